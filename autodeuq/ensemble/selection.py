"""Ensemble selection from a catalog of Gaussian models (Caruana et al. 2004; Egele et al. 2022).

Selection works on cached validation predictions only. Each model ``i`` of the catalog
predicts, per point and target, a Gaussian ``N(mu_i, s2_i)``; an ensemble is a weighted
mixture of them. The score of an ensemble is its validation NLL averaged over points and
targets, by one of two scores:

- ``"mixture"``: the exact NLL of the mixture ``sum_i w_i N(y; mu_i, s2_i)``;
- ``"gaussian"``: the NLL of the single Gaussian with the mixture's mean and variance
  (moment matching, as in the original AutoDEUQ code).

A catalog of classifiers (:func:`select_categorical`) is selected the same way: an ensemble
predicts the weighted mean of its members' class probabilities, and its score, the mean log loss
``-log sum_i w_i p_i(y)``, is the mixture NLL with each model's probability of the observed class
in place of its density.

Greedy steps are incremental: the ensemble is held as running sums, and one step scores
every catalog model at once in ``O(n_models * n_points * n_targets)``, whatever the
ensemble's size.
"""

import math
import numbers
import operator

import numpy as np

from autodeuq.core.errors import ParameterError
from autodeuq.ensemble.categorical import check_codes
from autodeuq.ensemble.options import METHODS, SCORES, STOPS
from autodeuq.metrics import LOG_2PI, check_mixture

__all__ = ["select", "select_categorical", "select_bagged", "select_categorical_bagged", "fit_weights", "Selection",
           "METHODS", "SCORES", "STOPS", "IMPROVEMENT_RTOL", "USABLE_SUM_TOL"]

OBJECTIVES = SCORES  # its former name, kept for one release

#: A greedy step is taken only if it lowers the score by more than this fraction of
#: ``max(1, |score|)``. It keeps float round-off (e.g. re-adding the only member, which
#: leaves the mixture unchanged) from counting as an improvement.
IMPROVEMENT_RTOL = 1e-12

#: A classifier is usable in :func:`select_categorical` only if each row of its probabilities
#: sums to 1 within this (in float64). Stricter than what
#: :class:`~autodeuq.ensemble.categorical.CategoricalPrediction` accepts and renormalizes: a
#: float32 softmax output should be cast to float64 and renormalized before selection.
USABLE_SUM_TOL = 1e-6


class Selection(tuple):
    """What :func:`select` chose, unpackable as ``(indices, weights)``.

    Attributes
    ----------
    indices, weights : ndarray
        Distinct catalog indices of the members and their weights (sum 1).
    size : int
        The number of distinct members asked for.
    reason : str or None
        Why fewer than ``size`` distinct members were chosen (``None`` when ``size`` were).
    """

    def __new__(cls, indices, weights, size, reason=None):
        self = super().__new__(cls, (indices, weights))
        self.indices, self.weights, self.size, self.reason = indices, weights, size, reason
        return self

    @property
    def effective_size(self) -> float:
        """``1 / sum(w**2)``: how many equally weighted members the weights amount to."""
        return float(1.0 / np.sum(np.square(self.weights)))


