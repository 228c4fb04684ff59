"""The store: :class:`Catalog` reads a run directory, :class:`CatalogWriter` (the search
driver's, from :meth:`Catalog.create_or_resume`) submits configurations and records their results.

The run directory's layout and what makes it crash-safe and safe to read are in
:mod:`autodeuq.catalog`; the files are read through :mod:`autodeuq.catalog.artifacts` and the
index through :mod:`autodeuq.catalog.schema`. This module opens a catalog and answers the queries
of the search and the leaderboard; the reads of the entries' files
(:mod:`autodeuq.catalog.predictions`), the views of early discarding (:mod:`autodeuq.catalog.views`)
and the recording (:mod:`autodeuq.catalog.writer`) are modules of their own, whose classes
:class:`Catalog` and :class:`CatalogWriter` derive from.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from autodeuq.catalog.artifacts import (
    MAX_ARRAY_BYTES,
    CatalogError,
    decode_json,
    dumps,
    load_npy,
    package_versions,
    refuse_links,
)
from autodeuq.catalog.folds import FoldWriter, check_folds_table, describe_fold, has_folds_table, is_fold_id, plan_key
from autodeuq.catalog.layout import (  # noqa: F401 - the names the catalog exports, also from here
    _DERIVED_COLUMNS,
    _MAX_ID,
    _SHA256,
    CSV_NAME,
    DISCARDING_DECISION,
    LEADING_COLUMNS,
    META_NAME,
    MODELS_DIR,
    MUTATED_FROM,
    PLACEMENT_COLUMNS,
    PREDICTIONS_DIR,
    PROMOTED_FROM,
    STATUSES,
    TARGETS_NAME,
    TRAILING_COLUMNS,
    _checked_objective,
    _number,
)
from autodeuq.catalog.predictions import PredictionReads, ValidationPredictions  # noqa: F401 - exported
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
from autodeuq.catalog.views import DiscardingViews
from autodeuq.catalog.writer import Recording
from autodeuq.core.result import MODEL_STATUSES, Status
from autodeuq.search.space import ROW_RULE_KEYS, SearchSpace, load_space

# --------------------------------------------------------------------------- small helpers


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


# --------------------------------------------------------------------------- read side
class Catalog(PredictionReads, DiscardingViews):
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
class CatalogWriter(Recording, Catalog):
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


