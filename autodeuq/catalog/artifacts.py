"""Safe artifacts: the files of a run directory or an ensemble folder, read and written without
running code from them.

A run directory (and an exported ensemble) is untrusted input, so everything read from one comes
through here:

- ``.keras`` archives are checked before Keras sees them (:func:`checked_keras_config`): only the
  members a saved model has, each under a size cap, and no Lambda layer or serialized bytecode
  (:func:`lambda_layers`); :func:`load_keras_model` then loads the checked bytes with
  ``safe_mode=True``.
- Files are read once, without following a final link, inside their folder, at most a given
  size, and must match their SHA-256 (:func:`read_verified`); :func:`refuse_links` refuses run
  files that are links.
- Arrays are ``.npy`` / ``.npz`` without pickle, their headers checked before anything is
  allocated (:func:`load_npy`, :func:`load_npz`); JSON is written canonical and standard
  (:func:`dumps`) and read with damage reported by column (:func:`decode_json`).

The size caps are :data:`MAX_MODEL_BYTES`, :data:`MAX_MODEL_JSON_BYTES` and :data:`MAX_ARRAY_BYTES`.
"""
from __future__ import annotations

import hashlib
import importlib
import io
import json
import math
import os
import platform
import stat
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from autodeuq.core.errors import AutoDEUQError
from autodeuq.core.fileio import O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK, os_reason

# Limits on what a run directory may make autodeuq read (a crafted file must not exhaust memory).
# Models of the shipped spaces are kilobytes to a few megabytes.
MAX_MODEL_BYTES = 1 << 30  #: a model file, and the sum of its decompressed members
MAX_MODEL_JSON_BYTES = 16 << 20  #: one JSON member of a model archive, decompressed
MAX_ARRAY_BYTES = 1 << 30  #: arrays stored in the index (validation targets, test set, training points)
_KERAS_MEMBERS = ("metadata.json", "config.json", "model.weights.h5")


class CatalogError(AutoDEUQError, RuntimeError):
    """A run directory cannot be used as asked: the message says which entry or file and why."""


def _json_default(obj):
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _finite_or_none(obj):
    """Replace NaN/inf by None, recursively, so the stored JSON is standard JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    return obj


def dumps(obj, **kwargs) -> str:
    """Canonical JSON (sorted keys, numpy scalars converted, NaN/inf as null)."""
    plain = json.loads(json.dumps(obj, default=_json_default))
    return json.dumps(_finite_or_none(plain), sort_keys=True, allow_nan=False, **kwargs)


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data``: 64 lowercase hexadecimal digits (what an index or manifest records)."""
    return hashlib.sha256(data).hexdigest()


