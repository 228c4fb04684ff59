"""The catalog: the durable, resumable store of every network trained by a search.

One run directory per search::

    run_dir/
        catalog.sqlite       index of evaluations + run metadata (the source of truth)
        catalog.lock         held (flock) by the one process writing the run
        models/<id>.keras    trained network (weights at the best validation loss)
        predictions/<id>.npz validation predictions: ``mean``, ``var`` (float64, original units)
        meta.json            search space, search options, data description, seed, versions
        valid_targets.npy    validation targets (original units)
        results.csv          one row per evaluation, the columns of :meth:`Catalog.to_dataframe`

Only the search driver writes, through the :class:`CatalogWriter` returned by
:meth:`Catalog.create_or_resume`. Anyone may read with :class:`Catalog`, which opens the index
read-only and runs no code from the directory: SQLite, JSON and NumPy (``allow_pickle=False``)
only, and Keras models load with ``safe_mode=True`` after a check that refuses Lambda layers.

Crash safety (SIGKILL or power loss at any instant):

- ``catalog.sqlite`` is the single commit point. An entry is *done* only once its row says so,
  and that row is committed only after its model and predictions files are complete on disk
  (written to a temporary file in the same folder, fsynced, renamed over the final name, folder
  fsynced). So a done row always has both files; a crash before the commit leaves the row
  *running* and it is re-trained on resume, keeping its id (:meth:`CatalogWriter.pending`).
- The run metadata is committed in the same transaction that creates the tables, so a catalog
  is either fully created or not at all.
- ``meta.json``, ``valid_targets.npy`` and ``results.csv`` are exports of the index, replaced
  atomically and rewritten whenever a writer opens the run, so they cannot be half-written and
  catch up after a crash.
- Leftover temporary files (dot-names ending in ``.tmp``) are never read and are removed when a
  writer reopens the run.
- The index keeps each file's SHA-256, so a file damaged or replaced later is reported as
  corrupt, naming its entry, instead of being used.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import math
import os
import platform
import socket
import sqlite3
import threading
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from .result import DONE, FAILED, TrainResult
from .space import SearchSpace, load_space

RUNNING = "running"
STATUSES = (RUNNING, DONE, FAILED)

FORMAT = "autodeuq-catalog"
FORMAT_VERSION = 1

DB_NAME = "catalog.sqlite"
LOCK_NAME = "catalog.lock"
META_NAME = "meta.json"
TARGETS_NAME = "valid_targets.npy"
CSV_NAME = "results.csv"
MODELS_DIR = "models"
PREDICTIONS_DIR = "predictions"
TEMP_SUFFIX = ".tmp"

# Columns of to_dataframe() / results.csv; the training hyperparameters follow "arch".
LEADING_COLUMNS = ("id", "status", "objective", "reason", "arch")
TRAILING_COLUMNS = (
    "epochs", "best_epoch", "wall_time", "n_params", "worker", "submit_time", "start_time", "end_time",
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS run (
    key   TEXT PRIMARY KEY,
    value NOT NULL
);
CREATE TABLE IF NOT EXISTS evaluations (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,  -- AUTOINCREMENT: an id is never reused
    status             TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed')),
    config_json        TEXT NOT NULL,
    arch_json          TEXT NOT NULL,
    hp_json            TEXT NOT NULL,
    objective          REAL,
    reason             TEXT,
    epochs             INTEGER,
    best_epoch         INTEGER,
    wall_time          REAL,
    n_params           INTEGER,
    worker             TEXT,
    submit_time        REAL NOT NULL,
    start_time         REAL,
    end_time           REAL,
    record_time        REAL,
    finish_order       INTEGER UNIQUE,
    data_fingerprint   TEXT NOT NULL,
    model_sha256       TEXT,
    predictions_sha256 TEXT,
    history_json       TEXT,
    extra_json         TEXT
);
CREATE INDEX IF NOT EXISTS evaluations_status ON evaluations (status);
CREATE TABLE IF NOT EXISTS sessions (
    n             INTEGER PRIMARY KEY AUTOINCREMENT,
    start_time    REAL NOT NULL,
    host          TEXT,
    pid           INTEGER,
    seed          INTEGER,
    search_json   TEXT,
    versions_json TEXT
);
"""


class CatalogError(RuntimeError):
    """A run directory cannot be used as asked: the message says which entry or file and why."""


