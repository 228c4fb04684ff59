"""The predictive ensemble: catalog members with weights, predicting a Gaussian mixture.

An ensemble reads its members from a *member source*: a catalog (:class:`CatalogMembers`, the
run directory a search filled, possibly with some members replaced by their refits, see
:mod:`autodeuq.ensemble.refit`) or a self-contained folder written by
``Ensemble.save(folder, self_contained=True)`` (:class:`ExportedMembers`).

A manifest that names its catalog is format "autodeuq-ensemble/1", or "autodeuq-ensemble/3" when
members were refitted: the refitted networks are not in the catalog, so they are written beside
the manifest, ``<stem>_refit/<id>.keras`` (``ensemble_refit/`` for ``ensemble.json``), each with
its SHA-256 in the manifest; the other members are read from the catalog. A self-contained folder::

    model_dir/
        ensemble.json          format "autodeuq-ensemble/2": members (id, weight, file, SHA-256,
                               size), feature and target names, input standardization, the
                               table encoding (categories, fill values; or null), calibration,
                               selection, package versions
        members/<id>.keras     the members' model files, the catalog's very bytes

Input and output standardization live inside each ``.keras`` model; the manifest repeats the
input standardization only for the range checks of :meth:`Ensemble.predict`. Loading checks
every member file against its SHA-256 and refuses unsafe archives (Lambda layers, oversized
members) before Keras sees them, exactly as the catalog does; Keras then loads with
``safe_mode=True``. No pickle is involved, so loading runs no code from the folder.
"""
from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np

from autodeuq.catalog import (
    MAX_MODEL_BYTES,
    MODELS_DIR,
    Catalog,
    CatalogError,
    checked_keras_config,
    load_keras_model,
    read_verified,
)
from autodeuq.catalog.artifacts import package_versions, sha256_hex
from autodeuq.data import FLOAT32_MAX, DataError, encode_table, feature_frame, feature_matrix
from autodeuq.ensemble.calibration import apply_scale, cross_fitted_scale, pooled_coverage, resolve_calibration
from autodeuq.ensemble.options import CALIBRATIONS, DIVERSITY
from autodeuq.ensemble.selection import select, select_bagged
from autodeuq.errors import AutoDEUQError, AutoDEUQWarning, ParameterError
from autodeuq.fileio import WriteError, atomic_write, os_reason, refuse_linked_folders
from autodeuq.metrics import central_interval, check_level, mixture_moments

COVERAGE_LEVELS = (0.5, 0.9, 0.95)

MANIFEST_FORMAT = "autodeuq-ensemble/1"  #: a manifest naming its catalog (``run_dir``)
SELF_CONTAINED_FORMAT = "autodeuq-ensemble/2"  #: a manifest next to its members' model files
REFIT_FORMAT = "autodeuq-ensemble/3"  #: a manifest naming its catalog, with refitted members' files beside it
MANIFEST_NAME = "ensemble.json"
MEMBERS_DIR = "members"
MAX_MANIFEST_BYTES = 16 << 20  # a manifest lists member ids and weights: kilobytes
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_MEMBER_FILE = re.compile(r"[0-9]+\.keras")
# Recorded in an exported manifest: a .keras file loads in the Keras it was saved with (or a later one).
_EXPORT_VERSIONS = ("autodeuq", "keras", "tensorflow", "numpy", "python")


class EnsembleError(AutoDEUQError, ValueError):
    """An ensemble cannot be built or saved as asked: the message says which file or folder and why."""


class ManifestError(EnsembleError):
    """An ensemble manifest cannot be used: the message names the file and the entry at fault."""


class EnsembleSizeWarning(AutoDEUQWarning):
    """The ensemble has fewer distinct members than asked, or its weights make it effectively one
    model (effective size below :data:`ONE_MODEL_EFFECTIVE_SIZE`); the message says why."""


#: Below this effective size (``1 / sum(w**2)``) an ensemble of several members is reported as
#: effectively one model: its epistemic part is then mostly one network's distance to a few
#: lightly weighted others.
ONE_MODEL_EFFECTIVE_SIZE = 1.5


