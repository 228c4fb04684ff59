"""An ensemble's prediction for a class label: a weighted mixture of categorical distributions.

Each member ``m`` of an ensemble of classifiers predicts, per row, class probabilities
``p_m`` (shape (n, K)); the ensemble predicts their weighted mean ``p = sum_m w_m p_m``.
Its uncertainty splits as the entropy of the mixture (Depeweg et al. 2018):

- total: ``H(p)``, the entropy of the ensemble's prediction;
- aleatoric: ``sum_m w_m H(p_m)``, the entropy the members expect on average;
- epistemic: their difference, the mutual information between the label and the member
  (how much knowing the member would tell about the label): large where members disagree.

Entropies are in nats (natural log), with ``0 log 0 = 0``.

Recalibration tempers every member (Guo et al. 2017): ``p_m`` becomes ``softmax(log p_m / T)``
with one temperature ``T`` fitted by maximum likelihood on rows the ensemble was not selected on;
:func:`cross_fitted_temperature` gets such rows as :func:`autodeuq.ensemble.calibration.cross_fitted_scale`
does for regression.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax, logsumexp

from autodeuq.core.errors import ParameterError
from autodeuq.metrics import check_level
from autodeuq.table.labels import check_codes  # the class codes' check, kept importable from here

__all__ = [
    "CategoricalPrediction", "apply_temperature", "fit_temperature", "cross_fitted_temperature", "pooled_log_loss",
    "log_probabilities",
    "check_codes", "TEMPERATURE_BOUNDS", "PROBA_SUM_TOL", "join_prediction_set", "split_prediction_set",
]

#: Temperatures are searched in this interval (on a log scale): from sharpening the members'
#: probabilities twentyfold in log space to flattening them twentyfold.
TEMPERATURE_BOUNDS = (0.05, 20.0)

#: Member probabilities must sum to 1 within this over classes; they are then renormalized, so
#: that float32 softmax outputs (whose sums are off by up to about ``K * 6e-8``) are taken as they are,
#: while logits or log-probabilities passed by mistake are refused.
PROBA_SUM_TOL = 1e-3

#: A prediction set whose probability falls short of the level by no more than this (float
#: round-off of the cumulative sum) counts as reaching it.
SET_LEVEL_TOL = 1e-12

Chunk = tuple  # (log_proba (M, n, K), weights (M,), y_codes (n,))


def _entropy(p: np.ndarray) -> np.ndarray:
    """Entropy in nats over the last axis, with ``0 log 0 = 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p), 0.0)
    return -terms.sum(axis=-1)


