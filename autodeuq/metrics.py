"""Scores of Gaussian and Gaussian-mixture predictions (Gneiting & Raftery 2007; Kuleshov et al. 2018).

Everything here is pure numpy/scipy and takes plain arrays.

Shape conventions
-----------------
- A single Gaussian prediction: ``mean`` and ``var`` of shape ``(n, T)`` (``n`` points,
  ``T`` targets), observations ``y`` of shape ``(n, T)``.
- A Gaussian mixture (an ensemble): ``means`` and ``variances`` of shape ``(M, n, T)`` and
  ``weights`` of shape ``(M,)``, non-negative and summing to 1.

Every score is averaged over points and returned per target, shape ``(T,)``.
"""

import numpy as np
from scipy.special import logsumexp, ndtr, ndtri

__all__ = [
    "LOG_2PI",
    "CALIBRATION_LEVELS",
    "check_mixture",
    "gaussian_logpdf",
    "gaussian_nll",
    "rmse",
    "mae",
    "mixture_moments",
    "mixture_logpdf",
    "mixture_nll",
    "mixture_cdf",
    "mixture_quantile",
    "central_interval",
    "check_level",
    "mixture_crps",
    "coverage",
    "calibration_curve",
    "miscalibration_area",
    "sharpness",
    "evaluate",
]

LOG_2PI = float(np.log(2.0 * np.pi))

#: Central-interval levels used for the calibration curve and the miscalibration area.
CALIBRATION_LEVELS = np.linspace(0.01, 0.99, 99)

_WEIGHT_SUM_TOL = 1e-6