@dataclass
class UncertaintyPrediction:
    """Decomposed predictive uncertainty, arrays of shape (n, n_targets) in original units.

    The fields ``aleatoric``, ``epistemic`` and ``total`` are **variances** (squared units):
    ``total = aleatoric + epistemic`` is exactly the variance of the weighted Gaussian mixture.
    ``std = sqrt(total)`` is a standard deviation. The properties name the scale outright:
    ``aleatoric_var``, ``epistemic_var``, ``total_var`` (the same variances) and
    ``aleatoric_std``, ``epistemic_std``, ``total_std`` (their square roots, in the target's
    units; standard deviations do not add up, variances do).
    """

    mean: np.ndarray
    aleatoric: np.ndarray
    epistemic: np.ndarray
    total: np.ndarray
    std: np.ndarray

    @classmethod
    def from_mixture(cls, means, variances, weights) -> "UncertaintyPrediction":
        """The decomposition of a Gaussian mixture given by its components, shape (M, n, T).

        ``mean = sum_i w_i mu_i``, ``aleatoric = sum_i w_i s2_i``,
        ``epistemic = sum_i w_i (mu_i - mean)**2`` (Egele et al. 2022), whose sum is the
        mixture's variance (law of total variance).
        """
        mean, aleatoric, epistemic = mixture_moments(means, variances, weights)
        total = aleatoric + epistemic
        return cls(mean, aleatoric, epistemic, total, np.sqrt(total))

    @property
    def aleatoric_var(self) -> np.ndarray:
        """Aleatoric variance (the field ``aleatoric``)."""
        return self.aleatoric

    @property
    def epistemic_var(self) -> np.ndarray:
        """Epistemic variance (the field ``epistemic``)."""
        return self.epistemic

    @property
    def total_var(self) -> np.ndarray:
        """Total predictive variance (the field ``total``)."""
        return self.total

    @property
    def aleatoric_std(self) -> np.ndarray:
        """Aleatoric standard deviation, ``sqrt(aleatoric)``."""
        return np.sqrt(self.aleatoric)

    @property
    def epistemic_std(self) -> np.ndarray:
        """Epistemic standard deviation, ``sqrt(epistemic)``."""
        return np.sqrt(self.epistemic)

    @property
    def total_std(self) -> np.ndarray:
        """Total predictive standard deviation (the field ``std``)."""
        return self.std


class CatalogMembers:
    """Ensemble members read from a catalog: its model files and its data description.

    Parameters
    ----------
    run_dir : path
        The run directory; kept as an absolute path, so a pickled ensemble (or estimator)
        reopens it from any working directory.
    refitted : dict of int to bytes, optional
        Members whose network is a refit (:mod:`autodeuq.ensemble.refit`): the ``.keras``
        archive used instead of the catalog's model of that entry.

    Attributes
    ----------
    run_dir : Path
    catalog : Catalog
    refitted : dict of int to bytes
    feature_names, target_names : list of str
    standardization : dict or None
        The training split's ``x_mean``, ``x_std`` (and ``y_mean``, ``y_std``).
    preprocessor : TablePreprocessor or None
        How a table's columns become ``feature_names`` (None: the features are the columns).
    """

    refitted: Mapping[int, bytes] = MappingProxyType({})  # also the value of sources pickled before refits

    def __init__(self, run_dir, refitted: Mapping[int, bytes] | None = None):
        self.run_dir = Path(os.path.abspath(run_dir))
        self.catalog = Catalog(self.run_dir)
        if refitted:
            self.refitted = {int(i): bytes(b) for i, b in refitted.items()}
        data = self.catalog.meta.get("data", {})
        self.feature_names = list(data.get("features", []))
        self.target_names = list(data.get("targets", []))
        self.standardization = data.get("standardization")
        try:
            self.preprocessor = checked_preprocessor(data.get("preprocessing"), self.feature_names)
        except DataError as exc:
            raise CatalogError(f"{self.run_dir}: damaged catalog: {exc}") from None

    @property
    def location(self) -> Path:
        return self.run_dir

    def model_bytes(self, entry_id: int) -> bytes:
        """The bytes of a member's ``.keras`` archive: its refit's, else the catalog's checked file."""
        if entry_id in self.refitted:
            return self.refitted[entry_id]
        return self.catalog.model_bytes(entry_id)

    def load_model(self, entry_id: int):
        """The member's Keras model: its refit, else the catalog's (:meth:`Catalog.load_model`)."""
        if entry_id in self.refitted:
            return load_keras_model(self.refitted[entry_id], f"{self.run_dir}: refitted member {entry_id}")
        return self.catalog.load_model(entry_id)


