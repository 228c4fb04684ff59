"""The store: :class:`Catalog` reads a run directory, :class:`CatalogWriter` (the search
driver's, from :meth:`Catalog.create_or_resume`) submits configurations and records their results.

The run directory's layout and what makes it crash-safe and safe to read are in
:mod:`autodeuq.catalog`; the files are read through :mod:`autodeuq.catalog.artifacts` and the
index through :mod:`autodeuq.catalog.schema`.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import socket
import sqlite3
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from autodeuq.catalog.artifacts import (
    MAX_ARRAY_BYTES,
    MAX_MODEL_BYTES,
    CatalogError,
    decode_json,
    dumps,
    load_keras_model,
    load_npy,
    load_npz,
    npy_bytes,
    npz_bytes,
    package_versions,
    read_verified,
    refuse_links,
    sha256_hex,
)
from autodeuq.catalog.folds import FoldWriter, check_folds_table, describe_fold, has_folds_table, is_fold_id, plan_key
from autodeuq.catalog.schema import (
    DB_FILES,
    DB_NAME,
    FORMAT_VERSION,
    LOCK_NAME,
    acquire_lock,
    connect,
    connect_readonly,
    decode_run_info,
    initialize,
    migrate,
    read_run_info,
    release_lock,
)
from autodeuq.core.errors import CatalogWarning
from autodeuq.core.fileio import TEMP_SUFFIX, replace_file, replace_files
from autodeuq.core.result import MODEL_STATUSES, Status, TrainResult
from autodeuq.search.space import ROW_RULE_KEYS, SearchSpace, load_space
from autodeuq.tasks import get_task

STATUSES = tuple(Status)

META_NAME = "meta.json"
TARGETS_NAME = "valid_targets.npy"
CSV_NAME = "results.csv"
MODELS_DIR = "models"
PREDICTIONS_DIR = "predictions"

#: Key of an entry's ``extra`` naming the search-phase entry whose configuration it trains to the full budget.
PROMOTED_FROM = "promoted_from"
#: Key of an entry's ``extra`` naming the entry whose configuration aging evolution mutated into it.
MUTATED_FROM = "mutated_from"
#: Key of the run's search options holding the decision of ``early_discarding="auto"``
#: (:mod:`autodeuq.discard.scheduler`).
DISCARDING_DECISION = "discarding_decision"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_MAX_ID = 2**63 - 1  # SQLite's largest integer

# Columns of to_dataframe() / results.csv; the training hyperparameters follow "architecture".
# "objective" is the training loss (standardized targets), "valid_nll" the same NLL in the data's units.
LEADING_COLUMNS = ("id", "status", "objective", "valid_nll", "reason", "arch", "architecture", "parent")
# Computed by to_dataframe(), not stored in the index ("parent": the entry aging evolution mutated into this
# one, from its extra; empty for a configuration drawn otherwise).
_DERIVED_COLUMNS = ("valid_nll", "architecture", "parent")
TRAILING_COLUMNS = (
    "epochs", "best_epoch", "wall_time", "n_params", "worker", "submit_time", "start_time", "end_time",
)
# Derived from an entry's extra, after the stored columns: where a Ray evaluation ran (its node's id
# and the GPU ids Ray gave it, comma-separated; empty for an evaluation without that record).
PLACEMENT_COLUMNS = ("node", "gpus")


# --------------------------------------------------------------------------- small helpers
def _number(value, kind):
    """``kind(value)``, or None for a missing or non-finite value (a failure may lack them)."""
    try:
        value = kind(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _without_row_rules(spec):
    """A space description without the keys that only adapt its ranges to the rows."""
    return {k: v for k, v in spec.items() if k not in ROW_RULE_KEYS} if isinstance(spec, dict) else spec


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


#: Relative difference under which two recorded fill values are the same: a mean summed in
#: another order (another pandas version lays the columns out differently) differs in the last place.
FILL_REL_TOL = 1e-12


def _same_record(old, new) -> bool:
    """Whether two JSON-like records are equal, floats within :data:`FILL_REL_TOL`."""
    if isinstance(old, dict) and isinstance(new, dict):
        return old.keys() == new.keys() and all(_same_record(old[k], new[k]) for k in old)
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(_same_record(a, b) for a, b in zip(old, new))
    if isinstance(old, float) and isinstance(new, float):
        return math.isclose(old, new, rel_tol=FILL_REL_TOL, abs_tol=0.0)
    return type(old) is type(new) and old == new


def _checked_objective(value, where: str):
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    raise CatalogError(f"{where}: damaged catalog: objective {value!r} is not a number")


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
    A run with three recorded trainings (their "models" are placeholders here; a search stores
    the ``.keras`` bytes that :meth:`load_model` turns back into a network):

    >>> import shutil, tempfile
    >>> from autodeuq.table.data import from_arrays
    >>> from autodeuq.core.result import TrainResult
    >>> from autodeuq.search.space import load_space
    >>> rng = np.random.default_rng(0)
    >>> dataset = from_arrays(rng.normal(size=(30, 1)), rng.normal(size=30), seed=0)
    >>> space, run_dir = load_space("toy"), tempfile.mkdtemp()
    >>> n_valid = len(dataset.y_valid)
    >>> with Catalog.create_or_resume(run_dir, space, dataset, {"algorithm": "random"}, seed=0) as writer:
    ...     for objective in (0.9, 0.4, 1.3):
    ...         entry_id = writer.submit(space.sample(rng))
    ...         stored = writer.record(entry_id, TrainResult("done", objective=objective, epochs=3, best_epoch=3,
    ...                                                      model_bytes=b"model", valid_mean=np.zeros((n_valid, 1)),
    ...                                                      valid_var=np.ones((n_valid, 1))))
    >>> stored["id"], stored["status"], stored["objective"]   # record() returns the entry as stored
    (3, 'done', 1.3)
    >>> with Catalog(run_dir) as cat:
    ...     frame = cat.to_dataframe()
    ...     best_id, best_objective = cat.best()
    ...     ids, means, variances = cat.validation_predictions()   # every entry with a model
    >>> frame["objective"].tolist(), best_objective, means.shape == (3, n_valid, 1)
    ([0.9, 0.4, 1.3], 0.4, True)
    >>> shutil.rmtree(run_dir)
    """

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        db = self.run_dir / DB_NAME
        if not self.run_dir.is_dir():
            raise CatalogError(f"{self.run_dir}: no such run directory, so no catalog to read")
        refuse_links(self.run_dir, DB_FILES)
        if not db.is_file():
            raise CatalogError(f"{self.run_dir}: not an autodeuq run directory (no {DB_NAME})")
        conn = None
        try:
            conn = connect_readonly(db)
            with conn.limited(db):
                info = read_run_info(conn, db)
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            raise CatalogError(f"{db}: cannot read the catalog: {exc}") from None
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        if info is None:
            conn.close()
            raise CatalogError(f"{db}: incomplete catalog (its creation did not finish); nothing was recorded in it")
        self._setup(conn, info)

    def _setup(self, conn: sqlite3.Connection, info: dict[str, Any]) -> None:
        try:
            self._meta, self._valid_targets, self.fingerprint = decode_run_info(self.run_dir / DB_NAME, info)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._conn.row_factory = sqlite3.Row
        self._lock = threading.RLock()
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
            with self._conn.limited(self.run_dir / DB_NAME):
                return self._conn.execute(sql, tuple(params)).fetchall()

    # ----------------------------------------------------------------- run metadata
    @property
    def meta(self) -> dict[str, Any]:
        """Search space, search options, data description, seed, versions, and the sessions."""
        meta = json.loads(json.dumps(self._meta))
        where = f"{self.run_dir / DB_NAME}: session"
        meta["sessions"] = [
            {"start_time": r["start_time"], "host": r["host"], "pid": r["pid"], "seed": r["seed"],
             "search": decode_json(r["search_json"] or "null", f"{where} {r['n']}", "search_json"),
             "versions": decode_json(r["versions_json"] or "null", f"{where} {r['n']}", "versions_json")}
            for r in self._query("SELECT * FROM sessions ORDER BY n")
        ]
        return meta

    @property
    def space(self) -> SearchSpace:
        if self._space is None:
            self._space = SearchSpace(self._meta["space"], source=f"{self.run_dir / META_NAME} (space)")
        return self._space

    def row_counts(self) -> tuple[int, int] | None:
        """``(training rows, validation rows)`` of the run, as recorded at its creation; None when
        the catalog does not record them (one of an older autodeuq)."""
        data = self._meta.get("data") or {}
        counts = (data.get("n_train"), data.get("n_valid"))
        if all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
            return counts
        return None

    def validation_targets(self) -> np.ndarray:
        """The validation targets, shape (n_valid, n_targets), original units."""
        return self._valid_targets.copy()

    def test_data(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The test set the run was created with, ``(x_test, y_test)`` in original units.

        Stored in the index at creation, so reports need no data file. None when the run had no
        test set (or was created by an autodeuq that did not store it).
        """
        return self._stored_pair(("x_test", "y_test"), "test set")

    def training_data(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The training rows ``(x_train, y_train)`` in original units.

        What the 1-D uncertainty plot shows. None for a run created by an autodeuq that did not
        store them (older ones kept them for one-feature problems only).
        """
        return self._stored_pair(("x_train", "y_train"), "training points")

    def fit_data(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The training and validation rows together, ``(x, y)`` in original units: what a refit
        of an ensemble's members trains on. None when the catalog did not store them (runs
        created before autodeuq kept the validation rows' features)."""
        train, valid = self.training_data(), self._stored_pair(("x_valid", "y_valid"), "validation rows")
        if train is None or valid is None:
            return None
        return np.vstack([train[0], valid[0]]), np.vstack([train[1], valid[1]])

    def _stored_pair(self, keys: tuple[str, str], what: str) -> tuple[np.ndarray, np.ndarray] | None:
        found = {r["key"]: r["value"] for r in self._query("SELECT key, value FROM run WHERE key IN (?, ?)", keys)}
        if len(found) < 2:
            return None
        try:
            for key in keys:
                if isinstance(found[key], (bytes, bytearray)) and len(found[key]) > MAX_ARRAY_BYTES:
                    raise ValueError(f"{key} has {len(found[key])} bytes")
            x, y = (load_npy(found[key]) for key in keys)
            if len(x) != len(y):
                raise ValueError(f"{keys[0]} has {len(x)} rows, {keys[1]} {len(y)}")
        except ValueError as exc:
            raise CatalogError(f"{self.run_dir / DB_NAME}: damaged catalog: stored {what} cannot be read: "
                               f"{exc}") from None
        return x, y

    # ----------------------------------------------------------------- entries
    @property
    def n_done(self) -> int:
        """Evaluations trained to their end (early stopping included)."""
        return int(self._query("SELECT COUNT(*) FROM evaluations WHERE status = ?", (Status.DONE,))[0][0])

    @property
    def n_discarded(self) -> int:
        """Evaluations stopped at a rung by early discarding (they hold a model too)."""
        return int(self._query("SELECT COUNT(*) FROM evaluations WHERE status = ?", (Status.DISCARDED,))[0][0])

    @property
    def n_out_of_time(self) -> int:
        """Trainings that ended at their time budget (``out_of_time`` in their record; they are
        done and hold a model)."""
        rows = self._query("SELECT id, extra_json FROM evaluations WHERE status = ? AND extra_json LIKE ?",
                           (Status.DONE, '%"out_of_time": true%'))
        return sum(decode_json(r["extra_json"], self._where(r), "extra_json").get("out_of_time") is True
                   for r in rows)

    @property
    def n_finished(self) -> int:
        """Evaluations with a result: done, discarded or failed."""
        return int(self._query("SELECT COUNT(*) FROM evaluations WHERE status IN (?, ?, ?)",
                               (Status.DONE, Status.DISCARDED, Status.FAILED))[0][0])

    def model_ids(self) -> list[int]:
        """Ids of the entries holding a model (done or discarded), in increasing order."""
        rows = self._query("SELECT id FROM evaluations WHERE status IN (?, ?) ORDER BY id", MODEL_STATUSES)
        return [int(r[0]) for r in rows]

    def ids(self, status: str | None = Status.DONE) -> list[int]:
        """Ids of the entries with ``status`` (``None``: all), in increasing order."""
        if status is None:
            rows = self._query("SELECT id FROM evaluations ORDER BY id")
        elif status in STATUSES:
            rows = self._query("SELECT id FROM evaluations WHERE status = ? ORDER BY id", (status,))
        else:
            raise ValueError(f"status must be one of {[str(s) for s in STATUSES]} or None, got {status!r}")
        return [int(r[0]) for r in rows]

    def _row(self, entry_id: int) -> sqlite3.Row:
        entry_id = int(entry_id)
        rows = self._query("SELECT * FROM evaluations WHERE id = ?", (entry_id,)) if 0 <= entry_id <= _MAX_ID else []
        if not rows:
            raise CatalogError(f"{self.run_dir}: no entry {entry_id}")
        return rows[0]

    def _where(self, row: sqlite3.Row) -> str:
        return f"{self.run_dir}: entry {row['id']}"

    def _entry_dict(self, row: sqlite3.Row) -> dict[str, Any]:
        where = self._where(row)
        out = {k: row[k] for k in ("id", "status", "objective", "reason", "epochs", "best_epoch", "wall_time",
                                   "n_params", "worker", "submit_time", "start_time", "end_time")}
        _checked_objective(out["objective"], where)
        out["config"] = self._decoded_config(row)
        out["history"] = decode_json(row["history_json"] or "{}", where, "history_json")
        out["extra"] = decode_json(row["extra_json"] or "{}", where, "extra_json")
        return out

    def entry(self, entry_id: int) -> dict[str, Any]:
        """Everything recorded about one entry (config and training history decoded); a fold
        entry's is its search entry's, with its own id, training record and ``fold`` record
        (:mod:`autodeuq.catalog.folds`)."""
        if is_fold_id(entry_id):
            fold = self.fold_entry(entry_id)
            entry = self._entry_dict(self._row(fold["entry"]))
            entry.update({k: fold[k] for k in ("id", "objective", "epochs", "best_epoch", "wall_time", "n_params")})
            return {**entry, "history": {}, "fold": fold}
        return self._entry_dict(self._row(entry_id))

    def config(self, entry_id: int) -> dict[str, Any]:
        if is_fold_id(entry_id):
            entry_id = self.fold_entry(entry_id)["entry"]
        return self._decoded_config(self._row(entry_id))

    # ----------------------------------------------------------------- fold entries
    def _fold_rows(self, where: str = "", params: Iterable = ()) -> list[sqlite3.Row]:
        db = self.run_dir / DB_NAME
        with self._lock, self._conn.limited(db):
            if not has_folds_table(self._conn):
                return []
            check_folds_table(self._conn, db)
        return self._query(f"SELECT * FROM folds {where} ORDER BY id", params)

    def fold_entries(self, plan: dict | None = None) -> list[dict[str, Any]]:
        """The fold entries (:mod:`autodeuq.catalog.folds`), by id; those of ``plan`` only when given."""
        rows = self._fold_rows(*(("WHERE plan_json = ?", (plan_key(plan),)) if plan is not None else ()))
        return [describe_fold(r) for r in rows]

    def fold_entry(self, fold_id: int) -> dict[str, Any]:
        rows = self._fold_rows("WHERE id = ?", (int(fold_id),))
        if not rows:
            raise CatalogError(f"{self.run_dir}: no fold entry {fold_id}")
        return describe_fold(rows[0])

    def fold_predictions(self, fold_id: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """A fold entry's held-out rows (their numbers among :meth:`fit_data`'s rows) and its
        predictions of them, in the order of :attr:`prediction_arrays`."""
        fold = self.fold_entry(fold_id)
        names = self.prediction_arrays
        n_rows = int(fold["plan"]["rows"])
        width = self.task_object.prediction_width(len(self.meta["data"]["targets"]), self.labels)
        array_bytes = n_rows * max(width, 1) * 8 + 4096
        data = self._read_checked(fold_id, self.predictions_path(fold_id), fold["predictions_sha256"], "predictions",
                                  (len(names) + 1) * array_bytes + (1 << 16))
        try:
            arrays = load_npz(data, ("rows", *names), array_bytes)
            rows = arrays["rows"][:, 0] if arrays["rows"].shape[1:] == (1,) else np.empty(0)
            if len(rows) == 0 or rows.min() < 0 or rows.max() >= n_rows or np.any(rows != np.round(rows)):
                raise ValueError(f"row numbers outside 0..{n_rows - 1}")
            if any(arrays[name].shape != (len(rows), width) for name in names):
                raise ValueError(f"predictions of shape {[arrays[n].shape for n in names]} for {len(rows)} rows")
        except Exception as exc:  # noqa: BLE001 - any decoding failure means a corrupt file
            raise CatalogError(f"{self.run_dir}: fold entry {fold_id}: predictions file "
                               f"{self.predictions_path(fold_id)} is corrupt: {exc}") from None
        return rows.astype(np.int64), tuple(arrays[name] for name in names)

    def fold_writer(self) -> FoldWriter:
        """A :class:`~autodeuq.catalog.folds.FoldWriter` of this run (it takes the run's lock)."""
        return FoldWriter(self.run_dir, MODELS_DIR, PREDICTIONS_DIR)

    def _decoded_config(self, row: sqlite3.Row) -> dict[str, Any]:
        """An entry's configuration; CatalogError ("damaged catalog") unless it is a point of the run's space."""
        return self._space_value(row, "config_json", self.space.validate, "a configuration")

    def best(self) -> tuple[int, float] | None:
        """(id, objective) of the entry with a model of lowest objective, or None when there is none."""
        rows = self._query(
            "SELECT id, objective FROM evaluations WHERE status IN (?, ?) ORDER BY objective ASC, id ASC LIMIT 1",
            MODEL_STATUSES,
        )
        if not rows:
            return None
        return int(rows[0]["id"]), float(_checked_objective(rows[0]["objective"], self._where(rows[0])))

    def best_configurations(self, n: int) -> list[int]:
        """Ids of the ``n`` entries trained to their end with the lowest objective, one per
        configuration (a configuration drawn twice counts once), best first."""
        rows = self._query("SELECT id, config_json FROM evaluations WHERE status = ? AND objective IS NOT NULL "
                           "ORDER BY objective, id", (Status.DONE,))
        chosen, seen = [], set()
        for row in rows:
            if row["config_json"] not in seen and len(chosen) < n:
                seen.add(row["config_json"])
                chosen.append(int(row["id"]))
        return chosen

    def history(self, with_ids: bool = False) -> list[tuple]:
        """(config, objective) of finished entries in the order their results were recorded.

        That is the order a searcher was told them, so replaying it rebuilds the searcher's state
        (the aging-evolution FIFO included). Failures have objective ``None``; a discarded entry
        has the loss it had reached, which is what the searcher was told. With ``with_ids``,
        ``(entry id, config, objective)`` triples.
        """
        rows = self._query(
            "SELECT id, config_json, status, objective FROM evaluations WHERE status IN (?, ?, ?) "
            "ORDER BY finish_order, id", (Status.DONE, Status.DISCARDED, Status.FAILED),
        )
        out = [(r["id"], self._decoded_config(r),
                float(_checked_objective(r["objective"], self._where(r))) if r["status"] in MODEL_STATUSES
                else None)
               for r in rows]
        return out if with_ids else [(config, objective) for _, config, objective in out]

    def validation_loss_histories(self, batch_sizes: bool = False) -> list:
        """Per-epoch validation losses of the finished entries, in the order they were recorded
        (what an early-discarding rule replays to continue a run; see :mod:`autodeuq.discard`).

        With ``batch_sizes``, ``(losses, batch size)`` pairs: the batch size the training used
        (``extra["batch_size"]``, which the row count may have capped), else None.
        """
        rows = self._query(
            "SELECT id, history_json, extra_json FROM evaluations WHERE status IN (?, ?, ?) "
            "ORDER BY finish_order, id", (Status.DONE, Status.DISCARDED, Status.FAILED),
        )
        out = []
        for r in rows:
            history = decode_json(r["history_json"] or "{}", self._where(r), "history_json")
            losses = history.get("val_loss", []) if isinstance(history, dict) else []
            losses = [float(v) if isinstance(v, (int, float)) else math.nan for v in losses]
            if batch_sizes:
                extra = decode_json(r["extra_json"] or "{}", self._where(r), "extra_json")
                batch = extra.get("batch_size") if isinstance(extra, dict) else None
                losses = (losses, int(batch) if isinstance(batch, int) and not isinstance(batch, bool) else None)
            out.append(losses)
        return out

    def full_trainings(self) -> dict[int, int]:
        """``{id: id of the entry it trains again}`` for the entries submitted as full trainings of a
        search-phase entry (i-Epoch, :class:`autodeuq.discard.IEpoch`), whatever their status."""
        out = {}
        for r in self._query("SELECT id, extra_json FROM evaluations WHERE extra_json LIKE ? ORDER BY id",
                             (f'%"{PROMOTED_FROM}"%',)):
            extra = decode_json(r["extra_json"], self._where(r), "extra_json")
            source = extra.get(PROMOTED_FROM) if isinstance(extra, dict) else None
            if isinstance(source, int) and not isinstance(source, bool):
                out[int(r["id"])] = source
        return out

    # ----------------------------------------------------------------- tables
    @property
    def nll_offset(self) -> float:
        """What turns an entry's objective (standardized units) into an NLL in the data's units.

        The networks are trained on targets standardized per column, ``y = y_mean + y_std z``,
        so a predictive density of ``y`` is that of ``z`` divided by ``y_std``: per point and
        target the NLL grows by ``log(y_std)``, and the NLL averaged over the targets (the
        objective; the ``mean`` of ``metrics.json``'s ``nll``) by ``mean_t log(y_std_t)``, this
        number. NaN when the run's metadata has no usable ``y_std``.
        """
        scaling = self._meta.get("data", {}).get("standardization") or {}
        try:
            y_std = np.asarray(scaling.get("y_std"), dtype=float).reshape(-1)
        except (TypeError, ValueError):
            return math.nan
        if not y_std.size or not np.all(np.isfinite(y_std) & (y_std > 0)):
            return math.nan
        return float(np.mean(np.log(y_std)))

    def _columns(self) -> list[str]:
        return [*LEADING_COLUMNS, *self.space.hp_names, *TRAILING_COLUMNS, *PLACEMENT_COLUMNS]

    def _architecture_words(self, row: sqlite3.Row) -> str:
        return self.space.describe_arch(self._space_value(row, "arch_json", self.space.validate_arch,
                                                          "an architecture"))

    def _space_value(self, row: sqlite3.Row, column: str, validate, what: str):
        """The JSON of ``column`` decoded and ``validate``d by the run's space; CatalogError ("damaged
        catalog ... is not ``what`` of the run's space") when it is not."""
        value = decode_json(row[column], self._where(row), column)
        try:
            validate(value)
        except ValueError as exc:
            raise CatalogError(f"{self._where(row)}: damaged catalog: {column} is not {what} of the run's space: "
                               f"{exc}") from None
        return value

    def to_dataframe(self):
        """One row per evaluation (all statuses), ordered by id.

        Columns: id, status, objective (the validation NLL the training minimized, in
        standardized units; NaN without a model), valid_nll (the same NLL in the data's units:
        objective + :attr:`nll_offset`, what ``metrics.json`` and the command line report),
        reason, arch (compact JSON string, so hashable), architecture (the same in words, see
        :meth:`~autodeuq.search.space.SearchSpace.describe_arch`), parent (the entry aging evolution
        mutated into this one; NaN for a configuration drawn otherwise), one column per training
        hyperparameter, epochs, best_epoch, wall_time, n_params, worker, submit_time,
        start_time, end_time (Unix seconds), node and gpus (where a Ray evaluation ran: its node's
        id and the ids of the GPUs Ray gave it, comma-separated; empty otherwise).
        """
        import pandas as pd

        columns = self._columns()
        hp_names = self.space.hp_names
        offset = self.nll_offset
        records = []
        for row in self._query("SELECT * FROM evaluations ORDER BY id"):
            hp = decode_json(row["hp_json"], self._where(row), "hp_json")
            if not isinstance(hp, dict):
                raise CatalogError(f"{self._where(row)}: damaged catalog: hp_json is not a JSON object")
            try:
                self.space.validate_hp(hp, partial=True)
            except ValueError as exc:
                raise CatalogError(f"{self._where(row)}: damaged catalog: hp_json does not hold training "
                                   f"hyperparameters of the run's space: {exc}") from None
            _checked_objective(row["objective"], self._where(row))
            rec = {c: row[c] for c in LEADING_COLUMNS if c != "arch" and c not in _DERIVED_COLUMNS}
            rec["valid_nll"] = None if row["objective"] is None else float(row["objective"]) + offset
            rec["arch"] = row["arch_json"]
            rec["architecture"] = self._architecture_words(row)
            extra = decode_json(row["extra_json"] or "{}", self._where(row), "extra_json")
            parent = extra.get(MUTATED_FROM) if isinstance(extra, dict) else None
            rec["parent"] = parent if isinstance(parent, int) and not isinstance(parent, bool) else None
            rec.update({name: hp.get(name) for name in hp_names})
            rec.update({c: row[c] for c in TRAILING_COLUMNS})
            where = extra.get("placement") if isinstance(extra, dict) else None
            where = where if isinstance(where, dict) else {}
            rec["node"] = where.get("node") if isinstance(where.get("node"), str) else None
            gpus = where.get("gpu_ids")
            rec["gpus"] = ",".join(map(str, gpus)) if isinstance(gpus, list) and gpus else None
            records.append(rec)
        frame = pd.DataFrame.from_records(records, columns=columns)
        # Same dtypes as reading results.csv back: numbers (NaN where missing) or strings.
        for column in columns:
            if column in ("status", "reason", "arch", "architecture", "worker"):
                continue
            with contextlib.suppress(ValueError, TypeError):
                frame[column] = pd.to_numeric(frame[column])
        frame["objective"] = frame["objective"].astype(float)
        frame["valid_nll"] = frame["valid_nll"].astype(float)
        return frame

    # ----------------------------------------------------------------- files
    def model_path(self, entry_id: int) -> Path:
        return self.run_dir / MODELS_DIR / f"{int(entry_id)}.keras"

    def predictions_path(self, entry_id: int) -> Path:
        return self.run_dir / PREDICTIONS_DIR / f"{int(entry_id)}.npz"

    def _done_row(self, entry_id: int, what: str) -> sqlite3.Row:
        row = self._row(entry_id)
        if row["status"] not in MODEL_STATUSES:
            raise CatalogError(f"{self.run_dir}: entry {entry_id} is {row['status']}: it has no {what}")
        return row

    def _read_checked(self, entry_id: int, path: Path, sha, what: str, limit: int) -> bytes:
        """The bytes of an entry's file, refused unless it is a regular file inside the run
        directory, at most ``limit`` bytes, matching the checksum the index holds."""
        where = f"{self.run_dir}: entry {entry_id}: {what} file {path}"
        if not (isinstance(sha, str) and _SHA256.fullmatch(sha)):
            state = "missing" if sha is None else "damaged"
            raise CatalogError(f"{where}: the catalog holds no valid checksum for it ({what}_sha256 is {state}); "
                               f"refusing to use it")
        return read_verified(path, self.run_dir, sha, limit, where, "the run directory")

    @property
    def task(self) -> str:
        """``"regression"`` or ``"classification"``, as the run was created."""
        return (self._meta.get("data") or {}).get("task", "regression")

    @property
    def task_object(self):
        """The run's :class:`~autodeuq.tasks.base.Task` (:func:`autodeuq.tasks.get_task` of :attr:`task`)."""
        return get_task(self.task)

    @property
    def labels(self):
        """The classes of a run whose targets are labels (:attr:`Task.targets
        <autodeuq.tasks.base.Task.targets>`), a :class:`~autodeuq.table.labels.Labels`; None otherwise."""
        from autodeuq.table.labels import Labels

        recorded = (self._meta.get("data") or {}).get("labels")
        return Labels.from_dict(recorded) if recorded and self.task_object.targets == "labels" else None

    @property
    def prediction_arrays(self) -> tuple[str, ...]:
        """The validation predictions each entry stores: the task's, ``("mean", "var")`` or ``("proba",)``."""
        return self.task_object.prediction_arrays

    @property
    def _prediction_shape(self) -> tuple[int, int]:
        n_valid, n_targets = self._valid_targets.shape
        return n_valid, self.task_object.prediction_width(n_targets, self.labels)

    def _read_predictions(self, entry_id: int) -> tuple[np.ndarray, ...]:
        """The entry's validation predictions, in the order of :attr:`prediction_arrays`."""
        row = self._done_row(entry_id, "predictions")
        path = self.predictions_path(entry_id)
        expected = self._prediction_shape
        names = self.prediction_arrays
        array_bytes = math.prod(expected) * 8 + 4096  # float64 data and its .npy header
        data = self._read_checked(entry_id, path, row["predictions_sha256"], "predictions",
                                  len(names) * array_bytes + (1 << 16))
        try:
            arrays = load_npz(data, names, array_bytes)
        except Exception as exc:  # any decoding failure means a corrupt file
            raise CatalogError(f"{self.run_dir}: entry {entry_id}: predictions file {path} is corrupt: {exc}") from None
        shapes = [arrays[name].shape for name in names]
        if any(shape != expected for shape in shapes):
            raise CatalogError(
                f"{self.run_dir}: entry {entry_id}: predictions file {path} has shapes "
                f"{'/'.join(map(str, shapes))}, expected {expected}"
            )
        return tuple(arrays[name] for name in names)

    def validation_probabilities(self, ids: Iterable[int] | None = None) -> tuple[list[int], np.ndarray, dict]:
        """A classification run's cached validation class probabilities of done entries.

        Returns
        -------
        ids : list of int
            The entries loaded (an entry whose file is missing or damaged is left out, as
            :meth:`validation_predictions` does with ``skip_missing=True``).
        probas : ndarray of shape (len(ids), n_valid, n_classes)
        skipped : dict of int to str
            The entries left out, with the reason.
        """
        if self.prediction_arrays != ("proba",):
            raise CatalogError(f"{self.run_dir}: a {self.task} run has no class probabilities")
        ids, arrays, skipped = self._load_predictions(ids, skip_missing=True)
        shape = (0, *self._prediction_shape)
        return ids, np.stack([a[0] for a in arrays]) if arrays else np.empty(shape), skipped

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
        if self.prediction_arrays != ("mean", "var"):
            raise CatalogError(f"{self.run_dir}: a {self.task} run has no means and variances: "
                               f"see validation_probabilities")
        loaded, arrays, skipped = self._load_predictions(ids, skip_missing)
        means, variances = [a[0] for a in arrays], [a[1] for a in arrays]
        shape = (0, *self._valid_targets.shape)
        return ValidationPredictions(
            loaded,
            np.stack(means) if means else np.empty(shape),
            np.stack(variances) if variances else np.empty(shape),
            skipped,
        )

    def _load_predictions(self, ids, skip_missing: bool) -> tuple[list[int], list[tuple], dict[int, str]]:
        ids = self.model_ids() if ids is None else [int(i) for i in ids]
        loaded, arrays, skipped = [], [], {}
        for entry_id in ids:
            try:
                arrays.append(self._read_predictions(entry_id))
            except CatalogError as exc:
                skipped[entry_id] = str(exc)
                continue
            loaded.append(entry_id)
        if skipped:
            listing = "; ".join(skipped.values())
            if not skip_missing:
                raise CatalogError(f"cannot load the validation predictions of {len(skipped)} entr"
                                   f"{'y' if len(skipped) == 1 else 'ies'}: {listing}")
            warnings.warn(f"skipped {len(skipped)} catalog entries: {listing}", CatalogWarning, stacklevel=3)
        return loaded, arrays, skipped

    def model_bytes(self, entry_id: int) -> bytes:
        """The bytes of a done entry's model file, checked as :meth:`load_model` checks them.

        Refused (:class:`CatalogError`) when the file is missing, outside the run directory,
        without a recorded checksum or not matching it, or larger than :data:`MAX_MODEL_BYTES`.
        """
        sha = (self.fold_entry(entry_id) if is_fold_id(entry_id) else self._done_row(entry_id, "model"))["model_sha256"]
        return self._read_checked(entry_id, self.model_path(entry_id), sha, "model", MAX_MODEL_BYTES)

    def load_model(self, entry_id: int):
        """The trained Keras model of a done entry (inputs and outputs in original units).

        Refuses, with a :class:`CatalogError`, a model file that is missing, outside the run
        directory, without a recorded checksum or not matching it, larger than
        :data:`MAX_MODEL_BYTES` (decompressed members included), holding members a saved model
        does not have, or holding a Lambda layer (which would run code stored in the file);
        Keras loads the checked bytes with ``safe_mode=True`` as a second guard
        (:func:`load_keras_model`). The model is not compiled (inference only).
        """
        data = self.model_bytes(entry_id)
        return load_keras_model(data, f"{self.run_dir}: entry {entry_id}: model file {self.model_path(entry_id)}")

    # ----------------------------------------------------------------- writing
    @classmethod
    def create_or_resume(cls, run_dir: str | Path, space: SearchSpace | dict | str, dataset,  # noqa: C901
                         search_options: dict | None = None, seed: int | None = None,
                         new_run: bool = False) -> "CatalogWriter":
        """Open ``run_dir`` for writing: create a new catalog, or resume the one in it.

        Parameters
        ----------
        run_dir : str or Path
        space : SearchSpace (or anything :func:`autodeuq.search.space.load_space` takes)
        dataset : autodeuq.table.data.Dataset
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
        # C901 above: the opening is one sequence of refusals, each with its own message, and a
        # writer released on any failure; the index's part of it is autodeuq.catalog.schema.
        run_dir = Path(run_dir)
        space = load_space(space)
        seed = None if seed is None else int(seed)
        try:
            search_json = dumps(search_options or {})
        except (TypeError, ValueError) as exc:
            raise CatalogError(f"search options must be JSON-serializable: {exc}") from None
        db = run_dir / DB_NAME
        if run_dir.exists() and not run_dir.is_dir():
            raise CatalogError(f"{run_dir}: exists and is not a directory; use a new run directory",
                               parameters=("run_dir",))
        contents = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_NAME) if run_dir.exists() else []
        if new_run and contents:
            raise CatalogError(f"{run_dir}: already exists and is not empty ({', '.join(contents[:5])}"
                               f"{', ...' if len(contents) > 5 else ''}); use a new run directory",
                               parameters=("run_dir",))
        if contents and not db.exists():
            raise CatalogError(f"{run_dir}: exists, is not empty and holds no autodeuq catalog; "
                               f"use a new run directory", parameters=("run_dir",))
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = acquire_lock(run_dir)
        conn = None
        try:
            refuse_links(run_dir, (*DB_FILES, MODELS_DIR, PREDICTIONS_DIR))
            try:
                conn = connect(db, isolation_level=None)
                with conn.limited(db):
                    # WAL + synchronous=FULL: every commit fsyncs the WAL before returning, so a recorded
                    # result survives power loss as well as a killed process (NORMAL could lose the last
                    # commits on power loss). One fsync per evaluation is nothing next to a training.
                    conn.execute("PRAGMA journal_mode=WAL")
                    conn.execute("PRAGMA synchronous=FULL")
                    info = read_run_info(conn, db)
                    triggers = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")]
            except sqlite3.DatabaseError as exc:
                raise CatalogError(f"{db}: cannot open the catalog: {exc}") from None
            if triggers:
                raise CatalogError(f"{db}: the catalog holds trigger(s) {', '.join(map(str, triggers))}, which an "
                                   f"autodeuq catalog never has; refusing to write it")
            versions = package_versions()
            if info is None:
                info = initialize(conn, space, dataset, search_options, seed, versions)
            else:
                decode_run_info(db, info)
                _check_matches(run_dir, info, space, dataset)
                if info["format_version"] < FORMAT_VERSION:
                    info = migrate(conn, info)
            conn.execute(
                "INSERT INTO sessions (start_time, host, pid, seed, search_json, versions_json) VALUES (?,?,?,?,?,?)",
                (time.time(), socket.gethostname(), os.getpid(), seed, search_json, dumps(versions)),
            )
            writer = CatalogWriter(run_dir, conn, info, lock)
        except BaseException:
            if conn is not None:
                conn.close()
            release_lock(lock)
            raise
        try:
            writer._prepare_folders()
        except BaseException:
            writer.close()
            raise
        return writer


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
            f"its entries would not be comparable. Use a new run directory", parameters=("run_dir",)
        )
    # Options that leave these arrays as they are (--impute median for data without gaps) still
    # change predictions; a catalog from before table encoding (no record) keeps its behaviour.
    recorded, wanted = meta.get("data", {}).get("preprocessing"), dataset.describe().get("preprocessing")
    if recorded is not None and wanted is not None and not _same_record(recorded, wanted):
        changed = [f"{k} {recorded.get(k)!r} recorded, {wanted.get(k)!r} asked"
                   for k in ("categorical", "impute", "drop", "id_column") if recorded.get(k) != wanted.get(k)]
        raise CatalogError(f"{run_dir}: its catalog was made with another table encoding "
                           f"({'; '.join(changed) or 'other categories or fill values'}). Use a new run directory",
                           parameters=("run_dir", "categorical", "impute", "drop", "id_column"))
    # The catalog is for the same rows (checked above) and both spaces are as searched on them, so
    # the rules that adapt ranges to the rows are compared through the ranges they gave: a space
    # file that gained such a rule resumes a run its ranges did not change.
    new_spec = json.loads(dumps(space.to_dict()))
    differences = _spec_differences(_without_row_rules(meta["space"]), _without_row_rules(new_spec))
    if differences:
        shown = "; ".join(differences[:5]) + ("; ..." if len(differences) > 5 else "")
        raise CatalogError(f"{run_dir}: its catalog was made for another search space ({shown}). "
                           f"Use a new run directory", parameters=("run_dir",))


# --------------------------------------------------------------------------- write side
class CatalogWriter(Catalog):
    """The search driver's handle on a run: submit configurations, record their results.

    Obtained from :meth:`Catalog.create_or_resume`; also offers every read method of
    :class:`Catalog`. Holds the run's lock until :meth:`close`.

    Examples
    --------
    The driver's loop, in outline (:class:`Catalog` has a complete example)::

        writer = Catalog.create_or_resume("runs/toy", space, dataset, {"algorithm": "agebo"}, seed=0)
        for entry_id, config in writer.pending():      # interrupted by a crash: train again
            submit_to_worker(entry_id, config)
        entry_id = writer.submit(config)
        writer.record(entry_id, result)
    """

    # results.csv is an export (the index is the truth): rewriting it for every result would put
    # O(catalog) work on the driver's hot path, so it is refreshed at most every CSV_INTERVAL s
    # and on close; and at most CSV_SHARE of the time, once a rewrite takes long (a large catalog).
    CSV_INTERVAL = 2.0
    CSV_SHARE = 0.05

    def __init__(self, run_dir: Path, conn: sqlite3.Connection, info: dict[str, Any], lock_handle):
        self.run_dir = Path(run_dir)
        self._lock_handle = lock_handle
        self._csv_written = 0.0
        self._csv_seconds = 0.0  # how long the last rewrite took
        self._csv_stale = False
        self._setup(conn, info)

    def close(self) -> None:
        if self._csv_stale and getattr(self, "_conn", None) is not None:
            self._refresh_results_csv(force=True)
        super().close()
        release_lock(self._lock_handle)

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
        replace_file(self.run_dir / META_NAME, (json.dumps(self.meta, indent=2, sort_keys=True) + "\n").encode())
        replace_file(self.run_dir / TARGETS_NAME, npy_bytes(self._valid_targets))
        self._write_results_csv()

    def _write_results_csv(self) -> None:
        tic = time.monotonic()
        buf = io.StringIO()
        self.to_dataframe().to_csv(buf, index=False)
        replace_file(self.run_dir / CSV_NAME, buf.getvalue().encode())
        self._csv_written, self._csv_stale = time.monotonic(), False
        self._csv_seconds = self._csv_written - tic

    def _refresh_results_csv(self, force: bool = False) -> None:
        self._csv_stale = True
        interval = max(self.CSV_INTERVAL, self._csv_seconds / self.CSV_SHARE)
        if not force and time.monotonic() - self._csv_written < interval:
            return
        try:
            self._write_results_csv()
        except OSError as exc:  # the index holds the result; the export catches up next time
            warnings.warn(f"could not rewrite {CSV_NAME}: {exc}", CatalogWarning, stacklevel=3)

    # ----------------------------------------------------------------- driver API
    def record_discarding(self, rule: dict[str, Any] | None, decision: dict[str, Any]) -> dict[str, Any]:
        """Record in the run's search options the early-discarding ``rule`` (its ``describe()``;
        None: none) that the trainings submitted from now on follow, and the ``decision`` that chose
        it (:data:`DISCARDING_DECISION`), so that a resumed search keeps both; returns the search
        options as recorded."""
        meta = json.loads(json.dumps(self._meta))
        meta["search"] = {**(meta.get("search") or {}), "early_discarding": rule, DISCARDING_DECISION: decision}
        db = self.run_dir / DB_NAME
        with self._conn.limited(db):
            self._conn.execute("UPDATE run SET value = ? WHERE key = 'meta_json'", (dumps(meta, indent=2),))
        self._meta = meta
        replace_file(self.run_dir / META_NAME, (json.dumps(self.meta, indent=2, sort_keys=True) + "\n").encode())
        return meta["search"]

    def submit(self, config: dict[str, Any], extra: dict[str, Any] | None = None) -> int:
        """Register a configuration about to be trained; returns its id (committed, never reused).

        ``extra`` is stored with the entry at once (a resumed driver reads it back, see
        :meth:`Catalog.full_trainings`); the result's own ``extra`` is added to it when recorded.
        """
        try:
            plain = json.loads(dumps(config))
            self.space.validate(plain)
        except (TypeError, ValueError) as exc:
            raise CatalogError(f"cannot submit {config!r}: not a configuration of the run's space: {exc}") from None
        arch, hp = SearchSpace.split(plain)
        with self._lock:
            if self._conn is None:
                raise CatalogError(f"{self.run_dir}: catalog is closed")
            # A submission stands between a freed worker and its next evaluation, so its commit
            # is not fsynced: the next recorded result's commit syncs the log with it. A power
            # loss can forget submissions since the last result, never a result (a killed
            # process forgets nothing: the operating system holds the write).
            self._conn.execute("PRAGMA synchronous=NORMAL")
            try:
                cursor = self._conn.execute(
                    "INSERT INTO evaluations (status, config_json, arch_json, hp_json, submit_time, "
                    "data_fingerprint, extra_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (Status.RUNNING, dumps(plain), json.dumps(arch, separators=(",", ":")), dumps(hp), time.time(),
                     self.fingerprint, dumps(extra) if extra else None),
                )
            finally:
                self._conn.execute("PRAGMA synchronous=FULL")
            return int(cursor.lastrowid)

    def pending(self) -> list[tuple[int, dict[str, Any]]]:
        """(id, config) of submitted entries without a result, by id: train them again on resume."""
        rows = self._query("SELECT id, config_json FROM evaluations WHERE status = ? ORDER BY id", (Status.RUNNING,))
        return [(int(r["id"]), self._decoded_config(r)) for r in rows]

    def record(self, entry_id: int, result: TrainResult) -> dict[str, Any]:
        """Store the result of a submitted entry, atomically, and return the entry as stored.

        A successful (or discarded) result's model and predictions are made durable under their
        final names first; then one transaction marks the entry done (or discarded). A failed
        result stores its reason and no file. A successful result that lacks its model or has
        predictions of the wrong shape is stored as failed, with the reason (and a warning).

        Parameters
        ----------
        entry_id : int
            The id :meth:`submit` returned; its entry must still be running.
        result : TrainResult

        Returns
        -------
        dict
            The entry as the index now holds it, :meth:`Catalog.entry`'s dict: its ``status``
            says whether the result was stored as given or as failed (``reason`` says why), and
            ``extra`` merges what :meth:`submit` stored with the result's own.

        Raises
        ------
        CatalogError
            The entry does not exist, already has a result, or the catalog is closed.
        """
        return self.record_many([(entry_id, result)])[0]

    def record_many(self, results: list[tuple[int, TrainResult]]) -> list[dict[str, Any]]:
        """:meth:`record` for several ``(entry_id, result)`` at once: their files are made durable
        together (one fsync per folder, not per file), then one transaction stores them all.

        Nothing is stored when one of them cannot be (another status than running, the same id
        twice): the :class:`CatalogError` names it.
        """
        with self._lock:
            staged, files = [], []
            for entry_id, result in results:
                entry_id = int(entry_id)
                row = self._row(entry_id)
                if row["status"] != Status.RUNNING or any(entry_id == e for e, *_ in staged):
                    raise CatalogError(f"{self.run_dir}: entry {entry_id} is already "
                                       f"{'recorded' if row['status'] == Status.RUNNING else row['status']}; "
                                       f"a result is recorded once")
                status, reason, model_sha, predictions_sha, written = self._stage(entry_id, result)
                files += written
                submitted = decode_json(row["extra_json"] or "{}", self._where(row), "extra_json")
                extra = {**(submitted if isinstance(submitted, dict) else {}), **(result.extra or {})}
                staged.append((entry_id, result, status, reason, model_sha, predictions_sha, extra))
            replace_files(files)
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for entry in staged:
                    self._commit_record(*entry)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            self._refresh_results_csv()
            return [self.entry(entry_id) for entry_id, *_ in staged]

    def _stage(self, entry_id: int, result: TrainResult) -> tuple:
        """(status, reason, model sha, predictions sha, [(path, bytes) to write]) of a result."""
        if result.ok:
            status, reason = (Status.DISCARDED if result.status == Status.DISCARDED else Status.DONE), None
        else:
            status, reason = Status.FAILED, str(result.reason or "unknown failure")
        if status in MODEL_STATUSES:
            problem = self.result_problem(result)
            if problem:
                warnings.warn(f"entry {entry_id}: recorded as failed: {problem}", CatalogWarning, stacklevel=4)
                status, reason = Status.FAILED, f"invalid result: {problem}"
        if status not in MODEL_STATUSES:
            return status, reason, None, None, []
        npz = npz_bytes(**{name: np.asarray(getattr(result, f"valid_{name}"), dtype=np.float64)
                           for name in self.prediction_arrays})
        model = bytes(result.model_bytes)
        return (status, reason, sha256_hex(model), sha256_hex(npz),
                [(self.model_path(entry_id), model), (self.predictions_path(entry_id), npz)])

    def result_problem(self, result: TrainResult) -> str | None:
        """Why :meth:`record` would store a done ``result`` as failed (no model, a non-finite
        objective, predictions of the wrong shape), or None: the rule the driver tells its
        searcher before the result is written."""
        if not isinstance(result.model_bytes, (bytes, bytearray)) or not result.model_bytes:
            return "no model bytes"
        if not isinstance(result.objective, (int, float)) or not math.isfinite(float(result.objective)):
            return f"non-finite objective {result.objective!r}"
        expected = self._prediction_shape
        for name in self.prediction_arrays:
            value = getattr(result, f"valid_{name}")
            shape = None if value is None else np.shape(value)
            if shape != expected:
                return f"valid_{name} has shape {shape}, expected {expected}"
        return None

    def _commit_record(self, entry_id, result, status, reason, model_sha, predictions_sha, extra) -> None:
        objective = float(result.objective) if status in MODEL_STATUSES else None
        cursor = self._conn.execute(
            "UPDATE evaluations SET status = ?, objective = ?, reason = ?, epochs = ?, best_epoch = ?, "
            "wall_time = ?, n_params = ?, worker = ?, start_time = ?, end_time = ?, record_time = ?, "
            "finish_order = (SELECT COALESCE(MAX(finish_order), 0) + 1 FROM evaluations), "
            "model_sha256 = ?, predictions_sha256 = ?, history_json = ?, extra_json = ? "
            "WHERE id = ? AND status = ?",
            (status, objective, reason, _number(result.epochs, int), _number(result.best_epoch, int),
             _number(result.wall_time, float), _number(result.n_params, int), str(result.worker or ""),
             _number(result.start_time, float), _number(result.end_time, float), time.time(),
             model_sha, predictions_sha, dumps(result.history or {}), dumps(extra),
             entry_id, Status.RUNNING),
        )
        if cursor.rowcount != 1:
            raise CatalogError(f"{self.run_dir}: entry {entry_id} was not running when its result arrived")