@dataclass
class CategoricalPrediction:
    """A weighted mixture of categorical distributions, one per row: an ensemble's class prediction.

    Parameters
    ----------
    members : array_like of shape (M, n, K)
        Each member's class probabilities: finite, non-negative, each row summing to 1 within
        :data:`PROBA_SUM_TOL` (they are cast to float64 and renormalized).
    weights : array_like of shape (M,)
        Non-negative, summing to 1.
    classes : array_like of shape (K,)
        The class labels, of any type (str, int, bool, ...), in the order of the last axis.

    Examples
    --------
    Two members that disagree on the first row and agree on the second:

    >>> value = CategoricalPrediction([[[0.9, 0.1], [0.5, 0.5]], [[0.1, 0.9], [0.5, 0.5]]], [0.5, 0.5], ["a", "b"])
    >>> value.proba.tolist()
    [[0.5, 0.5], [0.5, 0.5]]
    >>> value.label.tolist()
    ['a', 'a']
    >>> value.total_entropy.round(4).tolist(), value.epistemic_mi.round(4).tolist()
    ([0.6931, 0.6931], [0.3681, 0.0])
    >>> value.to_frame("y").columns.tolist()
    ['y_pred', 'y_p_a', 'y_p_b', 'y_entropy', 'y_aleatoric_entropy', 'y_epistemic_mi']
    """

    members: np.ndarray
    weights: np.ndarray
    classes: np.ndarray

    #: The ensemble's held-out conformity scores (:func:`autodeuq.ensemble.conformal.fit_classification`),
    #: or None: :meth:`prediction_set` is then the mixture's. Not a field (set by the ensemble).
    conformal = None

    def __post_init__(self):
        members = np.asarray(self.members, dtype=np.float64)
        if members.ndim != 3 or 0 in members.shape:
            raise ValueError(f"members must have shape (n_members, n_rows, n_classes), none of them 0, got "
                             f"{members.shape}")
        if not np.all(np.isfinite(members)) or np.any(members < 0):
            raise ValueError("members must hold finite, non-negative probabilities")
        sums = members.sum(axis=-1, keepdims=True)
        if np.any(np.abs(sums - 1.0) > PROBA_SUM_TOL):
            raise ValueError(f"members' probabilities must sum to 1 over the classes (within {PROBA_SUM_TOL}); "
                             f"pass log-probabilities or logits through apply_temperature first")
        weights = np.asarray(self.weights, dtype=np.float64)
        if weights.shape != (members.shape[0],):
            raise ValueError(f"weights must have shape ({members.shape[0]},), got {weights.shape}")
        if not np.all(np.isfinite(weights)) or np.any(weights < 0) or abs(weights.sum() - 1.0) > 1e-6:
            raise ValueError("weights must be non-negative and sum to 1")
        classes = np.asarray(self.classes)
        if classes.shape != (members.shape[2],):
            raise ValueError(f"classes must hold one label per class ({members.shape[2]}), got shape {classes.shape}")
        self.members, self.weights, self.classes = members / sums, weights, classes

    @classmethod
    def from_log_proba(cls, log_proba, weights, classes, temperature: float = 1.0) -> "CategoricalPrediction":
        """The mixture of members given by log-probabilities or logits (M, n, K), tempered by
        ``temperature`` (:func:`apply_temperature`)."""
        return cls(apply_temperature(log_proba, temperature), weights, classes)

    @property
    def proba(self) -> np.ndarray:
        """(n, K): the mixture's class probabilities, ``sum_m w_m p_m``."""
        return np.tensordot(self.weights, self.members, axes=1)

    @property
    def label(self) -> np.ndarray:
        """(n,): the most probable class of each row (a tie goes to the class listed first)."""
        return self.classes[np.argmax(self.proba, axis=1)]

    @property
    def total_entropy(self) -> np.ndarray:
        """(n,): entropy of the mixture, ``H(sum_m w_m p_m)``, in nats."""
        return _entropy(self.proba)

    @property
    def aleatoric_entropy(self) -> np.ndarray:
        """(n,): expected entropy of the members, ``sum_m w_m H(p_m)``, in nats."""
        return np.tensordot(self.weights, _entropy(self.members), axes=1)

    @property
    def epistemic_mi(self) -> np.ndarray:
        """(n,): mutual information between label and member, ``total - aleatoric``, in nats.

        It is ``>= 0`` mathematically (entropy is concave, so the entropy of a mixture is at
        least the mixture of the entropies: Jensen's inequality) and 0 exactly where the
        members with positive weight agree; the clip at 0 removes float round-off only.
        """
        return np.maximum(self.total_entropy - self.aleatoric_entropy, 0.0)

    @property
    def variance(self) -> np.ndarray:
        """(n, K): weighted variance of the members' probability of each class, ``sum_m w_m (p_m - p)**2``."""
        return np.tensordot(self.weights, np.square(self.members - self.proba), axes=1)

    def prediction_set(self, level: float, method: str = "auto") -> list[np.ndarray]:
        """The prediction set of level ``level`` of each row.

        ``method="conformal"`` (what ``"auto"`` is when the prediction holds the ensemble's
        held-out scores, :attr:`conformal`): every class of probability at least ``1 - q_L``, and
        the most probable one (LAC sets, Sadinle et al. 2019; :mod:`autodeuq.ensemble.conformal`),
        whose coverage has a finite-sample guarantee on exchangeable rows. ``"mixture"`` (what
        ``"auto"`` is otherwise): the smallest set whose probability under the mixture reaches
        ``level``: classes taken by descending probability (a tie goes to the class listed
        first) until their cumulative probability reaches ``level`` (within
        :data:`SET_LEVEL_TOL` for round-off).

        Parameters
        ----------
        level : float
            A probability in ``(0, 1)`` (at most ``1 - 1e-9``).
        method : {"auto", "conformal", "mixture"}

        Returns
        -------
        list of ndarray
            One array of labels per row, most probable first.

        Raises
        ------
        ParameterError
            ``level`` is not such a probability (a ``ValueError``).

        Examples
        --------
        >>> value = CategoricalPrediction([[[0.6, 0.3, 0.1]]], [1.0], [10, 20, 30])
        >>> [s.tolist() for s in value.prediction_set(0.5)], [s.tolist() for s in value.prediction_set(0.85)]
        ([[10]], [[10, 20]])
        """
        from autodeuq.ensemble import conformal

        level = check_level(level)
        proba = self.proba
        order = np.argsort(-proba, axis=1, kind="stable")
        if conformal.resolve_method(method, self.conformal) == "conformal":
            inside = conformal.prediction_sets(self.conformal, proba, level)
            return [self.classes[row[inside[i, row]]] for i, row in enumerate(order)]
        cumulative = np.cumsum(np.take_along_axis(proba, order, axis=1), axis=1)
        reached = cumulative >= level - SET_LEVEL_TOL
        # a row whose total falls short by more than the tolerance keeps every class
        sizes = np.where(reached.any(axis=1), np.argmax(reached, axis=1) + 1, proba.shape[1])
        return [self.classes[row[:size]] for row, size in zip(order, sizes)]

    def to_frame(self, target: str, index=None, set_level: float | None = None, method: str = "auto"):
        """The prediction as a table, one row per input row.

        Parameters
        ----------
        target : str
            The target's name, the prefix of every column.
        index : array_like, optional
            The table's index (default: 0, 1, ...).
        set_level : float, optional
            Adds the prediction set of this level (:meth:`prediction_set`).
        method : {"auto", "conformal", "mixture"}
            How that set is made (:meth:`prediction_set`).

        Returns
        -------
        pandas.DataFrame
            Columns, in order: ``<target>_pred`` (the label), one ``<target>_p_<class>`` per class
            (the mixture's probability; the class written with ``str()``), ``<target>_entropy``
            (total), ``<target>_aleatoric_entropy``, ``<target>_epistemic_mi`` (nats) and, with
            ``set_level``, ``<target>_set``: the set's labels written with ``str()`` and joined by
            ``"|"``, most probable first; a label holding ``|``, a double quote or a line break
            is quoted as in CSV (:func:`join_prediction_set`; :func:`split_prediction_set` reads
            the cell back).

        Raises
        ------
        ValueError
            Two classes are written alike by ``str()`` (their columns would clash), or
            ``set_level`` is not a probability in ``(0, 1)``.
        """
        import pandas as pd

        names = [str(c) for c in self.classes]
        if len(set(names)) < len(names):
            raise ValueError(f"the class labels {names} do not give distinct column names")
        proba = self.proba
        columns = {f"{target}_pred": self.label}
        for k, name in enumerate(names):
            columns[f"{target}_p_{name}"] = proba[:, k]
        columns[f"{target}_entropy"] = self.total_entropy
        columns[f"{target}_aleatoric_entropy"] = self.aleatoric_entropy
        columns[f"{target}_epistemic_mi"] = self.epistemic_mi
        if set_level is not None:
            sets = self.prediction_set(set_level, method)
            columns[f"{target}_set"] = [join_prediction_set(labels) for labels in sets]
        return pd.DataFrame(columns, index=index)