def check_mixture(means, variances, weights=None, y=None):
    """Cast a mixture's components (and its weights and observations, when given) to float arrays
    and check them once, at the boundary; the one validator of the scores and of ensemble selection.

    Parameters
    ----------
    means, variances : array_like, shape (M, n, T)
        At least one component and one point.
    weights : array_like, shape (M,), optional
        Non-negative, summing to 1.
    y : array_like, shape (n, T), optional
        Finite observations.

    Returns
    -------
    means, variances[, weights][, y] : ndarray
        The float arrays, ``weights`` and ``y`` only when given.

    Raises
    ------
    ValueError
        Naming the first argument that breaks a rule.

    Examples
    --------
    >>> means, variances, y = check_mixture([[[0.0]]], [[[1.0]]], y=[[0.5]])
    >>> means.shape, y.dtype
    ((1, 1, 1), dtype('float64'))
    >>> check_mixture([[[0.0]]], [[[1.0]]], weights=[0.5])
    Traceback (most recent call last):
    ...
    ValueError: weights must be non-negative and sum to 1
    """
    means = np.asarray(means, dtype=float)
    variances = np.asarray(variances, dtype=float)
    if means.ndim != 3:
        raise ValueError(f"means must have shape (n_models, n_points, n_targets), got {means.shape}")
    if variances.shape != means.shape:
        raise ValueError(f"variances must have the shape of means {means.shape}, got {variances.shape}")
    if means.shape[0] == 0 or means.shape[1] == 0:
        raise ValueError(f"means must hold at least one model and one point, got {means.shape}")
    checked = [means, variances]
    if weights is not None:
        weights = np.asarray(weights, dtype=float)
        if weights.shape != (means.shape[0],):
            raise ValueError(f"weights must have shape ({means.shape[0]},), got {weights.shape}")
        if np.any(weights < 0) or abs(weights.sum() - 1.0) > _WEIGHT_SUM_TOL:
            raise ValueError("weights must be non-negative and sum to 1")
        checked.append(weights)
    if y is not None:
        y = np.asarray(y, dtype=float)
        if y.shape != means.shape[1:]:
            raise ValueError(f"y must have shape {means.shape[1:]}, got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("y must be finite")
        checked.append(y)
    return tuple(checked)


def _check_gaussian(y, mean, var):
    y = np.asarray(y, dtype=float)
    mean = np.asarray(mean, dtype=float)
    var = np.asarray(var, dtype=float)
    if not (y.shape == mean.shape == var.shape):
        raise ValueError(
            f"y, mean and var must share one shape, got {y.shape}, {mean.shape}, {var.shape}"
        )
    return y, mean, var


def _log_weights(weights):
    with np.errstate(divide="ignore"):
        return np.log(weights)


def gaussian_logpdf(y, mean, var):
    """Elementwise log-density of ``y`` under ``N(mean, var)``.

    Parameters
    ----------
    y, mean, var : array_like
        Broadcastable arrays; ``var`` must be positive.

    Returns
    -------
    ndarray
        ``-0.5 * (log(2 pi var) + (y - mean)**2 / var)``, broadcast shape.
    """
    mean = np.asarray(mean, dtype=float)
    var = np.asarray(var, dtype=float)
    return -0.5 * (LOG_2PI + np.log(var) + (np.asarray(y, dtype=float) - mean) ** 2 / var)


def gaussian_nll(y, mean, var):
    """Negative log-likelihood of a Gaussian prediction, averaged over points.

    The observations come first, as in scikit-learn's metrics and :func:`autodeuq.train.gaussian_nll`.

    Parameters
    ----------
    y : array_like, shape (n, T)
        Observations.
    mean, var : array_like, shape (n, T)
        Predicted mean and (positive) variance.

    Returns
    -------
    ndarray, shape (T,)
        Mean over points of ``0.5 * log(2 pi var) + (y - mean)**2 / (2 var)``.

    Examples
    --------
    >>> gaussian_nll(np.zeros((1, 1)), np.zeros((1, 1)), np.ones((1, 1)))
    array([0.91893853])
    """
    y, mean, var = _check_gaussian(y, mean, var)
    return -gaussian_logpdf(y, mean, var).mean(axis=0)


def rmse(y, mean):
    """Root mean squared error per target.

    Parameters
    ----------
    y, mean : array_like, shape (n, T)
        Observations and point predictions.

    Returns
    -------
    ndarray, shape (T,)
    """
    mean = np.asarray(mean, dtype=float)
    y = np.asarray(y, dtype=float)
    return np.sqrt(np.mean((mean - y) ** 2, axis=0))


def mae(y, mean):
    """Mean absolute error per target.

    Parameters
    ----------
    y, mean : array_like, shape (n, T)
        Observations and point predictions.

    Returns
    -------
    ndarray, shape (T,)
    """
    mean = np.asarray(mean, dtype=float)
    y = np.asarray(y, dtype=float)
    return np.mean(np.abs(mean - y), axis=0)


def mixture_moments(means, variances, weights):
    """Mean and variance decomposition of a Gaussian mixture (law of total variance; Egele et al. 2022).

    Parameters
    ----------
    means, variances : array_like, shape (M, n, T)
        Component means and variances.
    weights : array_like, shape (M,)
        Component weights, summing to 1.

    Returns
    -------
    mean : ndarray, shape (n, T)
        ``sum_i w_i mu_i``.
    aleatoric : ndarray, shape (n, T)
        ``sum_i w_i s2_i``.
    epistemic : ndarray, shape (n, T)
        ``sum_i w_i (mu_i - mean)**2``.

    Notes
    -----
    ``aleatoric + epistemic`` is exactly the variance of the mixture.

    Examples
    --------
    >>> m, a, e = mixture_moments([[[0.0]], [[2.0]]], [[[1.0]], [[1.0]]], [0.5, 0.5])
    >>> float(m[0, 0]), float(a[0, 0]), float(e[0, 0])
    (1.0, 1.0, 1.0)
    """
    means, variances, weights = check_mixture(means, variances, weights)
    mean = np.tensordot(weights, means, axes=1)
    aleatoric = np.tensordot(weights, variances, axes=1)
    epistemic = np.tensordot(weights, (means - mean) ** 2, axes=1)
    return mean, aleatoric, epistemic


def mixture_logpdf(means, variances, weights, y):
    """Pointwise log-density of ``y`` under a Gaussian mixture, computed with logsumexp.

    Parameters
    ----------
    means, variances : array_like, shape (M, n, T)
    weights : array_like, shape (M,)
    y : array_like, shape (n, T)

    Returns
    -------
    ndarray, shape (n, T)
        ``log sum_i w_i N(y; mu_i, s2_i)``.
    """
    means, variances, weights, y = check_mixture(means, variances, weights, y)
    log_terms = _log_weights(weights)[:, None, None] + gaussian_logpdf(y, means, variances)
    return logsumexp(log_terms, axis=0)


def mixture_nll(means, variances, weights, y):
    """Exact negative log-likelihood of a Gaussian mixture, averaged over points.

    Parameters
    ----------
    means, variances : array_like, shape (M, n, T)
        Component means and variances.
    weights : array_like, shape (M,)
        Component weights, summing to 1.
    y : array_like, shape (n, T)
        Observations.

    Returns
    -------
    ndarray, shape (T,)
        ``-mean_n log sum_i w_i N(y; mu_i, s2_i)``.

    Examples
    --------
    >>> mixture_nll(np.zeros((2, 1, 1)), np.ones((2, 1, 1)), [0.5, 0.5], np.zeros((1, 1)))
    array([0.91893853])
    """
    return -mixture_logpdf(means, variances, weights, y).mean(axis=0)


def mixture_cdf(means, variances, weights, x):
    """Cumulative distribution function of a Gaussian mixture.

    Parameters
    ----------
    means, variances : array_like, shape (M, n, T)
    weights : array_like, shape (M,)
    x : array_like
        Points, broadcastable against ``(n, T)`` (e.g. ``(n, T)`` or ``(L, n, T)``).

    Returns
    -------
    ndarray
        ``sum_i w_i Phi((x - mu_i) / s_i)``, shape of ``x`` broadcast against ``(n, T)``.
    """
    means, variances, weights = check_mixture(means, variances, weights)
    x = np.asarray(x, dtype=float)
    stds = np.sqrt(variances)
    cdf = np.zeros(np.broadcast_shapes(x.shape, means.shape[1:]))
    for w, mu, s in zip(weights, means, stds):
        cdf += w * ndtr((x - mu) / s)
    return cdf


def mixture_quantile(means, variances, weights, q, max_iter=100):
    """Quantiles of a Gaussian mixture, by vectorized bisection on its CDF.

    Parameters
    ----------
    means, variances : array_like, shape (M, n, T)
    weights : array_like, shape (M,)
    q : float or array_like of shape (L,)
        Probabilities, strictly inside (0, 1).
    max_iter : int, default 100
        Bisection steps at most; iteration stops earlier once every bracket has shrunk to a
        few ulps.

    Returns
    -------
    ndarray, shape (n, T) for a scalar ``q``, else (L, n, T)

    Notes
    -----
    The ``p``-quantile of a mixture lies between the smallest and the largest ``p``-quantile
    of its components, which gives a valid starting bracket. A single component (``M = 1``)
    uses the exact normal quantile.
    """
    means, variances, weights = check_mixture(means, variances, weights)
    q = np.asarray(q, dtype=float)
    if np.any((q <= 0) | (q >= 1)):
        raise ValueError("q must lie strictly inside (0, 1)")
    scalar = q.ndim == 0
    q = np.atleast_1d(q)[:, None, None]
    z = ndtri(q)[:, None]  # (L, 1, 1, 1), broadcast against (M, n, T)
    keep = weights > 0
    means, variances, weights = means[keep], variances[keep], weights[keep]
    component_q = means[None] + np.sqrt(variances)[None] * z  # (L, M, n, T)
    if means.shape[0] == 1:
        out = component_q[:, 0]
    else:
        lo = component_q.min(axis=1)
        hi = component_q.max(axis=1)
        for _ in range(max_iter):
            mid = 0.5 * (lo + hi)
            below = mixture_cdf(means, variances, weights, mid) < q
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
            scale = np.maximum(np.abs(lo), np.abs(hi))
            if np.all(hi - lo <= 4.0 * np.finfo(float).eps * np.maximum(scale, 1e-300)):
                break
        out = 0.5 * (lo + hi)
    return out[0] if scalar else out


#: The widest central interval asked for: its tails, ``(1 - level) / 2``, must stay above zero in
#: float64 arithmetic (at ``1 - 1e-16`` the upper quantile's probability rounds to 1).
MAX_INTERVAL_LEVEL = 1 - 1e-9


def check_level(level) -> float:
    """``level`` as a float, refused unless a probability in ``(0, MAX_INTERVAL_LEVEL]``.

    Raises
    ------
    ParameterError
        Named ``level``.
    """
    from autodeuq.core.errors import ParameterError

    if isinstance(level, bool) or not isinstance(level, (int, float, np.integer, np.floating)) \
            or not 0 < level <= MAX_INTERVAL_LEVEL:
        raise ParameterError("level", "must be a probability strictly between 0 and 1 (e.g. 0.9), at most 1 - 1e-9",
                             level)
    return float(level)


def central_interval(means, variances, weights, level):
    """Central ``level`` prediction interval of a Gaussian mixture.

    Parameters
    ----------
    means, variances : array_like, shape (M, n, T)
    weights : array_like, shape (M,)
    level : float
        Nominal probability mass of the interval, in ``(0, MAX_INTERVAL_LEVEL]``.

    Returns
    -------
    lower, upper : ndarray, shape (n, T)
        The ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles.

    Raises
    ------
    ParameterError
        ``level`` outside ``(0, MAX_INTERVAL_LEVEL]`` (:func:`check_level`).
    """
    level = check_level(level)
    bounds = mixture_quantile(means, variances, weights, [(1 - level) / 2, (1 + level) / 2])
    return bounds[0], bounds[1]


def _crps_a(mu, var):
    """``E|Z|`` for ``Z ~ N(mu, var)``: ``mu (2 Phi(mu/s) - 1) + 2 s phi(mu/s)``."""
    s = np.sqrt(var)
    z = mu / s
    return mu * (2.0 * ndtr(z) - 1.0) + 2.0 * s * np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)