# --------------------------------------------------------------------------- small helpers
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


def _dumps(obj, **kwargs) -> str:
    """Canonical JSON (sorted keys, numpy scalars converted, NaN/inf as null)."""
    plain = json.loads(json.dumps(obj, default=_json_default))
    return json.dumps(_finite_or_none(plain), sort_keys=True, allow_nan=False, **kwargs)


def _number(value, kind):
    """``kind(value)``, or None for a missing or non-finite value (a failure may lack them)."""
    try:
        value = kind(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}{TEMP_SUFFIX}")


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX; elsewhere the OS gives no handle to sync)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(path: Path, data: bytes) -> Path:
    """Write ``data`` to a temporary file next to ``path`` and fsync it."""
    tmp = _temp_path(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def _publish(tmp: Path, path: Path) -> None:
    """Atomically give the complete temporary file its final name, durably."""
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _atomic_write(path: Path, data: bytes) -> None:
    _publish(_write_temp(path, data), path)


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array, dtype=np.float64), allow_pickle=False)
    return buf.getvalue()


def _npz_bytes(mean: np.ndarray, var: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, mean=mean, var=var)
    return buf.getvalue()


def _package_versions() -> dict[str, str]:
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


def _spec_differences(old, new, path="") -> list[str]:
    """Human-readable differences between two JSON-like specs (catalog vs now)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in new:
                out.append(f"{where}: {old[key]!r} in the catalog, absent now")
            elif key not in old:
                out.append(f"{where}: absent in the catalog, {new[key]!r} now")
            else:
                out.extend(_spec_differences(old[key], new[key], where))
        return out
    if old != new:
        return [f"{path or 'space'}: {old!r} in the catalog, {new!r} now"]
    return []


def _lambda_layers(config: Any) -> list[str]:
    """Names of the layers of a Keras model config whose class is a Lambda (runs arbitrary code)."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            cls = node.get("class_name")
            if isinstance(cls, str) and "Lambda" in cls:
                inner = node.get("config")
                found.append(str(inner.get("name", cls)) if isinstance(inner, dict) else cls)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    return found


def _import_custom_layers() -> None:
    """Register autodeuq's serializable layers with Keras before a model is deserialized."""
    try:
        importlib.import_module("autodeuq.model")
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("autodeuq.model"):
            raise


def _connect_readonly(db: Path) -> sqlite3.Connection:
    uri = db.resolve().as_uri()
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False)
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return conn
    except sqlite3.OperationalError:
        # A WAL database in a folder we may not write (no -shm can be made): only a frozen
        # copy can be read, and immutable=1 is how SQLite is told so.
        conn = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return conn


def _read_run_info(conn: sqlite3.Connection) -> dict[str, Any] | None:
    """The committed run metadata, or None when the catalog's creation never committed."""
    try:
        rows = conn.execute("SELECT key, value FROM run").fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    info = dict(rows)
    return info if "meta_json" in info else None


# --------------------------------------------------------------------------- predictions
class ValidationPredictions(tuple):
    """Cached validation predictions of catalog entries, unpackable as ``(ids, means, variances)``.

    Attributes
    ----------
    ids : list of int
        The entries loaded, in the order of the arrays.
    means, variances : ndarray of shape (n_models, n_valid, n_targets)
        Original units; row ``k`` belongs to entry ``ids[k]``.
    skipped : dict of int to str
        Entries asked for but not loaded, with the reason.
    """

    def __new__(cls, ids, means, variances, skipped):
        ids = list(ids)
        self = super().__new__(cls, (ids, means, variances))
        self.ids, self.means, self.variances, self.skipped = ids, means, variances, dict(skipped)
        return self

    def __repr__(self):
        return (f"ValidationPredictions(n_models={len(self.ids)}, shape={self.means.shape}, "
                f"skipped={sorted(self.skipped)})")