def join_prediction_set(labels) -> str:
    """A prediction set's labels as one text cell: written with ``str()``, joined by ``"|"``.

    The cell is one CSV record whose delimiter is ``|``: a label holding ``|``, a double quote or
    a line break (or a set of one empty label) is enclosed in double quotes, its own quotes
    doubled, so the cell splits back unambiguously (:func:`split_prediction_set`, or
    ``next(csv.reader([cell], delimiter="|"))``). Other labels are written as they are.

    >>> join_prediction_set(["cat", "a|b", 7])
    'cat|"a|b"|7'
    """
    import csv
    import io

    buffer = io.StringIO()
    # The line terminator is what makes the writer quote a label holding a line break.
    csv.writer(buffer, delimiter="|", quotechar='"', quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n").writerow(
        [str(c) for c in labels])
    return buffer.getvalue()[:-2]


def split_prediction_set(cell: str) -> list[str]:
    """The labels (as text) of a ``<target>_set`` cell written by :func:`join_prediction_set`.

    >>> split_prediction_set('cat|"a|b"|7')
    ['cat', 'a|b', '7']
    """
    import csv

    return next(csv.reader([cell], delimiter="|", quotechar='"'))


def _check_temperature(temperature) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.integer, np.floating)) \
            or not np.isfinite(temperature) or temperature <= 0:
        raise ParameterError("temperature", "must be a positive finite number", temperature)
    return float(temperature)


def apply_temperature(log_proba, temperature: float) -> np.ndarray:
    """Members' probabilities tempered by ``temperature``: ``softmax(log_proba / T)`` over the last axis.

    ``T > 1`` flattens the probabilities, ``T < 1`` sharpens them, ``T = 1`` only normalizes
    (Guo et al. 2017). Log-probabilities and logits give the same result: they differ by a
    constant per row, which the softmax removes. Classes of probability 0 (log-probability
    ``-inf``) stay at 0.

    Parameters
    ----------
    log_proba : array_like of shape (..., K), e.g. (M, n, K)
        Log-probabilities or logits; no NaN or ``+inf``, and not all ``-inf`` in a row.
    temperature : float
        Positive.

    Returns
    -------
    ndarray of the shape of ``log_proba``
        Probabilities summing to 1 over the last axis (float64).

    Examples
    --------
    >>> apply_temperature(np.log([[0.8, 0.2]]), 1.0).round(6).tolist()
    [[0.8, 0.2]]
    >>> apply_temperature(np.log([[0.8, 0.2]]), 2.0).round(6).tolist()
    [[0.666667, 0.333333]]
    """
    temperature = _check_temperature(temperature)
    return np.exp(log_softmax(_check_log_proba(log_proba) / temperature, axis=-1))