class ExportedMembers:
    """Ensemble members of a self-contained folder: their checked model bytes, held in memory.

    Built by :func:`load_ensemble` once every member file has matched its SHA-256 and passed
    :func:`autodeuq.catalog.checked_keras_config`; models are built from these bytes (never
    from the files again), and an ensemble pickled with them needs no folder.

    Parameters
    ----------
    folder : Path
        Where the members were read from (named in messages).
    models : dict of int to bytes
        Each member's ``.keras`` archive.
    feature_names, target_names : list of str
    standardization : dict or None
    preprocessor : TablePreprocessor or None
    """

    run_dir = None
    catalog = None

    def __init__(self, folder, models: dict, feature_names, target_names, standardization, preprocessor=None):
        self.folder = Path(folder)
        self.models = dict(models)
        self.feature_names = list(feature_names)
        self.target_names = list(target_names)
        self.standardization = standardization
        self.preprocessor = preprocessor

    @property
    def location(self) -> Path:
        return self.folder

    def model_bytes(self, entry_id: int) -> bytes:
        return self.models[entry_id]

    def load_model(self, entry_id: int):
        """The member's Keras model, through :func:`autodeuq.catalog.load_keras_model`."""
        try:
            where = f"{self.folder}: member {entry_id} ({MEMBERS_DIR}/{entry_id}.keras)"
            return load_keras_model(self.models[entry_id], where)
        except CatalogError as exc:
            raise ManifestError(str(exc)) from None


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
    >>> ens.save("model_dir", self_contained=True)                # doctest: +SKIP
    >>> load_ensemble("model_dir").predict(X)                     # doctest: +SKIP
    """

    def __init__(self, source, member_ids, weights, selection: dict | None = None,
                 calibration: dict | None = None):
        self.source = CatalogMembers(source) if isinstance(source, (str, os.PathLike)) else source
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
        each member the network the search trained (read from the catalog).

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
        return Ensemble(self.run_dir, self.member_ids, self.weights, selection=selection,
                        calibration=self.calibration)

    def __getstate__(self):
        # Loaded Keras models and the compiled prediction graph are rebuilt on first use after
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
        self.__dict__.update(state)

    # ------------------------------------------------------------------ building
    @classmethod
    def from_catalog(cls, run_dir, size: int = 5, selector: str = "greedy", score: str = "mixture", *,
                     stop: str = "size", diversity: str = "none", calibrate: str = "auto",
                     calibration_folds: int = 2, bags: int = 0, seed: int = 0) -> "Ensemble":
        """Select members greedily (or top-k) on the cached validation predictions of a catalog.

        Parameters
        ----------
        run_dir : path
        size : int
            Distinct members wanted (K). When the catalog has fewer successful entries, the
            ensemble is selected among all of them and an :class:`EnsembleSizeWarning` says so.
        selector, score, stop :
            See :func:`autodeuq.ensemble.select`. With the default ``stop="size"`` the ensemble
            has ``size`` distinct members whenever the catalog has that many usable models;
            otherwise a warning says how many it has and why. ``selector`` and ``score`` were
            ``method`` and ``objective``: those keywords still work for one release, with a
            ``DeprecationWarning``.
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
            the member weights averaged. Off by default: on five standard splits of concrete it
            raised the test NLL by 0.06 against selecting once (benchmarks/results/selection.md).
        seed : int
            Seed of the fold assignment and of the bags.

        Warns
        -----
        EnsembleSizeWarning
            The ensemble has fewer distinct members than ``size``, with the reason; or several
            members whose weights amount to fewer than :data:`ONE_MODEL_EFFECTIVE_SIZE` equally
            weighted ones (``selection["effective_size"]``), so that it is effectively one model.
        """
        if diversity not in DIVERSITY:
            raise ParameterError("diversity", f"must be one of {list(DIVERSITY)}", diversity)
        if calibrate not in CALIBRATIONS:
            raise ParameterError("calibrate", f"must be one of {list(CALIBRATIONS)}", calibrate)
        catalog = Catalog(run_dir)
        ids = catalog.model_ids()
        if not ids:
            raise EnsembleError(f"{run_dir}: the catalog has no successful evaluation to build an ensemble from")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ParameterError("size", "must be an integer >= 1", size)
        selection = {"size": min(int(size), len(ids)), "selector": selector, "score": score}
        if size > len(ids):
            selection["size_requested"] = int(size)
            warnings.warn(f"{run_dir}: ensemble size {size} asked, but the catalog has only {len(ids)} successful "
                          f"entries: selecting among those, at most {len(ids)} members", EnsembleSizeWarning,
                          stacklevel=2)
        ids, means, variances = loaded = catalog.validation_predictions(ids)
        if not ids:
            raise CatalogError(f"{run_dir}: no successful entry has usable validation predictions "
                               f"({next(iter(loaded.skipped.values()))})")
        y = catalog.validation_targets()
        counts = catalog.row_counts() if calibrate == "auto" else None
        rows = sum(counts) if counts else None
        calibrate, selection["calibration"] = resolve_calibration(calibrate, rows)
        if calibrate == "scale" and len(y) < calibration_folds:
            raise EnsembleError(f"{run_dir}: recalibration cross-fits on {calibration_folds} folds of the validation "
                                f"rows, and there are {len(y)}; give more validation rows or no recalibration",
                                parameters=("calibrate",))
        groups = None if diversity == "none" else member_groups(catalog, ids, diversity)

        def select_rows(rows):
            options = dict(selector=selector, score=score, stop=stop, groups=groups)
            if bags and selector != "topk":  # top-k ranks single models: its weights stay uniform
                return select_bagged(means[:, rows], variances[:, rows], y[rows], selection["size"], bags=bags,
                                     seed=seed, **options)
            return select(means[:, rows], variances[:, rows], y[rows], size=selection["size"], **options)

        chosen = select_rows(np.arange(len(y)))
        members = [int(ids[i]) for i in chosen.indices]
        selection.update({"stop": stop, "diversity": diversity, "bags": bags, "catalog_entries": len(ids),
                          "members": len(members), "effective_size": round(chosen.effective_size, 4),
                          "shortfall": chosen.reason})
        if "size_requested" in selection and chosen.reason is None:
            selection["shortfall"] = f"the catalog has only {len(ids)} successful entries"
        if chosen.reason is not None:
            warnings.warn(f"{run_dir}: the ensemble has {len(members)} distinct member(s), not {selection['size']}: "
                          f"{chosen.reason}", EnsembleSizeWarning, stacklevel=2)
        if len(members) > 1 and chosen.effective_size < ONE_MODEL_EFFECTIVE_SIZE:
            weights = ", ".join(f"{w:.3f}" for w in chosen.weights)
            warnings.warn(f"{run_dir}: the ensemble is effectively one model: its {len(members)} members weigh "
                          f"{weights} (effective size {chosen.effective_size:.2f}), so its epistemic part is "
                          f"mostly one network's distance to the others; selection without replacement "
                          f"weighs members equally", EnsembleSizeWarning, stacklevel=2)
        calibration = None
        if calibrate == "scale":
            scale, chunks = cross_fitted_scale(select_rows, means, variances, y, folds=calibration_folds, seed=seed)
            calibration = {
                "method": "scale", "scale": scale.tolist(), "folds": calibration_folds, "seed": seed,
                "validation_coverage_before": {str(level): pooled_coverage(chunks, level).tolist()
                                               for level in COVERAGE_LEVELS},
                "validation_coverage_after": {str(level): pooled_coverage(chunks, level, scale).tolist()
                                              for level in COVERAGE_LEVELS},
            }
        return cls(run_dir, members, chosen.weights, selection=selection, calibration=calibration)

    def save(self, path, self_contained: bool = False) -> Path:
        """Write the ensemble as JSON (no pickle), creating missing parent folders.

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

        Returns
        -------
        Path
            The manifest written (``path/ensemble.json`` for a self-contained folder).

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
        path = Path(path)
        if self_contained:
            return _export(self, path)
        if self.run_dir is None:
            raise EnsembleError(f"{path}: this ensemble was read from a self-contained folder and has no catalog to "
                             f"name: save it with self_contained=True")
        refitted = {i: self.source.refitted[i] for i in self.member_ids if i in self.source.refitted}
        refit_dir = path.parent / refit_folder_name(path)
        members = []
        for i, w in zip(self.member_ids, self.weights):
            member = {"id": i, "weight": float(w), "model": catalog_model_name(i)}  # the catalog's, before any refit
            if i in refitted:
                member.update({"refit_model": f"{refit_dir.name}/{i}.keras", "sha256": sha256_hex(refitted[i]),
                               "bytes": len(refitted[i])})
            members.append(member)
        manifest = {
            "format": REFIT_FORMAT if refitted else MANIFEST_FORMAT,
            # relative to the folder, not to a link's target: a link at ``path`` is replaced
            "run_dir": os.path.relpath(self.run_dir.resolve(), path.parent.resolve()),
            "members": members,
            "selection": self.selection,
            "calibration": self.calibration,
            "features": self.feature_names,
            "targets": self.target_names,
        }
        # Inside the run directory, a linked folder on the way is refused like a linked refit folder.
        refuse_linked_folders(self.run_dir, refit_dir if refitted else path.parent)
        _make_folder(path.parent)
        if refitted:
            if refit_dir.is_symlink():
                raise CatalogError(f"{refit_dir}: is a symbolic link; refusing to write through it (remove it)")
            _make_folder(refit_dir)
            for entry_id, data in refitted.items():
                atomic_write(refit_dir / f"{entry_id}.keras", data)
        written = atomic_write(path, json.dumps(manifest, indent=2).encode())
        if refit_dir.is_dir() and not refit_dir.is_symlink():
            _remove_stale_members(refit_dir, refitted, "refitted member of the ensemble saved there before")
        return written

    # ------------------------------------------------------------------ predicting
    def _load(self):
        if self._models is None:
            self._models = [_float64_copy(self.source.load_model(i)) for i in self.member_ids]
        return self._models

    def _check_x(self, x, source: str = "X", encoded: bool = False) -> np.ndarray:
        """Validated float64 inputs in the order of ``feature_names``.

        A DataFrame or a mapping of columns is matched by column name (target columns are
        ignored, any other unknown column is refused); an array is taken by position. With a
        ``preprocessor``, the table's ``columns`` are encoded first, unless ``encoded`` (``x``
        already holds the networks' inputs, e.g. a catalog's stored test set).
        """
        if self.preprocessor is not None and not encoded:
            frame = _as_frame(x, self.columns, source)
            x = encode_table(self.preprocessor, frame, source, ignore=self.target_names)
            # Rows whose categories training never saw: counted per column, in an UnseenCategoryWarning.
            self.preprocessor.warn_unseen(frame, source)
        elif hasattr(x, "columns") or isinstance(x, Mapping):
            x = feature_matrix(x, self.feature_names, source, ignore=self.target_names)
        else:
            try:
                x = np.asarray(x, dtype=np.float64)
            except (TypeError, ValueError):
                raise DataError(f"{source}: inputs must be numeric") from None
            if x.ndim == 1 and len(self.feature_names) == 1:
                x = x[:, None]
            if x.ndim != 2 or x.shape[1] != len(self.feature_names):
                raise DataError(f"{source}: the ensemble expects {len(self.feature_names)} feature column(s) "
                                f"{self.feature_names}, got an array of shape {x.shape}")
            x = feature_matrix(dict(zip(self.feature_names, x.T)), self.feature_names, source)
        scaling = self.source.standardization
        if scaling and len(x):
            # The networks were trained in float32 on standardized inputs of order 1; a value whose
            # standardized form is beyond float32's range was infinite in their arithmetic.
            z = np.abs((x - np.asarray(scaling["x_mean"])) / np.asarray(scaling["x_std"]))
            big = z > FLOAT32_MAX
            if big.any():
                row, col = np.argwhere(big)[0]
                raise DataError(
                    f"{source}: feature column {self.feature_names[col]!r} at data row {row + 1} is {x[row, col]:g}, "
                    f"whose standardized value ({z[row, col]:.3g} training standard deviations from the "
                    f"training mean) is beyond the float32 range the networks are trained in"
                )
        return x

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
        import tensorflow as tf

        x = self._check_x(x, source, encoded)
        if self._predict_fn is None:
            # One graph runs all members on the same batch, so TensorFlow executes them together.
            # Traced once per ensemble, for any number of rows (the signature's batch size is None).
            signature = [tf.TensorSpec([None, len(self.feature_names)], tf.float64)]
            self._predict_fn = tf.function(_StackedMembers(self._load()), input_signature=signature,
                                            autograph=False)
        # float64 arithmetic: with float32, a row's prediction changed in its last digits with
        # its position in the batch (vectorized kernels round tail rows differently).
        outputs = [self._predict_fn(tf.constant(x[i:i + 8192], dtype=tf.float64)).numpy()
                   for i in range(0, len(x), 8192)]
        out = np.concatenate(outputs, axis=1).astype(np.float64)
        bad = ~np.isfinite(out).all(axis=-1)
        if bad.any():
            member = int(np.argmax(bad.any(axis=1)))
            rows = np.flatnonzero(bad[member]) + 1
            shown = ", ".join(map(str, rows[:10])) + (f" and {len(rows) - 10} more" if len(rows) > 10 else "")
            raise DataError(f"{source}: ensemble member {self.member_ids[member]} (catalog entry) predicts "
                            f"non-finite values for data row(s) {shown}; no prediction is returned")
        t = out.shape[-1] // 2
        return out[..., :t], out[..., t:]

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

    def predict(self, x, *, source: str = "X", encoded: bool = False) -> UncertaintyPrediction:
        """Mixture mean and the aleatoric / epistemic / total variances.

        ``mean = sum_i w_i mu_i``, ``aleatoric = sum_i w_i s2_i``,
        ``epistemic = sum_i w_i (mu_i - mean)**2`` (Egele et al. 2022), whose sum is the mixture's
        variance (law of total variance); a recalibrated ensemble multiplies both variance parts
        by the square of its scale. ``x``, ``source`` and ``encoded`` are as in
        :meth:`member_predictions`.
        """
        return UncertaintyPrediction.from_mixture(*self.components(x, source=source, encoded=encoded), self.weights)

    def interval(self, x, level: float = 0.9, *, source: str = "X") -> tuple[np.ndarray, np.ndarray]:
        """Central ``level`` prediction interval of the predictive mixture, original units.

        The ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the weighted Gaussian
        mixture (recalibrated when the ensemble is), not ``mean +- z std``: a mixture need not be
        Gaussian. ``x`` and ``source`` as in :meth:`member_predictions`.

        Returns
        -------
        lower, upper : ndarray of shape (n, n_targets)

        Raises
        ------
        ParameterError
            ``level`` is not a probability in ``(0, 1 - 1e-9]`` (a ``ValueError``).
        """
        level = check_level(level)  # before any prediction
        return central_interval(*self.components(x, source=source), self.weights, level)

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