# --------------------------------------------------------------------------- read side
class Catalog:
    """Read-only view of a run directory.

    Parameters
    ----------
    run_dir : str or Path
        A folder written by :meth:`Catalog.create_or_resume`.

    Raises
    ------
    CatalogError
        When the folder holds no (complete) catalog.

    Examples
    --------
    >>> cat = Catalog("runs/toy")
    >>> cat.to_dataframe().sort_values("objective").head()
    >>> ids, means, variances = cat.validation_predictions()   # all done entries
    >>> best_id, best_objective = cat.best()
    >>> model = cat.load_model(best_id)
    """

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        db = self.run_dir / DB_NAME
        if not self.run_dir.is_dir():
            raise CatalogError(f"{self.run_dir}: no such run directory, so no catalog to read")
        if not db.is_file():
            raise CatalogError(f"{self.run_dir}: not an autodeuq run directory (no {DB_NAME})")
        conn = None
        try:
            conn = _connect_readonly(db)
            info = _read_run_info(conn)
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            raise CatalogError(f"{db}: cannot read the catalog: {exc}") from None
        if info is None:
            conn.close()
            raise CatalogError(f"{db}: incomplete catalog (its creation did not finish); nothing was recorded in it")
        self._setup(conn, info)

    def _setup(self, conn: sqlite3.Connection, info: dict[str, Any]) -> None:
        if info.get("format") != FORMAT or int(info.get("format_version", 0)) > FORMAT_VERSION:
            conn.close()
            raise CatalogError(
                f"{self.run_dir}: catalog format {info.get('format')!r} version {info.get('format_version')} "
                f"is not one this autodeuq reads ({FORMAT!r} <= {FORMAT_VERSION})"
            )
        self._conn = conn
        self._conn.row_factory = sqlite3.Row
        self._lock = threading.RLock()
        self.fingerprint = str(info["fingerprint"])
        self._meta = json.loads(info["meta_json"])
        self._valid_targets = np.load(io.BytesIO(info["valid_targets"]), allow_pickle=False)
        self._space = None

    # ----------------------------------------------------------------- lifecycle
    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"{type(self).__name__}({str(self.run_dir)!r}, done={self.n_done}, finished={self.n_finished})"

    def __reduce__(self):
        # A reader is its run directory: pickling it (inside a fitted estimator, say) stores the
        # path and unpickling reopens it read-only.
        return (Catalog, (str(self.run_dir),))

    def _query(self, sql: str, params: Iterable = ()) -> list[sqlite3.Row]:
        with self._lock:
            if self._conn is None:
                raise CatalogError(f"{self.run_dir}: catalog is closed")
            return self._conn.execute(sql, tuple(params)).fetchall()

    # ----------------------------------------------------------------- run metadata
    @property
    def meta(self) -> dict[str, Any]:
        """Search space, search options, data description, seed, versions, and the sessions."""
        meta = json.loads(json.dumps(self._meta))
        meta["sessions"] = [
            {"start_time": r["start_time"], "host": r["host"], "pid": r["pid"], "seed": r["seed"],
             "search": json.loads(r["search_json"] or "null"), "versions": json.loads(r["versions_json"] or "null")}
            for r in self._query("SELECT * FROM sessions ORDER BY n")
        ]
        return meta

    @property
    def space(self) -> SearchSpace:
        if self._space is None:
            self._space = SearchSpace(self._meta["space"], source=f"{self.run_dir / META_NAME} (space)")
        return self._space

    def validation_targets(self) -> np.ndarray:
        """The validation targets, shape (n_valid, n_targets), original units."""
        return self._valid_targets.copy()

    # ----------------------------------------------------------------- entries
    @property
    def n_done(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM evaluations WHERE status = ?", (DONE,))[0][0])

    @property
    def n_finished(self) -> int:
        """Evaluations with a result, successful or failed."""
        return int(self._query("SELECT COUNT(*) FROM evaluations WHERE status IN (?, ?)", (DONE, FAILED))[0][0])

    def ids(self, status: str | None = DONE) -> list[int]:
        """Ids of the entries with ``status`` (``None``: all), in increasing order."""
        if status is None:
            rows = self._query("SELECT id FROM evaluations ORDER BY id")
        elif status in STATUSES:
            rows = self._query("SELECT id FROM evaluations WHERE status = ? ORDER BY id", (status,))
        else:
            raise ValueError(f"status must be one of {STATUSES} or None, got {status!r}")
        return [int(r[0]) for r in rows]

    def _row(self, entry_id: int) -> sqlite3.Row:
        rows = self._query("SELECT * FROM evaluations WHERE id = ?", (int(entry_id),))
        if not rows:
            raise CatalogError(f"{self.run_dir}: no entry {entry_id}")
        return rows[0]

    @staticmethod
    def _entry_dict(row: sqlite3.Row) -> dict[str, Any]:
        out = {k: row[k] for k in ("id", "status", "objective", "reason", "epochs", "best_epoch", "wall_time",
                                   "n_params", "worker", "submit_time", "start_time", "end_time")}
        out["config"] = json.loads(row["config_json"])
        out["history"] = json.loads(row["history_json"] or "{}")
        out["extra"] = json.loads(row["extra_json"] or "{}")
        return out

    def entry(self, entry_id: int) -> dict[str, Any]:
        """Everything recorded about one entry (config and training history decoded)."""
        return self._entry_dict(self._row(entry_id))

    def config(self, entry_id: int) -> dict[str, Any]:
        return json.loads(self._row(entry_id)["config_json"])

    def best(self) -> tuple[int, float] | None:
        """(id, objective) of the done entry of lowest objective, or None when none is done."""
        rows = self._query(
            "SELECT id, objective FROM evaluations WHERE status = ? ORDER BY objective ASC, id ASC LIMIT 1", (DONE,)
        )
        return (int(rows[0]["id"]), float(rows[0]["objective"])) if rows else None

    def history(self) -> list[tuple[dict[str, Any], float | None]]:
        """(config, objective) of finished entries in the order their results were recorded.

        That is the order a searcher was told them, so replaying it rebuilds the searcher's state
        (the aging-evolution FIFO included). Failures have objective ``None``.
        """
        rows = self._query(
            "SELECT config_json, status, objective FROM evaluations WHERE status IN (?, ?) "
            "ORDER BY finish_order, id", (DONE, FAILED),
        )
        return [(json.loads(r["config_json"]), float(r["objective"]) if r["status"] == DONE else None)
                for r in rows]

    # ----------------------------------------------------------------- tables
    def _columns(self) -> list[str]:
        return [*LEADING_COLUMNS, *self.space.hp_names, *TRAILING_COLUMNS]

    def to_dataframe(self):
        """One row per evaluation (all statuses), ordered by id.

        Columns: id, status, objective (NaN unless done), reason, arch (compact JSON string, so
        hashable), one column per training hyperparameter, epochs, best_epoch, wall_time,
        n_params, worker, submit_time, start_time, end_time (Unix seconds).
        """
        import pandas as pd

        columns = self._columns()
        hp_names = self.space.hp_names
        records = []
        for row in self._query("SELECT * FROM evaluations ORDER BY id"):
            hp = json.loads(row["hp_json"])
            rec = {c: row[c] for c in LEADING_COLUMNS if c != "arch"}
            rec["arch"] = row["arch_json"]
            rec.update({name: hp.get(name) for name in hp_names})
            rec.update({c: row[c] for c in TRAILING_COLUMNS})
            records.append(rec)
        frame = pd.DataFrame.from_records(records, columns=columns)
        # Same dtypes as reading results.csv back: numbers (NaN where missing) or strings.
        for column in columns:
            if column in ("status", "reason", "arch", "worker"):
                continue
            with contextlib.suppress(ValueError, TypeError):
                frame[column] = pd.to_numeric(frame[column])
        frame["objective"] = frame["objective"].astype(float)
        return frame

    # ----------------------------------------------------------------- files
    def model_path(self, entry_id: int) -> Path:
        return self.run_dir / MODELS_DIR / f"{int(entry_id)}.keras"

    def predictions_path(self, entry_id: int) -> Path:
        return self.run_dir / PREDICTIONS_DIR / f"{int(entry_id)}.npz"

    def _done_row(self, entry_id: int, what: str) -> sqlite3.Row:
        row = self._row(entry_id)
        if row["status"] != DONE:
            raise CatalogError(f"{self.run_dir}: entry {entry_id} is {row['status']}: it has no {what}")
        return row

    def _read_checked(self, entry_id: int, path: Path, sha: str | None, what: str) -> bytes:
        if not path.is_file():
            raise CatalogError(f"{self.run_dir}: entry {entry_id}: {what} file {path} is missing")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CatalogError(f"{self.run_dir}: entry {entry_id}: cannot read {what} file {path}: {exc}") from None
        if sha and _sha256(data) != sha:
            raise CatalogError(f"{self.run_dir}: entry {entry_id}: {what} file {path} is corrupt (checksum mismatch)")
        return data

    def _read_predictions(self, entry_id: int) -> tuple[np.ndarray, np.ndarray]:
        row = self._done_row(entry_id, "predictions")
        path = self.predictions_path(entry_id)
        data = self._read_checked(entry_id, path, row["predictions_sha256"], "predictions")
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                mean = np.asarray(npz["mean"], dtype=np.float64)
                var = np.asarray(npz["var"], dtype=np.float64)
        except Exception as exc:  # noqa: BLE001 - any decoding failure means a corrupt file
            raise CatalogError(f"{self.run_dir}: entry {entry_id}: predictions file {path} is corrupt: {exc}") from None
        expected = self._valid_targets.shape
        if mean.shape != expected or var.shape != expected:
            raise CatalogError(
                f"{self.run_dir}: entry {entry_id}: predictions file {path} has shapes {mean.shape}/{var.shape}, "
                f"expected {expected}"
            )
        return mean, var

    def validation_predictions(self, ids: Iterable[int] | None = None, *,
                               skip_missing: bool = True) -> ValidationPredictions:
        """Cached validation predictions of done entries, original units.

        Parameters
        ----------
        ids : iterable of int, optional
            Entries to load, in this order; default :meth:`ids` ``("done")``.
        skip_missing : bool
            True (default): an entry that is not done or whose predictions file is missing or
            corrupt is left out, listed in ``.skipped`` with its reason and reported in one
            ``RuntimeWarning``; the returned ``ids`` say which entries were loaded.
            False: any such entry raises one :class:`CatalogError` listing every one of them.

        Returns
        -------
        ValidationPredictions
            Unpacks as ``(ids, means, variances)``: the entries loaded, and their means and
            variances, each of shape (len(ids), n_valid, n_targets).
        """
        ids = self.ids(DONE) if ids is None else [int(i) for i in ids]
        loaded, means, variances, skipped = [], [], [], {}
        for entry_id in ids:
            try:
                mean, var = self._read_predictions(entry_id)
            except CatalogError as exc:
                skipped[entry_id] = str(exc)
                continue
            loaded.append(entry_id)
            means.append(mean)
            variances.append(var)
        if skipped:
            listing = "; ".join(skipped.values())
            if not skip_missing:
                raise CatalogError(f"cannot load the validation predictions of {len(skipped)} entr"
                                   f"{'y' if len(skipped) == 1 else 'ies'}: {listing}")
            warnings.warn(f"skipped {len(skipped)} catalog entries: {listing}", RuntimeWarning, stacklevel=2)
        shape = (0, *self._valid_targets.shape)
        return ValidationPredictions(
            loaded,
            np.stack(means) if means else np.empty(shape),
            np.stack(variances) if variances else np.empty(shape),
            skipped,
        )

    def load_model(self, entry_id: int):
        """The trained Keras model of a done entry (inputs and outputs in original units).

        Refuses, with a :class:`CatalogError`, a model file that is missing, corrupt, or that
        holds a Lambda layer (which would run code stored in the file); Keras loads with
        ``safe_mode=True`` as a second guard. The model is not compiled (inference only).
        """
        row = self._done_row(entry_id, "model")
        path = self.model_path(entry_id)
        data = self._read_checked(entry_id, path, row["model_sha256"], "model")
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                config = json.loads(archive.read("config.json"))
        except (zipfile.BadZipFile, KeyError, ValueError) as exc:
            raise CatalogError(f"{self.run_dir}: entry {entry_id}: model file {path} is not a valid "
                               f".keras archive: {exc}") from None
        lambdas = _lambda_layers(config)
        if lambdas:
            raise CatalogError(
                f"{self.run_dir}: entry {entry_id}: refusing to load model file {path}: it contains Lambda "
                f"layer(s) {lambdas}, which would run code stored in the file"
            )
        import keras

        _import_custom_layers()
        try:
            return keras.models.load_model(path, safe_mode=True, compile=False)
        except Exception as exc:  # noqa: BLE001 - every loading failure names the entry
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if "safe_mode" in str(exc):
                raise CatalogError(f"{self.run_dir}: entry {entry_id}: refusing to load model file {path}: it holds "
                                   f"code (e.g. a Lambda layer) that safe_mode will not run: {message}") from None
            raise CatalogError(f"{self.run_dir}: entry {entry_id}: cannot load model file {path}: {message}") from None

    # ----------------------------------------------------------------- writing
    @classmethod
    def create_or_resume(cls, run_dir: str | Path, space: SearchSpace | dict | str, dataset,
                         search_options: dict | None = None, seed: int | None = None,
                         new_run: bool = False) -> "CatalogWriter":
        """Open ``run_dir`` for writing: create a new catalog, or resume the one in it.

        Parameters
        ----------
        run_dir : str or Path
        space : SearchSpace (or anything :func:`autodeuq.space.load_space` takes)
        dataset : autodeuq.data.Dataset
        search_options : dict
            The search algorithm's name and options (e.g. ``{"algorithm": "agebo", ...}``),
            stored as given (JSON).
        seed : int or None
        new_run : bool
            Refuse an existing non-empty ``run_dir`` instead of resuming it.

        Raises
        ------
        CatalogError
            ``run_dir`` is not empty and holds no catalog; or ``new_run`` and it is not empty;
            or its catalog was made for another dataset (fingerprint) or another search space;
            or another process is writing it.
        """
        run_dir = Path(run_dir)
        space = load_space(space)
        seed = None if seed is None else int(seed)
        try:
            search_json = _dumps(search_options or {})
        except (TypeError, ValueError) as exc:
            raise CatalogError(f"search options must be JSON-serializable: {exc}") from None
        db = run_dir / DB_NAME
        if run_dir.exists() and not run_dir.is_dir():
            raise CatalogError(f"{run_dir}: exists and is not a directory; use a new --run-dir")
        contents = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_NAME) if run_dir.exists() else []
        if new_run and contents:
            raise CatalogError(f"{run_dir}: already exists and is not empty ({', '.join(contents[:5])}"
                               f"{', ...' if len(contents) > 5 else ''}); use a new --run-dir")
        if contents and not db.exists():
            raise CatalogError(f"{run_dir}: exists, is not empty and holds no autodeuq catalog; "
                               f"use a new --run-dir")
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = _acquire_lock(run_dir)
        conn = None
        try:
            conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
            # WAL + synchronous=FULL: every commit fsyncs the WAL before returning, so a recorded
            # result survives power loss as well as a killed process (NORMAL could lose the last
            # commits on power loss). One fsync per evaluation is nothing next to a training.
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            info = _read_run_info(conn)
            versions = _package_versions()
            if info is None:
                info = _initialize(conn, space, dataset, search_options, seed, versions)
            else:
                _check_matches(run_dir, info, space, dataset)
            conn.execute(
                "INSERT INTO sessions (start_time, host, pid, seed, search_json, versions_json) VALUES (?,?,?,?,?,?)",
                (time.time(), socket.gethostname(), os.getpid(), seed, search_json, _dumps(versions)),
            )
            writer = CatalogWriter(run_dir, conn, info, lock)
        except BaseException:
            if conn is not None:
                conn.close()
            _release_lock(lock)
            raise
        try:
            writer._prepare_folders()
        except BaseException:
            writer.close()
            raise
        return writer


