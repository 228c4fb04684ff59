"""The catalog's writing: submitting configurations, recording results (files first, then the
index, each file's checksum with it), the results table and the early-discarding decisions.
:class:`Recording` is a part of :class:`~autodeuq.catalog.CatalogWriter`, the search driver's
writer (:meth:`~autodeuq.catalog.Catalog.create_or_resume`)."""
from __future__ import annotations

import contextlib
import io
import json
import math
import time
import warnings
from typing import Any

import numpy as np

from autodeuq.catalog.artifacts import (
    CatalogError,
    decode_json,
    dumps,
    npy_bytes,
    npz_bytes,
    sha256_hex,
)
from autodeuq.catalog.layout import (
    CSV_NAME,
    DISCARDING_DECISION,
    META_NAME,
    MODELS_DIR,
    PREDICTIONS_DIR,
    TARGETS_NAME,
    _number,
)
from autodeuq.catalog.schema import DB_NAME
from autodeuq.core.errors import CatalogWarning
from autodeuq.core.fileio import TEMP_SUFFIX, replace_file, replace_files
from autodeuq.core.result import MODEL_STATUSES, Status, TrainResult
from autodeuq.search.space import SearchSpace


class Recording:
    """What the writer records (a part of :class:`~autodeuq.catalog.CatalogWriter`, which holds the
    lock and the writable connection)."""

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