def select(
    means, variances, y, size=5, selector="greedy", score="mixture", *, stop="size",
    groups=None, max_selections=None, pool=1.0
):
    """Select an ensemble from a catalog of Gaussian models.

    Parameters
    ----------
    means, variances : array_like, shape (n_models, n_points, n_targets)
        Cached validation predictions of every catalog model.
    y : array_like, shape (n_points, n_targets)
        Validation targets.
    size : int, default 5
        Number of distinct members (K).
    selector : {"greedy", "greedy-noreplace", "topk"}, default "greedy"
        - ``"greedy"``: Caruana et al. (2004) with replacement. Start from the best single
          model; at each step add (once more) the catalog model, members included, that
          gives the lowest score. Weights are selection counts over the total.
        - ``"greedy-noreplace"``: the same, each model at most once; uniform weights.
        - ``"topk"``: the ``size`` models with the best individual score; uniform weights.
    score : {"mixture", "gaussian"}, default "mixture"
        What selection minimizes: the exact mixture NLL, or the NLL of the moment-matched
        Gaussian.
    stop : {"size", "improvement"}, default "size"
        When the greedy selectors stop.

        - ``"size"``: at ``size`` distinct members. A step whose best addition does not
          improve the score (or that comes after ``max_selections`` selections) adds the
          best model not yet in the ensemble instead, as the forward selection of neural
          ensemble search (Zaidi et al. 2021) does; so the ensemble never collapses to
          fewer members than asked while enough usable models exist.
        - ``"improvement"``: also as soon as no addition strictly improves the score, or
          after ``max_selections`` selections (Caruana's original rule); the ensemble may
          then have fewer than ``size`` members, down to one.
    groups : array_like of shape (n_models,), optional
        A label per model (e.g. its architecture): a model may join the ensemble only if no
        member has its label, so the members come from ``size`` different groups.
        Re-selecting a member is unaffected.
    max_selections : int, optional
        Cap on the total number of greedy selections, counting repeats; default
        ``10 * size``. With replacement, repeated additions of present members do not grow
        the number of distinct members, so this cap is what bounds the loop.
    pool : float, default 1.0
        The fraction of the usable models that may be selected: the best
        ``ceil(pool * n_usable)`` by their own score, and at least ``size`` of them (library
        pruning, Caruana et al. 2006, "Getting the most out of ensemble selection"). With 1,
        every usable model. A smaller pool keeps greedy selection from taking a model that is
        poor on its own for what it adds on a few validation rows (a wide model that covers
        outlying targets, for one).

    Returns
    -------
    Selection
        Unpacks as ``(indices, weights)``: the distinct catalog indices of the members,
        ``k <= size`` of them, in order of first selection (for ``"topk"``: best first), and
        their weights, summing to 1. ``.reason`` says why ``k < size`` when it is.

    Raises
    ------
    ValueError
        On an unknown ``selector`` or ``score``, ``size < 1``, shapes that do not agree,
        non-finite ``y``, or a catalog without a single usable model.

    Notes
    -----
    A model is usable when all its means and variances are finite, its variances are
    positive and its individual NLL is finite; other models are never selected. If fewer
    than ``size`` models are usable (or fewer than ``size`` groups hold one), selection runs
    on those there are. Ties go to the lower catalog index.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = rng.normal(size=(50, 1))
    >>> means = y + rng.normal(scale=[[[0.1]], [[1.0]], [[0.5]]], size=(3, 50, 1))
    >>> indices, weights = select(means, np.full(means.shape, 0.25), y, size=2)
    >>> int(indices[0])
    0
    """
    means, variances, y = check_mixture(means, variances, y=y)
    size, groups, max_selections = _check_selection(means.shape[0], size, selector, score, stop, groups,
                                                    max_selections, pool)
    # Any non-finite or non-positive input makes the model's log-density NaN or -inf at
    # that point, so "individual NLL is finite" is exactly the usability rule.
    with np.errstate(all="ignore"):
        diff = means - y
        sq_diff = np.square(diff)
        logpdf = sq_diff / variances
        logpdf += np.log(variances)
        logpdf += LOG_2PI
        logpdf *= -0.5
        single = -logpdf.reshape(means.shape[0], -1).mean(axis=1)
    if score == "mixture":
        state, arrays = _MixtureState, (logpdf,)
    else:
        state, arrays = _GaussianState, (diff, sq_diff, variances)
    del diff, sq_diff, logpdf
    return _select_scored(single, state, arrays, size, selector, stop, groups, max_selections, pool,
                          unusable="a non-finite mean, a non-finite or non-positive variance, or a non-finite NLL")


