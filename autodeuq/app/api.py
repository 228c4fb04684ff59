"""The whole job as scikit-learn estimators (a regressor, a classifier): search, catalog, ensemble, prediction."""
from __future__ import annotations

import dataclasses
import inspect
import os
import shutil
import tempfile
import time
import weakref
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_consistent_length, check_is_fitted, validate_data

from autodeuq.app.options import BY_NAME, numpydoc_parameters, signature_parameters

_FIT_DOC = """Search, fill the catalog and build the ensemble.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
            At least 3 rows without ``X_valid`` (2 with); a DataFrame's column names are kept.
            Non-numeric columns and missing values are handled as ``categorical`` and
            ``impute`` say.
{y}

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
            Ctrl-C (or SIGTERM, as :class:`~autodeuq.engine.runner.Terminated`) stopped the search; the
            catalog in ``run_dir_`` is consistent and ``fit`` with that ``run_dir`` resumes it.
        """


class _AutoDEUQ(BaseEstimator):
    """What the regressor and the classifier share: the parameters (one per option of a run), the
    search, the catalog and the ensemble; a subclass says its task and how it reads ``y``."""

    _TASK = ""

    def __init__(self, **params):
        # One keyword-only parameter per option of a run (autodeuq.app.options.OPTIONS): the signature
        # scikit-learn reads (get_params, clone) is set below from the same table.
        unknown = sorted(set(params) - set(BY_NAME))
        if unknown:
            raise TypeError(f"{type(self).__name__} got an unexpected keyword argument {unknown[0]!r}")
        for name, option in BY_NAME.items():
            setattr(self, name, params.get(name, option.default))

    def _fit(self, X, y, X_valid=None, y_valid=None):
        from autodeuq.app.pipeline import (
            ensemble_deadline,
            fill_catalog,
            refit_ensemble,
            refit_where,
            search_timeout,
            select_ensemble,
        )
        from autodeuq.core.errors import ParameterError
        from autodeuq.engine.runner import Terminated
        from autodeuq.search.space import load_space
        from autodeuq.table.data import DEFAULT_VALID_FRACTION, MIN_TRAIN_ROWS, MIN_VALID_ROWS, from_table
        from autodeuq.table.preprocess import TableOptions

        started = time.monotonic()
        table_config, config, ensemble_config = self._check_parameters()
        options = TableOptions.of(table_config)
        if table_config.task not in ("auto", self._TASK):
            raise ParameterError("task", f"must be 'auto' or {self._TASK!r} for {type(self).__name__}",
                                 table_config.task)
        space = load_space(config.space)
        # At least a training and a validation row; scikit-learn's message says "1 sample(s)".
        min_rows = MIN_TRAIN_ROWS + (MIN_VALID_ROWS if X_valid is None else 0)
        # Values (NaN, inf, text in numbers, missing targets) are checked by the data layer, whose
        # messages name the column and the data row.
        numeric = self._TASK == "regression"
        checked, y_checked = validate_data(self, X, y, validate_separately=(
            {"dtype": None, "ensure_all_finite": False, "ensure_min_samples": min_rows},
            {"ensure_2d": False, "dtype": "numeric" if numeric else None, "ensure_all_finite": False}))
        check_consistent_length(checked, y_checked)
        # Labels keep their type: scikit-learn's check turns a list of 1 and "neg" into text.
        y2, target_names = self._targets(y if hasattr(y, "name") or hasattr(y, "columns") or not numeric
                                         else y_checked, len(checked))
        valid = None
        if X_valid is not None:
            if self.valid_fraction != DEFAULT_VALID_FRACTION:
                raise ParameterError("valid_fraction", "must be left at its default when X_valid is given (the "
                                     "validation rows are X_valid's)", self.valid_fraction)
            X_valid = self._by_name(X_valid)
            valid_checked = validate_data(self, X_valid, reset=False, dtype=None, ensure_all_finite=False)
            y_valid = np.asarray(y_valid, dtype=np.float64 if numeric else object).reshape(len(valid_checked), -1)
        seed = 0 if config.seed is None else int(config.seed)
        # The catalog records the real column names, so `autodeuq predict --data table.csv` works.
        if not (target_names and len(target_names) == y2.shape[1]):
            target_names = ["y"] if y2.shape[1] == 1 else [f"y{j}" for j in range(y2.shape[1])]
        if X_valid is not None:
            valid = (_with_targets(self._table(X_valid, valid_checked), y_valid, target_names), "X_valid")
        dataset = from_table(_with_targets(self._table(X, checked), y2, target_names), target_names, "X", options,
                             valid=valid, valid_fraction=table_config.valid_fraction, seed=seed, name="<fit arrays>",
                             task=self._TASK, class_weight=table_config.class_weight,
                             label_smoothing=table_config.label_smoothing)
        self._fitted(dataset)
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
        self.search_summary_ = summary = fill_catalog(space, dataset, self.run_dir_, config,
                                                      timeout=search_timeout(config.timeout))
        if summary.interrupted:
            # Ctrl-C (or SIGTERM) is the caller's: no ensemble of whatever happened to finish.
            interrupt = Terminated if summary.stopped_by == "terminated" else KeyboardInterrupt
            raise interrupt(f"search interrupted; {self.run_dir_} is consistent: fit again with "
                            f"run_dir={str(self.run_dir_)!r} to resume it")
        summary.raise_for_error()
        # Fold networks and refits train in parallel on the search's workers (still up) when it ran on Ray.
        deadline = ensemble_deadline(started, config.timeout)
        ensemble = select_ensemble(self.run_dir_, ensemble_config, seed=seed, deadline=deadline,
                                   where=refit_where(config))
        self.ensemble_, _ = refit_ensemble(ensemble, ensemble_config.refit, deadline=deadline,
                                           where=refit_where(config))
        return self

    def _check_parameters(self) -> tuple:
        """The (table, search, ensemble) configurations of the parameters, each checked before any
        work (:func:`autodeuq.app.options.resolve`)."""
        from autodeuq.app.options import EnsembleConfig, SearchConfig, TableConfig, resolve

        return resolve(self.get_params(), (TableConfig, SearchConfig, EnsembleConfig))

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

    def _by_name(self, X):
        """A DataFrame holding the fit's feature names in another order, put in the fit's order."""
        names = getattr(self, "feature_names_in_", None)
        if names is None or not hasattr(X, "columns"):
            return X
        columns = list(X.columns)
        if columns != list(names) and len(columns) == len(names) and set(columns) == set(names):
            return X[list(names)]
        return X  # other mismatches: scikit-learn's own error names the unseen / missing columns

    def _ensemble_prediction(self, X):
        check_is_fitted(self, "ensemble_")
        X = self._by_name(X)
        checked = validate_data(self, X, reset=False, dtype=None, ensure_all_finite=False)  # checked when encoded
        return self.ensemble_.predict(self._table(X, checked))

    def _fitted(self, dataset) -> None:
        """Record what the fit learned of the targets (a subclass's own attributes)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        tags.input_tags.string = self.categorical != "none"
        tags.input_tags.allow_nan = self.impute != "none"
        return tags




class AutoDEUQRegressor(RegressorMixin, _AutoDEUQ):
    """Automated deep ensemble with uncertainty quantification.

    ``fit`` searches architectures and training hyperparameters jointly, keeps every trained
    network in a catalog (``run_dir``), and selects an ensemble greedily on validation NLL.

    Parameters
    ----------
{parameters}

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
    The encoding and the imputation values are fitted on the training rows only (see
    :mod:`autodeuq.table.preprocess`) and saved with the ensemble as JSON.

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
    >>> lower, upper = model.predict_interval(X_new, 0.9)           # doctest: +SKIP
    """

    _TASK = "regression"

    def fit(self, X, y, X_valid=None, y_valid=None):
        return self._fit(X, y, X_valid, y_valid)

    fit.__doc__ = _FIT_DOC.format(y="""        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        X_valid, y_valid : array-like, optional
            Validation data; default: a seeded random split of (X, y).""")

    def predict_uncertainty(self, X):
        """The decomposed prediction, shaped like :meth:`predict`'s.

        Returns an :class:`~autodeuq.ensemble.UncertaintyPrediction`: ``mean``; the variances
        ``aleatoric``, ``epistemic``, ``total`` (also ``aleatoric_var``, ...); the standard
        deviations ``std`` (total), ``aleatoric_std``, ``epistemic_std``. Each array has shape
        (n,) when ``fit`` got a 1-D ``y``, else (n, n_targets), as :meth:`predict` returns.

        A DataFrame is matched to the fit's columns by name (``feature_names_in_``), whatever
        its column order; an array by position.
        """
        result = self._ensemble_prediction(X)
        shaped = dataclasses.replace(result, **{f.name: self._shape(getattr(result, f.name))
                                                for f in dataclasses.fields(result)})
        # The mixture itself stays (n_members, n, n_targets): intervals and tables come from it.
        shaped.means, shaped.variances, shaped.weights = result.means, result.variances, result.weights
        shaped.conformal = result.conformal
        return shaped

    def predict_interval(self, X, level: float = 0.9, method: str = "auto"):
        """The ``level`` prediction interval of each row, shaped like :meth:`predict`'s output.

        ``method="auto"``: conformal (``mean +- q_L std``, ``q_L`` from the held-out scores the
        ensemble keeps: coverage at least ``level`` on rows exchangeable with the validation
        rows; infinite, with a :class:`~autodeuq.ensemble.conformal.ConformalLevelWarning`, when
        the level needs more held-out rows than there were) where the ensemble has the scores,
        else ``"mixture"``: the central interval of the ensemble's Gaussian mixture
        (:meth:`UncertaintyPrediction.interval <autodeuq.ensemble.UncertaintyPrediction.interval>`).

        Returns
        -------
        lower, upper : ndarray of shape (n,) or (n, n_targets)
        """
        from autodeuq.ensemble.conformal import resolve_method
        from autodeuq.metrics import check_level

        level = check_level(level)  # before any prediction
        check_is_fitted(self, "ensemble_")
        resolve_method(method, self.ensemble_.conformal)
        lower, upper = self._ensemble_prediction(X).interval(level, method)
        return self._shape(lower), self._shape(upper)

    def predict(self, X, return_std=False):
        """Ensemble mean (and total predictive std when ``return_std``)."""
        result = self.predict_uncertainty(X)
        return (result.mean, result.std) if return_std else result.mean

    def _targets(self, y, n_rows: int):
        """``y`` checked: (its values as a float (n, T) array, the target names or None)."""
        names = _target_names(y)
        self._y_1d = np.ndim(y) == 1
        return np.asarray(y, dtype=np.float64).reshape(n_rows, -1), names

    def _shape(self, a):
        return a[:, 0] if self._y_1d else a

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.single_output = False
        return tags


class AutoDEUQClassifier(ClassifierMixin, _AutoDEUQ):
    """Automated deep ensemble of classifiers whose uncertainty splits into aleatoric and epistemic entropy.

    The same search, catalog and greedy selection as :class:`AutoDEUQRegressor`, with networks
    that end in one logit per class, trained on the categorical NLL (cross-entropy); members are
    selected on the log loss of their mixture (the weighted mean of their class probabilities).
    Any labels (text, integers, booleans) are kept with the model; ``predict`` returns them.

    Parameters
    ----------
{parameters}

    Attributes
    ----------
    classes_ : ndarray
        The classes, sorted: the columns of :meth:`predict_proba`.
    ensemble_ : ClassifierEnsemble
    run_dir_ : Path
    search_summary_ : SearchSummary
    n_features_in_ : int
    feature_names_in_ : ndarray of str

    Notes
    -----
    ``task`` must be ``"auto"`` or ``"classification"``. Persistence and export are as for
    :class:`AutoDEUQRegressor`.

    Examples
    --------
    >>> from autodeuq import AutoDEUQClassifier                     # doctest: +SKIP
    >>> model = AutoDEUQClassifier(max_evals=20).fit(X, y)          # doctest: +SKIP
    >>> model.predict(X_new), model.predict_proba(X_new)            # doctest: +SKIP
    >>> parts = model.predict_uncertainty(X_new)                    # doctest: +SKIP
    >>> parts.total_entropy, parts.aleatoric_entropy, parts.epistemic_mi   # doctest: +SKIP
    """

    _TASK = "classification"

    def fit(self, X, y, X_valid=None, y_valid=None):
        return self._fit(X, y, X_valid, y_valid)

    fit.__doc__ = _FIT_DOC.format(y="""        y : array-like of shape (n_samples,)
            Class labels of any type; each class needs at least 2 rows.
        X_valid, y_valid : array-like, optional
            Validation data (labels among ``y``'s classes); default: a seeded split of (X, y),
            stratified by class.""")

    def predict_uncertainty(self, X):
        """The ensemble's class prediction: a :class:`~autodeuq.ensemble.categorical.CategoricalPrediction`
        with ``proba``, ``label``, ``total_entropy``, ``aleatoric_entropy``, ``epistemic_mi``,
        the per-class ``variance`` of the members' probabilities and ``prediction_set(level)``
        (conformal where the ensemble keeps held-out scores; ``prediction_set(level, "mixture")``
        the mixture's)."""
        return self._ensemble_prediction(X)

    def predict_proba(self, X):
        """(n, n_classes): class probabilities, columns in :attr:`classes_` order."""
        return self.predict_uncertainty(X).proba

    def predict(self, X):
        """The most probable class of each row."""
        return self.predict_uncertainty(X).label

    def _targets(self, y, n_rows: int):
        import pandas as pd
        from sklearn.utils.multiclass import check_classification_targets
        from sklearn.utils.validation import column_or_1d

        from autodeuq.table.labels import check_label_types

        names = _target_names(y)
        if not hasattr(y, "dtype"):
            y = np.asarray(y, dtype=object)  # a list's labels keep their types
        if np.ndim(y) == 2 and np.shape(y)[1] != 1:
            raise ValueError(f"AutoDEUQClassifier takes one column of labels, got y of shape {np.shape(y)}")
        labels = np.asarray(column_or_1d(y, dtype=None, warn=True), dtype=object)  # a column vector warns
        # Missing labels are the data layer's (refused with their row, or left out by drop_missing_target).
        present = labels[~pd.isna(labels)]
        check_label_types(present, "y", names[0] if names else "y")
        # scikit-learn's check (continuous numbers are not labels) on the labels' own dtype.
        check_classification_targets(np.asarray(present.tolist()))
        return labels.reshape(n_rows, 1), names

    def _fitted(self, dataset) -> None:
        self.classes_ = dataset.labels.array()
# scikit-learn reads the parameters from the signature (get_params, clone); help() shows them.
setattr(_AutoDEUQ.__init__, "__signature__", inspect.Signature(
    [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *signature_parameters()]))
for _estimator in (AutoDEUQRegressor, AutoDEUQClassifier):
    _estimator.__doc__ = str(_estimator.__doc__).replace("{parameters}", numpydoc_parameters())


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
