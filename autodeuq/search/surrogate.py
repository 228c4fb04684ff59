"""Surrogate models of Bayesian optimization: regressors that also predict their uncertainty.

A surrogate is any object with ``fit(X, y)`` and ``predict(X, return_std=True) -> (mu, sigma)``
(the scikit-learn convention). Surrogates are created by name through
:data:`~autodeuq.search.SURROGATES`, a table ``name -> factory(seed)``; adding one is one line anywhere::

    from autodeuq.search import SURROGATES
    SURROGATES["my-ensemble"] = lambda seed: MyEnsembleSurrogate(random_state=seed)

Constant liar (several suggestions from one fit) needs predictions on a fixed candidate set that
can absorb fantasy observations: :func:`candidate_predictions`. A surrogate may provide its own
fast ``candidate_predictions(candidates)`` (the tree ensembles here update their leaf statistics);
any other surrogate is refitted once per fantasy observation.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.ensemble import ExtraTreesRegressor, RandomForestRegressor
from sklearn.utils.validation import check_is_fitted, validate_data

from autodeuq.search import SURROGATES


class _TreeEnsembleSurrogate(RegressorMixin, BaseEstimator):
    """Tree ensemble whose uncertainty follows the law of total variance over trees.

    For a point x falling in leaf l_t(x) of tree t, with mu_t(x) and var_t(x) the mean and the
    variance of the training targets in that leaf::

        mu(x)     = mean_t mu_t(x)
        sigma2(x) = mean_t var_t(x) + var_t mu_t(x)

    Leaf statistics are read once at fit from the fitted trees (for the squared-error criterion
    scikit-learn stores each node's target mean in ``tree_.value`` and its target variance in
    ``tree_.impurity``), concatenated over trees, so a prediction is one ``apply`` per tree and
    two gathers.
    """

    def _make_forest(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def fit(self, X, y):
        X, y = validate_data(self, X, y, y_numeric=True)
        self.forest_ = self._make_forest().fit(X, y)
        trees = [est.tree_ for est in self.forest_.estimators_]
        sizes = np.array([t.node_count for t in trees])
        self.node_offsets_ = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self.node_mean_ = np.concatenate([t.value[:, 0, 0] for t in trees])
        self.node_var_ = np.maximum(np.concatenate([t.impurity for t in trees]), 0.0)
        self.node_count_ = np.concatenate([t.weighted_n_node_samples for t in trees])
        self.trees_ = trees
        return self

    def leaves(self, X) -> np.ndarray:
        """Index of each point's leaf in each tree, in the concatenated node arrays, shape (n, T)."""
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        out = np.empty((len(X32), len(self.trees_)), dtype=np.intp)
        for j, (tree, offset) in enumerate(zip(self.trees_, self.node_offsets_)):
            out[:, j] = tree.apply(X32)
            out[:, j] += offset
        return out

    def predict(self, X, return_std=False):
        check_is_fitted(self)
        leaves = self.leaves(validate_data(self, X, reset=False))
        means = self.node_mean_[leaves]
        mu = means.mean(axis=1)
        if not return_std:
            return mu
        sigma2 = self.node_var_[leaves].mean(axis=1) + means.var(axis=1)
        return mu, np.sqrt(sigma2)

    def candidate_predictions(self, candidates) -> "_TreeCandidatePredictions":
        """Predictions on ``candidates`` that can take fantasy observations cheaply."""
        return _TreeCandidatePredictions(self, candidates)


class ExtraTreesSurrogate(_TreeEnsembleSurrogate):
    """Extremely randomized trees (random splits, all features, no bootstrap), the default.

    Bayesian optimization builds it by name (``"et"``) with :data:`BO_N_ESTIMATORS` trees.

    Parameters
    ----------
    n_estimators : int
        Number of trees.
    min_samples_leaf : int
        Minimum training points per leaf (>= 2 so that leaves have a variance).
    random_state : int or None

    Examples
    --------
    >>> X = np.random.default_rng(0).random((50, 3)); y = X.sum(axis=1)
    >>> mu, sigma = ExtraTreesSurrogate(n_estimators=10, random_state=0).fit(X, y).predict(X, return_std=True)
    """

    def __init__(self, n_estimators=100, min_samples_leaf=3, random_state=None):
        self.n_estimators = n_estimators
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state

    def _make_forest(self):
        return ExtraTreesRegressor(
            n_estimators=self.n_estimators, min_samples_leaf=self.min_samples_leaf,
            max_features=1.0, bootstrap=False, n_jobs=1, random_state=self.random_state,
        )