def mixture_crps(means, variances, weights, y):
    """Continuous ranked probability score of a Gaussian mixture, in closed form.

    Parameters
    ----------
    means, variances : array_like, shape (M, n, T)
    weights : array_like, shape (M,)
    y : array_like, shape (n, T)

    Returns
    -------
    ndarray, shape (T,)
        Mean over points of ``E|X - y| - 0.5 E|X - X'|`` (lower is better).

    Notes
    -----
    Grimit et al. (2006):
    ``CRPS = sum_i w_i A(y - mu_i, s2_i) - 0.5 sum_ij w_i w_j A(mu_i - mu_j, s2_i + s2_j)``
    with ``A(mu, s2) = mu (2 Phi(mu/s) - 1) + 2 s phi(mu/s)``. The pairwise term costs
    ``O(M**2 n T)`` time but only ``O(M n T)`` memory.
    """
    means, variances, weights, y = check_mixture(means, variances, weights, y)
    w = weights[:, None, None]
    spread = np.sum(w * _crps_a(y - means, variances), axis=0)
    pairwise = np.zeros(y.shape)
    for wi, mu_i, var_i in zip(weights, means, variances):
        pairwise += wi * np.sum(w * _crps_a(mu_i - means, var_i + variances), axis=0)
    return np.mean(spread - 0.5 * pairwise, axis=0)


