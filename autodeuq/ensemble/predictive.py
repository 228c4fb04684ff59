"""The predictive ensemble: catalog members with weights, predicting a Gaussian mixture."""
from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autodeuq.catalog import Catalog, CatalogError, atomic_write
from autodeuq.data import FLOAT32_MAX, DataError, feature_matrix
from autodeuq.ensemble.calibration import apply_scale, cross_fitted_scale, pooled_coverage
from autodeuq.ensemble.selection import select, select_bagged
from autodeuq.metrics import central_interval, mixture_moments

#: How members may be kept apart (``diversity`` of :meth:`Ensemble.from_catalog`).
DIVERSITY = ("none", "architecture", "activations")
#: Post-hoc recalibration methods (``calibrate`` of :meth:`Ensemble.from_catalog`).
CALIBRATIONS = ("none", "scale")
COVERAGE_LEVELS = (0.5, 0.9, 0.95)

MANIFEST_FORMAT = "autodeuq-ensemble/1"
MAX_MANIFEST_BYTES = 16 << 20  # a manifest lists member ids and weights: kilobytes


class ManifestError(ValueError):
    """An ensemble manifest cannot be used: the message names the file and the entry at fault."""


class EnsembleSizeWarning(UserWarning):
    """The ensemble has fewer distinct members than asked; the message says why."""


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