def log_probabilities(probas) -> np.ndarray:
    """Probabilities as the log-probabilities :func:`apply_temperature` and the mixtures take (float64;
    a probability of 0 is floored at the smallest positive float, so that a fit never meets ``log 0``).

    >>> bool(log_probabilities([[1.0, 0.0]])[0, 1] < -700)
    True
    """
    return np.log(np.maximum(np.asarray(probas, dtype=np.float64), np.finfo(float).tiny))


def _check_log_proba(log_proba) -> np.ndarray:
    log_proba = np.asarray(log_proba, dtype=np.float64)
    if log_proba.ndim < 1 or log_proba.shape[-1] == 0:
        raise ValueError(f"log_proba must have a class axis last, got shape {log_proba.shape}")
    if np.any(np.isnan(log_proba)) or np.any(log_proba == np.inf):
        raise ValueError("log_proba must not hold NaN or +inf")
    if np.any(np.all(log_proba == -np.inf, axis=-1)):
        raise ValueError("log_proba gives every class of some row a probability of 0 (all -inf)")
    return log_proba


def _check_chunk(log_proba, weights, y_codes) -> Chunk:
    log_proba = _check_log_proba(log_proba)
    if log_proba.ndim != 3:
        raise ValueError(f"members' log-probabilities must have shape (n_members, n_rows, n_classes), got "
                         f"{log_proba.shape}")
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (log_proba.shape[0],) or np.any(weights < 0) or abs(weights.sum() - 1.0) > 1e-6:
        raise ValueError(f"weights must have shape ({log_proba.shape[0]},), be non-negative and sum to 1")
    return log_proba, weights, check_codes(y_codes, log_proba.shape[1], log_proba.shape[2])


def _log_likelihood(chunk: Chunk, temperature: float) -> np.ndarray:
    """Per-row log-probability of the observed class under the mixture of the tempered members."""
    log_proba, weights, codes = chunk
    tempered = log_softmax(log_proba / temperature, axis=-1)
    observed = tempered[:, np.arange(codes.size), codes]  # (M, n)
    with np.errstate(divide="ignore"):  # a member of weight 0 contributes nothing
        return logsumexp(observed + np.log(weights)[:, None], axis=0)


def pooled_log_loss(chunks: Sequence[Chunk], temperature: float = 1.0) -> float:
    """Mean log loss (nats) over the rows of all chunks of the mixtures tempered by ``temperature``.

    Parameters
    ----------
    chunks : sequence of (log_proba, weights, y_codes)
        Mixtures given by their members' log-probabilities or logits (M, n, K), weights (M,)
        and observed class codes (n,); ``M`` and ``n`` may differ between chunks, ``K`` may not.
    temperature : float

    Returns
    -------
    float

    Examples
    --------
    >>> round(pooled_log_loss([(np.log([[[0.5, 0.5]]]), [1.0], [0])]), 4)
    0.6931
    """
    temperature = _check_temperature(temperature)
    chunks = [_check_chunk(*chunk) for chunk in chunks]
    if not chunks:
        raise ValueError("pooled_log_loss needs at least one chunk of observations")
    return float(-np.mean(np.concatenate([_log_likelihood(chunk, temperature) for chunk in chunks])))


def _fit_pooled(chunks: Sequence[Chunk]) -> float:
    """The temperature of least pooled log loss over checked chunks."""
    if len({chunk[0].shape[2] for chunk in chunks}) > 1:
        raise ValueError("every chunk must have the same number of classes")

    def loss(log_t):
        return -np.mean(np.concatenate([_log_likelihood(chunk, np.exp(log_t)) for chunk in chunks]))

    if not np.isfinite(loss(0.0)):
        raise ValueError("the ensemble gives the observed class of some row a probability of 0 (log-probability "
                         "-inf in every member), so no temperature gives a finite log loss")
    low, high = TEMPERATURE_BOUNDS
    best = minimize_scalar(loss, bounds=(np.log(low), np.log(high)), method="bounded", options={"xatol": 1e-6})
    return float(np.exp(best.x))