def _float64_copy(model):
    """The same network (same weights) computing in float64: every layer's dtype set to float64."""
    def retyped(config):
        if isinstance(config, dict):
            return {k: ("float64" if k == "dtype" else retyped(v)) for k, v in config.items()}
        if isinstance(config, list):
            return [retyped(v) for v in config]
        return config

    copy = model.__class__.from_config(retyped(model.get_config()))
    copy.set_weights([np.asarray(w, dtype=np.float64) for w in model.get_weights()])
    return copy


def load_ensemble(path) -> Ensemble:
    """Load an ensemble written by :meth:`Ensemble.save`: a manifest, or a self-contained folder.

    Parameters
    ----------
    path : path
        An ``ensemble.json`` manifest, or a folder holding one (a self-contained export).

    Raises
    ------
    ManifestError
        The file is missing, unreadable, not JSON, or not a well-formed manifest (the message
        names the field at fault); for a self-contained folder also a member file that is
        missing, outside the folder, not matching its SHA-256, or not a safe ``.keras`` archive.
    CatalogError
        The catalog a manifest names cannot be read.
    """
    path = Path(path)
    if path.is_dir():
        if not (path / MANIFEST_NAME).exists():
            raise ManifestError(f"{path}: is a directory, not an ensemble manifest ({MANIFEST_NAME})")
        path = path / MANIFEST_NAME
    manifest = _read_manifest(path)
    if isinstance(manifest, dict) and manifest.get("format") == SELF_CONTAINED_FORMAT:
        return _load_self_contained(path, manifest)
    if not isinstance(manifest, dict) or manifest.get("format") not in (MANIFEST_FORMAT, REFIT_FORMAT):
        raise ManifestError(f"{path}: not an autodeuq ensemble manifest (format {MANIFEST_FORMAT!r}, "
                            f"{SELF_CONTAINED_FORMAT!r} or {REFIT_FORMAT!r} expected)")
    run_dir = manifest.get("run_dir")
    if not isinstance(run_dir, str) or not run_dir or "\0" in run_dir:
        raise ManifestError(f"{path}: 'run_dir' must name the catalog directory, got {run_dir!r}")
    ids, weights = _manifest_members(path, manifest.get("members"))
    for k, (entry_id, member) in enumerate(zip(ids, manifest["members"])):
        # Read from the catalog by id; a 'model' naming anything else is a tampered or foreign manifest.
        if "model" in member and member["model"] != catalog_model_name(entry_id):
            raise ManifestError(f"{path}: members[{k}]: 'model' must be {catalog_model_name(entry_id)!r} (the "
                                f"catalog's network of entry {entry_id}), got {_short(member['model'])}")
    refitted = _refitted_members(path, manifest) if manifest["format"] == REFIT_FORMAT else {}
    selection, calibration = _selection_and_calibration(path, manifest)
    try:
        source = CatalogMembers((path.parent.resolve() / run_dir).resolve(), refitted)
        return Ensemble(source, ids, weights, selection=selection, calibration=calibration)
    except CatalogError:
        raise
    except ValueError as exc:
        raise ManifestError(f"{path}: {exc}") from None


