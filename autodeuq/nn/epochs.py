"""The per-epoch bookkeeping of a training: Keras' ``ReduceLROnPlateau`` and
``EarlyStopping(restore_best_weights=True)`` on the validation loss, in pure Python
(:class:`EpochBookkeeper`), read by :func:`autodeuq.nn.train.train` after each compiled epoch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def _less32(a: float, b: float) -> bool:
    # Keras compares monitored values as float32 tensors (keras.ops.less); so do we, so that
    # near-ties go the same way.
    return bool(np.float32(a) < np.float32(b))


@dataclass(frozen=True)
class EpochDecision:
    """What to do after an epoch: keep its weights, change the learning rate, stop."""

    is_best: bool
    reduce_lr: bool
    new_lr: float
    stop: bool


class EpochBookkeeper:
    """Keras' ``ReduceLROnPlateau`` and ``EarlyStopping`` on the validation loss, in pure Python.

    Same rules as Keras 3 (mode ``min``, comparisons in float32 like ``keras.ops.less``):

    * learning rate: an epoch improves if ``val + min_delta_lr < best`` (or it is the first);
      otherwise, outside cooldown, ``wait`` grows and at ``patience_reduce_lr`` the rate is
      multiplied by ``factor`` (floored at ``min_lr``, only if still above it), ``wait`` resets
      and the cooldown starts;
    * early stopping: ``wait`` grows every epoch and resets when ``val < best`` (min_delta 0);
      training stops when ``wait >= patience_early_stopping`` (never at the first epoch);
    * best weights: those of the epoch early stopping last counted as an improvement, i.e. the
      first epoch of minimum validation loss; they are restored at the end in every case.

    Parameters
    ----------
    learning_rate : float
        Initial rate (held as float32, like the optimizer's variable).
    patience_reduce_lr, patience_early_stopping : int
    factor, min_delta_lr, cooldown, min_lr :
        Keras' ``ReduceLROnPlateau`` defaults.

    Examples
    --------
    >>> book = EpochBookkeeper(1e-2, patience_reduce_lr=1, patience_early_stopping=2)
    >>> [book.update(v).stop for v in (1.0, 1.0, 1.0)]
    [False, False, True]
    """

    def __init__(self, learning_rate: float, patience_reduce_lr: int, patience_early_stopping: int, *,
                 factor: float = 0.1, min_delta_lr: float = 1e-4, cooldown: int = 0, min_lr: float = 0.0):
        if not 0 < factor < 1:
            raise ValueError(f"factor must be in (0, 1), got {factor}")
        self.lr = float(np.float32(learning_rate))
        self.patience_reduce_lr = int(patience_reduce_lr)
        self.patience_early_stopping = int(patience_early_stopping)
        self.factor = float(factor)
        self.min_delta_lr = float(min_delta_lr)
        self.cooldown = int(cooldown)
        self.min_lr = float(min_lr)
        self.epoch = -1  # 0-based index of the last epoch seen
        self.best = math.inf  # lowest validation loss (early-stopping rule)
        self.best_epoch = -1  # 0-based
        self.stopped_epoch = None
        self.lr_reductions = 0
        self._lr_best = None
        self._lr_wait = 0
        self._cooldown_counter = 0
        self._es_wait = 0

    def update(self, val_loss: float) -> EpochDecision:
        """Record one epoch's validation loss and say what to do next."""
        self.epoch += 1
        current = float(val_loss)
        reduce_lr = self._update_lr(current)
        is_best, stop = self._update_early_stopping(current)
        if stop:
            self.stopped_epoch = self.epoch
        return EpochDecision(is_best=is_best, reduce_lr=reduce_lr, new_lr=self.lr, stop=stop)

    def _update_lr(self, current: float) -> bool:
        if self._cooldown_counter > 0:
            self._cooldown_counter -= 1
            self._lr_wait = 0
        if self._lr_best is None or _less32(current + self.min_delta_lr, self._lr_best):
            self._lr_best = current
            self._lr_wait = 0
            return False
        if self._cooldown_counter > 0:
            return False
        self._lr_wait += 1
        if self._lr_wait < self.patience_reduce_lr or not self.lr > np.float32(self.min_lr):
            return False
        self.lr = float(np.float32(max(self.lr * self.factor, self.min_lr)))
        self._cooldown_counter = self.cooldown
        self._lr_wait = 0
        self.lr_reductions += 1
        return True

    def _update_early_stopping(self, current: float) -> tuple[bool, bool]:
        self._es_wait += 1
        if self.best_epoch < 0 or _less32(current, self.best):
            self.best, self.best_epoch, self._es_wait = current, self.epoch, 0
            return True, False
        return False, self._es_wait >= self.patience_early_stopping and self.epoch > 0
