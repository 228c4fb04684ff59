"""The catalog's index: the SQLite schema, its format version and migrations, the connection
that bounds every query in time, and the lock that lets one process write a run.

- :data:`SCHEMA` creates the tables ``run`` (the run's metadata and stored arrays),
  ``evaluations`` (one row per configuration submitted) and ``sessions`` (one row per writer that
  opened the run). :func:`initialize` creates them and commits the run metadata in one
  transaction, so an index is either complete or absent.
- An index is read, never trusted: :func:`read_run_info` checks its tables and columns (no view
  stands in for a table), :func:`decode_run_info` its format and version; every statement runs
  under :data:`QUERY_TIME_LIMIT` (:func:`connect`, :func:`connect_readonly`).
- :data:`FORMAT_VERSION` is the version written; a writer brings an older index up to it
  (:func:`migrate`), readers take it as it is.
- :func:`acquire_lock` holds an advisory lock on ``catalog.lock`` for the one writer of a run,
  freed when that process dies.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import sqlite3
import stat
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from autodeuq.catalog.artifacts import (
    MAX_ARRAY_BYTES,
    CatalogError,
    decode_json,
    dumps,
    load_npy,
    npy_bytes,
    refuse_hard_links,
)
from autodeuq.core.errors import CatalogWarning
from autodeuq.core.fileio import O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK, os_reason

FORMAT = "autodeuq-catalog"
# Version 2 adds the status 'discarded' (early discarding); a writer migrates version 1 on opening.
FORMAT_VERSION = 2

DB_NAME = "catalog.sqlite"
LOCK_NAME = "catalog.lock"
# Files SQLite keeps next to the index: a planted link there would make SQLite write elsewhere.
DB_FILES = (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal")

QUERY_TIME_LIMIT = 60.0  #: seconds after which a query on the index is aborted
_PROGRESS_STEPS = 10_000  # SQLite virtual-machine steps between two checks of the time limit

#: The tables of the index (statements separated by ``;``).
SCHEMA = """
CREATE TABLE IF NOT EXISTS run (
    key   TEXT PRIMARY KEY,
    value NOT NULL
);
CREATE TABLE IF NOT EXISTS evaluations (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,  -- AUTOINCREMENT: an id is never reused
    status             TEXT NOT NULL CHECK (status IN ('running', 'done', 'discarded', 'failed')),
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
# The columns each table must have (checked on open: the index is read, never trusted).
_TABLES = {
    name: tuple(re.findall(r"^\s{4}(\w+)\s", body, flags=re.MULTILINE))
    for name, body in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\);", SCHEMA, flags=re.DOTALL)
}
# Run-table keys holding arrays that are read only when asked for (they may be large).
_ARRAY_KEYS = ("x_test", "y_test", "x_train", "y_train", "x_valid", "y_valid")


