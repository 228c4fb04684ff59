"""Ensemble members run by ONNX Runtime from one ``.onnx`` file: prediction without TensorFlow.

:func:`load_onnx_ensemble` (behind :func:`autodeuq.load_ensemble` for a path ending in ``.onnx``)
reads a file written by :func:`autodeuq.ensemble.onnx_export.save_onnx`: its ``autodeuq``
metadata gives the ensemble (members, weights, names, encoding, calibration, classes) and
:class:`OnnxMembers` runs the graph. The ensemble is the usual
:class:`~autodeuq.ensemble.Ensemble` (or :class:`~autodeuq.ensemble.ClassifierEnsemble`): its
inputs are checked and encoded as for the TensorFlow path (the same errors and warnings), the
graph gives the members' outputs, and the mixture, its recalibration and its decomposition are
computed by the same code. Nothing here imports TensorFlow or Keras.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

MAX_ONNX_BYTES = 1 << 30  #: an ensemble of the search's networks is megabytes
CHUNK_ROWS = 2048  #: rows per run of the graph: its values stay in the CPU caches


def onnxruntime_available() -> bool:
    """Whether ONNX Runtime can be imported here."""
    import importlib.util

    return importlib.util.find_spec("onnxruntime") is not None


def _session(data: bytes, where: str):
    import onnxruntime as ort

    from autodeuq.ensemble.members import ManifestError

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: ONNX Runtime's warnings are for model authors
    try:
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime raises its own exception types
        raise ManifestError(f"{where}: ONNX Runtime cannot load the file: {str(exc).splitlines()[0]}") from None


class OnnxMembers:
    """Ensemble members computed by one ONNX graph (:mod:`autodeuq.ensemble.onnx_export`).

    Parameters
    ----------
    path : Path
        The ``.onnx`` file (named in messages).
    data : bytes
        Its content.
    metadata : dict
        Its ``autodeuq`` metadata, checked.
    """

    run_dir = None
    catalog = None
    refitted: dict = {}

    def __init__(self, path, data: bytes, metadata: dict):
        from autodeuq.ensemble.inputs import checked_preprocessor
        from autodeuq.ensemble.members import ManifestError
        from autodeuq.table.data import DataError
        from autodeuq.table.labels import Labels

        self.path = Path(path)
        self.data = data
        self.feature_names = list(metadata["features"])
        self.target_names = list(metadata["targets"])
        self.standardization = metadata.get("standardization")
        try:
            self.preprocessor = checked_preprocessor(metadata.get("preprocessing"), self.feature_names)
        except DataError as exc:
            raise ManifestError(f"{self.path}: {exc}") from None
        labels = metadata.get("labels")
        self.labels = None if labels is None else Labels.from_dict(labels)
        self._session = None

    def __getstate__(self):
        return {**self.__dict__, "_session": None}

    @property
    def location(self) -> Path:
        return self.path

    @property
    def session(self):
        if self._session is None:
            self._session = _session(self.data, str(self.path))
        return self._session

    def model_bytes(self, entry_id: int) -> bytes:
        from autodeuq.ensemble.members import EnsembleError

        raise EnsembleError(f"{self.path}: an ONNX ensemble holds one graph, not its members' .keras files; export "
                            f"the ensemble from its run directory or self-contained folder instead")

    def load_network(self, entry_id: int, dtype: str = "float32"):
        return self.model_bytes(entry_id)

    def columns_of(self, x, ens, source: str, encoded: bool) -> dict[str, np.ndarray]:
        """The graph's inputs, one array ``[N]`` per column, from ``x`` checked and encoded as
        :meth:`Ensemble.member_predictions <autodeuq.ensemble.Ensemble.member_predictions>`
        checks it (the same errors and warnings)."""
        from autodeuq.ensemble.inputs import as_frame, encode_inputs, warn_out_of_range
        from autodeuq.ensemble.members import EnsembleError

        prep = self.preprocessor
        if prep is not None and encoded:
            raise EnsembleError(f"{self.path}: an ONNX ensemble reads the table's columns, not encoded inputs")
        fast = None if prep is not None else self._plain_numbers(x, ens.feature_names)
        if fast is not None:
            if self.standardization:  # as encode_inputs would
                warn_out_of_range(fast, ens.feature_names, self.standardization, source)
            return {c: np.ascontiguousarray(fast[:, j]) for j, c in enumerate(ens.feature_names)}
        checked = encode_inputs(x, ens.feature_names, target_names=ens.target_names, preprocessor=prep,
                                standardization=self.standardization, source=source, encoded=encoded)
        if prep is None:
            return {c: np.ascontiguousarray(checked[:, j]) for j, c in enumerate(ens.feature_names)}
        return raw_columns(as_frame(x, prep.feature_columns, source), prep)

    def _plain_numbers(self, x, features) -> np.ndarray | None:
        """``x`` as float64 when it is a numeric array or table of exactly the features that
        ``encode_inputs`` would take as it is (finite, within float32, also standardized); None
        for anything else, which ``encode_inputs`` then checks (and refuses with its message).
        A loaded ensemble's one-row prediction was mostly that check's pandas overhead."""
        from autodeuq.table.data import FLOAT32_MAX

        if isinstance(x, np.ndarray) and x.dtype.kind in "fiu":
            arr = x.astype(np.float64, copy=False)
            if arr.ndim == 1 and len(features) == 1:
                arr = arr[:, None]
        elif (hasattr(x, "columns") and hasattr(x, "dtypes") and [str(c) for c in x.columns] == list(features)
              and all(d.kind in "fiu" for d in x.dtypes)):
            arr = x.to_numpy(dtype=np.float64)
        else:
            return None
        if arr.ndim != 2 or arr.shape[1] != len(features) or not len(arr):
            return None
        if not np.isfinite(arr).all() or (np.abs(arr) > FLOAT32_MAX).any():
            return None
        if self.standardization:
            z = (arr - np.asarray(self.standardization["x_mean"])) / np.asarray(self.standardization["x_std"])
            if (np.abs(z) > FLOAT32_MAX).any():
                return None
        return arr

    def member_outputs(self, x, ens, *, source: str = "X", encoded: bool = False) -> np.ndarray:
        """Every member's output on ``x``, as the TensorFlow path gives it: ``[mean, var]``
        ``(M, n, 2T)`` in original units, or a classifier's logits ``(M, n, K)``."""
        columns = self.columns_of(x, ens, source, encoded)
        n = len(next(iter(columns.values())))
        names = ["member_logits"] if self.labels is not None else ["member_mean", "member_var"]
        # In chunks of rows: a layer of 256 units over a million rows would hold a gigabyte per value,
        # and a chunk's values stay in the caches (100,000 rows of the demo: 1.24 s in one run,
        # 0.82 s in chunks of 16384, 0.65 s of 1024).
        parts = [self.session.run(names, {c: v[i:i + CHUNK_ROWS] for c, v in columns.items()})
                 for i in range(0, n, CHUNK_ROWS)]
        return np.concatenate([np.concatenate(outputs, axis=-1) for outputs in parts], axis=1)


