"""Post-hoc recalibration of an ensemble's predictive mixture: one scale per target.

The ensemble predicts, per point and target, the mixture ``sum_i w_i N(mu_i, s2_i)`` with mean
``m``. Recalibration stretches it about its mean by a factor ``c`` (per target): the component
``i`` becomes ``N(m + c (mu_i - m), c**2 s2_i)``. The mean is unchanged; the aleatoric and the
epistemic variance, and so the total, are multiplied by ``c**2``; every central interval is
``c`` times as wide. ``c`` is fitted by maximum likelihood on rows the ensemble was not selected
on (Kuleshov et al. 2018 and Levi et al. 2022 recalibrate regression uncertainty the same way,
with a single variance scale).

:func:`cross_fitted_scale` gets such rows without giving up any for selection: the validation
rows are split into folds, the selection is re-run without each fold, and the scale is fitted
on the out-of-fold mixtures of all folds together.

When to recalibrate (:func:`resolve_calibration`, the default ``calibrate="auto"``): on tables
that are not small (:data:`autodeuq.data.SMALL_DATA_ROWS`), where it was measured to lower the
test NLL; the measurements are in the documentation (docs/decisions/calibrate.md).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy.optimize import minimize_scalar

from autodeuq import metrics
from autodeuq.core.errors import ParameterError
from autodeuq.table import data
from autodeuq.tasks import get_task

__all__ = ["apply_scale", "fit_scale", "cross_fitted_scale", "pooled_coverage", "resolve_calibration"]

#: Scales are searched in [1/LIMIT, LIMIT].
LIMIT = 1e3

Chunk = tuple  # (means (M, n, T), variances (M, n, T), weights (M,), y (n, T))


def resolve_calibration(calibrate: str, n_rows: int | None, task="regression") -> tuple[str, str]:
    """The recalibration ``calibrate`` stands for on ``n_rows`` training and validation rows
    (None: not known, as for a catalog of an older autodeuq), and why: the task's
    (:attr:`Task.calibration <autodeuq.tasks.base.Task.calibration>`, a name or a task), a std
    scale for regression, a temperature for classification.

    >>> resolve_calibration("auto", 5000)
    ('scale', 'recalibrated: 5000 training and validation rows (auto: more than 1000)')
    >>> resolve_calibration("auto", 500)[0], resolve_calibration("scale", 10)[0], resolve_calibration("none", 10)[0]
    ('none', 'scale', 'none')
    """
    task = get_task(task)
    method = task.calibration
    if calibrate in ("scale", "temperature") and calibrate != method:
        raise ParameterError("calibrate", f"must be 'auto', 'none' or {method!r} for {task.name}: {calibrate!r} "
                                          f"recalibrates the other task's predictions", calibrate)
    if calibrate == method:
        return method, "recalibrated: asked for"
    if calibrate == "none":
        return "none", "not recalibrated: turned off"
    if n_rows is None:
        return "none", "not recalibrated: the catalog does not record its number of rows"
    limit = data.SMALL_DATA_ROWS
    if not data.is_small(n_rows):
        return method, f"recalibrated: {n_rows} training and validation rows (auto: more than {limit})"
    return "none", (f"not recalibrated: {n_rows} training and validation rows, at most the {limit} above "
                    f"which recalibration is on by default")


def apply_scale(means, variances, weights, scale):
    """The mixture's components stretched about its mean by ``scale`` (shape (T,)).

    Returns
    -------
    means, variances : ndarray of shape (M, n, T)
    """
    means = np.asarray(means, dtype=float)
    variances = np.asarray(variances, dtype=float)
    scale = np.asarray(scale, dtype=float)
    center = np.tensordot(np.asarray(weights, dtype=float), means, axes=1)
    return center + scale * (means - center), variances * np.square(scale)


def _logpdf_at_scale(chunk, target, log_c):
    """Per-point mixture log density of one target's observations after scaling by exp(log_c).

    Stretching the mixture by ``c`` about ``m`` gives ``p_c(y) = p((y - m) / c + m) / c``.
    """
    means, variances, weights, y = chunk
    mu, s2 = means[..., target:target + 1], variances[..., target:target + 1]
    center = np.tensordot(weights, mu, axes=1)
    c = np.exp(log_c)
    z = (y[:, target:target + 1] - center) / c + center
    return metrics.mixture_logpdf(mu, s2, weights, z)[:, 0] - log_c


def fit_scale(chunks: Sequence[Chunk]) -> np.ndarray:
    """Maximum-likelihood scale per target over one or more mixtures and their observations.

    Parameters
    ----------
    chunks : sequence of (means, variances, weights, y)
        Mixtures with ``means``/``variances`` of shape (M, n, T) (``M`` and ``n`` may differ
        between chunks, ``T`` may not), weights (M,) and observations (n, T). Every point of
        every chunk counts once.

    Returns
    -------
    ndarray of shape (T,)
        The factor by which each target's predictive std should be multiplied.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = rng.normal(scale=2.0, size=(2000, 1))
    >>> means, variances = np.zeros((1, 2000, 1)), np.ones((1, 2000, 1))
    >>> round(float(fit_scale([(means, variances, np.ones(1), y)])[0]), 1)
    2.0
    """
    chunks = [tuple(np.asarray(a, dtype=float) for a in chunk) for chunk in chunks]
    if not chunks:
        raise ValueError("fit_scale needs at least one chunk of observations")
    n_targets = chunks[0][3].shape[1]
    scales = np.ones(n_targets)
    for t in range(n_targets):
        def nll(log_c, t=t):
            return -np.mean(np.concatenate([_logpdf_at_scale(chunk, t, log_c) for chunk in chunks]))

        best = minimize_scalar(nll, bounds=(-np.log(LIMIT), np.log(LIMIT)), method="bounded",
                               options={"xatol": 1e-6})
        scales[t] = float(np.exp(best.x))
    return scales


def cross_fitted_scale(select_rows: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], means, variances, y,
                       folds: int = 2, seed: int = 0):
    """Fit the scale on out-of-fold mixtures: each fold scored by a selection made without it.

    Parameters
    ----------
    select_rows : callable ``rows -> (indices, weights)``
        Runs the ensemble selection on the validation rows ``rows`` (an index array) and
        returns the chosen catalog indices (into ``means``) and their weights.
    means, variances : ndarray of shape (n_models, n, T)
        The catalog's validation predictions.
    y : ndarray of shape (n, T)
    folds : int
        Number of folds (at least 2; at most n).
    seed : int
        Seed of the row permutation.

    Returns
    -------
    scale : ndarray of shape (T,)
    chunks : list of (means, variances, weights, y)
        The out-of-fold mixtures, unscaled, to report coverage before and after.
    """
    means, variances, y = (np.asarray(a, dtype=float) for a in (means, variances, y))
    n = len(y)
    if not 2 <= folds <= n:
        raise ValueError(f"cross-fitting needs 2 <= folds <= {n} validation rows, got {folds}")
    order = np.random.default_rng(seed).permutation(n)
    chunks = []
    for held in np.array_split(order, folds):
        rows = np.setdiff1d(np.arange(n), held)
        indices, weights = select_rows(rows)
        chunks.append((means[indices][:, held], variances[indices][:, held], np.asarray(weights, dtype=float),
                       y[held]))
    return fit_scale(chunks), chunks


def pooled_coverage(chunks: Sequence[Chunk], level: float, scale=None) -> np.ndarray:
    """Fraction of the chunks' observations inside the central ``level`` interval, per target."""
    inside, total = 0.0, 0
    for means, variances, weights, y in chunks:
        if scale is not None:
            means, variances = apply_scale(means, variances, weights, scale)
        inside = inside + metrics.coverage(means, variances, weights, y, level) * len(y)
        total += len(y)
    return inside / total