class _Connection(sqlite3.Connection):
    """A connection whose statements can be bounded in time (:meth:`limited`).

    A crafted index (a recursive view in place of a table, say) must not hang its reader: while
    a limit is set, SQLite's progress handler aborts any statement that runs past it.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._deadline = None
        self.set_progress_handler(self._over_time, _PROGRESS_STEPS)

    def _over_time(self) -> bool:
        return self._deadline is not None and time.monotonic() > self._deadline

    @contextlib.contextmanager
    def limited(self, where):
        """Run the enclosed statements under :data:`QUERY_TIME_LIMIT`; SQLite errors become
        :class:`CatalogError` naming ``where``."""
        outer = self._deadline
        if outer is None:
            self._deadline = time.monotonic() + QUERY_TIME_LIMIT
        try:
            yield self
        except sqlite3.DatabaseError as exc:
            if "interrupted" in str(exc) and self._over_time():
                raise CatalogError(f"{where}: a query on the catalog ran longer than {QUERY_TIME_LIMIT:g} s and "
                                   f"was stopped; the catalog is damaged or was crafted") from None
            raise CatalogError(f"{where}: cannot read the catalog: {exc}") from None
        except (OverflowError, MemoryError) as exc:
            raise CatalogError(f"{where}: cannot read the catalog: {type(exc).__name__}: {exc}") from None
        finally:
            self._deadline = outer


def connect(db, **kwargs) -> _Connection:
    conn = sqlite3.connect(db, check_same_thread=False, factory=_Connection, **kwargs)
    try:
        # Functions with side effects may not run from inside the schema (views, triggers, defaults).
        conn.execute("PRAGMA trusted_schema = OFF")
    except BaseException:
        conn.close()
        raise
    return conn


def connect_readonly(db: Path) -> _Connection:
    uri = db.resolve().as_uri()
    try:
        return _probe(connect(f"{uri}?mode=ro", uri=True))
    except sqlite3.OperationalError:
        # A WAL database in a folder we may not write (no -shm can be made): only a frozen
        # copy can be read, and immutable=1 is how SQLite is told so.
        return _probe(connect(f"{uri}?mode=ro&immutable=1", uri=True))


def _probe(conn: _Connection) -> _Connection:
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except BaseException:
        conn.close()
        raise
    return conn


def _check_schema(conn: sqlite3.Connection, where) -> bool:
    """Whether the catalog's tables exist; raises CatalogError when they exist but are not the
    expected tables with the expected columns (False: none exists, its creation never committed)."""
    kinds = dict(conn.execute(
        f"SELECT name, type FROM sqlite_master WHERE name IN ({', '.join('?' * len(_TABLES))})", tuple(_TABLES),
    ).fetchall())
    if not kinds:
        return False
    for name, columns in _TABLES.items():
        kind = kinds.get(name)
        if kind is None:
            raise CatalogError(f"{where}: damaged catalog: it has no table {name!r}")
        if kind != "table":
            raise CatalogError(f"{where}: not an autodeuq catalog: {name!r} is a {kind}, not a table")
        info = conn.execute(f"PRAGMA table_info({name})").fetchall()  # name: one of ours, not input
        have = {row[1] for row in info}
        missing = [c for c in columns if c not in have]
        if missing:
            raise CatalogError(f"{where}: damaged catalog: table {name!r} lacks column(s) {', '.join(missing)}")
        if name == "evaluations" and [(r[1], str(r[2]).upper()) for r in info if r[5]] != [("id", "INTEGER")]:
            raise CatalogError(f"{where}: damaged catalog: evaluations.id is not its INTEGER PRIMARY KEY")
    return True


def read_run_info(conn: sqlite3.Connection, where) -> dict[str, Any] | None:
    """The committed run metadata, or None when the catalog's creation never committed."""
    if not _check_schema(conn, where):
        return None
    rows = conn.execute(
        f"SELECT key, value FROM run WHERE key NOT IN ({', '.join('?' * len(_ARRAY_KEYS))})", _ARRAY_KEYS,
    ).fetchall()
    info = dict(rows)
    return info if "meta_json" in info else None


def decode_run_info(where: Path, info: dict[str, Any]) -> tuple[dict[str, Any], np.ndarray, str]:
    """(metadata, validation targets, data fingerprint) of the run table, checked."""
    version = info.get("format_version")
    if (info.get("format") != FORMAT or not isinstance(version, int) or isinstance(version, bool)
            or version > FORMAT_VERSION):
        raise CatalogError(
            f"{where}: catalog format {info.get('format')!r} version {version!r} "
            f"is not one this autodeuq reads ({FORMAT!r} <= {FORMAT_VERSION})"
        )
    meta = decode_json(info.get("meta_json"), str(where), "run metadata (meta_json)")
    if not isinstance(meta, dict) or not isinstance(meta.get("space"), dict):
        raise CatalogError(f"{where}: damaged catalog: run metadata (meta_json) has no search space")
    value = info.get("valid_targets")
    try:
        if isinstance(value, (bytes, bytearray)) and len(value) > MAX_ARRAY_BYTES:
            raise ValueError(f"{len(value)} bytes")
        targets = load_npy(value)
    except ValueError as exc:
        raise CatalogError(f"{where}: damaged catalog: validation targets (valid_targets) cannot be read: "
                           f"{exc}") from None
    fingerprint = info.get("fingerprint")
    if not isinstance(fingerprint, str):
        raise CatalogError(f"{where}: damaged catalog: the data fingerprint is {fingerprint!r}")
    return meta, targets, fingerprint


