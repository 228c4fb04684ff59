"""Acquisition functions of Bayesian optimization, as scores to minimize.

All functions take the surrogate's predictive mean ``mu`` and standard deviation ``sigma`` of
costs (lower is better) and return one score per candidate; the next point is the candidate of
lowest score. Expected and probability of improvement are negated for that reason.
"""
from __future__ import annotations

import numpy as np
from scipy.special import ndtr  # standard normal CDF; scipy ships with scikit-learn


def lcb(mu, sigma, kappa):
    """Lower confidence bound ``mu - kappa * sigma``."""
    return np.asarray(mu, dtype=float) - kappa * np.asarray(sigma, dtype=float)


def _improvement(mu, sigma, best, xi):
    mu = np.asarray(mu, dtype=float)
    sigma = np.asarray(sigma, dtype=float)
    gain = best - xi - mu
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sigma > 0, gain / np.where(sigma > 0, sigma, 1.0), 0.0)
    return gain, sigma, z


def ei(mu, sigma, best, xi=0.0):
    """Negated expected improvement below ``best - xi``.

    ``EI = g * Phi(g / sigma) + sigma * phi(g / sigma)`` with ``g = best - xi - mu``; where
    ``sigma == 0`` it is ``max(g, 0)``.
    """
    gain, sigma, z = _improvement(mu, sigma, best, xi)
    pdf = np.exp(-0.5 * z**2) / np.sqrt(2 * np.pi)
    value = np.where(sigma > 0, gain * ndtr(z) + sigma * pdf, np.maximum(gain, 0.0))
    return -value


def pi(mu, sigma, best, xi=0.0):
    """Negated probability of improvement ``P(cost < best - xi)``.

    Where ``sigma == 0`` the probability is 1 if ``mu < best - xi`` else 0.
    """
    gain, sigma, z = _improvement(mu, sigma, best, xi)
    value = np.where(sigma > 0, ndtr(z), (gain > 0).astype(float))
    return -value


def kappa_schedule(kappa0, t, n_initial, period=25, decay=0.1):
    """Periodic exponential decay of the LCB exploration weight.

    ``kappa_t = kappa0 * exp(-decay * ((t - n_initial) mod period))`` for ``t >= n_initial``
    and ``kappa0`` before (Egele 2024, ch. 2). ``decay=None`` (or 0) keeps ``kappa0`` throughout.
    ``t`` is the index of the suggestion (0-based) and may be an array.
    """
    t = np.asarray(t)
    if not decay:
        return kappa0 * np.ones_like(t, dtype=float) if t.ndim else float(kappa0)
    phase = np.where(t >= n_initial, (t - n_initial) % period, 0)
    out = kappa0 * np.exp(-decay * phase)
    return out if t.ndim else float(out)