def select_categorical(probas, y_codes, size=5, selector="greedy", *, stop="size", groups=None, max_selections=None,
                       pool=1.0):
    """Select an ensemble from a catalog of classifiers, on the log loss of their mixture.

    The ensemble predicts the weighted mean of its members' class probabilities; its log loss
    at row ``n`` of true class ``y_n`` is ``-log sum_j w_j p_j(y_n)``: the mixture NLL of
    :func:`select` with the density of model ``j`` at row ``n`` replaced by ``p_j(y_n)``. So the
    same greedy selection (Caruana et al. 2004) runs on it, in the same incremental form.

    Parameters
    ----------
    probas : array_like, shape (n_models, n_points, n_classes)
        Cached validation class probabilities of every catalog model.
    y_codes : array_like, shape (n_points,)
        Validation labels as class codes in ``[0, n_classes)``.
    size, selector, stop, groups, max_selections, pool :
        As in :func:`select`.

    Returns
    -------
    Selection
        As in :func:`select`.

    Raises
    ------
    ValueError
        On an unknown ``selector`` or ``stop``, ``size < 1``, shapes that do not agree, bad
        class codes, or a catalog without a single usable model.

    Notes
    -----
    A model is usable when all its probabilities are finite and in ``[0, 1]``, each of its rows
    sums to 1 within :data:`USABLE_SUM_TOL` (in float64: a float32 softmax output may need
    renormalizing first), and its individual log loss is finite (it gives no
    row's true class a probability of exactly 0); other models are never selected.

    Examples
    --------
    >>> y = np.array([0, 1, 1, 0])
    >>> probas = np.array([[[0.6, 0.4]] * 4, [[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.8, 0.2]]])
    >>> indices, weights = select_categorical(probas, y, size=2)
    >>> indices.tolist(), weights.tolist()
    ([1, 0], [0.5, 0.5])
    """
    probas = np.asarray(probas, dtype=float)
    if probas.ndim != 3 or 0 in probas.shape:
        raise ValueError(f"probas must have shape (n_models, n_points, n_classes), none of them 0, got {probas.shape}")
    n_models, n_points, n_classes = probas.shape
    codes = check_codes(y_codes, n_points, n_classes)
    size, groups, max_selections = _check_selection(n_models, size, selector, "mixture", stop, groups, max_selections,
                                                    pool)
    with np.errstate(all="ignore"):
        logpdf = np.log(probas[:, np.arange(n_points), codes])
        single = -logpdf.mean(axis=1)
        valid = np.all((probas >= 0) & (probas <= 1), axis=(1, 2))  # NaN fails both comparisons
        valid &= np.all(np.abs(probas.sum(axis=2) - 1.0) <= USABLE_SUM_TOL, axis=1)
    single[~valid] = np.nan
    return _select_scored(single, _MixtureState, (logpdf,), size, selector, stop, groups, max_selections, pool,
                          unusable="probabilities that are not finite, not in [0, 1] or do not sum to 1, or a "
                                   "non-finite log loss")


def _select_scored(single, state_class, arrays, size, selector, stop, groups, max_selections, pool, unusable):
    """The selection shared by :func:`select` and :func:`select_categorical`, once every model is scored.

    ``single`` is each model's own score (NaN or inf: unusable); ``state_class(*arrays)``, with
    each array (n_models, ...) cut to the usable models of the pool, scores the greedy candidates;
    ``unusable`` says what makes a model unusable, for the error when none is usable.
    """
    n_models = single.size
    usable = np.flatnonzero(np.isfinite(single))
    if usable.size == 0:
        raise ValueError(f"no usable model in the catalog: every model has {unusable}")
    n_usable = usable.size
    usable = _pool(usable, single, size, pool)
    if usable.size < n_models:
        single = single[usable]
        arrays = tuple(a[usable] for a in arrays)
    if groups is not None:
        groups = groups[usable]

    if selector == "topk":
        ranked = np.argsort(single, kind="stable")
        if groups is not None:
            # the best model of each group, groups ranked by their best model
            ranked = ranked[np.sort(np.unique(groups[ranked], return_index=True)[1])]
        order = ranked[:size]
        return Selection(usable[order], np.full(order.size, 1.0 / order.size), size,
                         _shortfall(order.size, size, n_models, n_usable, groups, stopped=None,
                                    pooled=usable.size < n_usable))

    order, counts, stopped = _greedy(
        state_class(*arrays), single, size, replace=(selector == "greedy"), stop=stop, groups=groups,
        max_selections=max_selections,
    )
    counts = counts[order]
    return Selection(usable[order], counts / counts.sum(), size,
                     _shortfall(order.size, size, n_models, n_usable, groups, stopped,
                                pooled=usable.size < n_usable))