def _initialize(conn, space, dataset, search_options, seed, versions) -> dict[str, Any]:
    """Create the tables and commit the run metadata, all in one transaction."""
    fingerprint = dataset.fingerprint()
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": time.time(),
        "space": space.to_dict(),
        "search": search_options or {},
        "data": dataset.describe(),
        "seed": seed,
        "versions": versions,
    }
    info = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "fingerprint": fingerprint,
        "meta_json": _dumps(meta, indent=2),
        "valid_targets": _npy_bytes(dataset.y_valid),
    }
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.executemany("INSERT OR REPLACE INTO run (key, value) VALUES (?, ?)", list(info.items()))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return info


def _check_matches(run_dir: Path, info: dict[str, Any], space: SearchSpace, dataset) -> None:
    meta = json.loads(info["meta_json"])
    fingerprint = dataset.fingerprint()
    if info["fingerprint"] != fingerprint:
        old = meta.get("data", {})
        raise CatalogError(
            f"{run_dir}: its catalog was made for other data: dataset {old.get('name')!r} "
            f"(fingerprint {info['fingerprint']}, {old.get('n_train')} train / {old.get('n_valid')} validation rows), "
            f"this run has {dataset.describe().get('name')!r} (fingerprint {fingerprint}, "
            f"{len(dataset.x_train)} train / {len(dataset.x_valid)} validation rows); "
            f"its entries would not be comparable. Use a new --run-dir"
        )
    new_spec = json.loads(_dumps(space.to_dict()))
    differences = _spec_differences(meta["space"], new_spec)
    if differences:
        shown = "; ".join(differences[:5]) + ("; ..." if len(differences) > 5 else "")
        raise CatalogError(f"{run_dir}: its catalog was made for another search space ({shown}). "
                           f"Use a new --run-dir")


