"""The whole job as one scikit-learn estimator: search, catalog, ensemble, decomposed prediction."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data


class AutoDEUQRegressor(RegressorMixin, BaseEstimator):
    """Automated deep ensemble with uncertainty quantification.

    ``fit`` searches architectures and training hyperparameters jointly, keeps every trained
    network in a catalog (``run_dir``), and selects an ensemble greedily on validation NLL.

    Parameters
    ----------
    space : str, path or SearchSpace, default="tabular"
        Search space: a shipped name (``"toy"``, ``"tabular"``) or a YAML/JSON file.
    search : {"agebo", "age", "bo", "random"}, default="agebo"
    max_evals : int, default=100
        Trainings to run (the catalog size).
    ensemble_size : int, default=5
        Distinct members of the ensemble.
    workers : int, optional
        Concurrent evaluations on Ray; default: what the local Ray instance can run.
    run_dir : path, optional
        Catalog directory (resumed when it exists); default: a new temporary directory.
    seed : int, optional
        Seed of the validation split, the search and the trainings; ``None`` means 0.
    epochs : int, optional
        Override of the space's epoch budget.
    evaluator : {"ray", "serial"}, default="ray"
    valid_fraction : float, default=1/3
        Fraction of the training data held out for validation when ``fit`` gets none.
    selector : {"greedy", "greedy-noreplace", "topk"}, default="greedy"
    selection_objective : {"mixture", "gaussian"}, default="mixture"
    timeout : float, optional
        Wall-clock limit of the search in seconds.
    verbose : bool, default=False
        Show the search progress bar.

    Attributes
    ----------
    ensemble_ : Ensemble
    run_dir_ : Path
    search_summary_ : SearchSummary
    n_features_in_ : int
    n_targets_ : int

    Examples
    --------
    >>> from autodeuq import AutoDEUQRegressor                      # doctest: +SKIP
    >>> model = AutoDEUQRegressor(max_evals=20).fit(X, y)           # doctest: +SKIP
    >>> mean, std = model.predict(X_new, return_std=True)           # doctest: +SKIP
    >>> parts = model.predict_uncertainty(X_new)                    # doctest: +SKIP
    >>> parts.aleatoric, parts.epistemic                            # doctest: +SKIP
    """

    def __init__(self, space="tabular", search="agebo", max_evals=100, ensemble_size=5, workers=None,
                 run_dir=None, seed=None, epochs=None, evaluator="ray", valid_fraction=1 / 3,
                 selector="greedy", selection_objective="mixture", timeout=None, verbose=False):
        self.space = space
        self.search = search
        self.max_evals = max_evals
        self.ensemble_size = ensemble_size
        self.workers = workers
        self.run_dir = run_dir
        self.seed = seed
        self.epochs = epochs
        self.evaluator = evaluator
        self.valid_fraction = valid_fraction
        self.selector = selector
        self.selection_objective = selection_objective
        self.timeout = timeout
        self.verbose = verbose

    def fit(self, X, y, X_valid=None, y_valid=None):
        """Search, fill the catalog and build the ensemble.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        X_valid, y_valid : array-like, optional
            Validation data; default: a seeded random split of (X, y).

        Returns
        -------
        self

        Raises
        ------
        SearchError
            No training succeeded, or the first ones all failed the same way (the message gives
            the most common reason).
        KeyboardInterrupt
            Ctrl-C (or SIGTERM, as :class:`~autodeuq.runner.Terminated`) stopped the search; the
            catalog in ``run_dir_`` is consistent and ``fit`` with that ``run_dir`` resumes it.
        """
        from autodeuq import evaluator as evaluators
        from autodeuq.data import from_arrays
        from autodeuq.ensemble import Ensemble
        from autodeuq.runner import SearchError, Terminated, run_search
        from autodeuq.space import load_space

        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True, dtype=np.float64)
        self._y_1d = np.ndim(y) == 1
        y2 = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        if X_valid is not None:
            X_valid = validate_data(self, X_valid, reset=False, dtype=np.float64)
            y_valid = np.asarray(y_valid, dtype=np.float64).reshape(len(X_valid), -1)
        seed = 0 if self.seed is None else int(self.seed)
        dataset = from_arrays(X, y2, X_valid, y_valid, valid_fraction=self.valid_fraction, seed=seed,
                              name="<fit arrays>")
        self.n_targets_ = y2.shape[1]
        space = load_space(self.space)
        self.run_dir_ = Path(self.run_dir) if self.run_dir is not None else Path(tempfile.mkdtemp(prefix="autodeuq-"))
        objective = evaluators.TrainingObjective(space, dataset, seed=seed, epochs=self.epochs, threads=1)
        options = {} if self.evaluator == "serial" else {"workers": self.workers}
        with evaluators.create(self.evaluator, objective, **options) as evaluator:
            self.search_summary_ = run_search(
                space, dataset, evaluator, self.run_dir_, search=self.search, max_evals=self.max_evals,
                timeout=self.timeout, seed=seed, progress=self.verbose, run_options={"epochs": self.epochs},
            )
        summary = self.search_summary_
        if summary.interrupted:
            # Ctrl-C (or SIGTERM) is the caller's: no ensemble of whatever happened to finish.
            interrupt = Terminated if summary.stopped_by == "terminated" else KeyboardInterrupt
            raise interrupt(f"search interrupted; {self.run_dir_} is consistent: fit again with "
                            f"run_dir={str(self.run_dir_)!r} to resume it")
        if summary.error:
            raise SearchError(summary.error)
        size = min(self.ensemble_size, self.search_summary_.n_done)
        self.ensemble_ = Ensemble.from_catalog(self.run_dir_, size=size, method=self.selector,
                                               objective=self.selection_objective)
        return self

    def _shape(self, a):
        return a[:, 0] if self._y_1d else a

    def predict_uncertainty(self, X):
        """The decomposed prediction (mean, aleatoric, epistemic, total, std), shape (n, n_targets)."""
        check_is_fitted(self, "ensemble_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return self.ensemble_.predict(X)

    def predict(self, X, return_std=False):
        """Ensemble mean (and total predictive std when ``return_std``)."""
        result = self.predict_uncertainty(X)
        if return_std:
            return self._shape(result.mean), self._shape(result.std)
        return self._shape(result.mean)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.single_output = False
        tags.non_deterministic = False
        return tags