def _pool(usable, single, size, pool):
    """The usable model indices (ascending) that may be selected: the best ``ceil(pool * n)`` by
    their own score ``single``, at least ``size`` (ties to the lower index)."""
    keep = max(size, math.ceil(pool * usable.size - 1e-9))
    if keep >= usable.size:
        return usable
    return np.sort(usable[np.argsort(single[usable], kind="stable")[:keep]])


def _check_selection(n_models, size, selector, score, stop, groups, max_selections, pool):
    """``select``'s settings checked: (size, the groups as integer codes or None, max_selections)."""
    size = _check_positive_int(size, "size")
    if isinstance(pool, bool) or not isinstance(pool, numbers.Real) or not 0 < pool <= 1:
        raise ParameterError("pool", "must be a number in (0, 1]", pool)
    for name, value, allowed in (("selector", selector, METHODS), ("score", score, SCORES), ("stop", stop, STOPS)):
        if value not in allowed:
            raise ParameterError(name, f"must be one of {list(allowed)}", value)
    if groups is not None:
        groups = np.asarray(groups)
        if groups.shape != (n_models,):
            raise ValueError(f"groups must have one label per model ({n_models}), got shape {groups.shape}")
        # Integer codes, so that "same group" is one comparison per step.
        groups = np.unique(groups, return_inverse=True)[1].reshape(-1)
    max_selections = 10 * size if max_selections is None else _check_positive_int(max_selections, "max_selections")
    return size, groups, max_selections


def _shortfall(chosen, size, n_models, n_usable, groups, stopped, pooled=False):
    """Why an ensemble has fewer distinct members than asked, or None."""
    if chosen >= size:
        return None
    if stopped == "improvement":
        return ("no further model improved the validation score (stop='improvement'); "
                "stop='size' always fills the ensemble")
    if stopped == "max_selections":
        return "the cap on greedy selections (max_selections) was reached (stop='improvement')"
    if n_usable < size:
        unusable = n_models - n_usable
        return (f"the catalog has only {n_usable} usable model(s)"
                + (f" ({unusable} with non-finite predictions or NLL)" if unusable else ""))
    if groups is not None:
        where = "the models of the selection pool" if pooled else "the usable models"
        return f"{where} fall into only {np.unique(groups).size} group(s)"
    return None


def _check_positive_int(value, name):
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _greedy(state, single, size, replace, stop, groups, max_selections):
    """Caruana's greedy loop over a scoring state.

    Returns (first-selection order, counts, what stopped it early: None, "improvement" or
    "max_selections").
    """
    counts = np.zeros(single.size, dtype=np.int64)
    first = int(np.argmin(single))
    state.add(first)
    counts[first] = 1
    order = [first]
    score = single[first]
    selections = 1
    # May a model still join as a new member? Not a member yet, and its group not taken.
    joinable = np.ones(single.size, dtype=bool)
    joinable[first] = False
    if groups is not None:
        joinable &= groups != groups[first]
    while len(order) < size:
        candidate_scores = state.candidate_scores()
        allowed = joinable | (counts > 0) if replace else joinable
        if not allowed.any():
            break
        best = int(np.argmin(np.where(allowed, candidate_scores, np.inf)))
        improves = candidate_scores[best] < score - IMPROVEMENT_RTOL * max(1.0, abs(score))
        if not improves or selections >= max_selections:
            if stop == "improvement":
                return np.asarray(order, dtype=np.int64), counts, "improvement" if not improves else "max_selections"
            if not joinable.any():
                break
            best = int(np.argmin(np.where(joinable, candidate_scores, np.inf)))
        state.add(best)
        score = candidate_scores[best]
        selections += 1
        if counts[best] == 0:
            order.append(best)
            joinable[best] = False
            if groups is not None:
                joinable &= groups != groups[best]
        counts[best] += 1
    return np.asarray(order, dtype=np.int64), counts, None