def _pit_distance(means, variances, weights, y):
    """``|2 F(y) - 1|``: ``y`` is inside the central ``level`` interval iff this is <= level."""
    return np.abs(2.0 * mixture_cdf(means, variances, weights, y) - 1.0)


def coverage(means, variances, weights, y, level):
    """Fraction of observations inside the central ``level`` interval of the mixture.

    Parameters
    ----------
    means, variances : array_like, shape (M, n, T)
    weights : array_like, shape (M,)
    y : array_like, shape (n, T)
    level : float
        Nominal coverage, in (0, 1).

    Returns
    -------
    ndarray, shape (T,)

    Notes
    -----
    The mixture CDF ``F`` is continuous and strictly increasing, so ``y`` lies in
    ``[F^-1((1 - level)/2), F^-1((1 + level)/2)]`` exactly when
    ``|2 F(y) - 1| <= level``. Testing that is exact and avoids computing quantiles; it
    agrees with :func:`central_interval` up to the bisection tolerance.
    """
    means, variances, weights, y = check_mixture(means, variances, weights, y)
    return np.mean(_pit_distance(means, variances, weights, y) <= level, axis=0)


def gaussian_coverage(y, mean, var, level):
    """Fraction of observations inside ``mean ± z std``, the central ``level`` interval of the
    moment-matched Gaussian (``z = 1.645`` for 0.9): the interval most users and peers report.

    Parameters
    ----------
    y, mean, var : array_like, shape (n, T)
        Observations, predictive mean and total predictive variance.
    level : float
        Nominal coverage, in (0, 1).

    Returns
    -------
    ndarray, shape (T,)

    Examples
    --------
    >>> gaussian_coverage(np.array([[0.0], [1.0], [3.0]]), np.zeros((3, 1)), np.ones((3, 1)), 0.9)
    array([0.66666667])
    """
    y, mean, var = _check_gaussian(y, mean, var)
    z = ndtri(0.5 + check_level(level) / 2)
    return np.mean(np.abs(y - mean) <= z * np.sqrt(var), axis=0)


