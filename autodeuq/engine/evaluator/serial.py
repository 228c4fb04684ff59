"""In-process evaluator: one evaluation at a time, for debugging and tests."""
from __future__ import annotations

from collections import deque

from autodeuq.core.result import TrainResult
from autodeuq.engine.evaluator.base import Evaluator, check_eval_timeout, guarded


class SerialEvaluator(Evaluator):
    """Runs each submitted evaluation, in order, inside :meth:`wait`.

    ``eval_timeout`` is recorded as a failure after the fact when an evaluation overran it
    (an in-process call cannot be interrupted safely).
    """

    n_slots = 1

    def __init__(self, objective, eval_timeout: float | None = None):
        self.objective = objective
        self.discarder = getattr(objective, "discarder", None)
        self.eval_timeout = check_eval_timeout(eval_timeout)
        self._queue: deque[tuple[int, dict]] = deque()

    def submit(self, eval_id, config):
        self._queue.append((eval_id, config))

    @property
    def n_running(self):
        return len(self._queue)

    def wait(self, timeout=None):
        if not self._queue:
            return []
        eval_id, config = self._queue.popleft()
        result = guarded(self.objective, eval_id, config)
        elapsed = result.end_time - result.start_time
        if self.eval_timeout is not None and elapsed > self.eval_timeout:
            result = TrainResult.failure(
                f"timeout: evaluation took {elapsed:.1f} s, more than the per-evaluation limit (eval_timeout) of "
                f"{self.eval_timeout:g} s",
                worker=result.worker, start_time=result.start_time, end_time=result.end_time,
            )
        return [(eval_id, result)]

    def set_discarder(self, discarder):
        self.objective = self.objective.with_discarder(discarder)
        self.discarder = discarder

    def cancel_all(self):
        ids = [i for i, _ in self._queue]
        self._queue.clear()
        return ids
