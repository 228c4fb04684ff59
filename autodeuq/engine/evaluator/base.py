"""The evaluator interface and the objective every evaluation runs."""
from __future__ import annotations

import copy
import time
from abc import ABC, abstractmethod
from typing import Any, Callable

import numpy as np

from autodeuq.core.errors import ParameterError
from autodeuq.core.result import TrainResult, worker_name

Objective = Callable[[int, dict], TrainResult]


class Evaluator(ABC):
    """Runs ``objective(eval_id, config)`` calls, ``n_slots`` of them at once.

    The search driver keeps at most ``n_slots`` evaluations submitted; it collects finished
    ones with :meth:`wait` and submits new ones at once, so no slot idles.
    """

    n_slots: int = 1
    #: The early-discarding rule the evaluations consult (shared state), or None.
    discarder = None

    @abstractmethod
    def submit(self, eval_id: int, config: dict) -> None:
        """Start evaluating ``config`` under the catalog id ``eval_id``."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> list[tuple[int, TrainResult]]:
        """Block until at least one evaluation ends (or ``timeout`` s pass); return the finished ones."""

    @property
    @abstractmethod
    def n_running(self) -> int:
        """Evaluations submitted and not yet returned by :meth:`wait`."""

    def cancel_all(self) -> list[int]:
        """Cancel every running evaluation; return their ids (they stay resumable)."""
        return []

    def set_discarder(self, discarder) -> None:
        """Make the evaluations submitted from now on consult ``discarder`` (None: each trains to its
        own end); the ones running keep theirs. The objective must have ``with_discarder``."""
        raise NotImplementedError(f"{type(self).__name__} cannot change its early-discarding rule")

    def close(self) -> None:
        """Release the evaluator's resources."""

    def describe(self) -> dict[str, Any]:
        return {"kind": type(self).__name__, "slots": self.n_slots}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def positive_seconds(name: str, value) -> float | None:
    """``value`` as a float number of seconds > 0, or None when it is None; anything else is
    refused with a :class:`~autodeuq.core.errors.ParameterError` naming ``name``."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ParameterError(name, "must be > 0 seconds", value) from None
    if not seconds > 0:  # NaN too
        raise ParameterError(name, "must be > 0 seconds", value)
    return seconds


def check_eval_timeout(eval_timeout: float | None) -> float | None:
    """``eval_timeout`` as a float, or None; a limit <= 0 would fail every evaluation, so it is refused."""
    return positive_seconds("eval_timeout", eval_timeout)


def evaluation_threads(cpus_per_eval: float | None) -> int:
    """TensorFlow threads of an evaluation given ``cpus_per_eval`` CPUs (None: 1): one per whole CPU, at least one.

    >>> evaluation_threads(None), evaluation_threads(0.5), evaluation_threads(4)
    (1, 1, 4)
    """
    return max(1, int(cpus_per_eval or 1))


def evaluation_seed(seed: int, eval_id: int) -> int:
    """The training seed of evaluation ``eval_id`` of a search seeded with ``seed``.

    Child ``eval_id`` of ``numpy.random.SeedSequence(seed)`` (what ``SeedSequence(seed).spawn``
    would hand out at that position), reduced to 32 bits: any non-negative ``seed`` works and
    the result is always a seed ``keras.utils.set_random_seed`` accepts.

    Examples
    --------
    >>> evaluation_seed(12345, 0) == evaluation_seed(12345, 0) != evaluation_seed(12345, 1)
    True
    """
    seed, eval_id = int(seed), int(eval_id)
    if seed < 0 or eval_id < 0:
        raise ValueError(f"seed and evaluation id must be >= 0, got seed={seed}, id={eval_id}")
    return int(np.random.SeedSequence(seed, spawn_key=(eval_id,)).generate_state(1, np.uint32)[0])


def guarded(objective: Objective, eval_id: int, config: dict) -> TrainResult:
    """Run the objective; any exception becomes a failure result instead of propagating.

    Except an interrupt: Ctrl-C or SIGTERM (a ``KeyboardInterrupt``) propagates, also when a
    native module turned it into another error on its way out. pybind11 reports an exception
    raised while an extension module initializes as an ``ImportError`` caused by it, so a
    SIGTERM during TensorFlow's first import would otherwise read as a failed evaluation (and
    leave an import that fails again in every later one).
    """
    start = time.time()
    try:
        result = objective(eval_id, config)
    except Exception as exc:  # a failing evaluation must never stop the search
        interrupt = _interrupt_behind(exc)
        if interrupt is not None:
            raise type(interrupt)(*interrupt.args) from exc
        result = TrainResult.failure(f"{type(exc).__name__}: {exc}", wall_time=time.time() - start)
    if not isinstance(result, TrainResult):
        result = TrainResult.failure(f"objective returned {type(result).__name__}, not TrainResult")
    result.worker = result.worker or worker_name()
    result.start_time = result.start_time or start
    result.end_time = result.end_time or time.time()
    return result


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The ``KeyboardInterrupt`` in the cause or context chain of ``exc``, if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


class TrainingObjective:
    """Train one configuration on a dataset: what every evaluation of a search runs.

    Holds plain data only (the space description, the dataset arrays), so it pickles cheaply
    to remote workers; TensorFlow is imported in the worker, on first call.

    Parameters
    ----------
    space : SearchSpace
    dataset : Dataset
    seed : int
        Base seed (any non-negative integer); evaluation ``i`` trains with
        :func:`evaluation_seed` ``(seed, i)``.
    epochs : int, optional
        Override of the space's epoch budget.
    threads : int, optional
        TensorFlow intra-op threads (the CPUs given to one evaluation).
    discarder : SuccessiveHalving, optional
        Early discarding shared by every evaluation (:mod:`autodeuq.discard`); an evaluator
        running evaluations in other processes moves its records where they all reach them.
    time_limit : float, optional
        Seconds each training may take (``time_limit`` of :func:`autodeuq.nn.train.train`: it ends
        early, keeping its best epoch, rather than run past them).
    """

    def __init__(self, space, dataset, seed: int = 0, epochs: int | None = None, threads: int | None = None,
                 discarder=None, time_limit: float | None = None):
        self.space_spec = space.to_dict()
        self.space_source = space.source
        self.dataset = dataset
        evaluation_seed(seed, 0)  # refuse a bad seed now, not in every evaluation
        self.seed = int(seed)
        self.epochs = epochs
        self.threads = threads
        self.discarder = discarder
        self.time_limit = positive_seconds("time_limit", time_limit)
        self._space = None

    def with_discarder(self, discarder) -> "TrainingObjective":
        """The same objective consulting ``discarder``."""
        clone = copy.copy(self)
        clone.discarder = discarder
        return clone

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_space"] = None
        return state

    def __call__(self, eval_id: int, config: dict) -> TrainResult:
        from autodeuq.nn.train import configure_threads, train
        from autodeuq.search.space import SearchSpace

        if self.threads:
            configure_threads(self.threads)
        if self._space is None:
            self._space = SearchSpace(self.space_spec, source=self.space_source)
        return train(config, self._space, self.dataset, seed=evaluation_seed(self.seed, eval_id),
                     **self._training_options(eval_id))

    def _training_options(self, eval_id: int) -> dict:
        """Keywords of :func:`autodeuq.nn.train.train` for evaluation ``eval_id`` (a subclass may change them)."""
        return {"epochs": self.epochs, "discarder": self.discarder, "time_limit": self.time_limit}
