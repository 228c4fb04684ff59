"""The whole job as one scikit-learn estimator: search, catalog, ensemble, decomposed prediction."""
from __future__ import annotations

import dataclasses
import numbers
import os
import shutil
import tempfile
import time
import weakref
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_consistent_length, check_is_fitted, validate_data


class AutoDEUQRegressor(RegressorMixin, BaseEstimator):
    """Automated deep ensemble with uncertainty quantification.

    ``fit`` searches architectures and training hyperparameters jointly, keeps every trained
    network in a catalog (``run_dir``), and selects an ensemble greedily on validation NLL.

    Parameters
    ----------
    space : str, path or SearchSpace, default="tabular"
        Search space: a shipped name (``"toy"``, ``"tabular"``) or a YAML/JSON file.
    search : {"agebo", "age", "bo", "random", "age-fixed-hp", "bo-fixed-arch"}, default="agebo"
        The two last are the thesis' ablations, with their default fixed halves (see
        :func:`autodeuq.search.create`).
    max_evals : int, default=100
        Trainings to run (the catalog size).
    population_size, tournament_size : int or "auto", default="auto"
        P and S of aging evolution (``search`` "age", "agebo", "age-fixed-hp"): the population
        holds the last P successful trainings and is random until full; each child mutates the
        best of S members drawn from it. ``"auto"``: P a fifth of ``max_evals`` within [10, 100],
        S a third of P (:func:`autodeuq.pipeline.evolution_options`).
    ensemble_size : int, default=5
        Maximum distinct members of the ensemble. When fewer trainings succeeded, the ensemble
        is selected among all of them and an :class:`~autodeuq.ensemble.EnsembleSizeWarning`
        says so.
    workers : int, optional
        Concurrent evaluations on Ray; default: what the local Ray instance can run.
    run_dir : path, optional
        Catalog directory (resumed when it exists), kept after the estimator. Default: a new
        temporary directory that lives as long as the estimator: it is deleted when the
        estimator is garbage-collected, refitted, or at interpreter exit. Pickling (or copying)
        the fitted estimator keeps that directory, since the copy reads its models from it;
        its path is ``run_dir_``, to delete by hand then. See Notes for persistence.
    seed : int, optional
        Seed of the validation split, the search and the trainings, from 0 to 2**32 - 1; ``None``
        means 0.
    epochs : int, optional
        Override of the space's epoch budget.
    evaluator : {"ray", "serial"}, default="ray"
    valid_fraction : float, default=1/3
        Fraction of the training data held out for validation when ``fit`` gets none.
    selector : {"greedy", "greedy-noreplace", "topk"}, default="greedy"
        Greedy selection with replacement (Caruana et al. 2004), without, or the best
        ``ensemble_size`` models.
    selection_score : {"mixture", "gaussian"}, default="mixture"
        What selection minimizes on the validation rows: the ensemble's exact mixture NLL, or the
        NLL of its moment-matched Gaussian. (The networks' own score, the search's objective, is
        always their validation NLL.)
    selection_stop : {"size", "improvement"}, default="size"
        ``"size"``: the ensemble has ``ensemble_size`` distinct members whenever the catalog has
        that many usable models; ``"improvement"``: greedy selection stops as soon as no addition
        improves the validation NLL (Caruana et al. 2004), possibly at one member.
    diversity : {"none", "architecture", "activations"}, default="none"
        At most one member per architecture, or per set of activation functions.
    calibrate : {"auto", "none", "scale"}, default="auto"
        ``"scale"``: recalibrate each target's predictive std by a factor fitted on out-of-fold
        selections of the validation rows (saved with the ensemble). ``"auto"``: when the
        training and validation rows number more than 1000 (:data:`autodeuq.data.SMALL_DATA_ROWS`),
        where it was measured to lower the test NLL (:mod:`autodeuq.ensemble.calibration`).
    selection_bags : int, default=0
        When > 0, bagged selection: repeated on that many random halves of the validation rows,
        weights averaged (0: selection once on all the validation rows).
    refit : {"auto", True, False}, default="auto"
        Retrain the selected members on the training and validation rows together, each for
        the epochs of its best validation loss with the learning rates it used then (see
        :mod:`autodeuq.ensemble.refit`). ``"auto"``: when those rows number at most 1000 (the
        same threshold), where it was measured to lower the test NLL (on 10 of 12 standard UCI splits, by 0.072 nats on
        average). ``ensemble_`` keeps its catalog (``run_dir_``) and holds the refitted networks;
        ``ensemble_.without_refit()`` is the ensemble before the refit, and
        ``ensemble_.selection["refit"]`` says what was done. With ``evaluator="ray"`` the
        members retrain at once on the search's workers. Under ``timeout``, a member is
        refitted only when its retraining fits in the time left (else a
        :class:`~autodeuq.ensemble.refit.RefitTimeWarning`).
    early_discarding : {"auto", "none", "sha", "iepoch"}, default="auto"
        ``"auto"``: ``"sha"`` when the training and validation rows number more than 1000, else
        ``"none"`` (:data:`autodeuq.data.SMALL_DATA_ROWS`). ``"none"``: every configuration is
        trained to its own early stop. ``"sha"``: asynchronous successive halving (Li et al.
        2020) with rungs at epochs 1, 3, 9, 27, 81 (3, 9, 27, 81 on up to 1000 rows; see
        ``sha_min_epochs``): a training continues past a rung only if its validation loss is
        among the best third recorded there. ``"iepoch"``: i-Epoch (Egele
        2024): every evaluation of the search trains 1 epoch, then the 10 configurations of
        lowest validation loss are trained to the full budget as catalog entries of their own
        (see :mod:`autodeuq.discard`).
    sha_min_epochs : int or "auto", default="auto"
    sha_reduction : int, default=3
        The rungs of successive halving (``"sha"``, or ``"auto"`` when it becomes ``"sha"``):
        epochs ``sha_min_epochs * sha_reduction**k``, where a training continues only if its
        validation loss is among the best ``1 / sha_reduction`` recorded there. ``"auto"``: the
        first rung is epoch 3 when the training and validation rows number at most 1000, where one
        epoch was measured to rank configurations poorly, else epoch 1 (a resumed catalog keeps its
        own; :mod:`autodeuq.discard`).
    sha_rungs : {"auto", "epochs", "steps"}, default="auto"
        What the rungs of successive halving count. ``"steps"``: optimizer steps, those of as many
        epochs with the middle batch size of the space (the geometric mean of its range), so a
        training with batches ``k`` times larger reaches each rung after ``k`` times the epochs,
        and trainings are compared after the same number of updates. ``"epochs"``: epochs,
        whatever the batch size. ``"auto"``: ``"epochs"`` (a resumed catalog keeps its own).
    timeout : float, optional
        Wall-clock limit of ``fit`` in seconds: the search stops early enough to leave the
        ensemble step a tenth of it (30 s to 5 min; :func:`autodeuq.pipeline.search_timeout`).
    eval_budget : float, optional
        Seconds each training of the search may take: it ends after the epoch when another one
        as long would pass them and keeps its best epoch so far, like an early stop (``None``:
        no limit). Bounds what one evaluation costs on large data.
    verbose : bool, default=False
        Show the search progress bar.
    categorical : {"onehot", "ordinal", "none"}, default="onehot"
        Encoding of non-numeric columns of ``X`` (strings, categories, booleans): one 0/1 input
        per training category (an unseen category is all zeros), the category's index in the
        sorted training categories (unseen: -1), or none (such columns are refused). ``predict``
        counts the rows with unseen categories, per column, in an
        :class:`~autodeuq.UnseenCategoryWarning`. A text column that is mostly numbers, or that
        looks like an identifier, is refused (see :mod:`autodeuq.preprocess`).
    impute : {"mean", "median", "none"}, default="mean"
        Missing values of ``X`` (NaN, None): replaced by the training rows' mean or median
        (numeric columns) or most frequent category, at ``fit`` and ``predict``; ``"none"``
        refuses them. Missing targets are refused unless ``drop_missing_target``.
    drop : sequence of str, optional
        Columns of ``X`` that are not features (read and ignored, also by ``predict``).
    id_column : str, optional
        A column of ``X`` that identifies rows: not a feature; ``autodeuq predict`` copies it
        into its output.
    drop_missing_target : bool, default=False
        Leave out the rows whose target is missing (NaN), of ``X`` and of ``X_valid``, instead
        of refusing them; ``n_dropped_missing_target_`` counts them.

    The encoding and the imputation values are fitted on the training rows only (see
    :mod:`autodeuq.preprocess`) and saved with the ensemble as JSON.

    Attributes
    ----------
    ensemble_ : Ensemble
    run_dir_ : Path
    search_summary_ : SearchSummary
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Set when ``X`` is a DataFrame with string column names; recorded in the catalog with the
        target's name(s) (a named Series or a DataFrame ``y``), so ``autodeuq predict`` reads the
        original table.
    n_targets_ : int
    n_dropped_missing_target_ : int
        Rows left out because their target is missing (``drop_missing_target``).

    Notes
    -----
    Persistence: ``joblib.dump(model, "model.joblib")`` and ``model = joblib.load("model.joblib")``
    (or :mod:`pickle`) work, before or after ``predict``; the file holds the estimator and the
    absolute path of its catalog, from which the loaded estimator reads its member models, so it
    predicts identically on any machine that has the run directory at that path (with the same
    package versions, as for any scikit-learn pickle). Loading a pickle runs code: load only files
    you trust. To ship the model without its catalog, and without pickle, export the ensemble:
    ``model.ensemble_.save("model_dir", self_contained=True)``, then
    ``autodeuq.load_ensemble("model_dir").predict(X)`` anywhere.

    Examples
    --------
    >>> from autodeuq import AutoDEUQRegressor                      # doctest: +SKIP
    >>> model = AutoDEUQRegressor(max_evals=20).fit(X, y)           # doctest: +SKIP
    >>> mean, std = model.predict(X_new, return_std=True)           # doctest: +SKIP
    >>> parts = model.predict_uncertainty(X_new)                    # doctest: +SKIP
    >>> parts.aleatoric_std, parts.epistemic_std                    # doctest: +SKIP
    """

    def __init__(self, space="tabular", search="agebo", max_evals=100, ensemble_size=5, workers=None,
                 run_dir=None, seed=None, epochs=None, evaluator="ray", valid_fraction=1 / 3,
                 selector="greedy", selection_score="mixture", selection_stop="size", diversity="none",
                 calibrate="auto", selection_bags=0, early_discarding="auto", timeout=None, verbose=False,
                 categorical="onehot", impute="mean", drop=None, id_column=None, refit="auto",
                 eval_budget=None, sha_min_epochs="auto", sha_reduction=3, sha_rungs="auto",
                 drop_missing_target=False, population_size="auto", tournament_size="auto"):
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
        self.selection_score = selection_score
        self.selection_stop = selection_stop
        self.diversity = diversity
        self.calibrate = calibrate
        self.selection_bags = selection_bags
        self.early_discarding = early_discarding
        self.timeout = timeout
        self.verbose = verbose
        self.categorical = categorical
        self.impute = impute
        self.drop = drop
        self.id_column = id_column
        self.refit = refit
        self.eval_budget = eval_budget
        self.sha_min_epochs = sha_min_epochs
        self.sha_reduction = sha_reduction
        self.sha_rungs = sha_rungs
        self.drop_missing_target = drop_missing_target
        self.population_size = population_size
        self.tournament_size = tournament_size

    def fit(self, X, y, X_valid=None, y_valid=None):
        """Search, fill the catalog and build the ensemble.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            At least 3 rows without ``X_valid`` (2 with); a DataFrame's column names are kept.
            Non-numeric columns and missing values are handled as ``categorical`` and
            ``impute`` say.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        X_valid, y_valid : array-like, optional
            Validation data; default: a seeded random split of (X, y).

        Returns
        -------
        self

        Raises
        ------
        ParameterError
            A parameter's value is refused, before any work (a ``ValueError``).
        SpaceError
            ``space`` names no shipped space or a bad space file, before any work.
        SearchError
            No training succeeded, or the first ones all failed the same way (the message gives
            the most common reason).
        KeyboardInterrupt
            Ctrl-C (or SIGTERM, as :class:`~autodeuq.runner.Terminated`) stopped the search; the
            catalog in ``run_dir_`` is consistent and ``fit`` with that ``run_dir`` resumes it.
        """
        from autodeuq.data import DEFAULT_VALID_FRACTION, MIN_TRAIN_ROWS, MIN_VALID_ROWS, from_table
        from autodeuq.ensemble import Ensemble
        from autodeuq.ensemble.refit import refit_selected
        from autodeuq.errors import ParameterError
        from autodeuq.pipeline import ensemble_deadline, fill_catalog, search_timeout
        from autodeuq.preprocess import TableOptions
        from autodeuq.runner import Terminated
        from autodeuq.space import load_space

        started = time.monotonic()
        score = self._check_parameters()
        options = TableOptions(categorical=self.categorical, impute=self.impute, drop=self.drop,
                               id_column=self.id_column, drop_missing_target=self.drop_missing_target)
        space = load_space(self.space)
        target_names = _target_names(y)
        # At least a training and a validation row; scikit-learn's message says "1 sample(s)".
        min_rows = MIN_TRAIN_ROWS + (MIN_VALID_ROWS if X_valid is None else 0)
        # Values (NaN, inf, text in numbers, missing targets) are checked by the data layer, whose
        # messages name the column and the data row.
        checked, y = validate_data(self, X, y, validate_separately=(
            {"dtype": None, "ensure_all_finite": False, "ensure_min_samples": min_rows},
            {"ensure_2d": False, "dtype": "numeric", "ensure_all_finite": False}))
        check_consistent_length(checked, y)
        self._y_1d = np.ndim(y) == 1
        y2 = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        valid = None
        if X_valid is not None:
            if self.valid_fraction != DEFAULT_VALID_FRACTION:
                raise ParameterError("valid_fraction", "must be left at its default when X_valid is given (the "
                                     "validation rows are X_valid's)", self.valid_fraction)
            X_valid = self._by_name(X_valid)
            valid_checked = validate_data(self, X_valid, reset=False, dtype=None, ensure_all_finite=False)
            y_valid = np.asarray(y_valid, dtype=np.float64).reshape(len(valid_checked), -1)
        seed = 0 if self.seed is None else int(self.seed)
        # The catalog records the real column names, so `autodeuq predict --data table.csv` works.
        if not (target_names and len(target_names) == y2.shape[1]):
            target_names = ["y"] if y2.shape[1] == 1 else [f"y{j}" for j in range(y2.shape[1])]
        if X_valid is not None:
            valid = (_with_targets(self._table(X_valid, valid_checked), y_valid, target_names), "X_valid")
        dataset = from_table(_with_targets(self._table(X, checked), y2, target_names), target_names, "X", options,
                             valid=valid, valid_fraction=self.valid_fraction, seed=seed, name="<fit arrays>")
        self.n_targets_ = y2.shape[1]
        self.n_dropped_missing_target_ = sum(dataset.dropped_missing_target.values())
        space = space.for_rows(len(dataset.x_train))
        self._remove_temporary_catalog()
        if self.run_dir is not None:
            # Absolute: a pickled estimator finds its catalog from any working directory.
            self.run_dir_ = Path(os.path.abspath(self.run_dir))
        else:
            self.run_dir_ = Path(tempfile.mkdtemp(prefix="autodeuq-"))
            self._temporary_catalog = weakref.finalize(self, shutil.rmtree, str(self.run_dir_), ignore_errors=True)
        self.search_summary_ = summary = fill_catalog(
            space, dataset, self.run_dir_, search=self.search, max_evals=self.max_evals,
            timeout=search_timeout(self.timeout),
            seed=seed, epochs=self.epochs, early_discarding=self.early_discarding, evaluator=self.evaluator,
            sha_min_epochs=self.sha_min_epochs, sha_reduction=self.sha_reduction, sha_rungs=self.sha_rungs,
            workers=self.workers,
            eval_budget=self.eval_budget, progress=bool(self.verbose), population_size=self.population_size,
            tournament_size=self.tournament_size)
        if summary.interrupted:
            # Ctrl-C (or SIGTERM) is the caller's: no ensemble of whatever happened to finish.
            interrupt = Terminated if summary.stopped_by == "terminated" else KeyboardInterrupt
            raise interrupt(f"search interrupted; {self.run_dir_} is consistent: fit again with "
                            f"run_dir={str(self.run_dir_)!r} to resume it")
        summary.raise_for_error()
        self.ensemble_ = Ensemble.from_catalog(self.run_dir_, size=self.ensemble_size, selector=self.selector,
                                               score=score, stop=self.selection_stop, diversity=self.diversity,
                                               calibrate=self.calibrate, bags=self.selection_bags, seed=seed)
        # The members retrain in parallel on the search's workers (still up) when it ran on Ray.
        self.ensemble_, _ = refit_selected(self.ensemble_, np.vstack([dataset.x_train, dataset.x_valid]),
                                           np.vstack([dataset.y_train, dataset.y_valid]), self.refit,
                                           deadline=ensemble_deadline(started, self.timeout),
                                           evaluator=self.evaluator, evaluator_options={"workers": self.workers})
        return self

    def _check_parameters(self) -> str:
        """Refuse a bad parameter before any work; the selection score to use.

        Checks every constructor parameter but the space (whose loading checks it) and the data.
        """
        from autodeuq.errors import ParameterError
        from autodeuq.pipeline import check_ensemble_parameters, check_search_parameters
        from autodeuq.space import SearchSpace

        score = self.selection_score
        if not isinstance(self.space, (str, os.PathLike, dict, SearchSpace)):
            raise ParameterError("space", "must be a shipped space's name, a space file or a SearchSpace", self.space)
        if self.run_dir is not None and not isinstance(self.run_dir, (str, os.PathLike)):
            raise ParameterError("run_dir", "must be None or a path", self.run_dir)
        if not isinstance(self.verbose, numbers.Integral) or self.verbose < 0:  # bool is Integral
            raise ParameterError("verbose", "must be a bool", self.verbose)
        check_search_parameters(search=self.search, max_evals=self.max_evals, epochs=self.epochs, seed=self.seed,
                                timeout=self.timeout, eval_budget=self.eval_budget, evaluator=self.evaluator,
                                workers=self.workers,
                                valid_fraction=self.valid_fraction, early_discarding=self.early_discarding,
                                sha_min_epochs=self.sha_min_epochs, sha_reduction=self.sha_reduction,
                                sha_rungs=self.sha_rungs, population_size=self.population_size,
                                tournament_size=self.tournament_size)
        check_ensemble_parameters(ensemble_size=self.ensemble_size, selector=self.selector, selection_score=score,
                                  selection_stop=self.selection_stop, diversity=self.diversity,
                                  selection_bags=self.selection_bags, calibrate=self.calibrate, refit=self.refit)
        return score

    def _remove_temporary_catalog(self):
        finalizer = self.__dict__.pop("_temporary_catalog", None)
        if finalizer is not None:
            finalizer()

    def __getstate__(self):
        state = dict(super().__getstate__())
        finalizer = state.pop("_temporary_catalog", None)
        if finalizer is not None:
            # The copy reads its models from the temporary catalog: it must outlive this estimator.
            finalizer.detach()
            self.__dict__.pop("_temporary_catalog", None)
        return state

    def _table(self, X, checked):
        """The inputs as a DataFrame of the fit's columns: ``X`` itself when it has the fit's names."""
        import pandas as pd

        names = getattr(self, "feature_names_in_", None)
        if names is not None and hasattr(X, "columns"):
            return X.reset_index(drop=True)
        checked = np.asarray(checked)
        columns = list(names) if names is not None else [f"x{i}" for i in range(checked.shape[1])]
        # An object array of numbers is numbers: only text and the like are categorical.
        return pd.DataFrame(checked, columns=columns).infer_objects()

    def _shape(self, a):
        return a[:, 0] if self._y_1d else a

    def _by_name(self, X):
        """A DataFrame holding the fit's feature names in another order, put in the fit's order."""
        names = getattr(self, "feature_names_in_", None)
        if names is None or not hasattr(X, "columns"):
            return X
        columns = list(X.columns)
        if columns != list(names) and len(columns) == len(names) and set(columns) == set(names):
            return X[list(names)]
        return X  # other mismatches: scikit-learn's own error names the unseen / missing columns

    def predict_uncertainty(self, X):
        """The decomposed prediction, shaped like :meth:`predict`'s.

        Returns an :class:`~autodeuq.ensemble.UncertaintyPrediction`: ``mean``; the variances
        ``aleatoric``, ``epistemic``, ``total`` (also ``aleatoric_var``, ...); the standard
        deviations ``std`` (total), ``aleatoric_std``, ``epistemic_std``. Each array has shape
        (n,) when ``fit`` got a 1-D ``y``, else (n, n_targets), as :meth:`predict` returns.

        A DataFrame is matched to the fit's columns by name (``feature_names_in_``), whatever
        its column order; an array by position.
        """
        check_is_fitted(self, "ensemble_")
        X = self._by_name(X)
        checked = validate_data(self, X, reset=False, dtype=None, ensure_all_finite=False)  # checked when encoded
        result = self.ensemble_.predict(self._table(X, checked))
        return dataclasses.replace(result, **{f.name: self._shape(getattr(result, f.name))
                                              for f in dataclasses.fields(result)})

    def predict(self, X, return_std=False):
        """Ensemble mean (and total predictive std when ``return_std``)."""
        result = self.predict_uncertainty(X)
        return (result.mean, result.std) if return_std else result.mean

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.single_output = False
        tags.non_deterministic = False
        tags.input_tags.string = self.categorical != "none"
        tags.input_tags.allow_nan = self.impute != "none"
        return tags


def _with_targets(table, y, names):
    """``table`` with the target columns appended (a name already in ``table`` stays repeated: refused later)."""
    import pandas as pd

    return pd.concat([table, pd.DataFrame(y, columns=names)], axis=1)


def _target_names(y):
    """Column names of a pandas target (a named Series or a DataFrame with string columns), else None."""
    if hasattr(y, "columns"):
        names = list(y.columns)
    elif getattr(y, "name", None) is not None and hasattr(y, "to_numpy"):
        names = [y.name]
    else:
        return None
    return [str(n) for n in names] if all(isinstance(n, str) for n in names) else None
