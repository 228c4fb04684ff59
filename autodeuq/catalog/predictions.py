"""The catalog's reads of what its entries trained: their model files and validation predictions,
checked against the index's checksums, in the task's arrays (:attr:`Task.prediction_arrays
<autodeuq.tasks.base.Task.prediction_arrays>`). :class:`PredictionReads` is a part of
:class:`~autodeuq.catalog.Catalog`."""
from __future__ import annotations

import math
import sqlite3
import warnings
from pathlib import Path
from typing import Iterable

import numpy as np

from autodeuq.catalog.artifacts import (
    MAX_MODEL_BYTES,
    CatalogError,
    load_keras_model,
    load_npz,
    read_verified,
)
from autodeuq.catalog.folds import is_fold_id
from autodeuq.catalog.layout import (
    _SHA256,
    MODELS_DIR,
    PREDICTIONS_DIR,
)
from autodeuq.core.errors import CatalogWarning
from autodeuq.core.result import MODEL_STATUSES
from autodeuq.tasks import TASKS, get_task


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


class PredictionReads:
    """The catalog's reads of its entries' model files and validation predictions (a part of
    :class:`~autodeuq.catalog.Catalog`, which gives ``run_dir``, ``meta`` and the index's rows)."""

    def fold_predictions(self, fold_id: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """A fold entry's held-out rows (their numbers among :meth:`fit_data`'s rows) and its
        predictions of them, in the order of :attr:`prediction_arrays` (read once per catalog object)."""
        return self._read_once(("fold", int(fold_id)), lambda: self._read_fold_predictions(fold_id))

    def _read_fold_predictions(self, fold_id: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
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
        """The run's :class:`~autodeuq.tasks.base.Task` (:func:`autodeuq.tasks.get_task` of :attr:`task`).

        Raises
        ------
        CatalogError
            The run's task is not registered in this process (:data:`autodeuq.tasks.TASKS`).
        """
        if self.task not in TASKS:
            raise CatalogError(f"{self.run_dir}: the run's task {self.task!r} is not registered here: the tasks are "
                               f"{list(TASKS)} (a task added outside the package is registered in "
                               f"autodeuq.tasks.TASKS before its catalog is read)")
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
        """The entry's validation predictions, in the order of :attr:`prediction_arrays`: read once
        per catalog object (:meth:`_read_once`)."""
        return self._read_once(("entry", int(entry_id)), lambda: self._read_entry_predictions(entry_id))

    def _read_once(self, key, read):
        """``read()``, memoized under ``key`` for this catalog object, its arrays made read-only: a
        recorded entry's files never change, and the ensemble stage asks for the same members'
        predictions in its selection, its calibration and its report."""
        memo = self.__dict__.setdefault("_arrays_read", {})
        if key not in memo:
            value = read()
            for array in (a for a in _arrays_of(value)):
                array.flags.writeable = False
            memo[key] = value
        return memo[key]

    def _read_entry_predictions(self, entry_id: int) -> tuple[np.ndarray, ...]:
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


def _arrays_of(value):
    """The numpy arrays in ``value``, a tuple of arrays or of tuples of arrays."""
    for item in value:
        if isinstance(item, np.ndarray):
            yield item
        else:
            yield from _arrays_of(item)
