"""Manifest formats: writing an ensemble as JSON and reading it back, checked.

:func:`save_ensemble` (behind :meth:`Ensemble.save <autodeuq.ensemble.Ensemble.save>`) writes a
manifest naming the catalog, or a self-contained folder; :func:`load_ensemble` reads any of the
three formats, every field and member file checked.

A manifest that names its catalog is format "autodeuq-ensemble/1", or "autodeuq-ensemble/3" when
members were refitted: the refitted networks are not in the catalog, so they are written beside
the manifest, ``<stem>_refit/<id>.keras`` (``ensemble_refit/`` for ``ensemble.json``), each with
its SHA-256 in the manifest; the other members are read from the catalog. A self-contained folder::

    model_dir/
        ensemble.json          format "autodeuq-ensemble/2": members (id, weight, file, SHA-256,
                               size), feature and target names, input standardization, the
                               table encoding (categories, fill values; or null), calibration,
                               conformal scores, selection, package versions
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
from pathlib import Path
from typing import TYPE_CHECKING

from autodeuq.catalog import (
    MAX_MODEL_BYTES,
    MODELS_DIR,
    CatalogError,
    checked_keras_config,
    read_verified,
)
from autodeuq.catalog.artifacts import package_versions, sha256_hex
from autodeuq.core.fileio import WriteError, atomic_write, os_reason, refuse_linked_folders
from autodeuq.ensemble.inputs import checked_preprocessor
from autodeuq.ensemble.manifest_fields import (
    _conformal,
    _manifest_members,
    _manifest_names,
    _selection_and_calibration,
    _short,
    read_capped,
)
from autodeuq.ensemble.members import (
    MEMBERS_DIR,
    CatalogMembers,
    EnsembleError,
    ExportedMembers,
    ManifestError,
    ensemble_class,
)
from autodeuq.table.data import DataError

if TYPE_CHECKING:
    from autodeuq.ensemble.predictive import Ensemble

MANIFEST_FORMAT = "autodeuq-ensemble/1"  #: a manifest naming its catalog (``run_dir``)
SELF_CONTAINED_FORMAT = "autodeuq-ensemble/2"  #: a manifest next to its members' model files
REFIT_FORMAT = "autodeuq-ensemble/3"  #: a manifest naming its catalog, with refitted members' files beside it
MANIFEST_NAME = "ensemble.json"
MAX_MANIFEST_BYTES = 16 << 20  # a manifest lists member ids and weights: kilobytes
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_MEMBER_FILE = re.compile(r"[0-9]+\.keras")
# Recorded in an exported manifest: a .keras file loads in the Keras it was saved with (or a later one).
_EXPORT_VERSIONS = ("autodeuq", "keras", "tensorflow", "numpy", "python")


def save_ensemble(ens, path, self_contained: bool = False) -> Path:
    """Write ``ens`` as JSON (no pickle): what :meth:`Ensemble.save
    <autodeuq.ensemble.Ensemble.save>` does, whose documentation gives the parameters, the
    files written and the errors.

    Parameters
    ----------
    ens : Ensemble
    path : path
        The manifest file, or with ``self_contained`` the folder.
    self_contained : bool

    Returns
    -------
    Path
        The manifest written.
    """
    path = Path(path)
    if self_contained:
        return _export(ens, path)
    if ens.run_dir is None:
        raise EnsembleError(f"{path}: this ensemble was read from a self-contained folder and has no catalog to "
                         f"name: save it with self_contained=True")
    refitted = {i: ens.source.refitted[i] for i in ens.member_ids if i in ens.source.refitted}
    refit_dir = path.parent / refit_folder_name(path)
    members = []
    for i, w in zip(ens.member_ids, ens.weights):
        member = {"id": i, "weight": float(w), "model": catalog_model_name(i)}  # the catalog's, before any refit
        if i in refitted:
            member.update({"refit_model": f"{refit_dir.name}/{i}.keras", "sha256": sha256_hex(refitted[i]),
                           "bytes": len(refitted[i])})
        members.append(member)
    manifest = {
        "format": REFIT_FORMAT if refitted else MANIFEST_FORMAT,
        # relative to the folder, not to a link's target: a link at ``path`` is replaced
        "run_dir": os.path.relpath(ens.run_dir.resolve(), path.parent.resolve()),
        "members": members,
        "selection": ens.selection,
        "calibration": ens.calibration,
        **({} if ens.conformal is None else {"conformal": ens.conformal}),
        "features": ens.feature_names,
        "targets": ens.target_names,
    }
    # Inside the run directory, a linked folder on the way is refused like a linked refit folder.
    refuse_linked_folders(ens.run_dir, refit_dir if refitted else path.parent)
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


ENGINES = ("auto", "tensorflow", "onnx")


def load_ensemble(path, engine: str = "auto") -> Ensemble:
    """Load an ensemble written by :meth:`Ensemble.save`: a manifest, or a self-contained folder.

    Parameters
    ----------
    path : path
        An ``ensemble.json`` manifest, a folder holding one (a self-contained export), or an
        ONNX file (a name ending in ``.onnx``, written by ``Ensemble.save(path, format="onnx")``),
        whose ensemble predicts with ONNX Runtime, without TensorFlow.
    engine : {"auto", "tensorflow", "onnx"}
        What a manifest's ensemble predicts with. ``"onnx"``: ONNX Runtime, on the ensemble's
        ONNX conversion cached beside its catalog (``onnx/`` in the run directory, or in the
        self-contained folder), made the first time (that once, with TensorFlow;
        :func:`autodeuq.ensemble.onnx_members.cached_onnx_ensemble`). ``"auto"``: ONNX Runtime
        when that conversion is there already and ONNX Runtime is installed, TensorFlow otherwise.
        ``"tensorflow"``: TensorFlow, the reference. An ``.onnx`` file always runs on ONNX Runtime.

    Raises
    ------
    ManifestError
        The file is missing, unreadable, not JSON, or not a well-formed manifest (the message
        names the field at fault); for a self-contained folder also a member file that is
        missing, outside the folder, not matching its SHA-256, or not a safe ``.keras`` archive.
    CatalogError
        The catalog a manifest names cannot be read.
    """
    from autodeuq.core.errors import ParameterError

    if engine not in ENGINES:
        raise ParameterError("engine", f"must be one of {list(ENGINES)}", engine)
    path = Path(path)
    if path.suffix == ".onnx" and not path.is_dir():
        if engine == "tensorflow":
            raise ParameterError("engine", "cannot be 'tensorflow' for an .onnx file (it runs on ONNX Runtime)", engine)
        from autodeuq.ensemble.onnx_members import load_onnx_ensemble

        return load_onnx_ensemble(path)
    ens = _load_manifest(path)
    if engine == "tensorflow":
        return ens
    from autodeuq.ensemble.onnx_members import cached_onnx_ensemble

    return cached_onnx_ensemble(ens, convert=engine == "onnx") or ens


def _load_manifest(path: Path) -> Ensemble:
    """:func:`load_ensemble` of a manifest or a self-contained folder."""
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
        return ensemble_class(source.catalog.task)(source, ids, weights, selection=selection,
                                                   calibration=calibration, conformal=_conformal(path, manifest))
    except CatalogError:
        raise
    except ValueError as exc:
        raise ManifestError(f"{path}: {exc}") from None


def catalog_model_name(entry_id: int) -> str:
    """The 'model' a catalog-naming manifest lists for a member: its file in the run directory."""
    return f"{MODELS_DIR}/{int(entry_id)}.keras"


def _read_manifest(path: Path):
    """The parsed JSON of a manifest file, read with a size cap, or ManifestError saying why not."""
    text = read_capped(path, MAX_MANIFEST_BYTES, "ensemble manifest")
    try:
        return json.loads(text)
    except RecursionError:
        raise ManifestError(f"{path}: not an ensemble manifest (JSON nested too deeply)") from None
    except ValueError as exc:
        raise ManifestError(f"{path}: not a JSON ensemble manifest ({exc})") from None


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
    models, configs = {}, {}
    for k, (entry_id, member) in enumerate(zip(ids, manifest["members"])):
        name = f"{MEMBERS_DIR}/{entry_id}.keras"
        if member.get("model") != name:
            raise ManifestError(f"{path}: members[{k}]: 'model' must be {name!r}, got {_short(member.get('model'))}")
        models[entry_id], configs[entry_id] = _member_file(path, k, member, name, "model file", "the ensemble folder")
    selection, calibration = _selection_and_calibration(path, manifest)
    labels = _manifest_labels(path, manifest.get("labels"), targets)
    if labels is None:
        _check_target_count(path, configs, targets)
    source = ExportedMembers(folder, models, features, targets, standardization, preprocessor, labels)
    try:
        return ensemble_class("regression" if labels is None else "classification")(
            source, ids, weights, selection=selection, calibration=calibration, conformal=_conformal(path, manifest))
    except ValueError as exc:
        raise ManifestError(f"{path}: {exc}") from None


def _check_target_count(path: Path, configs: dict[int, dict], targets: list[str]) -> None:
    """Refuse a regression manifest whose ``targets`` do not match its members' Gaussian heads
    (``configs``: each member's checked Keras config; an edited manifest): found here, before any
    network is built, not after the prediction."""
    for entry_id, config in configs.items():
        heads = [layer.get("config", {}).get("n_targets") for layer in _layers(config)
                 if layer.get("class_name") == "GaussianHead"]
        if heads and heads[0] != len(targets):
            raise ManifestError(f"{path}: 'targets' names {len(targets)} target(s) {targets}, but member {entry_id} "
                                f"predicts {heads[0]}: the manifest does not match its members")


def _layers(config):
    """Every layer record (a dict with ``class_name`` and ``config``) in a Keras config, depth first."""
    if isinstance(config, dict):
        if "class_name" in config and isinstance(config.get("config"), dict):
            yield config
        for value in config.values():
            yield from _layers(value)
    elif isinstance(config, list):
        for value in config:
            yield from _layers(value)


def _manifest_labels(path: Path, recorded, targets: list[str]):
    """A self-contained classifier's classes (``labels``: ``{"classes": [...], "target": name}``), or None."""
    from autodeuq.table.labels import Labels

    if recorded is None:
        return None
    classes = recorded.get("classes") if isinstance(recorded, dict) else None
    if (not isinstance(classes, list) or len(classes) < 2 or len(classes) > 100_000
            or not all(isinstance(c, (str, int, float, bool)) for c in classes) or len(set(classes)) != len(classes)
            or recorded.get("target") not in targets):
        raise ManifestError(f"{path}: 'labels' must hold 'classes' (at least two distinct labels) and 'target' (one "
                            f"of {targets}), got {_short(recorded)}")
    return Labels(classes, recorded["target"])


def _member_file(path: Path, k: int, member: dict, name: str, what: str, held_in: str) -> tuple[bytes, dict]:
    """The checked ``.keras`` bytes of the file ``name`` beside the manifest ``path`` that its
    ``members[k]`` lists with its SHA-256 and size, and their Keras config; read at most the
    recorded size, so a grown file is refused before it is read."""
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
        config = checked_keras_config(data, where)
    except CatalogError as exc:
        raise ManifestError(str(exc)) from None
    return data, config


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
        refitted[entry_id] = _member_file(path, k, member, name, "refitted model file", "the manifest's folder")[0]
    if not refitted:
        raise ManifestError(f"{path}: a {REFIT_FORMAT!r} manifest must list at least one member's 'refit_model'")
    return refitted


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
    if "x_min" in scaling or "x_max" in scaling:  # the training range, recorded since after 0.3.0
        low, high = scaling.get("x_min"), scaling.get("x_max")
        if not all(isinstance(v, list) and len(v) == n_features and all(
                isinstance(e, (int, float)) and not isinstance(e, bool) and math.isfinite(e) for e in v)
                for v in (low, high)) or any(a > b for a, b in zip(low, high)):
            raise ManifestError(f"{path}: 'standardization' must hold 'x_min' and 'x_max' together, one finite number "
                                f"per feature ({n_features}) each, x_min <= x_max; got {_short(scaling)}")
    return scaling


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
        **({} if ens.conformal is None else {"conformal": ens.conformal}),
        "features": ens.feature_names,
        "targets": ens.target_names,
        "standardization": ens.source.standardization,
        "preprocessing": None if ens.preprocessor is None else ens.preprocessor.to_dict(),
        **({} if ens.source.labels is None else {"labels": ens.source.labels.to_dict()}),
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
