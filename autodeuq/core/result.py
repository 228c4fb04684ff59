"""What one evaluation (one training of one configuration) sends back to the search driver."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np


class Status(StrEnum):
    """State of one evaluation; each member is the very string stored in the catalog and results.csv.

    >>> Status.DONE == "done", f"{Status.DISCARDED}", Status("failed") is Status.FAILED
    (True, 'discarded', True)
    """

    #: Submitted to a worker and not finished (or interrupted: re-run on resume).
    RUNNING = "running"
    #: Trained to its end: a usable model.
    DONE = "done"
    #: Stopped at a rung by early discarding: a usable model, trained for fewer epochs than it would have been.
    DISCARDED = "discarded"
    #: No usable model; the entry's reason says why.
    FAILED = "failed"


#: Statuses of entries that hold a trained model (and validation predictions).
MODEL_STATUSES = (Status.DONE, Status.DISCARDED)


def worker_name() -> str:
    """``host:pid`` of this process: the :attr:`TrainResult.worker` of what it evaluates."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class TrainResult:
    """Outcome of training one configuration.

    Everything here is plain data (numbers, numpy arrays, bytes), so it travels back from a
    remote worker and is written to the catalog by the driver alone.

    Attributes
    ----------
    status : {"done", "discarded", "failed"}
    objective : float
        Minimum validation Gaussian NLL over the epochs (standardized units), a classifier's
        minimum validation categorical NLL (log loss); ``inf`` on failure.
    reason : str or None
        Why the evaluation failed (``None`` when it succeeded).
    epochs : int
        Epochs actually run.
    best_epoch : int
        1-based epoch of the minimum validation loss (the weights kept).
    wall_time : float
        Seconds spent building and training.
    n_params : int
        Trainable parameters of the network.
    model_bytes : bytes or None
        The ``.keras`` file of the trained model (inputs and outputs in original units).
    valid_mean, valid_var : ndarray of shape (n_valid, n_targets) or None
        Validation predictions of the kept weights, original units (regression).
    valid_proba : ndarray of shape (n_valid, n_classes) or None
        A classifier's validation class probabilities of the kept weights.
    history : dict of lists
        Per-epoch ``loss``, ``val_loss`` and ``lr``.
    worker : str
        Host and process that ran the evaluation.
    start_time, end_time : float
        Unix timestamps of the evaluation on the worker.
    """

    status: Status
    objective: float = float("inf")
    reason: str | None = None
    epochs: int = 0
    best_epoch: int = 0
    wall_time: float = 0.0
    n_params: int = 0
    model_bytes: bytes | None = None
    valid_mean: np.ndarray | None = None
    valid_var: np.ndarray | None = None
    valid_proba: np.ndarray | None = None
    history: dict[str, list[float]] = field(default_factory=dict)
    worker: str = ""
    start_time: float = 0.0
    end_time: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the training produced a model (trained to its end, or discarded at a rung)."""
        return self.status in MODEL_STATUSES

    @classmethod
    def failure(cls, reason: str, **kwargs) -> "TrainResult":
        return cls(status=Status.FAILED, reason=reason, **kwargs)
