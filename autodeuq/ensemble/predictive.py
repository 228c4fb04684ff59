"""The predictive ensemble: members with weights, predicting a Gaussian mixture.

:class:`Ensemble` holds its members (ids and weights), its recalibration and where the members'
networks come from, a *member source* (:mod:`autodeuq.ensemble.members`): a catalog
(:class:`~autodeuq.ensemble.members.CatalogMembers`, the run directory a search filled, possibly
with some members replaced by their refits, see :mod:`autodeuq.ensemble.refit`) or a
self-contained folder written by ``Ensemble.save(folder, self_contained=True)``
(:class:`~autodeuq.ensemble.members.ExportedMembers`). Its prediction runs
every member on the same rows in one TensorFlow graph, in float64, and returns the mixture
(:class:`~autodeuq.ensemble.mixture.UncertaintyPrediction`).

The other jobs are modules of their own: building an ensemble from a catalog
(:mod:`autodeuq.ensemble.building`), the manifest formats it is saved in and read from
(:mod:`autodeuq.ensemble.manifest`), the encoding of its inputs (:mod:`autodeuq.ensemble.inputs`)
and the value a prediction returns (:mod:`autodeuq.ensemble.mixture`).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from autodeuq.catalog import Catalog
from autodeuq.ensemble import conformal as conformal_scores
from autodeuq.ensemble.calibration import apply_scale
from autodeuq.ensemble.inputs import encode_inputs
from autodeuq.ensemble.members import (  # noqa: F401 - their former home: importable from here
    MEMBERS_DIR,
    CatalogMembers,
    EnsembleError,
    ExportedMembers,
    ManifestError,
    ensemble_class,
)
from autodeuq.ensemble.mixture import UncertaintyPrediction
from autodeuq.metrics import check_level
from autodeuq.table.data import DataError


class Ensemble:
    """A weighted ensemble of catalog entries.

    Parameters
    ----------
    source : path, CatalogMembers or ExportedMembers
        Where the members come from: a run directory (its catalog), or a member source.
        :func:`load_ensemble` gives an ensemble read from a self-contained folder.
    member_ids : list of int
        Catalog ids of the members (distinct).
    weights : array-like
        Member weights, summing to 1.
    selection : dict, optional
        How the members were chosen (recorded in the manifest).
    calibration : dict, optional
        Post-hoc recalibration: ``{"method": "scale", "scale": [c_1, ..., c_T], ...}`` stretches
        each target's predictive mixture about its mean by ``c_t`` (see
        :mod:`autodeuq.ensemble.calibration`); ``None``: predictions as the members make them.
    conformal : dict, optional
        Held-out conformity scores (:func:`autodeuq.ensemble.conformal.fit_regression`):
        :meth:`interval` is then the conformal interval of any level unless asked for the
        mixture's; ``None`` (an ensemble of an older autodeuq): the mixture's intervals.

    Attributes
    ----------
    source : CatalogMembers or ExportedMembers
    run_dir : Path or None
        The catalog's run directory; None for an ensemble read from a self-contained folder.
    catalog : Catalog or None
        Likewise.
    feature_names, target_names : list of str
        The networks' inputs and outputs. For an ensemble fitted on a table with categorical
        columns, ``feature_names`` are the encoded inputs (``island=Dream``).
    preprocessor : TablePreprocessor or None
        The encoding of a table's columns into ``feature_names`` (categories, imputation
        values), fitted on the training rows; None when the features are the table's columns.
    columns : list of str
        The table columns the ensemble reads (``preprocessor.feature_columns``, else
        ``feature_names``).

    Examples
    --------
    >>> ens = Ensemble.from_catalog("runs/demo", size=5)          # doctest: +SKIP
    >>> result = ens.predict(X)                                   # doctest: +SKIP
    >>> result.mean, result.aleatoric, result.epistemic           # doctest: +SKIP
    >>> lower, upper = result.interval(0.9)                       # doctest: +SKIP
    >>> result.to_frame(ens.target_names, levels=[0.9])           # doctest: +SKIP
    >>> ens.save("model_dir", self_contained=True)                # doctest: +SKIP
    >>> load_ensemble("model_dir").predict(X)                     # doctest: +SKIP
    """

    task = "regression"  #: the run's task: what the conformal scores are of

    def __init__(self, source, member_ids, weights, selection: dict | None = None,
                 calibration: dict | None = None, conformal: dict | None = None):
        self.source = CatalogMembers(source) if isinstance(source, (str, os.PathLike, Catalog)) else source
        self.member_ids = [int(i) for i in member_ids]
        self.weights = np.asarray(weights, dtype=float)
        if len(self.member_ids) != len(self.weights) or not self.member_ids:
            raise ValueError("an ensemble needs at least one member and one weight per member")
        if len(set(self.member_ids)) != len(self.member_ids):
            raise ValueError("ensemble members must be distinct catalog ids")
        if np.any(self.weights < 0) or not np.isclose(self.weights.sum(), 1.0):
            raise ValueError(f"weights must be non-negative and sum to 1, got {self.weights.tolist()}")
        self.selection = dict(selection or {})
        self.calibration = dict(calibration) if calibration else None
        self.feature_names = list(self.source.feature_names)
        self.target_names = list(self.source.target_names)
        self.preprocessor = getattr(self.source, "preprocessor", None)
        self.scale = None
        if self.calibration is not None:
            self.scale = np.asarray(self.calibration.get("scale"), dtype=float).reshape(-1)
            if self.scale.shape != (len(self.target_names),) or not np.all(np.isfinite(self.scale) & (self.scale > 0)):
                raise ValueError(f"calibration scale must hold one positive number per target "
                                 f"{self.target_names}, got {self.calibration.get('scale')!r}")
        self.conformal = None
        if conformal is not None:
            self.conformal = conformal_scores.check_conformal(dict(conformal), len(self.target_names), self.task)
        self._models = None
        self._predict_fn = None

    @property
    def run_dir(self) -> Path | None:
        return self.source.run_dir

    @property
    def columns(self) -> list[str]:
        """The table columns the ensemble reads, in order."""
        return self.feature_names if self.preprocessor is None else self.preprocessor.feature_columns

    @property
    def catalog(self) -> Catalog | None:
        return self.source.catalog

    @property
    def refitted_ids(self) -> list[int]:
        """The members whose network is a refit on the training and validation rows, in member order
        (:mod:`autodeuq.ensemble.refit`); the others are the networks the search trained."""
        held = getattr(self.source, "refitted", None)
        if held:
            return [i for i in self.member_ids if i in held]
        epochs = (self.selection.get("refit") or {}).get("epochs") or {}  # an export: as its record says
        return [i for i in self.member_ids if str(i) in epochs]

    def without_refit(self) -> "Ensemble":
        """The ensemble as selected, before its refit: the same members, weights and calibration,
        each member the network the search trained (read from the catalog); of the same class (a
        classifier's stays a :class:`~autodeuq.ensemble.classifier.ClassifierEnsemble`).

        Raises
        ------
        EnsembleError
            The ensemble was read from a self-contained folder, which holds only the networks it
            predicts with.
        """
        if self.run_dir is None:
            raise EnsembleError(f"{self.source.location}: a self-contained ensemble holds only the networks it "
                                f"predicts with; the networks before the refit are in the run directory's catalog")
        selection = {k: v for k, v in self.selection.items() if k != "refit"}
        # Of this ensemble's own class: a classifier's stays one, with its temperature.
        return type(self)(self.run_dir, self.member_ids, self.weights, selection=selection,
                          calibration=self.calibration, conformal=self.conformal)

    def __getstate__(self):
        # Loaded networks and the compiled prediction graph are rebuilt on first use after
        # unpickling; a catalog pickles as its (absolute) run directory, an exported ensemble's
        # members as their model bytes.
        state = dict(self.__dict__)
        state["_models"] = state["_predict_fn"] = None
        return state

    def __setstate__(self, state):
        if "source" not in state:  # pickled before member sources: it held its catalog
            state["source"] = CatalogMembers(state.pop("run_dir"))
            state.pop("catalog", None)
        state.setdefault("preprocessor", None)  # pickled before table preprocessing
        state.setdefault("conformal", None)  # pickled before conformal scores
        self.__dict__.update(state)

    # ------------------------------------------------------------------ building
    @classmethod
    def from_catalog(cls, run_dir, size: int = 5, selector: str = "auto", score: str = "mixture", *,
                     stop: str = "size", diversity: str = "none", calibrate: str = "auto",
                     calibration_folds: int = 2, bags: int = 0, seed: int = 0,
                     pool: float | str = "auto", crossfit=None) -> "Ensemble":
        """Select members greedily (or top-k) on the cached validation predictions of a catalog.

        Parameters
        ----------
        run_dir : path
        size : int
            Distinct members wanted (K). When the catalog has fewer successful entries, the
            ensemble is selected among all of them and an
            :class:`~autodeuq.ensemble.building.EnsembleSizeWarning` says so.
        selector, score, stop :
            See :func:`autodeuq.ensemble.select`; ``selector="auto"`` is the task's
            (:attr:`Task.auto_selector <autodeuq.tasks.base.Task.auto_selector>`: ``"greedy"`` for regression,
            ``"greedy-noreplace"`` for classification). With the default ``stop="size"`` the ensemble
            has ``size`` distinct members whenever the catalog has that many usable models;
            otherwise a warning says how many it has and why.
        diversity : {"none", "architecture", "activations"}
            Keep members apart: at most one member per architecture, or per set of activation
            functions used by the network's dense layers.
        calibrate : {"auto", "none", "scale"}
            ``"scale"``: fit a std scale per target on out-of-fold selections
            (:func:`autodeuq.ensemble.calibration.cross_fitted_scale`), so the rows that
            calibrate an ensemble are never the rows that selected it. ``"auto"``: ``"scale"``
            when the catalog's training and validation rows number more than 1000, else
            ``"none"`` (:func:`autodeuq.ensemble.calibration.resolve_calibration`; the reason is
            ``selection["calibration"]``).
        calibration_folds : int
            Folds of the validation rows for the cross-fitting.
        bags : int, default 0
            For the greedy selectors, when > 0, bagged selection (:func:`autodeuq.ensemble.selection.select_bagged`):
            the selection is repeated on ``bags`` random halves of the validation rows and
            the member weights averaged. Off by default: against selecting once it helped some
            tables a little and cost another more (docs/decisions/selection.md).
        seed : int
            Seed of the fold assignment and of the bags.
        pool : float or "auto", default "auto"
            Select only among the best fraction ``pool`` of the catalog's usable models, ranked by
            their own validation score (at least ``size`` of them; see
            :func:`autodeuq.ensemble.select`). ``"auto"`` is the task's
            (:attr:`Task.auto_pool <autodeuq.tasks.base.Task.auto_pool>`: 0.4 for regression, 1, the whole
            catalog, for classification); ``selection["pool"]`` records the fraction used.

        Warns
        -----
        EnsembleSizeWarning
            The ensemble has fewer distinct members than ``size``, with the reason; or several
            members whose weights amount to fewer than
            :data:`~autodeuq.ensemble.building.ONE_MODEL_EFFECTIVE_SIZE` equally weighted ones
            (``selection["effective_size"]``), so that it is effectively one model.
        """
        from autodeuq.ensemble.building import from_catalog

        return from_catalog(cls, run_dir, size, selector, score, stop=stop, diversity=diversity, calibrate=calibrate,
                            calibration_folds=calibration_folds, bags=bags, seed=seed, pool=pool,
                            crossfit=crossfit)

    def save(self, path, self_contained: bool = False, format: str = "keras") -> Path:
        """Write the ensemble as JSON (no pickle), creating missing parent folders; or, with
        ``format="onnx"``, as one ONNX file.

        Parameters
        ----------
        path : path
            ``self_contained=False``: the manifest file, which names the catalog by its path
            relative to the file's folder (moving either breaks it); refitted members' networks
            are written beside it, ``<stem>_refit/<id>.keras`` (format "autodeuq-ensemble/3"),
            and earlier ones there that are no longer members removed. ``self_contained=True``: a
            folder that receives ``ensemble.json`` and ``members/<id>.keras`` (see the module
            documentation); :func:`load_ensemble` opens it anywhere, without the catalog. The
            folder must be new, empty or an earlier export (whose old member files are removed).
        self_contained : bool
        format : {"keras", "onnx"}
            ``"onnx"``: ``path`` is a file ending in ``.onnx`` that holds the whole prediction (the
            table's encoding, every member, the mixture and its decomposition) for ONNX Runtime,
            without TensorFlow (:mod:`autodeuq.ensemble.onnx_export`); ``self_contained`` is
            implied. :func:`load_ensemble` reads it back, and predicts with ONNX Runtime.

        Returns
        -------
        Path
            The manifest written (``path/ensemble.json`` for a self-contained folder; ``path`` for
            an ONNX file).

        Raises
        ------
        ValueError
            ``self_contained=True`` with a ``.json`` path, a file or a folder holding other
            things; or ``self_contained=False`` for an ensemble that has no catalog.
        WriteError
            A file or folder cannot be written (the message says which and why).
        CatalogError
            A member's model file is refused.

        Notes
        -----
        Files are replaced atomically, never written through a link (see
        :func:`autodeuq.fileio.atomic_write`); a self-contained folder's manifest is written
        after its members, so an interrupted export leaves no manifest naming missing files.
        """
        if format == "onnx":
            from autodeuq.ensemble.onnx_export import save_onnx

            return save_onnx(self, path)
        if format != "keras":
            from autodeuq.core.errors import ParameterError

            raise ParameterError("format", "must be 'keras' or 'onnx'", format)
        from autodeuq.ensemble.manifest import save_ensemble

        return save_ensemble(self, path, self_contained)

    # ------------------------------------------------------------------ predicting
    def load_members(self) -> list:
        """The members' networks, in member order, loaded once and kept (computing in float64;
        see :func:`autodeuq.catalog.load_network`).

        Loading checks each member's model file (see :meth:`Catalog.load_model
        <autodeuq.catalog.Catalog.load_model>`), so calling this first makes an unreadable member
        fail before anything else is done with the ensemble.

        Returns
        -------
        list of callables
            Each called as a Keras model is (``network(x, training=False)``).

        Raises
        ------
        CatalogError
            A member's model file is missing, damaged or refused.
        ManifestError
            Likewise for a member of a self-contained folder.
        """
        if self._models is None:
            self._models = [self.source.load_network(i, "float64") for i in self.member_ids]
        return self._models

    def member_predictions(self, x, *, source: str = "X", encoded: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Every member's (means, variances), shape (n_members, n, n_targets), original units.

        Parameters
        ----------
        x : array-like of shape (n, n_features), DataFrame or mapping of columns
            Arrays are taken by position; a DataFrame or a mapping by column name (the
            ensemble's ``feature_names``; its ``target_names`` may be present and are ignored).
        source : str
            Names the inputs in error messages (the file they were read from, say).
        encoded : bool
            ``x`` is already encoded (the networks' ``feature_names``, by position): the
            ``preprocessor`` is skipped.

        Raises
        ------
        DataError
            Missing, unknown or non-numeric columns, NaN/inf values, values beyond float32 (also
            once standardized), or a member predicting a non-finite value; the message names the
            first offending data row (1-based) or the rows and the member.

        Warns
        -----
        UnseenCategoryWarning
            Rows of a table hold categories the training rows did not have: how many, per column.
        """
        out = self._member_outputs(x, source=source, encoded=encoded)
        t = out.shape[-1] // 2
        return out[..., :t], out[..., t:]

    def _member_outputs(self, x, *, source: str = "X", encoded: bool = False) -> np.ndarray:
        """Every member's network output on ``x`` (checked finite), shape (n_members, n, outputs):
        by ONNX Runtime for an ensemble read from an ``.onnx`` file, else by TensorFlow."""
        run_graph = getattr(self.source, "member_outputs", None)
        out = (self._tensorflow_outputs(x, source=source, encoded=encoded) if run_graph is None
               else run_graph(x, self, source=source, encoded=encoded))
        bad = ~np.isfinite(out).all(axis=-1)
        if bad.any():
            member = int(np.argmax(bad.any(axis=1)))
            rows = np.flatnonzero(bad[member]) + 1
            shown = ", ".join(map(str, rows[:10])) + (f" and {len(rows) - 10} more" if len(rows) > 10 else "")
            raise DataError(f"{source}: ensemble member {self.member_ids[member]} (catalog entry) predicts "
                            f"non-finite values for data row(s) {shown}; no prediction is returned")
        return out

    def _tensorflow_outputs(self, x, *, source: str = "X", encoded: bool = False) -> np.ndarray:
        """Every member's network output on ``x``, by TensorFlow (the reference)."""
        # The table is checked before anything heavy is imported or loaded (TensorFlow, the members).
        x = encode_inputs(x, self.feature_names, target_names=self.target_names, preprocessor=self.preprocessor,
                          standardization=self.source.standardization, source=source, encoded=encoded)
        import tensorflow as tf

        if self._predict_fn is None:
            # One graph runs all members on the same batch, so TensorFlow executes them together.
            # Traced once per ensemble, for any number of rows (the signature's batch size is None).
            signature = [tf.TensorSpec([None, len(self.feature_names)], tf.float64)]
            self._predict_fn = tf.function(_StackedMembers(self.load_members()), input_signature=signature,
                                            autograph=False)
        # float64 arithmetic: with float32, a row's prediction changed in its last digits with
        # its position in the batch (vectorized kernels round tail rows differently).
        outputs = [self._predict_fn(tf.constant(x[i:i + 8192], dtype=tf.float64)).numpy()
                   for i in range(0, len(x), 8192)]
        return np.concatenate(outputs, axis=1).astype(np.float64)

    def components(self, x, *, source: str = "X", encoded: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The predictive mixture's component (means, variances), recalibrated when the ensemble is.

        Without calibration these are :meth:`member_predictions`; ``x``, ``source`` and
        ``encoded`` as there.
        """
        return self.recalibrated(*self.member_predictions(x, source=source, encoded=encoded))

    def recalibrated(self, means, variances) -> tuple[np.ndarray, np.ndarray]:
        """Members' (means, variances) as the ensemble's mixture components: scaled when calibrated."""
        if self.scale is None:
            return means, variances
        return apply_scale(means, variances, self.weights, self.scale)

    def mixture(self, means, variances) -> UncertaintyPrediction:
        """The ensemble's predictive mixture of its members' predictions made already.

        Parameters
        ----------
        means, variances : ndarray of shape (n_members, n, n_targets)
            Every member's prediction, as :meth:`member_predictions` returns them (or the
            catalog's cached validation predictions of the members), original units.

        Returns
        -------
        UncertaintyPrediction
            The mixture, recalibrated when the ensemble is (:meth:`recalibrated`), weighted by
            :attr:`weights`, with its moments: what :meth:`predict` returns for those rows.
        """
        value = UncertaintyPrediction.from_mixture(*self.recalibrated(means, variances), self.weights)
        value.conformal = self.conformal
        return value

    def predict(self, x, *, source: str = "X", encoded: bool = False) -> UncertaintyPrediction:
        """The predictive mixture at each row of ``x``, with its mean and aleatoric / epistemic / total variances.

        ``mean = sum_i w_i mu_i``, ``aleatoric = sum_i w_i s2_i``,
        ``epistemic = sum_i w_i (mu_i - mean)**2`` (Egele et al. 2022), whose sum is the mixture's
        variance (law of total variance); a recalibrated ensemble multiplies both variance parts
        by the square of its scale. ``x``, ``source`` and ``encoded`` are as in
        :meth:`member_predictions`.

        Returns
        -------
        UncertaintyPrediction
            Holding the mixture too: :meth:`~UncertaintyPrediction.interval` gives its central
            intervals, :meth:`~UncertaintyPrediction.to_frame` the table ``autodeuq predict`` writes.
        """
        return self.mixture(*self.member_predictions(x, source=source, encoded=encoded))

    def interval(self, x, level: float = 0.9, *, source: str = "X", method: str = "auto"
                 ) -> tuple[np.ndarray, np.ndarray]:
        """The ``level`` prediction interval at each row of ``x``, original units
        (:meth:`UncertaintyPrediction.interval <autodeuq.ensemble.UncertaintyPrediction.interval>`).

        ``method="auto"``: the conformal interval ``mean +- q_L std`` where the ensemble holds
        held-out scores (:attr:`conformal`), whose coverage has a finite-sample guarantee on
        exchangeable rows (:mod:`autodeuq.ensemble.conformal`); else, and with
        ``method="mixture"``, the central interval of the predictive mixture (recalibrated when
        the ensemble is): its ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles, not
        ``mean +- z std``, since a mixture need not be Gaussian. ``x`` and ``source`` as in
        :meth:`member_predictions`.

        Returns
        -------
        lower, upper : ndarray of shape (n, n_targets)

        Raises
        ------
        ParameterError
            ``level`` is not a probability in ``(0, 1 - 1e-9]`` (a ``ValueError``).
        """
        level = check_level(level)  # before any prediction
        conformal_scores.resolve_method(method, self.conformal)
        return self.predict(x, source=source).interval(level, method=method)

    def distribution(self, x):
        """The weighted Gaussian mixture as a TFP ``MixtureSameFamily``, batch shape (n, n_targets)."""
        import tensorflow_probability as tfp

        tfd = tfp.distributions
        means, variances = self.components(x)
        loc = np.moveaxis(means, 0, -1)
        scale = np.sqrt(np.moveaxis(variances, 0, -1))
        probs = np.broadcast_to(self.weights, loc.shape)
        return tfd.MixtureSameFamily(
            mixture_distribution=tfd.Categorical(probs=probs),
            components_distribution=tfd.Normal(loc=loc, scale=scale),
        )

    def __repr__(self):
        members = ", ".join(f"{i}:{w:.2f}" for i, w in zip(self.member_ids, self.weights))
        refitted = f", refitted={self.refitted_ids}" if self.refitted_ids else ""
        return f"Ensemble({str(self.source.location)!r}, members=[{members}]{refitted})"


class _StackedMembers:
    """Every member's output on one batch, stacked: the function an ensemble's ``tf.function`` traces.

    A callable object rather than a lambda: TensorFlow tells traces of one Python function apart
    from retraces by the function's code object, which every lambda made by this module shares,
    so many ensembles (each traced once) read as one function retraced again and again and
    trigger its frequent-retracing warning. An object is a function of its own. It is traced
    without AutoGraph: there is no control flow to convert, and AutoGraph would read this file's
    source at every trace (and warn when the file changed on disk after the import).
    """

    def __init__(self, models):
        self.models = models

    def __call__(self, batch):
        import tensorflow as tf

        return tf.stack([m(batch, training=False) for m in self.models])