def catalog_model_name(entry_id: int) -> str:
    """The 'model' a catalog-naming manifest lists for a member: its file in the run directory."""
    return f"{MODELS_DIR}/{int(entry_id)}.keras"


def _read_manifest(path: Path):
    """The parsed JSON of a manifest file, read with a size cap, or ManifestError saying why not."""
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise ManifestError(f"{path}: ensemble manifest not found") from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the ensemble manifest: {exc.strerror or exc}") from None
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes: not an ensemble manifest")
    try:
        return json.loads(text)
    except RecursionError:
        raise ManifestError(f"{path}: not an ensemble manifest (JSON nested too deeply)") from None
    except ValueError as exc:
        raise ManifestError(f"{path}: not a JSON ensemble manifest ({exc})") from None


def _selection_and_calibration(path: Path, manifest: dict) -> tuple[dict | None, dict | None]:
    selection, calibration = manifest.get("selection"), manifest.get("calibration")
    if calibration is not None and not isinstance(calibration, dict):
        raise ManifestError(f"{path}: 'calibration' must be an object or null, got {_short(calibration)}")
    return (selection if isinstance(selection, dict) else None), calibration


def _load_self_contained(path: Path, manifest: dict) -> Ensemble:
    """The ensemble of a self-contained folder: every field checked, every member file verified."""
    if manifest.get("self_contained") is not True:
        raise ManifestError(f"{path}: 'self_contained' must be true in a {SELF_CONTAINED_FORMAT!r} manifest, "
                            f"got {_short(manifest.get('self_contained'))}")
    ids, weights = _manifest_members(path, manifest.get("members"))
    features = _manifest_names(path, manifest, "features")
    targets = _manifest_names(path, manifest, "targets")
    standardization = _manifest_standardization(path, manifest.get("standardization"), len(features))
    try:
        preprocessor = checked_preprocessor(manifest.get("preprocessing"), features)
    except DataError as exc:
        raise ManifestError(f"{path}: {exc}") from None
    folder = path.parent.resolve()
    models = {}
    for k, (entry_id, member) in enumerate(zip(ids, manifest["members"])):
        name = f"{MEMBERS_DIR}/{entry_id}.keras"
        if member.get("model") != name:
            raise ManifestError(f"{path}: members[{k}]: 'model' must be {name!r}, got {_short(member.get('model'))}")
        models[entry_id] = _member_file(path, k, member, name, "model file", "the ensemble folder")
    selection, calibration = _selection_and_calibration(path, manifest)
    source = ExportedMembers(folder, models, features, targets, standardization, preprocessor)
    try:
        return Ensemble(source, ids, weights, selection=selection, calibration=calibration)
    except ValueError as exc:
        raise ManifestError(f"{path}: {exc}") from None