class _MixtureState:
    """Exact mixture NLL of ``ensemble + one more copy of model i``, for every i at once.

    Holds ``log_sum[n, t] = log sum_j c_j N(y; mu_j, s2_j)`` over the members with counts
    ``c_j``; adding model i gives ``logaddexp(log_sum, logpdf_i)`` and the mixture density
    ``exp(.) / (total + 1)``.
    """

    def __init__(self, logpdf):
        self.logpdf = logpdf.reshape(logpdf.shape[0], -1)
        self.log_sum = None
        self.total = 0
        self._diff = np.empty_like(self.logpdf)
        self._work = np.empty_like(self.logpdf)

    def add(self, i):
        if self.log_sum is None:
            self.log_sum = self.logpdf[i].copy()
        else:
            self.log_sum = np.logaddexp(self.log_sum, self.logpdf[i])
        self.total += 1

    def candidate_scores(self):
        # logaddexp(a, b) = a + max(d, 0) + log1p(exp(-|d|)) with d = b - a; written out
        # with in-place buffers because np.logaddexp is several times slower.
        diff, work = self._diff, self._work
        np.subtract(self.logpdf, self.log_sum, out=diff)
        np.abs(diff, out=work)
        np.negative(work, out=work)
        np.exp(work, out=work)
        np.log1p(work, out=work)
        np.maximum(diff, 0.0, out=diff)
        work += diff
        mean_log_sum = work.mean(axis=1) + self.log_sum.mean()
        return np.log(self.total + 1) - mean_log_sum


class _GaussianState:
    """NLL of the moment-matched Gaussian of ``ensemble + one more copy of model i``.

    Holds count-weighted sums of ``s2``, ``d = mu - y`` and ``d**2``. Means are taken
    relative to ``y`` because the NLL only needs ``mean - y``, and centring keeps the
    variance ``E[d**2] - E[d]**2`` from cancelling catastrophically when means are large.
    """

    def __init__(self, diff, sq_diff, variances):
        n_models = diff.shape[0]
        self.d = diff.reshape(n_models, -1)
        self.d2 = sq_diff.reshape(n_models, -1)
        self.s2 = variances.reshape(n_models, -1)
        self.sum_s2 = np.zeros(self.d.shape[1])
        self.sum_d = np.zeros(self.d.shape[1])
        self.sum_d2 = np.zeros(self.d.shape[1])
        self.total = 0
        self._mean = np.empty_like(self.d)
        self._aleatoric = np.empty_like(self.d)
        self._work = np.empty_like(self.d)

    def add(self, i):
        self.sum_s2 += self.s2[i]
        self.sum_d += self.d[i]
        self.sum_d2 += self.d2[i]
        self.total += 1

    def candidate_scores(self):
        inv = 1.0 / (self.total + 1)
        mean, aleatoric, work = self._mean, self._aleatoric, self._work
        np.add(self.d, self.sum_d, out=mean)
        mean *= inv
        np.add(self.s2, self.sum_s2, out=aleatoric)
        aleatoric *= inv
        # epistemic = E[d^2] - E[d]^2, clipped at 0 against round-off
        np.add(self.d2, self.sum_d2, out=work)
        work *= inv
        np.square(mean, out=mean)
        work -= mean
        np.maximum(work, 0.0, out=work)
        work += aleatoric  # total variance
        np.divide(mean, work, out=mean)  # squared error / variance
        np.log(work, out=work)
        work += mean
        return 0.5 * (LOG_2PI + work.mean(axis=1))