def npy_bytes(array: np.ndarray) -> bytes:
    """``array`` as float64 ``.npy`` bytes, without pickle (:func:`load_npy` reads them back)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array, dtype=np.float64), allow_pickle=False)
    return buf.getvalue()


def npz_bytes(**arrays: np.ndarray) -> bytes:
    """A predictions file: named arrays (``mean`` and ``var``, or a classifier's ``proba``) in one
    ``.npz`` archive (:func:`load_npz` reads it)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def load_npy(data: bytes, ndim: int = 2) -> np.ndarray:
    """A float array from ``.npy`` bytes, checked before anything is allocated.

    Raises ValueError when the header is not that of a ``ndim``-D float array whose data is
    exactly the rest of ``data`` (a header declaring a huge shape is refused, not allocated).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"not .npy bytes but {type(data).__name__}")
    buf = io.BytesIO(data)
    version = np.lib.format.read_magic(buf)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(buf)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(buf)
    else:
        raise ValueError(f"unsupported .npy version {version}")
    if dtype.kind != "f" or dtype.hasobject or len(shape) != ndim:
        raise ValueError(f"expected a {ndim}-D float array, found dtype {dtype} and shape {shape}")
    size = math.prod(shape) * dtype.itemsize
    if size != len(data) - buf.tell():
        raise ValueError(f"shape {shape} needs {size} bytes of data, the file has {len(data) - buf.tell()}")
    return np.asarray(np.lib.format.read_array(io.BytesIO(data), allow_pickle=False), dtype=np.float64)


def load_npz(data: bytes, names: Iterable[str], max_bytes: int) -> dict[str, np.ndarray]:
    """Named float arrays of an ``.npz`` archive, each member's declared size checked first."""
    out = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in names:
            info = archive.getinfo(f"{name}.npy")
            if info.file_size > max_bytes:
                raise ValueError(f"{name} would decompress to {info.file_size} bytes (at most {max_bytes} expected)")
            out[name] = load_npy(archive.read(info))
    return out


def package_versions() -> dict[str, str]:
    """Versions from package metadata: nothing is imported, so this costs nothing."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    candidates = {
        "autodeuq": ("autodeuq",), "numpy": ("numpy",), "pandas": ("pandas",),
        "tensorflow": ("tensorflow", "tensorflow-cpu"), "keras": ("keras",), "ray": ("ray",),
        "ConfigSpace": ("ConfigSpace",),
    }
    for name, dists in candidates.items():
        for dist in dists:
            try:
                out[name] = version(dist)
                break
            except PackageNotFoundError:
                continue
    return out


def lambda_layers(config: Any) -> list[str]:
    """Names of what, in a Keras model config, holds Python code: a layer or object whose class
    names a lambda in any case (``Lambda``, Keras' ``__lambda__``), or a function serialized as its
    bytecode (Keras writes a lambda given as an activation as ``{"value": [code, defaults,
    closure]}``)."""
    found = []

    def walk(node, key=""):
        if isinstance(node, dict):
            cls = node.get("class_name")
            if isinstance(cls, str) and "lambda" in cls.lower():
                inner = node.get("config")
                found.append(str(inner.get("name", cls)) if isinstance(inner, dict) else cls)
            elif set(node) == {"value"} and isinstance(node["value"], list) and node["value"] \
                    and isinstance(node["value"][0], str):
                found.append(f"{key or 'a value'} (serialized bytecode)")
            for name, value in node.items():
                walk(value, str(name))
        elif isinstance(node, list):
            for value in node:
                walk(value, key)

    walk(config)
    return found


def _keras_config(data: bytes, where: str) -> Any:
    """The config of a ``.keras`` archive, after checking what it would decompress to."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            names = [m.filename for m in members]
            unexpected = sorted(set(names) - set(_KERAS_MEMBERS))
            if unexpected or len(set(names)) != len(names):
                raise CatalogError(f"{where}: refusing to load it: it holds member(s) {unexpected or names} that a "
                                   f"model saved by autodeuq does not have")
            for member in members:
                cap = MAX_MODEL_JSON_BYTES if member.filename.endswith(".json") else MAX_MODEL_BYTES
                if member.file_size > cap:
                    raise CatalogError(f"{where}: refusing to load it: {member.filename} would decompress to "
                                       f"{member.file_size} bytes, more than the {cap} allowed")
            total = sum(m.file_size for m in members)
            if total > MAX_MODEL_BYTES:
                raise CatalogError(f"{where}: refusing to load it: its members would decompress to {total} bytes, "
                                   f"more than the {MAX_MODEL_BYTES} allowed")
            # zipfile stops at the declared size, so the caps above bound what this reads.
            return json.loads(archive.read("config.json"))
    except CatalogError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, KeyError, ValueError, RecursionError, EOFError,
            NotImplementedError, RuntimeError) as exc:
        raise CatalogError(f"{where} is not a valid .keras archive: {exc}") from None


def checked_keras_config(data: bytes, where: str) -> Any:
    """The config of a ``.keras`` archive, refused unless it is safe to hand to Keras.

    Refuses (:class:`CatalogError`, the message starting with ``where``) an archive that is not
    a zip, holds members a model saved by autodeuq does not have, would decompress beyond
    :data:`MAX_MODEL_BYTES`, or holds a Lambda layer (which would run code stored in the file).
    Nothing is decompressed before the sizes are checked, and no Keras code runs.
    """
    config = _keras_config(data, where)
    try:
        lambdas = lambda_layers(config)
    except RecursionError:
        raise CatalogError(f"{where}: refusing to load it: its config is nested too deeply") from None
    if lambdas:
        raise CatalogError(f"{where}: refusing to load it: it contains Lambda layer(s) or serialized functions "
                           f"{lambdas}, which would run code stored in the file")
    return config


def load_keras_model(data: bytes, where: str):
    """A Keras model (not compiled) from the bytes of a ``.keras`` archive, safely.

    The bytes pass :func:`checked_keras_config` first; Keras then loads a private copy of those
    very bytes with ``safe_mode=True`` as a second guard. Every model autodeuq loads through
    Keras, from a catalog or from an exported ensemble, comes through here (to predict,
    :func:`load_network` reads autodeuq's own files without Keras).

    Parameters
    ----------
    data : bytes
        The archive, already read (and checksum-verified) by the caller.
    where : str
        Names the file in error messages.

    Raises
    ------
    CatalogError
        The archive is refused or Keras cannot load it; the message starts with ``where``.
    """
    checked_keras_config(data, where)
    return _keras_load(data, where)


def _keras_load(data: bytes, where: str):
    """Keras' ``load_model`` (safe mode, not compiled) of bytes that passed :func:`checked_keras_config`."""
    import keras

    _import_custom_layers()
    # Keras reads the very bytes that were checked (a private copy), not the file again.
    with tempfile.TemporaryDirectory(prefix="autodeuq-model-") as folder:
        copy = Path(folder) / "model.keras"
        copy.write_bytes(data)
        try:
            return keras.models.load_model(copy, safe_mode=True, compile=False)
        except Exception as exc:  # every loading failure names the file
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if "safe_mode" in str(exc):
                raise CatalogError(f"{where}: refusing to load it: it holds code (e.g. a Lambda layer) that "
                                   f"safe_mode will not run: {message}") from None
            raise CatalogError(f"{where}: cannot load it: {message}") from None


def load_network(data: bytes, where: str, dtype: str = "float32"):
    """A network to predict with, from the bytes of a ``.keras`` archive, safely.

    The bytes pass :func:`checked_keras_config` first. A file that is exactly what autodeuq
    writes for a network's plan is then computed from that plan
    (:class:`autodeuq.nn.keras_file.SavedNetwork`, no Keras model built: a fraction of the cost,
    the same numbers); any other file is loaded by :func:`load_keras_model`. Either is called as
    a Keras model is, ``network(x, training=False)``, and has an ``output_shape``.

    Parameters
    ----------
    data : bytes
        The archive, already read (and checksum-verified) by the caller.
    where : str
        Names the file in error messages.
    dtype : {"float32", "float64"}
        What the network computes in: float32, as saved, or float64 (the weights converted).

    Raises
    ------
    CatalogError
        As :func:`load_keras_model`.
    """
    checked_keras_config(data, where)
    from autodeuq.nn.keras_file import read_network

    network = read_network(data, dtype)
    if network is not None:
        return network
    model = _keras_load(data, where)
    return model if dtype == "float32" else _retyped(model, dtype)


def _retyped(model, dtype: str):
    """The same Keras network (same weights) computing in ``dtype``: every layer's dtype set to it."""
    def retyped(config):
        if isinstance(config, dict):
            return {k: (dtype if k == "dtype" else retyped(v)) for k, v in config.items()}
        if isinstance(config, list):
            return [retyped(v) for v in config]
        return config

    copy = model.__class__.from_config(retyped(model.get_config()))
    copy.set_weights([np.asarray(w, dtype=dtype) for w in model.get_weights()])
    return copy


def read_verified(path: Path, root: Path, sha256: str, limit: int, where: str, root_name: str) -> bytes:
    """The bytes of ``path``, refused unless it is a regular file inside ``root``, at most
    ``limit`` bytes, whose SHA-256 is ``sha256``.

    Messages start with ``where`` (which names the file); ``root_name`` says what ``root`` is
    ("the run directory", say). The file is opened without following a final link and read
    once: the bytes returned are the bytes checked.
    """
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        raise CatalogError(f"{where} is missing") from None
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        raise CatalogError(f"{where}: cannot read it: {exc}") from None
    if not real.is_relative_to(root.resolve()):
        raise CatalogError(f"{where}: resolves to {real}, outside {root_name}; refusing to read it")
    try:
        fd = os.open(real, os.O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise CatalogError(f"{where}: not a regular file")
            data = f.read(limit + 1) if info.st_size <= limit else b""
    except FileNotFoundError:
        raise CatalogError(f"{where} is missing") from None
    except OSError as exc:
        raise CatalogError(f"{where}: cannot read it: {os_reason(exc)}") from None
    if info.st_size > limit or len(data) > limit:
        raise CatalogError(f"{where}: is larger than the {limit} bytes allowed; refusing to read it")
    if sha256_hex(data) != sha256:
        raise CatalogError(f"{where} is corrupt (checksum mismatch)")
    return data


def _import_custom_layers() -> None:
    """Register autodeuq's serializable layers with Keras before a model is deserialized."""
    try:
        importlib.import_module("autodeuq.nn.model")
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("autodeuq.nn.model"):
            raise


def refuse_links(run_dir: Path, names: Iterable[str]) -> None:
    """Refuse files and folders of a run that are symbolic links, and files with more than one hard
    link: writing there (SQLite writes its -wal and -shm files, even for readers) would write
    wherever the link points, or into every other name of the same file."""
    for name in names:
        path = run_dir / name
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise CatalogError(f"{path}: cannot inspect it: {os_reason(exc)}") from None
        if stat.S_ISLNK(info.st_mode):
            raise CatalogError(f"{path}: is a symbolic link; the files and folders of a run directory may not be "
                               f"links (remove it)")
        refuse_hard_links(path, info)


def refuse_hard_links(path: Path, info: os.stat_result) -> None:
    """Refuse a regular file of a run that has other names (hard links): it is written in place."""
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        raise CatalogError(f"{path}: has {info.st_nlink} hard links; a file of a run directory is written in place "
                           f"and may not be linked elsewhere (replace it with a copy of its own)")


def decode_json(text, where: str, column: str):
    """A JSON column's value; CatalogError naming the column when it is damaged."""
    try:
        if not isinstance(text, str):
            raise ValueError(f"{type(text).__name__} instead of text")
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CatalogError(f"{where}: damaged catalog: {column} is not valid JSON ({exc})") from None