def _member_file(path: Path, k: int, member: dict, name: str, what: str, held_in: str) -> bytes:
    """The checked ``.keras`` bytes of the file ``name`` beside the manifest ``path`` that its
    ``members[k]`` lists with its SHA-256 and size; read at most the recorded size, so a grown
    file is refused before it is read."""
    folder = path.parent.resolve()
    sha, size = member.get("sha256"), member.get("bytes")
    if not (isinstance(sha, str) and _SHA256_HEX.fullmatch(sha)):
        raise ManifestError(f"{path}: members[{k}]: 'sha256' must be the 64 hexadecimal digits of the {what}'s "
                            f"SHA-256, got {_short(sha)}")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_MODEL_BYTES:
        raise ManifestError(f"{path}: members[{k}]: 'bytes' must be the {what}'s size (1 to {MAX_MODEL_BYTES}), "
                            f"got {_short(size)}")
    where = f"{path}: members[{k}]: {what} {folder / name}"
    try:
        data = read_verified(folder / name, folder, sha, size, where, held_in)
        checked_keras_config(data, where)
    except CatalogError as exc:
        raise ManifestError(str(exc)) from None
    return data


def _refitted_members(path: Path, manifest: dict) -> dict[int, bytes]:
    """The checked ``.keras`` bytes of the refitted members a catalog-naming manifest lists beside it."""
    refitted = {}
    for k, member in enumerate(manifest["members"]):
        name = member.get("refit_model")
        if name is None:
            continue
        entry_id = member["id"]
        if not (isinstance(name, str) and re.fullmatch(rf"[^/\\]+/{entry_id}\.keras", name)):
            raise ManifestError(f"{path}: members[{k}]: 'refit_model' must be 'FOLDER/{entry_id}.keras' beside the "
                                f"manifest, got {_short(name)}")
        refitted[entry_id] = _member_file(path, k, member, name, "refitted model file", "the manifest's folder")
    if not refitted:
        raise ManifestError(f"{path}: a {REFIT_FORMAT!r} manifest must list at least one member's 'refit_model'")
    return refitted