def fit_temperature(members_log_proba, weights, y_codes) -> float:
    """The temperature of least log loss of the ensemble on the given rows (Guo et al. 2017).

    One scalar ``T`` tempers every member (:func:`apply_temperature`); the ensemble's prediction
    is the weighted mean of the tempered members' probabilities. ``T`` minimizes its mean log
    loss, searched on ``log T`` in :data:`TEMPERATURE_BOUNDS` (a bounded scalar search, to
    ``1e-6`` in ``log T``).

    Parameters
    ----------
    members_log_proba : array_like of shape (M, n, K)
        The members' log-probabilities or logits.
    weights : array_like of shape (M,)
        Non-negative, summing to 1.
    y_codes : array_like of shape (n,)
        Observed class codes in ``[0, K)``.

    Returns
    -------
    float
        The temperature; above 1 for an over-confident ensemble, below 1 for an under-confident one.

    Raises
    ------
    ValueError
        On shapes that do not agree, bad weights or codes, or an observed class every member
        gives probability 0.

    Examples
    --------
    A model that gives 0.9 to a class that comes out right 3 times in 4 is tempered to 0.75,
    which halves its log-odds, ``log 9``, to ``log 3``:

    >>> log_proba = np.log([[[0.9, 0.1]] * 4])
    >>> round(fit_temperature(log_proba, [1.0], [0, 0, 0, 1]), 3)
    2.0
    """
    return _fit_pooled([_check_chunk(members_log_proba, weights, y_codes)])


def cross_fitted_temperature(select_rows: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], members_log_proba,
                             y_codes, folds: int = 5, seed: int = 0):
    """Fit the temperature on out-of-fold mixtures: each fold scored by a selection made without it.

    The counterpart of :func:`autodeuq.ensemble.calibration.cross_fitted_scale`: the validation
    rows are split into ``folds`` at random; for each fold, ``select_rows`` re-selects the
    ensemble on the other folds' rows, and the fold's rows are predicted by that ensemble.
    The temperature is fitted (:func:`fit_temperature`) on these held-out predictions of all
    folds together, so no row both chose the members and tunes the temperature.

    Parameters
    ----------
    select_rows : callable ``rows -> (indices, weights)``
        Runs the ensemble selection on the validation rows ``rows`` (an index array) and
        returns the chosen catalog indices (into ``members_log_proba``) and their weights (a
        :class:`~autodeuq.ensemble.selection.Selection` unpacks so).
    members_log_proba : ndarray of shape (n_models, n, K)
        The catalog's validation log-probabilities or logits.
    y_codes : ndarray of shape (n,)
        Observed class codes in ``[0, K)``.
    folds : int, default 5
        Number of folds (at least 2; at most n).
    seed : int, default 0
        Seed of the row permutation.

    Returns
    -------
    temperature : float
    chunks : list of (log_proba, weights, y_codes)
        The out-of-fold mixtures, untempered, one per fold (each row in exactly one, a fold's
        rows in increasing order), to report the log loss before and after
        (:func:`pooled_log_loss`).

    Examples
    --------
    >>> from autodeuq.ensemble.selection import select_categorical
    >>> rng = np.random.default_rng(0)
    >>> logits = rng.normal(size=(200, 3))
    >>> y = np.array([rng.choice(3, p=p) for p in apply_temperature(logits, 1.0)])
    >>> catalog = np.stack([3 * logits, 3 * logits + rng.normal(size=logits.shape)])
    >>> def select_rows(rows):
    ...     return select_categorical(apply_temperature(catalog[:, rows], 1.0), y[rows], size=2)
    >>> temperature, chunks = cross_fitted_temperature(select_rows, catalog, y, folds=4)
    >>> temperature > 1, sum(len(c[2]) for c in chunks)
    (True, 200)
    """
    log_proba = _check_log_proba(members_log_proba)
    if log_proba.ndim != 3:
        raise ValueError(f"members_log_proba must have shape (n_models, n_rows, n_classes), got {log_proba.shape}")
    n = log_proba.shape[1]
    codes = check_codes(y_codes, n, log_proba.shape[2])
    if not 2 <= folds <= n:
        raise ValueError(f"cross-fitting needs 2 <= folds <= {n} validation rows, got {folds}")
    order = np.random.default_rng(seed).permutation(n)
    chunks = []
    for held in np.array_split(order, folds):
        held = np.sort(held)  # so that a chunk's rows are in the order of the validation rows
        rows = np.setdiff1d(np.arange(n), held)
        indices, weights = select_rows(rows)
        chunks.append(_check_chunk(log_proba[np.asarray(indices)][:, held], weights, codes[held]))
    return _fit_pooled(chunks), chunks