def select_bagged(means, variances, y, size=5, *, bags=10, fraction=0.5, seed=0, **options):
    """Selection averaged over random halves of the validation rows (bagged ensemble selection).

    Greedy selection on few validation rows fits their noise: it picks the models that happen to
    suit those rows. Caruana et al. (2006) reduce that by repeating the selection on random
    subsets and averaging. Here :func:`select` runs ``bags`` times, each on a random
    ``fraction`` of the rows (without replacement); each model's weights are summed over the
    runs, and the ``size`` models of largest total become the ensemble, weighted by their totals.

    Parameters
    ----------
    means, variances, y, size :
        As in :func:`select`.
    bags : int, default 10
        Number of selections.
    fraction : float, default 0.5
        Fraction of the rows each selection sees.
    seed : int, default 0
        Seed of the row subsets.
    **options :
        ``selector``, ``score``, ``stop``, ``groups``, ``max_selections`` of :func:`select`.

    Returns
    -------
    Selection
    """
    means, variances, y = check_mixture(means, variances, y=y)
    return _bagged(lambda rows: select(means[:, rows], variances[:, rows], y[rows], size, **options),
                   means.shape[0], y.shape[0], size, bags, fraction, seed, options.get("groups"))


def select_categorical_bagged(probas, y_codes, size=5, *, bags=10, fraction=0.5, seed=0, **options):
    """:func:`select_bagged` for a catalog of classifiers: :func:`select_categorical` on random row subsets.

    Parameters
    ----------
    probas, y_codes, size :
        As in :func:`select_categorical`.
    bags, fraction, seed :
        As in :func:`select_bagged`.
    **options :
        ``selector``, ``stop``, ``groups``, ``max_selections`` of :func:`select_categorical`.

    Returns
    -------
    Selection

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, size=40)
    >>> probas = rng.dirichlet(np.ones(3), size=(6, 40))
    >>> chosen = select_categorical_bagged(probas, y, size=2, bags=4)
    >>> len(chosen.indices), round(float(chosen.weights.sum()), 12)
    (2, 1.0)
    """
    probas = np.asarray(probas, dtype=float)
    if probas.ndim != 3:
        raise ValueError(f"probas must have shape (n_models, n_points, n_classes), got {probas.shape}")
    y_codes = check_codes(y_codes, probas.shape[1], probas.shape[2])
    return _bagged(lambda rows: select_categorical(probas[:, rows], y_codes[rows], size, **options),
                   probas.shape[0], y_codes.size, size, bags, fraction, seed, options.get("groups"))


def _bagged(select_rows, n_models, n_rows, size, bags, fraction, seed, groups):
    """Bagged selection over ``select_rows(rows) -> Selection`` (see :func:`select_bagged`)."""
    size = _check_positive_int(size, "size")
    bags = _check_positive_int(bags, "bags")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    rng = np.random.default_rng(seed)
    totals = np.zeros(n_models)
    reasons = []
    for _ in range(bags):
        rows = np.sort(rng.choice(n_rows, size=max(1, int(round(fraction * n_rows))), replace=False))
        chosen = select_rows(rows)
        totals[chosen.indices] += chosen.weights
        reasons.append(chosen.reason)
    ranked = np.argsort(-totals, kind="stable")
    ranked = ranked[totals[ranked] > 0][:size]
    if groups is not None:  # the union of the bags may hold two members of a group: keep the heavier
        labels = np.asarray(groups)[ranked]
        ranked = ranked[np.sort(np.unique(labels, return_index=True)[1])]
    reason = None
    if ranked.size < size:
        reason = next((r for r in reasons if r), f"the {bags} selections together chose {ranked.size} model(s)")
    weights = totals[ranked] / totals[ranked].sum()
    return Selection(ranked, weights, size, reason)