class Ensemble:
    """A weighted ensemble of catalog entries.

    Parameters
    ----------
    run_dir : path
        The catalog the members come from.
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

    Examples
    --------
    >>> ens = Ensemble.from_catalog("runs/demo", size=5)          # doctest: +SKIP
    >>> result = ens.predict(X)                                   # doctest: +SKIP
    >>> result.mean, result.aleatoric, result.epistemic           # doctest: +SKIP
    """

    def __init__(self, run_dir, member_ids, weights, selection: dict | None = None,
                 calibration: dict | None = None):
        self.run_dir = Path(run_dir)
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
        self.catalog = Catalog(self.run_dir)
        data = self.catalog.meta.get("data", {})
        self.feature_names = list(data.get("features", []))
        self.target_names = list(data.get("targets", []))
        self.scale = None
        if self.calibration is not None:
            self.scale = np.asarray(self.calibration.get("scale"), dtype=float).reshape(-1)
            if self.scale.shape != (len(self.target_names),) or not np.all(np.isfinite(self.scale) & (self.scale > 0)):
                raise ValueError(f"calibration scale must hold one positive number per target "
                                 f"{self.target_names}, got {self.calibration.get('scale')!r}")
        self._models = None
        self._predict_fn = None

    def __getstate__(self):
        # Loaded Keras models and the compiled prediction graph are rebuilt on first use after
        # unpickling; the catalog pickles as its run directory.
        state = dict(self.__dict__)
        state["_models"] = state["_predict_fn"] = None
        return state

    # ------------------------------------------------------------------ building
    @classmethod
    def from_catalog(cls, run_dir, size: int = 5, method: str = "greedy", objective: str = "mixture", *,
                     stop: str = "size", diversity: str = "none", calibrate: str = "none",
                     calibration_folds: int = 2, bags: int = 0, seed: int = 0) -> "Ensemble":
        """Select members greedily (or top-k) on the cached validation predictions of a catalog.

        Parameters
        ----------
        run_dir : path
        size : int
            Distinct members wanted (K). When the catalog has fewer successful entries, the
            ensemble is selected among all of them and an :class:`EnsembleSizeWarning` says so.
        method, objective, stop :
            See :func:`autodeuq.ensemble.select`. With the default ``stop="size"`` the
            ensemble has ``size`` distinct members whenever the catalog has that many usable
            models; otherwise a warning says how many it has and why.
        diversity : {"none", "architecture", "activations"}
            Keep members apart: at most one member per architecture, or per set of activation
            functions used by the network's dense layers.
        calibrate : {"none", "scale"}
            ``"scale"``: fit a std scale per target on out-of-fold selections
            (:func:`autodeuq.ensemble.calibration.cross_fitted_scale`), so the rows that
            calibrate an ensemble are never the rows that selected it.
        calibration_folds : int
            Folds of the validation rows for the cross-fitting.
        bags : int
            When > 0, bagged selection (:func:`autodeuq.ensemble.selection.select_bagged`):
            the selection is repeated on ``bags`` random halves of the validation rows and
            the member weights averaged, which fits the rows' noise less.
        seed : int
            Seed of the fold assignment and of the bags.

        Warns
        -----
        EnsembleSizeWarning
            The ensemble has fewer distinct members than ``size``, with the reason.
        """
        if diversity not in DIVERSITY:
            raise ValueError(f"diversity must be one of {DIVERSITY}, got {diversity!r}")
        if calibrate not in CALIBRATIONS:
            raise ValueError(f"calibrate must be one of {CALIBRATIONS}, got {calibrate!r}")
        catalog = Catalog(run_dir)
        ids = catalog.model_ids()
        if not ids:
            raise ValueError(f"{run_dir}: the catalog has no successful evaluation to build an ensemble from")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"ensemble size must be an integer >= 1, got {size!r}")
        selection = {"size": min(int(size), len(ids)), "method": method, "objective": objective}
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
        groups = None if diversity == "none" else member_groups(catalog, ids, diversity)

        def select_rows(rows):
            options = dict(method=method, objective=objective, stop=stop, groups=groups)
            if bags:
                return select_bagged(means[:, rows], variances[:, rows], y[rows], selection["size"], bags=bags,
                                     seed=seed, **options)
            return select(means[:, rows], variances[:, rows], y[rows], size=selection["size"], **options)

        chosen = select_rows(np.arange(len(y)))
        members = [int(ids[i]) for i in chosen.indices]
        selection.update({"stop": stop, "diversity": diversity, "bags": bags, "catalog_entries": len(ids), "members": len(members),
                          "effective_size": round(chosen.effective_size, 4), "shortfall": chosen.reason})
        if "size_requested" in selection and chosen.reason is None:
            selection["shortfall"] = f"the catalog has only {len(ids)} successful entries"
        if chosen.reason is not None:
            warnings.warn(f"{run_dir}: the ensemble has {len(members)} distinct member(s), not {selection['size']}: "
                          f"{chosen.reason}", EnsembleSizeWarning, stacklevel=2)
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

    def save(self, path) -> Path:
        """Write the JSON manifest (catalog entries and weights; no pickle).

        The file is replaced atomically, never written through a link (see
        :func:`autodeuq.catalog.atomic_write`); :class:`~autodeuq.catalog.CatalogError` says
        why when it cannot be written.
        """
        path = Path(path)
        manifest = {
            "format": MANIFEST_FORMAT,
            # relative to the folder, not to a link's target: a link at ``path`` is replaced
            "run_dir": os.path.relpath(self.run_dir.resolve(), path.parent.resolve()),
            "members": [{"id": i, "weight": float(w), "model": f"models/{i}.keras"}
                        for i, w in zip(self.member_ids, self.weights)],
            "selection": self.selection,
            "calibration": self.calibration,
            "features": self.feature_names,
            "targets": self.target_names,
        }
        return atomic_write(path, json.dumps(manifest, indent=2).encode())

    # ------------------------------------------------------------------ predicting
    def _load(self):
        if self._models is None:
            self._models = [_float64_copy(self.catalog.load_model(i)) for i in self.member_ids]
        return self._models

    def _check_x(self, x, source: str = "X") -> np.ndarray:
        """Validated float64 inputs in the order of ``feature_names``.

        A DataFrame or a mapping of columns is matched by column name (target columns are
        ignored, any other unknown column is refused); an array is taken by position.
        """
        if hasattr(x, "columns") or isinstance(x, Mapping):
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
        scaling = self.catalog.meta.get("data", {}).get("standardization")
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

    def member_predictions(self, x, *, source: str = "X") -> tuple[np.ndarray, np.ndarray]:
        """Every member's (means, variances), shape (n_members, n, n_targets), original units.

        Parameters
        ----------
        x : array-like of shape (n, n_features), DataFrame or mapping of columns
            Arrays are taken by position; a DataFrame or a mapping by column name (the
            ensemble's ``feature_names``; its ``target_names`` may be present and are ignored).
        source : str
            Names the inputs in error messages (the file they were read from, say).

        Raises
        ------
        DataError
            Missing, unknown or non-numeric columns, NaN/inf values, values beyond float32 (also
            once standardized), or a member predicting a non-finite value; the message names the
            first offending data row (1-based) or the rows and the member.
        """
        import tensorflow as tf

        x = self._check_x(x, source)
        models = self._load()
        if self._predict_fn is None:
            # One graph runs all members on the same batch, so TensorFlow executes them together.
            self._predict_fn = tf.function(lambda batch: tf.stack([m(batch, training=False) for m in models]),
                                           reduce_retracing=True)
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

    def components(self, x, *, source: str = "X") -> tuple[np.ndarray, np.ndarray]:
        """The predictive mixture's component (means, variances), recalibrated when the ensemble is.

        Without calibration these are :meth:`member_predictions`; ``x`` and ``source`` as there.
        """
        return self.recalibrated(*self.member_predictions(x, source=source))

    def recalibrated(self, means, variances) -> tuple[np.ndarray, np.ndarray]:
        """Members' (means, variances) as the ensemble's mixture components: scaled when calibrated."""
        if self.scale is None:
            return means, variances
        return apply_scale(means, variances, self.weights, self.scale)

    def predict(self, x, *, source: str = "X") -> UncertaintyPrediction:
        """Mixture mean and the aleatoric / epistemic / total variances.

        ``mean = sum_i w_i mu_i``, ``aleatoric = sum_i w_i s2_i``,
        ``epistemic = sum_i w_i (mu_i - mean)**2`` (Egele et al. 2022), whose sum is the mixture's
        variance (law of total variance); a recalibrated ensemble multiplies both variance parts
        by the square of its scale. ``x`` and ``source`` are as in :meth:`member_predictions`.
        """
        return UncertaintyPrediction.from_mixture(*self.components(x, source=source), self.weights)

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
        ValueError
            ``level`` is not strictly between 0 and 1.
        """
        if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)) or not 0 < level < 1:
            raise ValueError(f"interval level must be a probability strictly between 0 and 1, got {level!r}")
        return central_interval(*self.components(x, source=source), self.weights, float(level))

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
        return f"Ensemble({str(self.run_dir)!r}, members=[{members}])"


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
    """Load an ensemble from its JSON manifest (written by :meth:`Ensemble.save`).

    Raises
    ------
    ManifestError
        The file is missing, unreadable, not JSON, or not a well-formed manifest (the message
        names the field at fault).
    CatalogError
        The catalog it names cannot be read.
    """
    path = Path(path)
    if path.is_dir():
        raise ManifestError(f"{path}: is a directory, not an ensemble manifest (ensemble.json)")
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
        manifest = json.loads(text)
    except RecursionError:
        raise ManifestError(f"{path}: not an ensemble manifest (JSON nested too deeply)") from None
    except ValueError as exc:
        raise ManifestError(f"{path}: not a JSON ensemble manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"{path}: not an autodeuq ensemble manifest (format {MANIFEST_FORMAT!r} expected)")
    run_dir = manifest.get("run_dir")
    if not isinstance(run_dir, str) or not run_dir or "\0" in run_dir:
        raise ManifestError(f"{path}: 'run_dir' must name the catalog directory, got {run_dir!r}")
    ids, weights = _manifest_members(path, manifest.get("members"))
    selection, calibration = manifest.get("selection"), manifest.get("calibration")
    if calibration is not None and not isinstance(calibration, dict):
        raise ManifestError(f"{path}: 'calibration' must be an object or null, got {_short(calibration)}")
    try:
        return Ensemble((path.parent.resolve() / run_dir).resolve(), ids, weights,
                        selection=selection if isinstance(selection, dict) else None, calibration=calibration)
    except CatalogError:
        raise
    except ValueError as exc:
        raise ManifestError(f"{path}: {exc}") from None


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