def _manifest_names(path: Path, manifest: dict, key: str) -> list[str]:
    names = manifest.get(key)
    if (not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names)
            or len(set(names)) != len(names)):
        raise ManifestError(f"{path}: '{key}' must be a non-empty list of distinct column names, got {_short(names)}")
    return names


def _manifest_standardization(path: Path, scaling, n_features: int) -> dict | None:
    """The input standardization (``x_mean``, ``x_std`` per feature) of a manifest, or None."""
    if scaling is None:
        return None
    ok = isinstance(scaling, dict)
    for key in ("x_mean", "x_std"):
        values = scaling.get(key) if ok else None
        ok = ok and (isinstance(values, list) and len(values) == n_features
                     and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                             for v in values))
    if not ok or not all(v > 0 for v in scaling["x_std"]):
        raise ManifestError(f"{path}: 'standardization' must hold 'x_mean' and positive 'x_std', one finite number "
                            f"per feature ({n_features}), or be null; got {_short(scaling)}")
    return scaling


def checked_preprocessor(spec, features):
    """The :class:`~autodeuq.preprocess.TablePreprocessor` a catalog or manifest records, or None.

    Raises
    ------
    DataError
        A malformed record, or one whose encoded names are not ``features``.
    """
    from autodeuq.preprocess import TablePreprocessor

    if spec is None:
        return None
    prep = TablePreprocessor.from_dict(spec)
    if prep.output_names != list(features):
        raise DataError(f"'preprocessing' encodes the columns {prep.feature_columns} as {prep.output_names}, "
                        f"not as the features {list(features)}")
    return prep


def _as_frame(x, columns: list[str], source: str):
    """A DataFrame of a table's columns: a DataFrame as it is, a mapping by name, an array by position."""
    import pandas as pd

    if hasattr(x, "columns"):
        return x
    if isinstance(x, Mapping):
        return feature_frame(x, source)
    x = np.asarray(x)
    if x.ndim == 1 and len(columns) == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[1] != len(columns):
        raise DataError(f"{source}: the ensemble expects {len(columns)} column(s) {columns}, "
                        f"got an array of shape {x.shape}")
    return pd.DataFrame({c: x[:, j] for j, c in enumerate(columns)})


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"cannot create the folder {folder}: {os_reason(exc)}") from None


def _is_export(folder: Path) -> bool:
    try:
        manifest = _read_manifest(folder / MANIFEST_NAME)
    except ManifestError:
        return False
    return isinstance(manifest, dict) and manifest.get("format") == SELF_CONTAINED_FORMAT