def fit_weights(means, variances, y, min_weight=0.0, *, tol=1e-12, max_iter=10_000):
    """Mixture weights of given members that maximize the validation log-likelihood, each >= ``min_weight``.

    The weights of a mixture of fixed components that maximize its log-likelihood are found by
    the EM iteration for mixture proportions (Dempster et al. 1977): each step sets the weights
    to the members' mean responsibilities for the rows. The log-likelihood is concave in the
    weights, so the iteration climbs to the global maximum. The lower bound enters the M-step:
    ``argmax sum_i r_i log w_i`` over ``{w : sum w = 1, w_i >= min_weight}`` keeps every
    member whose proportional share ``r_i / lambda`` falls below the bound at the bound and
    shares the rest of the mass in proportion to ``r`` among the others (the step still
    maximizes EM's lower bound, so the likelihood never decreases). Greedy selection with
    replacement approximates the unbounded maximum on a grid of ``1 / selections``
    (Caruana et al. 2004); the bound keeps a member from vanishing, so that the ensemble does
    not become one or two networks in disguise.

    Parameters
    ----------
    means, variances : array_like, shape (n_members, n_points, n_targets)
        The members' validation predictions (usable: finite, positive variances).
    y : array_like, shape (n_points, n_targets)
        Validation targets.
    min_weight : float, default 0.0
        Lower bound on every weight, in ``[0, 1 / n_members]``.
    tol : float
        Stop when an iteration raises the mean log-likelihood by less than this.
    max_iter : int
        Cap on iterations.

    Returns
    -------
    ndarray, shape (n_members,)
        Weights summing to 1, each ``>= min_weight``.

    Examples
    --------
    >>> y = np.zeros((4, 1))
    >>> w = fit_weights(np.zeros((2, 4, 1)), np.stack([np.full((4, 1), 1.0), np.full((4, 1), 9.0)]), y, 0.1)
    >>> w.round(3).tolist()
    [0.9, 0.1]
    """
    means, variances, y = check_mixture(means, variances, y=y)
    n_members = means.shape[0]
    if not 0.0 <= min_weight <= 1.0 / n_members:
        raise ValueError(f"min_weight must be in [0, 1/{n_members}] for {n_members} member(s), got {min_weight!r}")
    logpdf = -0.5 * (LOG_2PI + np.log(variances) + np.square(means - y) / variances)
    logpdf = logpdf.reshape(n_members, -1)
    if not np.all(np.isfinite(logpdf)):
        raise ValueError("fit_weights needs members with finite means and positive, finite variances")
    weights = np.full(n_members, 1.0 / n_members)
    previous = -np.inf
    for _ in range(max_iter):
        joint = logpdf + np.log(np.maximum(weights, np.finfo(float).tiny))[:, None]
        log_mixture = np.logaddexp.reduce(joint, axis=0)
        likelihood = log_mixture.mean()
        if likelihood - previous < tol:
            break
        previous = likelihood
        weights = _bounded_proportions(np.exp(joint - log_mixture).mean(axis=1), min_weight)
    return weights


def _bounded_proportions(responsibilities, min_weight):
    """``argmax sum_i r_i log w_i`` over the simplex with ``w_i >= min_weight`` (``sum r = 1``)."""
    weights = np.empty_like(responsibilities)
    at_bound = np.zeros(responsibilities.size, dtype=bool)
    while True:
        free = ~at_bound
        mass, share = 1.0 - min_weight * at_bound.sum(), responsibilities[free].sum()
        weights[free] = responsibilities[free] * (mass / share) if share > 0 else mass / free.sum()
        weights[at_bound] = min_weight
        below = free & (weights < min_weight)
        if not below.any():
            return weights
        at_bound |= below