def _acquire_lock(run_dir: Path):
    """Exclusive advisory lock so that one process at a time writes a run (freed if it dies)."""
    path = run_dir / LOCK_NAME
    handle = open(path, "a+")
    try:
        import fcntl
    except ImportError:  # not POSIX: no advisory locks, rely on the one-driver convention
        return handle
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        raise CatalogError(f"{run_dir}: another process ({holder or 'unknown'}) is writing this run; "
                           f"only one search may write a run directory") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    handle.flush()
    return handle


def _release_lock(handle) -> None:
    if handle is not None and not handle.closed:
        handle.close()  # closing the file releases the flock


# --------------------------------------------------------------------------- write side
class CatalogWriter(Catalog):
    """The search driver's handle on a run: submit configurations, record their results.

    Obtained from :meth:`Catalog.create_or_resume`; also offers every read method of
    :class:`Catalog`. Holds the run's lock until :meth:`close`.

    Examples
    --------
    >>> writer = Catalog.create_or_resume("runs/toy", space, dataset, {"algorithm": "agebo"}, seed=0)
    >>> for entry_id, config in writer.pending():      # interrupted by a crash: train again
    ...     submit_to_worker(entry_id, config)
    >>> entry_id = writer.submit(config)
    >>> writer.record(entry_id, result)
    """

    # results.csv is an export (the index is the truth): rewriting it for every result would put
    # O(catalog) work on the driver's hot path, so it is refreshed at most this often and on close.
    CSV_INTERVAL = 2.0

    def __init__(self, run_dir: Path, conn: sqlite3.Connection, info: dict[str, Any], lock_handle):
        self.run_dir = Path(run_dir)
        self._lock_handle = lock_handle
        self._csv_written = 0.0
        self._csv_stale = False
        self._setup(conn, info)

    def close(self) -> None:
        if self._csv_stale and getattr(self, "_conn", None) is not None:
            self._refresh_results_csv(force=True)
        super().close()
        _release_lock(self._lock_handle)

    def __reduce__(self):
        raise TypeError("a CatalogWriter holds its run's lock and cannot be pickled; pickle Catalog(run_dir)")

    def _prepare_folders(self) -> None:
        for name in (MODELS_DIR, PREDICTIONS_DIR):
            (self.run_dir / name).mkdir(exist_ok=True)
        # We hold the lock, so no temporary file here belongs to a live writer.
        for folder in (self.run_dir, self.run_dir / MODELS_DIR, self.run_dir / PREDICTIONS_DIR):
            for tmp in folder.glob(f".*{TEMP_SUFFIX}"):
                with contextlib.suppress(OSError):
                    tmp.unlink()
        _atomic_write(self.run_dir / META_NAME, (json.dumps(self.meta, indent=2, sort_keys=True) + "\n").encode())
        _atomic_write(self.run_dir / TARGETS_NAME, _npy_bytes(self._valid_targets))
        self._write_results_csv()

    def _write_results_csv(self) -> None:
        buf = io.StringIO()
        self.to_dataframe().to_csv(buf, index=False)
        _atomic_write(self.run_dir / CSV_NAME, buf.getvalue().encode())
        self._csv_written, self._csv_stale = time.monotonic(), False

    def _refresh_results_csv(self, force: bool = False) -> None:
        self._csv_stale = True
        if not force and time.monotonic() - self._csv_written < self.CSV_INTERVAL:
            return
        try:
            self._write_results_csv()
        except OSError as exc:  # the index holds the result; the export catches up next time
            warnings.warn(f"could not rewrite {CSV_NAME}: {exc}", RuntimeWarning, stacklevel=3)

    # ----------------------------------------------------------------- driver API
    def submit(self, config: dict[str, Any]) -> int:
        """Register a configuration about to be trained; returns its id (committed, never reused)."""
        try:
            plain = json.loads(_dumps(config))
            self.space.validate(plain)
        except (TypeError, ValueError) as exc:
            raise CatalogError(f"cannot submit {config!r}: not a configuration of the run's space: {exc}") from None
        arch, hp = SearchSpace.split(plain)
        with self._lock:
            if self._conn is None:
                raise CatalogError(f"{self.run_dir}: catalog is closed")
            cursor = self._conn.execute(
                "INSERT INTO evaluations (status, config_json, arch_json, hp_json, submit_time, data_fingerprint) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (RUNNING, _dumps(plain), json.dumps(arch, separators=(",", ":")), _dumps(hp), time.time(),
                 self.fingerprint),
            )
            return int(cursor.lastrowid)

    def pending(self) -> list[tuple[int, dict[str, Any]]]:
        """(id, config) of submitted entries without a result, by id: train them again on resume."""
        rows = self._query("SELECT id, config_json FROM evaluations WHERE status = ? ORDER BY id", (RUNNING,))
        return [(int(r["id"]), json.loads(r["config_json"])) for r in rows]

    def record(self, entry_id: int, result: TrainResult) -> None:
        """Store the result of a submitted entry, atomically.

        A successful result's model and predictions are made durable under their final names
        first; then one transaction marks the entry done. A failed result stores its reason and
        no file. A successful result that lacks its model or has predictions of the wrong shape
        is stored as failed, with the reason (and a warning).
        """
        entry_id = int(entry_id)
        with self._lock:
            row = self._row(entry_id)
            if row["status"] != RUNNING:
                raise CatalogError(f"{self.run_dir}: entry {entry_id} is already {row['status']}; "
                                   f"a result is recorded once")
            status, reason = (DONE, None) if result.ok else (FAILED, str(result.reason or "unknown failure"))
            model_sha = predictions_sha = None
            if status == DONE:
                problem = self._result_problem(result)
                if problem:
                    warnings.warn(f"entry {entry_id}: recorded as failed: {problem}", RuntimeWarning, stacklevel=2)
                    status, reason = FAILED, f"invalid result: {problem}"
            if status == DONE:
                npz = _npz_bytes(np.asarray(result.valid_mean, dtype=np.float64),
                                 np.asarray(result.valid_var, dtype=np.float64))
                model_sha, predictions_sha = _sha256(result.model_bytes), _sha256(npz)
                _atomic_write(self.model_path(entry_id), bytes(result.model_bytes))
                _atomic_write(self.predictions_path(entry_id), npz)
            self._commit_record(entry_id, result, status, reason, model_sha, predictions_sha)
            self._refresh_results_csv()

    def _result_problem(self, result: TrainResult) -> str | None:
        if not isinstance(result.model_bytes, (bytes, bytearray)) or not result.model_bytes:
            return "no model bytes"
        if not isinstance(result.objective, (int, float)) or not math.isfinite(float(result.objective)):
            return f"non-finite objective {result.objective!r}"
        expected = self._valid_targets.shape
        for name in ("valid_mean", "valid_var"):
            value = getattr(result, name)
            shape = None if value is None else np.shape(value)
            if shape != expected:
                return f"{name} has shape {shape}, expected {expected}"
        return None

    def _commit_record(self, entry_id, result, status, reason, model_sha, predictions_sha) -> None:
        objective = float(result.objective) if status == DONE else None
        cursor = self._conn.execute(
            "UPDATE evaluations SET status = ?, objective = ?, reason = ?, epochs = ?, best_epoch = ?, "
            "wall_time = ?, n_params = ?, worker = ?, start_time = ?, end_time = ?, record_time = ?, "
            "finish_order = (SELECT COALESCE(MAX(finish_order), 0) + 1 FROM evaluations), "
            "model_sha256 = ?, predictions_sha256 = ?, history_json = ?, extra_json = ? "
            "WHERE id = ? AND status = ?",
            (status, objective, reason, _number(result.epochs, int), _number(result.best_epoch, int),
             _number(result.wall_time, float), _number(result.n_params, int), str(result.worker or ""),
             _number(result.start_time, float), _number(result.end_time, float), time.time(),
             model_sha, predictions_sha, _dumps(result.history or {}), _dumps(result.extra or {}),
             entry_id, RUNNING),
        )
        if cursor.rowcount != 1:
            raise CatalogError(f"{self.run_dir}: entry {entry_id} was not running when its result arrived")