def initialize(conn, space, dataset, search_options, seed, versions) -> dict[str, Any]:
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
        "meta_json": dumps(meta, indent=2),
        "valid_targets": npy_bytes(dataset.y_valid),
    }
    arrays = _arrays_to_store(dataset)
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.executemany("INSERT OR REPLACE INTO run (key, value) VALUES (?, ?)",
                         [*info.items(), *arrays.items()])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return info


def migrate(conn, info: dict[str, Any]) -> dict[str, Any]:
    """Bring a version-1 catalog to the current format, in one transaction.

    Version 2 only widens the status CHECK (adds 'discarded'); SQLite cannot alter a constraint,
    so the table is rebuilt from the current schema and the rows copied, ids included.
    """
    create = next(statement for statement in SCHEMA.split(";") if "TABLE IF NOT EXISTS evaluations" in statement)
    columns = ", ".join(_TABLES["evaluations"])
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(create.replace("TABLE IF NOT EXISTS evaluations", "TABLE evaluations_migrated"))
        conn.execute(f"INSERT INTO evaluations_migrated ({columns}) SELECT {columns} FROM evaluations")
        conn.execute("DROP TABLE evaluations")
        conn.execute("ALTER TABLE evaluations_migrated RENAME TO evaluations")
        conn.execute("CREATE INDEX IF NOT EXISTS evaluations_status ON evaluations (status)")
        conn.execute("UPDATE run SET value = ? WHERE key = 'format_version'", (FORMAT_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return {**info, "format_version": FORMAT_VERSION}


def _arrays_to_store(dataset) -> dict[str, bytes]:
    """The test set, the training rows and the validation rows, as ``.npy`` bytes: what a report
    (test scores, the 1-D plot's training points) and a refit of the ensemble's members need
    besides the index, so that they never re-read the user's (moved, relative) data files."""
    pairs = {"test set": ("x_test", "y_test"), "training points": ("x_train", "y_train"),
             "validation rows": ("x_valid", "y_valid")}
    out = {}
    for what, keys in pairs.items():
        x, y = (getattr(dataset, key, None) for key in keys)
        if x is None or y is None:
            continue
        stored = {key: npy_bytes(value) for key, value in zip(keys, (x, y))}
        if sum(map(len, stored.values())) > MAX_ARRAY_BYTES:
            later = ("reports will not show it unless the test table is given again" if keys[0] == "x_test"
                     else "a refit of the ensemble's members will not be possible")
            warnings.warn(f"the {what} are too large to keep in the catalog ({MAX_ARRAY_BYTES} bytes at most); "
                          f"{later}", CatalogWarning, stacklevel=4)
            continue
        out.update(stored)
    return out


def acquire_lock(run_dir: Path):
    """Exclusive advisory lock so that one process at a time writes a run (freed if it dies).

    The lock file is opened without following links (a link planted there would make the
    holder's line overwrite whatever it points to) and must be a regular file.
    """
    path = run_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            raise CatalogError(f"{path}: is a symbolic link; refusing to follow it (remove it)") from None
        raise CatalogError(f"{path}: cannot open the lock file: {os_reason(exc)}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise CatalogError(f"{path}: not a regular file; remove it")
    if info.st_nlink > 1:  # the holder's line below would overwrite every other name of the file
        os.close(fd)
        refuse_hard_links(path, info)
    handle = os.fdopen(fd, "r+")
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


def release_lock(handle) -> None:
    if handle is not None and not handle.closed:
        handle.close()  # closing the file releases the flock