def raw_columns(frame, prep) -> dict[str, np.ndarray]:
    """A table's feature columns as the ONNX graph takes them: numbers as float64 (NaN missing),
    text as str (``""`` missing). The table was checked already (``encode_inputs``)."""
    import pandas as pd

    from autodeuq.table.preprocess import _as_labels

    names = [str(c) for c in frame.columns]
    frame = frame.set_axis(names, axis=1)
    out = {}
    for c in prep.columns:
        values = frame[c["name"]]
        if c["kind"] == "numeric":
            out[c["name"]] = np.ascontiguousarray(pd.to_numeric(values.astype(object) if values.dtype == object
                                                                else values, errors="coerce")
                                                  .to_numpy(dtype=np.float64, na_value=np.nan))
        else:
            labels = _as_labels(values)
            labels[np.array([v is None for v in labels], dtype=bool)] = ""
            out[c["name"]] = labels.astype(str)
    return out


def read_metadata(data: bytes, where: str) -> tuple[dict, object]:
    """The checked ``autodeuq`` metadata of an ``.onnx`` file's bytes, and the ONNX Runtime session that read it."""
    from autodeuq.ensemble.members import ManifestError
    from autodeuq.ensemble.onnx_export import METADATA_KEY, ONNX_FORMAT

    session = _session(data, where)
    text = session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
    try:
        metadata = json.loads(text) if text is not None else None
    except ValueError:
        metadata = None
    if not isinstance(metadata, dict) or metadata.get("format") != ONNX_FORMAT:
        raise ManifestError(f"{where}: not an autodeuq ONNX ensemble (no '{METADATA_KEY}' metadata of format "
                            f"{ONNX_FORMAT!r})")
    return metadata, session


