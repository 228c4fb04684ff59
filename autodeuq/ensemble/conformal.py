"""Conformal intervals and prediction sets: a coverage guarantee on top of the ensemble's mixture.

Split conformal prediction (Vovk et al. 2005; Lei et al. 2018) turns any predictor into one whose
intervals cover a new observation with probability at least ``L``, given ``n`` held-out rows
exchangeable with it: each held-out row gets a *conformity score*, and the interval of level
``L`` is every value whose score would be at most the ``k``-th smallest held-out score,
``k = ceil((n + 1) L)``. Over the draw of the held-out rows and the new row, the coverage then
lies in ``[L, L + 1 / (n + 1)]`` (the upper bound when the scores have no ties). When
``(n + 1) L > n`` no held-out score is large enough: the interval is infinite (the set holds
every class), and :class:`ConformalLevelWarning` says so.

- Regression, normalized scores (Papadopoulos et al. 2008; Lei et al. 2018, section 5.2):
  ``|y - mean| / std`` per target, ``mean`` and ``std`` the moments of the ensemble's mixture
  (recalibrated when it is), so that the interval ``mean +- q_L std`` is wide where the
  ensemble's total uncertainty is, and its width is set by the held-out rows rather than by the
  mixture's shape. One scale per target multiplies ``std`` and divides every score alike, so
  the interval does not depend on the recalibration's scale.
- Classification, LAC scores (Sadinle, Lei & Wasserman 2019): ``1 - p_y``, the probability the
  ensemble (after its temperature) gives the observed class; the set of level ``L`` holds every
  class of probability at least ``1 - q_L``, which gives the smallest expected set size among
  sets of that coverage. The most probable class is always in the set (an empty set would
  otherwise say nothing; adding it can only raise the coverage).

The held-out scores are kept sorted (at most :data:`MAX_SCORES` order statistics per target), so
any level is computed at prediction time. Everything here is numpy: the ONNX path uses it as
the TensorFlow path does. Where the held-out rows come from, and what is guaranteed with them,
is the documentation's decision page (docs/decisions/conformal.md).
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from autodeuq.core.errors import AutoDEUQWarning
from autodeuq.metrics import check_level
from autodeuq.tasks import get_task

__all__ = ["ConformalLevelWarning", "MAX_SCORES", "METHODS", "fit_regression", "fit_classification",
           "quantile", "interval", "prediction_sets", "check_conformal", "resolve_method", "coverage",
           "set_coverage"]

#: At most this many order statistics of the held-out scores are kept per target; with more
#: held-out rows, every rank's quantile is read from the next kept rank above it (a wider
#: interval, never a narrower one: the guarantee holds, the coverage rises by less than
#: ``1 / MAX_SCORES``).
MAX_SCORES = 10_000

#: How an interval or a set is computed: ``"auto"`` conformal where the ensemble holds held-out
#: scores, else the mixture's; ``"conformal"`` (refused without scores); ``"mixture"`` the
#: mixture's central quantiles (regression) or its smallest set of probability ``L`` (classification).
METHODS = ("auto", "conformal", "mixture")

REGRESSION_METHOD = "normalized"  #: ``|y - mean| / std``
CLASSIFICATION_METHOD = "lac"  #: ``1 - p_y``


class ConformalLevelWarning(AutoDEUQWarning):
    """A conformal level needs more held-out rows than the ensemble has: ``(n + 1) L > n``, so its
    interval is infinite (its set holds every class); the message says how many rows it needs."""


def _kept(sorted_scores: np.ndarray) -> list[float]:
    """The order statistics kept of ``n`` sorted scores: all of them, or :data:`MAX_SCORES` at the ranks
    :func:`_kept_ranks` gives."""
    n = len(sorted_scores)
    return [float(s) for s in sorted_scores[_kept_ranks(n, min(n, MAX_SCORES)) - 1]]


def _kept_ranks(n: int, m: int) -> np.ndarray:
    """The 1-based ranks of the ``m`` order statistics kept of ``n``: ``ceil(i n / m)``, i = 1..m."""
    i = np.arange(1, m + 1, dtype=np.int64)
    return (i * n + m - 1) // m


def fit_regression(y, means, stds) -> dict:
    """Normalized conformity scores of held-out predictions, sorted per target.

    Parameters
    ----------
    y : array_like of shape (n,) or (n, T)
        The held-out rows' observations, original units.
    means, stds : array_like of the shape of ``y``
        The ensemble's predictive mean and total standard deviation on those rows (the moments
        of its mixture, recalibrated when it is), each made without the row: out-of-fold or
        out-of-selection predictions.

    Returns
    -------
    dict
        ``{"method": "normalized", "n": n, "scores": [[...], ...]}``: per target, the sorted
        scores ``|y - mean| / std`` (at most :data:`MAX_SCORES` order statistics), JSON-ready;
        what ``Ensemble(conformal=...)`` takes and the manifest stores.

    Raises
    ------
    ValueError
        Shapes that differ, no row, a non-finite value or a negative std.

    Examples
    --------
    >>> table = fit_regression([0.0, 1.0, -3.0], [0.0, 0.0, 0.0], [1.0, 1.0, 2.0])
    >>> table["scores"], table["n"]
    ([[0.0, 1.0, 1.5]], 3)
    """
    y, means, stds = (np.asarray(a, dtype=np.float64) for a in (y, means, stds))
    y, means, stds = (a[:, None] if a.ndim == 1 else a for a in (y, means, stds))
    if y.ndim != 2 or means.shape != y.shape or stds.shape != y.shape:
        raise ValueError(f"y, means and stds must have one shape (n,) or (n, T), got {y.shape}, {means.shape}, "
                         f"{stds.shape}")
    if not len(y):
        raise ValueError("conformal scores need at least one held-out row")
    if not (np.isfinite(y).all() and np.isfinite(means).all() and np.isfinite(stds).all()) or (stds < 0).any():
        raise ValueError("y, means and stds must be finite, and stds non-negative")
    residuals = np.abs(y - means)
    with np.errstate(divide="ignore", invalid="ignore"):  # a std of 0: 0 if the mean is exact, else inf
        scores = np.where(stds > 0, residuals / np.where(stds > 0, stds, 1.0), np.where(residuals > 0, np.inf, 0.0))
    return {"method": REGRESSION_METHOD, "n": int(len(y)),
            "scores": [_kept(np.sort(scores[:, t])) for t in range(y.shape[1])]}


def fit_classification(codes, probas) -> dict:
    """LAC conformity scores, ``1 - p_y``, of held-out class probabilities, sorted.

    Parameters
    ----------
    codes : array_like of shape (n,)
        The held-out rows' observed class codes, in ``[0, K)``.
    probas : array_like of shape (n, K)
        The ensemble's class probabilities on those rows (after its temperature), each made
        without the row.

    Returns
    -------
    dict
        ``{"method": "lac", "n": n, "scores": [[...]]}`` (one list, sorted; at most
        :data:`MAX_SCORES` order statistics), JSON-ready.

    Examples
    --------
    >>> fit_classification([0, 1], [[0.75, 0.25], [0.5, 0.5]])["scores"]
    [[0.25, 0.5]]
    """
    from autodeuq.table.labels import check_codes

    probas = np.asarray(probas, dtype=np.float64)
    if probas.ndim != 2 or 0 in probas.shape:
        raise ValueError(f"probas must have shape (n, K) with at least one row and class, got {probas.shape}")
    if not np.isfinite(probas).all() or (probas < 0).any():
        raise ValueError("probas must hold finite, non-negative probabilities")
    codes = check_codes(codes, probas.shape[0], probas.shape[1])
    scores = np.clip(1.0 - probas[np.arange(len(codes)), codes], 0.0, 1.0)
    return {"method": CLASSIFICATION_METHOD, "n": int(len(codes)), "scores": [_kept(np.sort(scores))]}


def check_conformal(table, n_targets: int | None = None, task="regression") -> dict:
    """``table`` (a manifest's ``conformal`` object) checked: its method is the task's
    (:attr:`Task.conformal <autodeuq.tasks.base.Task.conformal>`; ``task`` a name or a task), ``n``
    a positive integer, one list of sorted, non-negative scores per target (one for LAC's sets),
    each of ``min(n, MAX_SCORES)`` numbers. Raises ValueError naming what is wrong."""
    want = get_task(task).conformal
    if not isinstance(table, dict) or table.get("method") != want:
        raise ValueError(f"conformal scores must be an object with method {want!r}, got "
                         f"{str(table)[:80] if not isinstance(table, dict) else table.get('method')!r}")
    n = table.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"conformal 'n' must be a positive integer, got {n!r}")
    scores = table.get("scores")
    lists = 1 if want == CLASSIFICATION_METHOD else n_targets
    if not isinstance(scores, list) or (lists is not None and len(scores) != lists):
        raise ValueError(f"conformal 'scores' must hold {lists} list(s) of scores, got "
                         f"{len(scores) if isinstance(scores, list) else type(scores).__name__}")
    for t, column in enumerate(scores):
        values = np.asarray(column, dtype=np.float64) if isinstance(column, list) else None
        if values is None or values.shape != (min(n, MAX_SCORES),) or np.isnan(values).any() \
                or (values < 0).any() or (np.diff(values) < 0).any():
            raise ValueError(f"conformal 'scores'[{t}] must be {min(n, MAX_SCORES)} sorted non-negative numbers")
    return table


def resolve_method(method: str, table) -> str:
    """``"conformal"`` or ``"mixture"``: what ``method`` (one of :data:`METHODS`) means for an
    ensemble whose conformal scores are ``table`` (None: it has none)."""
    from autodeuq.core.errors import AutoDEUQError, ParameterError

    if method not in METHODS:
        raise ParameterError("method", f"must be one of {list(METHODS)}", method)
    if method == "auto":
        return "mixture" if table is None else "conformal"
    if method == "conformal" and table is None:
        raise AutoDEUQError("this ensemble holds no conformal scores (built by an older autodeuq, or from fewer "
                            "than 2 validation rows): its intervals and sets are the mixture's (method='mixture')")
    return method


def quantile(table: dict, level: float, *, warn: bool = True) -> np.ndarray:
    """The conformal quantile ``q_L`` per score list: the ``ceil((n + 1) L)``-th smallest held-out
    score, ``inf`` when ``(n + 1) L > n`` (with a :class:`ConformalLevelWarning` unless ``warn``
    is False).

    Examples
    --------
    >>> table = fit_regression(np.arange(1.0, 10.0), np.zeros(9), np.ones(9))   # scores 1..9
    >>> float(quantile(table, 0.5)[0]), float(quantile(table, 0.9)[0])
    (5.0, 9.0)
    >>> import warnings
    >>> with warnings.catch_warnings(record=True):
    ...     float(quantile(table, 0.95)[0])
    inf
    """
    level = check_level(level)
    n = int(table["n"])
    # (n + 1) L, less a hair of round-off: (9 + 1) * 0.9 is 9.000000000000002 in floats.
    rank = max(1, math.ceil((n + 1) * level - 1e-9))
    scores = table["scores"]
    if rank > n:
        if warn:
            warnings.warn(f"conformal level {level:g} needs at least {math.ceil(level / (1 - level) - 1e-9)} held-out "
                          f"rows ((n + 1) x level <= n), the ensemble has {n}: its interval is infinite (its set "
                          f"holds every class); ask a lower level, or give more validation rows",
                          ConformalLevelWarning, stacklevel=3)
        return np.full(len(scores), np.inf)
    kept = _kept_ranks(n, len(scores[0]))
    at = int(np.searchsorted(kept, rank))  # the first kept rank >= rank
    return np.array([float(column[at]) for column in scores])


def interval(table: dict, mean, std, level: float, *, warn: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The conformal interval ``mean +- q_L std`` of level ``level``, per row and target.

    Parameters
    ----------
    table : dict
        From :func:`fit_regression`.
    mean, std : array_like of shape (n, T)
        The ensemble's predictive mean and total std on the new rows (as the scores were made).

    Returns
    -------
    lower, upper : ndarray of shape (n, T)
        ``-inf`` and ``inf`` where the level needs more held-out rows than there are (with a
        :class:`ConformalLevelWarning` unless ``warn`` is False).
    """
    q = quantile(table, level, warn=warn)
    mean, std = np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # inf * 0 for a std of 0 at an infinite level
        half = np.where(np.isinf(q), np.inf, q * std)
    return mean - half, mean + half


def prediction_sets(table: dict, probas, level: float, *, nonempty: bool = True, warn: bool = True) -> np.ndarray:
    """The conformal (LAC) sets of level ``level``: a boolean (n, K) mask, True for every class of
    probability at least ``1 - q_L``, and (``nonempty``) for the most probable class of each row.

    Examples
    --------
    >>> table = fit_classification([0, 0, 1, 1], [[0.9, 0.1], [0.6, 0.4], [0.3, 0.7], [0.5, 0.5]])
    >>> prediction_sets(table, [[0.8, 0.2], [0.5, 0.5]], 0.75).tolist()   # q = 0.5: p >= 0.5
    [[True, False], [True, True]]
    """
    q = float(quantile(table, level, warn=warn)[0])
    probas = np.asarray(probas, dtype=np.float64)
    inside = probas >= 1.0 - q - 1e-12  # the float round-off of 1 - (1 - p)
    if nonempty:
        inside[np.arange(len(probas)), np.argmax(probas, axis=1)] = True
    return inside


def coverage(table: dict, mean, std, y, level: float) -> np.ndarray:
    """Per target, the fraction of the rows of ``y`` (n, T) inside their conformal ``level``
    interval (:func:`interval`, infinite without a warning where the level needs more rows)."""
    lower, upper = interval(table, mean, std, level, warn=False)
    y = np.asarray(y, dtype=np.float64)
    return np.mean((y >= lower) & (y <= upper), axis=0)


def set_coverage(table: dict, probas, codes, level: float) -> tuple[float, float]:
    """The fraction of rows whose observed class (``codes``) is in its conformal ``level`` set
    (:func:`prediction_sets`), and the sets' mean size."""
    inside = prediction_sets(table, probas, level, warn=False)
    codes = np.asarray(codes, dtype=np.int64)
    return float(np.mean(inside[np.arange(len(codes)), codes])), float(np.mean(inside.sum(axis=1)))