def _export(ens: Ensemble, folder: Path) -> Path:
    """Write ``ens`` as a self-contained folder (see :meth:`Ensemble.save`); the manifest's path."""
    if folder.suffix == ".json":
        raise EnsembleError(f"{folder}: a self-contained ensemble is a folder (holding {MANIFEST_NAME} and "
                         f"{MEMBERS_DIR}/); give a folder name, not a .json file")
    if folder.exists() and not folder.is_dir():
        raise EnsembleError(f"{folder}: exists and is not a folder; a self-contained ensemble is written to a folder")
    if folder.is_dir() and any(folder.iterdir()) and not _is_export(folder):
        raise EnsembleError(f"{folder}: the folder is not empty and holds no self-contained ensemble; refusing to "
                         f"write into it (give a new or empty folder)")
    members_dir = folder / MEMBERS_DIR
    if ens.run_dir is not None:
        refuse_linked_folders(ens.run_dir, members_dir)
    if members_dir.is_symlink():
        raise CatalogError(f"{members_dir}: is a symbolic link; refusing to write through it (remove it)")
    # Every member is read and checked before anything is written.
    models = {}
    for entry_id in ens.member_ids:
        models[entry_id] = data = ens.source.model_bytes(entry_id)
        checked_keras_config(data, f"{ens.source.location}: member {entry_id}")
    versions = package_versions()
    manifest = {
        "format": SELF_CONTAINED_FORMAT,
        "self_contained": True,
        "members": [{"id": i, "weight": float(w), "model": f"{MEMBERS_DIR}/{i}.keras",
                     "sha256": sha256_hex(models[i]), "bytes": len(models[i])}
                    for i, w in zip(ens.member_ids, ens.weights)],
        "selection": ens.selection,
        "calibration": ens.calibration,
        "features": ens.feature_names,
        "targets": ens.target_names,
        "standardization": ens.source.standardization,
        "preprocessing": None if ens.preprocessor is None else ens.preprocessor.to_dict(),
        "versions": {k: versions[k] for k in _EXPORT_VERSIONS if k in versions},
    }
    _make_folder(members_dir)
    for entry_id, data in models.items():
        atomic_write(members_dir / f"{entry_id}.keras", data)
    path = atomic_write(folder / MANIFEST_NAME, json.dumps(manifest, indent=2).encode())
    _remove_stale_members(members_dir, ens.member_ids, "member of the ensemble exported there before")
    return path


def refit_folder_name(manifest: Path) -> str:
    """The folder, beside a catalog-naming manifest, that holds its refitted members' ``<id>.keras``."""
    return f"{Path(manifest).stem}_refit"


def _remove_stale_members(folder: Path, keep_ids, what: str) -> None:
    """Remove the ``<id>.keras`` files of ``folder`` whose id is not in ``keep_ids`` (only names
    autodeuq writes there; a member written before, say)."""
    keep = {f"{i}.keras" for i in keep_ids}
    for old in folder.iterdir():
        if old.name not in keep and _MEMBER_FILE.fullmatch(old.name) and not old.is_dir():
            try:
                old.unlink()
            except OSError as exc:
                raise WriteError(f"cannot remove {old} (a {what}): {os_reason(exc)}") from None


def _manifest_members(path: Path, members) -> tuple[list[int], list[float]]:
    """(ids, weights) of a manifest's 'members', each checked, or ManifestError naming the entry."""
    if not isinstance(members, list) or not members:
        raise ManifestError(f"{path}: 'members' must be a non-empty list of {{\"id\": ..., \"weight\": ...}}, "
                            f"got {_short(members)}")
    ids, weights = [], []
    for k, member in enumerate(members):
        if not isinstance(member, dict):
            raise ManifestError(f"{path}: members[{k}] must be an object with 'id' and 'weight', got {_short(member)}")
        entry_id, weight = member.get("id"), member.get("weight")
        if not isinstance(entry_id, int) or isinstance(entry_id, bool) or not 1 <= entry_id < 2**63:
            raise ManifestError(f"{path}: members[{k}]: 'id' must be a catalog entry id (a positive integer), "
                                f"got {_short(entry_id)}")
        if (not isinstance(weight, (int, float)) or isinstance(weight, bool) or not math.isfinite(weight)
                or weight < 0):
            raise ManifestError(f"{path}: members[{k}]: 'weight' must be a finite non-negative number, "
                                f"got {_short(weight)}")
        ids.append(entry_id)
        weights.append(float(weight))
    return ids, weights


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def member_groups(catalog, ids, by: str) -> list[str]:
    """A label per catalog entry for diverse selection: its architecture, or its activation set."""
    space = catalog.space
    labels = []
    for entry_id in ids:
        arch = catalog.config(entry_id)["arch"]
        if by == "architecture":
            labels.append(json.dumps(list(arch)))
        else:
            used = sorted({dense.activation for dense, _ in space.cells(arch) if dense.activation})
            labels.append("+".join(used) or "identity")
    return labels
