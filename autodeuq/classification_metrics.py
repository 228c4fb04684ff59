"""Scores of class-probability predictions: log loss, accuracy, Brier score, calibration error,
and how well an uncertainty flags the misclassified rows.

Everything here is pure numpy (and scikit-learn's ROC AUC) and takes plain arrays: ``proba`` of
shape (n, K), each row a distribution over the K classes, and ``y_codes`` of shape (n,), the
observed classes as codes in ``[0, K)``.
"""
from __future__ import annotations

import numpy as np

from autodeuq.ensemble.categorical import check_codes

__all__ = ["ECE_BINS", "LOG_LOSS_FLOOR", "classification_metrics", "reliability_bins", "check_proba"]

#: Equal-width bins of the top-class confidence for the expected calibration error (Guo et al. 2017 use 15).
ECE_BINS = 15

#: The log loss takes the probability of the observed class as at least this, so that one row the
#: model thought impossible gives a large, finite loss (``-log 1e-15 = 34.5`` nats) rather than inf.
LOG_LOSS_FLOOR = 1e-15


def check_proba(proba) -> np.ndarray:
    """``proba`` as a float64 (n, K) array of finite, non-negative rows (checked once, at the boundary).

    Examples
    --------
    >>> check_proba([[0.2, 0.8]]).dtype
    dtype('float64')
    """
    proba = np.asarray(proba, dtype=np.float64)
    if proba.ndim != 2 or 0 in proba.shape:
        raise ValueError(f"proba must have shape (n_rows, n_classes), none of them 0, got {proba.shape}")
    if not np.all(np.isfinite(proba)) or np.any(proba < 0):
        raise ValueError("proba must hold finite, non-negative probabilities")
    return proba


def reliability_bins(proba, y_codes, bins: int = ECE_BINS):
    """The rows grouped by top-class confidence into ``bins`` equal-width bins of ``[0, 1]``.

    A row's confidence is its largest probability; bin ``b`` holds the confidences in
    ``(b / bins, (b + 1) / bins]`` (the first bin also 0).

    Parameters
    ----------
    proba : array_like of shape (n, K)
    y_codes : array_like of shape (n,)
    bins : int

    Returns
    -------
    edges : ndarray of shape (bins + 1,)
    counts : ndarray of shape (bins,)
        Rows per bin.
    confidence, accuracy : ndarray of shape (bins,)
        Mean confidence and fraction of rows whose top class is right, per bin (NaN where empty).

    Examples
    --------
    >>> edges, counts, confidence, accuracy = reliability_bins([[0.9, 0.1], [0.7, 0.3], [0.4, 0.6]], [0, 1, 1], bins=2)
    >>> counts.tolist(), confidence.round(3).tolist(), accuracy.round(3).tolist()
    ([0, 3], [nan, 0.733], [nan, 0.667])
    """
    proba = check_proba(proba)
    codes = check_codes(y_codes, proba.shape[0], proba.shape[1])
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins must be a positive integer, got {bins!r}")
    confidence = proba.max(axis=1)
    correct = np.argmax(proba, axis=1) == codes
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, bins - 1)
    counts = np.bincount(index, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_confidence = np.bincount(index, confidence, minlength=bins) / counts
        accuracy = np.bincount(index, correct.astype(float), minlength=bins) / counts
    return edges, counts, mean_confidence, accuracy


def classification_metrics(proba, y_codes, uncertainties: dict[str, np.ndarray] | None = None,
                           bins: int = ECE_BINS) -> dict:
    """Scores of class probabilities against observed classes, as plain floats.

    Parameters
    ----------
    proba : array_like of shape (n, K)
        Predicted class probabilities, rows summing to 1.
    y_codes : array_like of shape (n,)
        Observed classes as codes in ``[0, K)``.
    uncertainties : dict of str to array_like of shape (n,), optional
        Uncertainties per row (e.g. total entropy, epistemic mutual information), each scored
        on how well it flags the misclassified rows.
    bins : int, default :data:`ECE_BINS`
        Bins of the expected calibration error.

    Returns
    -------
    dict
        - ``log_loss``: mean ``-log p(y)`` in nats, ``p(y)`` taken as at least :data:`LOG_LOSS_FLOOR`;
        - ``accuracy``: fraction of rows whose most probable class (the first of ties) is the observed one;
        - ``balanced_accuracy``: the recall of each observed class, averaged over the classes observed;
        - ``brier``: mean over rows of ``sum_k (p_k - [y = k])**2`` (between 0 and 2);
        - ``ece``: expected calibration error (Naeini et al. 2015; Guo et al. 2017): over
          ``bins`` equal-width bins of the top-class confidence (:func:`reliability_bins`),
          ``sum_b (n_b / n) |accuracy_b - confidence_b|``; ``ece_bins``: that number of bins;
        - ``n_rows``;
        - ``auroc_misclassified_<name>`` per uncertainty: the area under the ROC curve of the
          uncertainty as a score for "this row is misclassified" (1: every wrong row is more
          uncertain than every right one; 0.5: no better than chance); None when all rows are
          right or all wrong.

    Examples
    --------
    >>> proba = np.array([[0.8, 0.2], [0.4, 0.6], [0.7, 0.3]])
    >>> scores = classification_metrics(proba, [0, 1, 1], {"entropy": [0.5, 0.67, 0.61]})
    >>> round(scores["log_loss"], 4), round(scores["accuracy"], 4), round(scores["brier"], 4)
    (0.646, 0.6667, 0.46)
    >>> scores["auroc_misclassified_entropy"]
    0.5
    """
    from sklearn.metrics import roc_auc_score

    proba = check_proba(proba)
    n_rows, n_classes = proba.shape
    codes = check_codes(y_codes, n_rows, n_classes)
    rows = np.arange(n_rows)
    correct = np.argmax(proba, axis=1) == codes
    observed = np.unique(codes)
    recall = [correct[codes == k].mean() for k in observed]
    onehot = np.eye(n_classes)[codes]
    _, counts, confidence, accuracy = reliability_bins(proba, codes, bins)
    filled = counts > 0
    scores = {
        "log_loss": float(-np.mean(np.log(np.maximum(proba[rows, codes], LOG_LOSS_FLOOR)))),
        "accuracy": float(correct.mean()),
        "balanced_accuracy": float(np.mean(recall)),
        "brier": float(np.mean(np.sum(np.square(proba - onehot), axis=1))),
        "ece": float(np.sum(counts[filled] / n_rows * np.abs(accuracy[filled] - confidence[filled]))),
        "ece_bins": int(bins),
        "n_rows": int(n_rows),
    }
    for name, values in (uncertainties or {}).items():
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (n_rows,) or not np.all(np.isfinite(values)):
            raise ValueError(f"uncertainty {name!r} must hold {n_rows} finite values, got shape {values.shape}")
        mixed = 0 < correct.sum() < n_rows
        scores[f"auroc_misclassified_{name}"] = float(roc_auc_score(~correct, values)) if mixed else None
    return scores