def calibration_curve(means, variances, weights, y, levels=None):
    """Observed against expected coverage of central intervals.

    Parameters
    ----------
    means, variances : array_like, shape (M, n, T)
    weights : array_like, shape (M,)
    y : array_like, shape (n, T)
    levels : array_like of shape (L,), optional
        Nominal levels in (0, 1); default :data:`CALIBRATION_LEVELS` (0.01 to 0.99 by 0.01).

    Returns
    -------
    expected : ndarray, shape (L,)
        The nominal levels.
    observed : ndarray, shape (L, T)
        Fraction of observations inside each central interval, per target.
    """
    means, variances, weights, y = check_mixture(means, variances, weights, y)
    expected = CALIBRATION_LEVELS if levels is None else np.asarray(levels, dtype=float)
    distance = np.sort(_pit_distance(means, variances, weights, y), axis=0)
    n = distance.shape[0]
    observed = np.stack(
        [np.searchsorted(col, expected, side="right") / n for col in distance.T], axis=1
    )
    return expected.copy(), observed


def miscalibration_area(means, variances, weights, y, levels=None):
    """Mean absolute gap between expected and observed central-interval coverage.

    Parameters
    ----------
    means, variances : array_like, shape (M, n, T)
    weights : array_like, shape (M,)
    y : array_like, shape (n, T)
    levels : array_like of shape (L,), optional
        Nominal levels; default :data:`CALIBRATION_LEVELS`.

    Returns
    -------
    ndarray, shape (T,)
        ``mean_levels |observed - expected|``; 0 is perfectly calibrated.
    """
    expected, observed = calibration_curve(means, variances, weights, y, levels)
    return np.mean(np.abs(observed - expected[:, None]), axis=0)


def sharpness(total_var):
    """Mean predicted standard deviation per target (lower is sharper).

    Parameters
    ----------
    total_var : array_like, shape (n, T)
        Predicted total variance.

    Returns
    -------
    ndarray, shape (T,)
    """
    return np.mean(np.sqrt(np.asarray(total_var, dtype=float)), axis=0)


def evaluate(means, variances, weights, y):
    """All section-7 prediction scores of a Gaussian mixture, JSON-ready.

    Parameters
    ----------
    means, variances : array_like, shape (M, n, T)
    weights : array_like, shape (M,)
    y : array_like, shape (n, T)

    Returns
    -------
    dict
        Keys ``nll``, ``nll_gaussian`` (NLL of the moment-matched Gaussian), ``rmse``,
        ``mae``, ``crps``, ``coverage_50``, ``coverage_90``, ``coverage_95`` (central intervals of
        the mixture, from its quantiles), ``coverage_gaussian_50``, ``coverage_gaussian_90``,
        ``coverage_gaussian_95`` (mean ± z std of the moment-matched Gaussian, e.g. z = 1.645 for 0.9),
        ``miscalibration_area``, ``sharpness``; each value is
        ``{"per_target": [float, ...], "mean": float}`` with plain Python floats.

    Examples
    --------
    >>> scores = evaluate(np.zeros((1, 3, 1)), np.ones((1, 3, 1)), [1.0], np.zeros((3, 1)))
    >>> scores["rmse"]
    {'per_target': [0.0], 'mean': 0.0}
    """
    means, variances, weights, y = check_mixture(means, variances, weights, y)
    mean, aleatoric, epistemic = mixture_moments(means, variances, weights)
    total = aleatoric + epistemic
    scores = {
        "nll": mixture_nll(means, variances, weights, y),
        "nll_gaussian": gaussian_nll(y, mean, total),
        "rmse": rmse(y, mean),
        "mae": mae(y, mean),
        "crps": mixture_crps(means, variances, weights, y),
        "coverage_50": coverage(means, variances, weights, y, 0.50),
        "coverage_90": coverage(means, variances, weights, y, 0.90),
        "coverage_95": coverage(means, variances, weights, y, 0.95),
        "coverage_gaussian_50": gaussian_coverage(y, mean, total, 0.50),
        "coverage_gaussian_90": gaussian_coverage(y, mean, total, 0.90),
        "coverage_gaussian_95": gaussian_coverage(y, mean, total, 0.95),
        "miscalibration_area": miscalibration_area(means, variances, weights, y),
        "sharpness": sharpness(total),
    }
    return {
        name: {"per_target": [float(v) for v in values], "mean": float(np.mean(values))}
        for name, values in scores.items()
    }