class RandomForestSurrogate(_TreeEnsembleSurrogate):
    """Breiman's random forest (best splits over sqrt(d) features, bootstrap samples).

    Leaf statistics are those of each tree's bootstrap sample.
    """

    def __init__(self, n_estimators=100, min_samples_leaf=3, random_state=None):
        self.n_estimators = n_estimators
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state

    def _make_forest(self):
        return RandomForestRegressor(
            n_estimators=self.n_estimators, min_samples_leaf=self.min_samples_leaf,
            max_features="sqrt", bootstrap=True, n_jobs=1, random_state=self.random_state,
        )


class GaussianProcessSurrogate(RegressorMixin, BaseEstimator):
    """Gaussian process with a Matern kernel (one length scale per feature) plus white noise.

    Targets are normalized (``normalize_y=True``). Fitting costs O(n^3): use it for searches of a
    few hundred evaluations at most. Under the constant liar, fantasy points are absorbed by
    refitting with the kernel hyperparameters frozen (no marginal-likelihood optimization).

    Parameters
    ----------
    nu : float
        Smoothness of the Matern kernel.
    n_restarts_optimizer : int
        Restarts of the marginal-likelihood optimization of the kernel hyperparameters.
    kernel : sklearn kernel or None
        Replaces the default kernel; it is used as given, without optimization, when
        ``optimize=False``.
    optimize : bool
        Fit the kernel hyperparameters by maximizing the marginal likelihood.
    random_state : int or None
    """

    def __init__(self, nu=2.5, n_restarts_optimizer=2, kernel=None, optimize=True, random_state=None):
        self.nu = nu
        self.n_restarts_optimizer = n_restarts_optimizer
        self.kernel = kernel
        self.optimize = optimize
        self.random_state = random_state

    def fit(self, X, y):
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

        X, y = validate_data(self, X, y, y_numeric=True)
        kernel = self.kernel
        if kernel is None:
            kernel = (
                ConstantKernel(1.0, (1e-3, 1e3))
                * Matern(length_scale=np.ones(X.shape[1]), length_scale_bounds=(1e-2, 1e2), nu=self.nu)
                + WhiteKernel(1e-2, (1e-8, 1e0))
            )
        self.gp_ = GaussianProcessRegressor(
            kernel=kernel, normalize_y=True, n_restarts_optimizer=self.n_restarts_optimizer,
            optimizer="fmin_l_bfgs_b" if self.optimize else None, random_state=self.random_state,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.gp_.fit(X, y)
        self.X_fit_, self.y_fit_ = X, y
        return self

    def predict(self, X, return_std=False):
        check_is_fitted(self)
        return self.gp_.predict(validate_data(self, X, reset=False), return_std=return_std)

    def candidate_predictions(self, candidates) -> "_RefitCandidatePredictions":
        """Predictions on ``candidates``; fantasy points refit with the kernel frozen."""
        frozen = GaussianProcessSurrogate(kernel=self.gp_.kernel_, optimize=False).fit(self.X_fit_, self.y_fit_)
        return _RefitCandidatePredictions(frozen, self.X_fit_, self.y_fit_, candidates)


# Trees per ensemble when BO builds a tree surrogate by name (the classes keep 100 as their own
# default). The fit and the acquisition of an ask grow linearly with the trees
# (benchmarks/results/search_overhead.md times ask(8) with 10, 25 and 100). On synthetic box
# problems (sphere in 6 and 20 dimensions, Ackley in 6; 120 evaluations, 6 seeds) 10 and 25 trees
# reached the same median best cost. DeepHyper's current CBO also defaults to 10 trees.
BO_N_ESTIMATORS = 10



def extra_trees(seed: int | None = None) -> ExtraTreesSurrogate:
    """``"et"``: extremely randomized trees with :data:`BO_N_ESTIMATORS` trees."""
    return ExtraTreesSurrogate(n_estimators=BO_N_ESTIMATORS, random_state=seed)


def random_forest(seed: int | None = None) -> RandomForestSurrogate:
    """``"rf"``: a random forest with :data:`BO_N_ESTIMATORS` trees."""
    return RandomForestSurrogate(n_estimators=BO_N_ESTIMATORS, random_state=seed)


def gaussian_process(seed: int | None = None) -> GaussianProcessSurrogate:
    """``"gp"``: a Gaussian process."""
    return GaussianProcessSurrogate(random_state=seed)


def register_surrogate(name: str, factory: Callable[[int | None], Any]) -> None:
    """Make ``make_surrogate(name)`` build ``factory(seed)`` (replaces an existing name)."""
    SURROGATES[name.lower()] = factory


def make_surrogate(surrogate, seed: int | None = None):
    """An unfitted surrogate from a name of :data:`SURROGATES` or from a surrogate object.

    An object is cloned (``sklearn.base.clone``) when it is a scikit-learn estimator, so the
    caller's instance is never fitted in place, and given ``random_state=seed`` when it has none;
    other objects are used as they are.
    """
    if isinstance(surrogate, str):
        factory = SURROGATES.get(surrogate.lower())
        if factory is None:
            raise ValueError(f"unknown surrogate {surrogate!r}; known: {sorted(SURROGATES)}")
        return factory(seed)
    if not (callable(getattr(surrogate, "fit", None)) and callable(getattr(surrogate, "predict", None))):
        raise TypeError(
            "a surrogate is a name of SURROGATES or an object with fit(X, y) and "
            f"predict(X, return_std=True); got {surrogate!r}"
        )
    try:
        model = clone(surrogate)
    except (TypeError, RuntimeError):
        return surrogate
    # An unseeded estimator takes the searcher's seed, so a seeded search stays reproducible.
    if seed is not None and model.get_params().get("random_state", 0) is None:
        model.set_params(random_state=seed)
    return model


# --------------------------------------------------- fantasy observations
def candidate_predictions(surrogate, X, y, candidates):
    """Predictions of a fitted ``surrogate`` on ``candidates``, updatable with fantasy points.

    The returned object has arrays ``mu`` and ``sigma`` (one value per candidate) and a method
    ``add(index, value)`` that conditions the predictions on one more observation ``value`` at
    ``candidates[index]`` (the constant liar's lie).

    Parameters
    ----------
    surrogate : fitted surrogate
    X, y : arrays
        The data ``surrogate`` was fitted on (used to refit surrogates without a fast path).
    candidates : ndarray of shape (n_candidates, d)
    """
    fast = getattr(surrogate, "candidate_predictions", None)
    if callable(fast):
        return fast(candidates)
    return _RefitCandidatePredictions(surrogate, X, y, candidates)


class _RefitCandidatePredictions:
    """Generic fantasy: refit the surrogate with the fantasy point appended."""

    def __init__(self, surrogate, X, y, candidates):
        self._surrogate = surrogate
        self._X = np.asarray(X, dtype=float)
        self._y = np.asarray(y, dtype=float)
        self._candidates = np.asarray(candidates, dtype=float)
        self._predict()

    def _predict(self):
        mu, sigma = self._surrogate.predict(self._candidates, return_std=True)
        self.mu, self.sigma = np.asarray(mu, dtype=float).ravel(), np.asarray(sigma, dtype=float).ravel()

    def add(self, index, value):
        self._X = np.vstack([self._X, self._candidates[index]])
        self._y = np.append(self._y, value)
        self._surrogate.fit(self._X, self._y)
        self._predict()


class _TreeCandidatePredictions:
    """Fantasy observations for a fitted tree ensemble, with its tree structure kept.

    Adding a value at a candidate adds it to the candidate's leaf in every tree (count, mean and
    variance updated exactly), which is what the ensemble would predict if those trees had been
    grown with the fantasy point and split the same way. Only candidates sharing one of those
    leaves change, so each ``add`` costs one comparison over the (n_candidates, T) leaf matrix
    instead of a refit.
    """

    def __init__(self, model: _TreeEnsembleSurrogate, candidates):
        self._leaves = model.leaves(candidates)
        self._n_trees = self._leaves.shape[1]
        self._count = model.node_count_.copy()
        self._mean = model.node_mean_.copy()
        self._var = model.node_var_.copy()
        means = self._mean[self._leaves]
        self._sum_mean = means.sum(axis=1)
        self._sum_mean2 = (means**2).sum(axis=1)
        self._sum_var = self._var[self._leaves].sum(axis=1)

    @property
    def mu(self):
        return self._sum_mean / self._n_trees

    @property
    def sigma(self):
        mu = self.mu
        between = self._sum_mean2 / self._n_trees - mu**2
        return np.sqrt(np.maximum(self._sum_var / self._n_trees + between, 0.0))

    def add(self, index, value):
        leaves = self._leaves[index]  # one leaf per tree, distinct in the concatenated arrays
        n, mean, var = self._count[leaves], self._mean[leaves], self._var[leaves]
        new_n = n + 1
        new_mean = mean + (value - mean) / new_n
        new_var = (n * (var + mean**2) + value**2) / new_n - new_mean**2
        new_var = np.maximum(new_var, 0.0)
        rows, cols = np.nonzero(self._leaves == leaves)
        size = len(self._sum_mean)
        self._sum_mean += np.bincount(rows, new_mean[cols] - mean[cols], minlength=size)
        self._sum_mean2 += np.bincount(rows, new_mean[cols] ** 2 - mean[cols] ** 2, minlength=size)
        self._sum_var += np.bincount(rows, new_var[cols] - var[cols], minlength=size)
        self._count[leaves], self._mean[leaves], self._var[leaves] = new_n, new_mean, new_var
