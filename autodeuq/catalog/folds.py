"""Cross-fitted networks in a catalog: a search entry's configuration trained on all but one fold.

The cross-fitted ensemble stage (:mod:`autodeuq.ensemble.crossfit`) trains the best
configurations of a search again on K folds of the training and validation rows together, each
fold's network stopping early on the fold it leaves out. Each such network is a catalog entry of
its own, in the ``folds`` table of the index beside ``evaluations``: which search entry's
configuration it trains, which fold it leaves out, under which fold plan (the number of folds,
the seed of the assignment and the rows, as JSON), with its model and its held-out predictions
stored and checksummed as every other entry's (``models/<id>.keras``, ``predictions/<id>.npz``:
the predictions of the rows it left out, and their row numbers in ``rows``).

Fold entries have ids from :data:`FOLD_ID_START` on, so that an ensemble names its members the
same way whether they are search entries or fold networks (:meth:`Catalog.model_bytes
<autodeuq.catalog.Catalog.model_bytes>` reads both); they never appear among the search's
entries (:meth:`~autodeuq.catalog.Catalog.model_ids`, ``results.csv``) and never feed a
searcher. A fold network is recorded only once its files are durable, in one transaction, so an
interrupted stage resumes with the folds it has (:class:`FoldWriter`).
"""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import numpy as np

from autodeuq.catalog.artifacts import CatalogError, npz_bytes, refuse_links, sha256_hex
from autodeuq.catalog.schema import DB_FILES, DB_NAME, acquire_lock, connect, release_lock
from autodeuq.core.fileio import replace_files

#: The first id of a fold entry: far above any search's entry ids, below SQLite's largest integer.
FOLD_ID_START = 1 << 40

FOLDS_TABLE = """
CREATE TABLE IF NOT EXISTS folds (
    id                 INTEGER PRIMARY KEY,
    entry              INTEGER NOT NULL,
    fold               INTEGER NOT NULL,
    plan_json          TEXT NOT NULL,
    objective          REAL NOT NULL,
    epochs             INTEGER,
    best_epoch         INTEGER,
    wall_time          REAL,
    n_params           INTEGER,
    model_sha256       TEXT NOT NULL,
    predictions_sha256 TEXT NOT NULL,
    record_time        REAL NOT NULL,
    UNIQUE (entry, fold, plan_json)
)"""
FOLD_COLUMNS = ("id", "entry", "fold", "plan_json", "objective", "epochs", "best_epoch", "wall_time", "n_params",
                "model_sha256", "predictions_sha256", "record_time")


def is_fold_id(entry_id) -> bool:
    """Whether ``entry_id`` names a fold entry rather than a search entry.

    >>> is_fold_id(12), is_fold_id(FOLD_ID_START + 3)
    (False, True)
    """
    return int(entry_id) >= FOLD_ID_START


def plan_key(plan: dict) -> str:
    """The canonical JSON of a fold plan, as the index stores it.

    >>> plan_key({"seed": 0, "folds": 5, "rows": 120})
    '{"folds":5,"rows":120,"seed":0}'
    """
    return json.dumps(plan, sort_keys=True, separators=(",", ":"))


def has_folds_table(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'folds'").fetchall())


def check_folds_table(conn: sqlite3.Connection, where) -> None:
    """Refuse a ``folds`` table that lacks a column of :data:`FOLD_COLUMNS` (a damaged catalog)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(folds)").fetchall()}
    missing = [c for c in FOLD_COLUMNS if c not in have]
    if missing:
        raise CatalogError(f"{where}: damaged catalog: table 'folds' lacks column(s) {', '.join(missing)}")


class FoldWriter:
    """Records fold networks in an existing catalog, holding its lock (so never while a search
    writes it). Use as a context manager.

    Parameters
    ----------
    run_dir : path
        A run directory holding a catalog.
    models_dir, predictions_dir : str
        The catalog's folders of model and prediction files.
    """

    def __init__(self, run_dir, models_dir: str, predictions_dir: str):
        self.run_dir = Path(run_dir)
        self.models_dir, self.predictions_dir = self.run_dir / models_dir, self.run_dir / predictions_dir
        db = self.run_dir / DB_NAME
        self._lock = acquire_lock(self.run_dir)
        self._conn = None
        try:
            refuse_links(self.run_dir, (*DB_FILES, models_dir, predictions_dir))
            self._conn = connect(db, isolation_level=None)
            with self._conn.limited(db):
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=FULL")
                self._conn.execute(FOLDS_TABLE)
                check_folds_table(self._conn, db)
                last = self._conn.execute("SELECT MAX(id) FROM folds").fetchone()[0]
            #: The first id no fold entry has: a training's slot counts from it.
            self.first_free = max(int(last) + 1, FOLD_ID_START) if last is not None else FOLD_ID_START
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._lock is not None:
            release_lock(self._lock)
            self._lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def record(self, entry: int, fold: int, plan: dict, result, rows: np.ndarray, arrays: dict, slot: int) -> int:
        """Store ``result`` (a done :class:`~autodeuq.result.TrainResult`) as the network of search
        entry ``entry``'s configuration that left out fold ``fold`` of ``plan``; ``rows`` are the
        rows it left out and ``arrays`` its predictions of them (``mean``/``var`` or ``proba``).
        Returns the fold entry's id: :attr:`first_free` + ``slot``, the training's place in the
        stage's list, so that the ids do not depend on which training ends first."""
        db = self.run_dir / DB_NAME
        fold_id = self.first_free + int(slot)
        model = bytes(result.model_bytes)
        # The catalog's .npy arrays are 2-D floats: the row numbers too.
        npz = npz_bytes(rows=np.asarray(rows, dtype=np.float64).reshape(-1, 1),
                        **{k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()})
        replace_files([(self.models_dir / f"{fold_id}.keras", model), (self.predictions_dir / f"{fold_id}.npz", npz)])
        with self._conn.limited(db):
            self._conn.execute(
                f"INSERT INTO folds ({', '.join(FOLD_COLUMNS)}) VALUES ({', '.join('?' * len(FOLD_COLUMNS))})",
                (fold_id, int(entry), int(fold), plan_key(plan), float(result.objective),
                 _int_or_none(result.epochs), _int_or_none(result.best_epoch),
                 None if result.wall_time is None else float(result.wall_time),
                 _int_or_none(result.n_params), sha256_hex(model), sha256_hex(npz), time.time()))
        return fold_id


def _int_or_none(value):
    return None if value is None else int(value)


def describe_fold(row) -> dict:
    """A fold entry's record as a plain dict (its plan decoded)."""
    out = {k: row[k] for k in FOLD_COLUMNS if k != "plan_json"}
    out["plan"] = json.loads(row["plan_json"])
    return out


__all__ = ["FOLD_ID_START", "FoldWriter", "describe_fold", "is_fold_id", "plan_key"]