def load_onnx_ensemble(path):
    """The ensemble of an ``.onnx`` file written by ``Ensemble.save(path, format="onnx")``.

    Raises
    ------
    ManifestError
        The file is missing, too large, not an ONNX model ONNX Runtime loads, or holds no
        autodeuq metadata (the message names the field at fault).
    """
    from autodeuq.ensemble.manifest_fields import (
        _conformal,
        _manifest_members,
        _manifest_names,
        _selection_and_calibration,
        read_capped,
    )
    from autodeuq.ensemble.members import ManifestError, ensemble_class

    path = Path(path)
    if not onnxruntime_available():
        raise ManifestError(f"{path}: ONNX Runtime is not installed (pip install onnxruntime); an ONNX ensemble "
                            f"runs on it (the ensemble's manifest predicts with TensorFlow)")
    data = read_capped(path, MAX_ONNX_BYTES, "autodeuq ONNX ensemble")
    metadata, session = read_metadata(data, str(path))
    ids, weights = _manifest_members(path, metadata.get("members"))
    _manifest_names(path, metadata, "features")
    _manifest_names(path, metadata, "targets")
    selection, calibration = _selection_and_calibration(path, metadata)
    source = OnnxMembers(path, data, metadata)
    source._session = session
    try:
        return ensemble_class(metadata.get("task", "regression"))(source, ids, weights, selection=selection,
                                                                  calibration=calibration,
                                                                  conformal=_conformal(path, metadata))
    except ValueError as exc:
        raise ManifestError(f"{path}: {exc}") from None


CACHE_DIR = "onnx"  #: the folder, in a run directory or a self-contained export, of cached conversions


def conversion_key(ens) -> str:
    """The SHA-256 of everything an ensemble's ONNX graph is made of: its members' model files,
    weights, names, encoding, calibration and classes (and the graph's format)."""
    import hashlib

    from autodeuq.catalog.artifacts import sha256_hex
    from autodeuq.ensemble.onnx_export import ONNX_FORMAT, OPSET

    labels = getattr(ens, "labels", None)
    description = {
        "format": ONNX_FORMAT, "opset": OPSET,
        "members": [[i, float(w), sha256_hex(ens.source.model_bytes(i))] for i, w in zip(ens.member_ids, ens.weights)],
        "features": ens.feature_names, "targets": ens.target_names, "calibration": ens.calibration,
        "preprocessing": None if ens.preprocessor is None else ens.preprocessor.to_dict(),
        "standardization": ens.source.standardization, "labels": None if labels is None else labels.to_dict(),
        # the scores are in the file's metadata: another set of them is another file
        **({} if getattr(ens, "conformal", None) is None else {"conformal": ens.conformal}),
    }
    return hashlib.sha256(json.dumps(description, sort_keys=True, default=str).encode()).hexdigest()


def cached_onnx_ensemble(ens, convert: bool = True):
    """``ens`` on ONNX Runtime, from its conversion cached beside its catalog; None when there is none
    and ``convert`` is False, or ONNX Runtime is not installed and ``convert`` is False.

    The conversion is ``<location>/onnx/ensemble-<key>.onnx``, ``<location>`` the run directory (or
    the self-contained folder) and ``<key>`` the start of :func:`conversion_key`, so a changed
    ensemble (another selection, a refit, a recalibration) never reads an old one. Making it
    imports TensorFlow once; reading it does not. The members' files are read (not their networks
    built) to compute the key.

    Raises
    ------
    EnsembleError
        ``convert`` without ONNX Runtime installed, or a member that cannot be converted.
    WriteError
        The conversion cannot be written.
    """
    from autodeuq.ensemble.members import EnsembleError

    if not onnxruntime_available():
        if convert:
            raise EnsembleError("ONNX Runtime is not installed (pip install onnxruntime): predict with TensorFlow")
        return None
    if isinstance(ens.source, OnnxMembers):
        return ens
    folder = Path(ens.source.location) / CACHE_DIR
    if not convert and not folder.is_dir():  # never converted: nothing read, the ensemble as loaded
        return None
    path = folder / f"ensemble-{conversion_key(ens)[:24]}.onnx"
    if not path.is_file():
        if not convert:
            return None
        from autodeuq.ensemble.onnx_export import save_onnx

        save_onnx(ens, path)
    return load_onnx_ensemble(path)
