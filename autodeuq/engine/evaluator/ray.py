"""Ray evaluator: one Ray task per evaluation, on a local instance or an existing cluster (or, where
evaluations need GPUs that a reused task process could confuse, a pool of actors that keep theirs)."""
from __future__ import annotations

import collections
import contextlib
import os
import time
import warnings
from dataclasses import dataclass
from typing import Any

from autodeuq.core.errors import AutoDEUQWarning, ParameterError
from autodeuq.core.result import TrainResult
from autodeuq.engine.evaluator.base import Evaluator, check_eval_timeout, guarded
from autodeuq.engine.evaluator.ray_session import (  # noqa: F401  (re-exported: they lived here)
    AUTH_FIX,
    FAILURE_HANDLER_VARIABLE,
    RAY_CONNECT_TIMEOUT,
    RayConnectionError,
    _import_ray,
    _init,
    _sigterm_deferred,
    connection_failure,
    init_ray,
)


class ConcurrencyWarning(AutoDEUQWarning):
    """Fewer evaluations run at once than asked: the Ray cluster's resources hold no more."""


def _run_task(objective, eval_id: int, config: dict, gpus: float, report_start: bool):
    # A generator task. Under a per-evaluation timeout its first item says when it started on a
    # worker, so that the timeout does not count the time the task waited in Ray's queue (without
    # one, that item would only wake the driver once more per evaluation).
    if report_start:
        yield time.time()
    if not gpus:
        _hide_gpus()
    result = guarded(objective, eval_id, config)
    result.extra = {**(result.extra or {}), PLACEMENT: placement()}
    yield result


#: Key of an evaluation's ``extra`` (its catalog record) saying where it ran (:func:`placement`).
PLACEMENT = "placement"


def placement() -> dict:
    """Where the calling Ray task runs: its node (id and address) and the GPUs Ray gave it.

    ``gpu_ids`` are Ray's ids of the GPUs assigned to the task (empty without GPUs);
    ``cuda_visible_devices`` is what the task's process had, so what TensorFlow saw: the devices Ray
    gave it (renumbered from 0), or an empty string, none, when it was given no GPU
    (:func:`_hide_gpus`).
    """
    import ray

    context = ray.get_runtime_context()
    gpus = context.get_accelerator_ids().get("GPU", [])
    return {"node": context.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
            "gpu_ids": [str(g) for g in gpus], "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def _hide_gpus() -> None:
    """Keep an evaluation that Ray gave no GPU off the node's GPUs.

    Ray (2.60) leaves ``CUDA_VISIBLE_DEVICES`` as the worker inherited it for a task given no GPU
    (unless ``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1``), so on a GPU node such an evaluation's
    TensorFlow would see every GPU, reserve their memory and place its ops there, beside the
    evaluations that were given them. Set before TensorFlow first looks for devices in the worker
    process (it reads the variable once).
    """
    os.environ["CUDA_VISIBLE_DEVICES"] = ""


def pinned_workers(gpus_per_eval: float) -> bool:
    """Whether evaluations given ``gpus_per_eval`` GPUs must run on workers that keep their GPUs:
    when they use GPUs and a node of the cluster has more than one evaluation takes (at least one).

    Ray reuses a task's worker process for later tasks and, once it has been idle, with other GPUs:
    it sets the new ids in ``CUDA_VISIBLE_DEVICES``, but TensorFlow read the variable when the
    process first used a GPU and keeps computing there, on a GPU that Ray may have given to another
    evaluation. Where an evaluation takes all of its node's GPUs (one GPU per node, say) the ids
    cannot change and tasks are kept. Otherwise each evaluation runs on a :class:`PinnedWorker`, a
    Ray actor that holds the GPUs Ray gave it when it started for as long as it lives.
    """
    import ray

    takes = max(1.0, float(gpus_per_eval))
    return bool(gpus_per_eval) and any(
        node.get("Alive") and node.get("Resources", {}).get("GPU", 0) > takes for node in ray.nodes())


class PinnedWorker:
    """A worker process that keeps one set of GPUs: a Ray actor, made by :class:`_WorkerPool`.

    Ray gives an actor its GPUs once, when it starts, and sets ``CUDA_VISIBLE_DEVICES`` before
    anything in it runs, so TensorFlow in this process only ever sees those; its evaluations one
    after the other keep the process's imports, traces and GPU context.
    """

    def run(self, objective, eval_id: int, config: dict, gpus: float, report_start: bool):
        yield from _run_task(objective, eval_id, config, gpus, report_start)


class _WorkerPool:
    """The evaluator's :class:`PinnedWorker` actors, at most ``size`` alive: each runs one evaluation
    at a time; one is started when an evaluation is submitted, none is idle and fewer than ``size``
    live; one is ended when its evaluation failed with it or was cancelled, and all when the
    evaluator closes."""

    def __init__(self, cpus: float, gpus: float, size: int):
        import ray

        self._actor = ray.remote(PinnedWorker).options(num_cpus=cpus, num_gpus=gpus, max_restarts=0,
                                                       max_task_retries=0)
        self.size = size
        self._idle: list = []
        self.started = 0  # actors started so far
        self.live = 0

    def take(self):
        """An idle worker, a new one, or None when ``size`` are alive and busy."""
        if self._idle:
            return self._idle.pop()
        if self.live >= self.size:
            return None
        self.started += 1
        self.live += 1
        return self._actor.remote()

    def release(self, worker) -> None:
        self._idle.append(worker)

    def end(self, worker) -> None:
        import ray

        self.live -= 1
        with contextlib.suppress(Exception):  # already dead, or Ray already gone
            ray.kill(worker, no_restart=True)

    def close(self) -> None:
        for worker in self._idle:
            self.end(worker)
        self._idle.clear()


@dataclass
class _Task:
    eval_id: int
    submitted: float
    started: float | None = None  # on the worker, once the task reported it (under a per-evaluation timeout)
    worker: Any = None  # the PinnedWorker running it, if any


class RayEvaluator(Evaluator):
    """Runs evaluations as Ray tasks with ``cpus_per_eval`` CPUs and ``gpus_per_eval`` GPUs each, or,
    where a node has more GPUs than one evaluation takes, on :class:`PinnedWorker` actors holding
    those resources (:func:`pinned_workers`).

    Parameters
    ----------
    objective : callable
        ``objective(eval_id, config) -> TrainResult``; shipped once to the object store.
    workers : int, optional
        Concurrent evaluations; default and at most (with a :class:`ConcurrencyWarning`): as many
        as the cluster's resources hold when the evaluator starts.
    cpus_per_eval, gpus_per_eval : float, optional
        Resources of one evaluation (CPUs > 0, GPUs >= 0); default 1 GPU (and 1 CPU) when the
        cluster has GPUs, else 1 CPU.
    address : str, optional
        Ray cluster address or ``"auto"`` to join; ``None`` joins ``RAY_ADDRESS`` when set and
        otherwise starts a local instance (see :func:`init_ray`).
    eval_timeout : float, optional
        Seconds an evaluation may run on its worker (time waiting in Ray's queue not counted)
        before it is cancelled and recorded as a failure.
    num_cpus : int, optional
        CPUs of the local instance when one is started (default: the machine's).
    connect_timeout : float
        Seconds allowed to reach the address of a cluster to join.

    Notes
    -----
    :meth:`close` (also the end of a ``with`` block) cancels every evaluation still running, so
    no task outlives a driver that stops for any reason.
    """

    def __init__(self, objective, workers: int | None = None, cpus_per_eval: float | None = None,
                 gpus_per_eval: float | None = None, address: str | None = None,
                 eval_timeout: float | None = None, num_cpus: int | None = None,
                 connect_timeout: float = RAY_CONNECT_TIMEOUT):
        # Checked before Ray starts: 0 CPUs per task would lift Ray's limit on concurrent tasks
        # (one TensorFlow process per evaluation, all at once).
        if cpus_per_eval is not None and not cpus_per_eval > 0:
            raise ParameterError("cpus_per_eval", "must be > 0", cpus_per_eval)
        if gpus_per_eval is not None and not gpus_per_eval >= 0:
            raise ParameterError("gpus_per_eval", "must be >= 0", gpus_per_eval)
        if workers is not None and int(workers) < 1:
            raise ParameterError("workers", "must be >= 1", workers)
        eval_timeout = check_eval_timeout(eval_timeout)
        init_ray(address, num_cpus, connect_timeout=connect_timeout)
        import ray

        resources = ray.cluster_resources()
        total_cpus, total_gpus = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
        if gpus_per_eval is None:
            gpus_per_eval = 1.0 if total_gpus > 0 else 0.0
        if cpus_per_eval is None:
            cpus_per_eval = 1.0
        if gpus_per_eval > total_gpus or cpus_per_eval > total_cpus:
            raise RayConnectionError(
                f"one evaluation asks for {cpus_per_eval:g} CPU / {gpus_per_eval:g} GPU but the Ray cluster "
                f"has {total_cpus:g} CPU / {total_gpus:g} GPU"
            )
        fit = max(1, int(total_cpus // cpus_per_eval))
        if gpus_per_eval:
            fit = min(fit, max(1, int(total_gpus // gpus_per_eval)))
        if workers and int(workers) > fit:
            # More would only wait in Ray's queue: the driver counts what runs, not what waits.
            warnings.warn(f"{int(workers)} parallel evaluations asked, but the Ray cluster runs at most {fit} at once "
                          f"({total_cpus:g} CPU / {total_gpus:g} GPU, {cpus_per_eval:g} CPU / {gpus_per_eval:g} GPU "
                          f"each): running {fit}", ConcurrencyWarning, stacklevel=2)
        self.n_slots = min(int(workers), fit) if workers else fit
        self.cpus_per_eval, self.gpus_per_eval = cpus_per_eval, gpus_per_eval
        self.eval_timeout = eval_timeout
        self.cluster = {"CPU": total_cpus, "GPU": total_gpus}
        self._objective = objective
        self._put_objective(getattr(objective, "discarder", None))
        #: The workers that keep their GPUs, where evaluations need them (:func:`pinned_workers`), else None.
        self.workers = (_WorkerPool(cpus_per_eval, gpus_per_eval, self.n_slots) if pinned_workers(gpus_per_eval)
                        else None)
        # Evaluations submitted while every worker is busy, started as workers free up (Ray queues
        # tasks by itself; an actor started for each would hold its GPUs, waiting, while idle ones
        # hold the rest).
        self._queued: collections.deque[tuple[int, dict, float]] = collections.deque()
        self._remote = ray.remote(_run_task).options(
            num_cpus=cpus_per_eval, num_gpus=gpus_per_eval, max_retries=0, num_returns="streaming",
        )
        self._running: dict[Any, _Task] = {}  # task's item generator -> what the driver knows of it

    def _put_objective(self, discarder):
        import ray

        self.discarder = discarder
        objective = self._objective
        if discarder is not None and hasattr(discarder, "shared_on_ray"):
            # Trainings in other processes consult one set of rung records: a Ray actor's.
            self.discarder = discarder.shared_on_ray()
            objective = objective.with_discarder(self.discarder)
        elif discarder is not getattr(objective, "discarder", None):
            objective = objective.with_discarder(discarder)
        self._objective_ref = ray.put(objective)

    def set_discarder(self, discarder):
        self._put_objective(discarder)

    @property
    def n_running(self):
        return len(self._running) + len(self._queued)

    def submit(self, eval_id, config):
        self._queued.append((eval_id, config, time.time()))
        self._dispatch()

    def _dispatch(self) -> None:
        """Start the queued evaluations that a worker is free for (all of them without workers)."""
        while self._queued:
            worker = None
            if self.workers is not None:
                worker = self.workers.take()
                if worker is None:  # every worker busy
                    return
            eval_id, config, submitted = self._queued.popleft()
            self._running[self._start(eval_id, config, worker)] = _Task(eval_id, submitted, worker=worker)

    def _start(self, eval_id, config, worker=None):
        """Start the evaluation on Ray, as a task or on ``worker``; its generator of items (the start
        under a per-evaluation timeout, then the result)."""
        call = self._remote if worker is None else worker.run.options(num_returns="streaming")
        return call.remote(self._objective_ref, eval_id, config, self.gpus_per_eval, self.eval_timeout is not None)

    def _end(self, task, failed: bool) -> _Task:
        """Forget a task that ended; its worker, if any, takes the next evaluation, or ends with an
        evaluation that failed with it (a crash, a cancellation)."""
        info = self._running.pop(task)
        if info.worker is not None:
            if failed:
                self.workers.end(info.worker)
            else:
                self.workers.release(info.worker)
            self._dispatch()
        return info

    def wait(self, timeout=None):
        import ray

        deadline = None if timeout is None else time.time() + max(0.0, timeout)
        finished: list[tuple[int, TrainResult]] = []
        while self._running and not finished:
            ready, _ = ray.wait(list(self._running), num_returns=1, timeout=self._wait_budget(deadline))
            if ready:
                # Take everything else that is already there too, without waiting.
                rest = [t for t in self._running if t not in ready]
                more, _ = ray.wait(rest, num_returns=len(rest), timeout=0) if rest else ([], [])
                ready = ready + more
            for outcome in self._advance_all(ready):
                if outcome is not None:
                    finished.append(outcome)
            finished.extend(self._expire_overdue())
            if deadline is not None and time.time() >= deadline:
                break
        return finished

    def _wait_budget(self, deadline: float | None) -> float | None:
        """Seconds until the deadline or the next per-evaluation timeout (None: no limit)."""
        now = time.time()
        limits = [] if deadline is None else [deadline - now]
        if self.eval_timeout is not None:
            limits += [t.started + self.eval_timeout - now for t in self._running.values() if t.started is not None]
        return max(0.0, min(limits)) if limits else None

    def _advance_all(self, ready) -> list[tuple[int, TrainResult] | None]:
        """:meth:`_advance` for each ready task, their items fetched in one call to Ray (one call
        per item costs the driver about a millisecond each when a thousand evaluations end together)."""
        import ray

        refs, tasks, outcomes = [], [], []
        for task in ready:
            try:
                ref = next(task)
            except StopIteration:
                outcomes.append(self._advance(task, None))
            except ray.exceptions.RayError as exc:
                info = self._end(task, failed=True)
                outcomes.append((info.eval_id, self._failure(info, _reason(exc), time.time())))
            else:
                refs.append(ref)
                tasks.append(task)
        try:
            items = ray.get(refs) if refs else []
        except ray.exceptions.RayError:  # one of them failed: fetch each, to tell which
            return outcomes + [self._advance(task, ref) for task, ref in zip(tasks, refs)]
        return outcomes + [self._advance(task, ref, item) for task, ref, item in zip(tasks, refs, items)]

    _NOT_FETCHED = object()

    def _advance(self, task, ref, item=_NOT_FETCHED) -> tuple[int, TrainResult] | None:
        """Take the next item of a ready task (``ref``, None when the task has no more; ``item``,
        when fetched already): its start report (None returned) or its result."""
        import ray

        info = self._running[task]
        now = time.time()
        if ref is None:
            self._end(task, failed=True)
            return info.eval_id, self._failure(info, "the task ended without a result", now)
        try:
            item = ray.get(ref) if item is self._NOT_FETCHED else item
        except ray.exceptions.RayError as exc:
            self._end(task, failed=True)
            return info.eval_id, self._failure(info, _reason(exc), now)
        if info.started is None and isinstance(item, float):
            # The worker's clock, kept within what the driver saw (clocks of nodes may differ).
            info.started = min(max(item, info.submitted), now)
            return None
        self._end(task, failed=False)
        return info.eval_id, item

    @staticmethod
    def _failure(info: _Task, reason: str, now: float) -> TrainResult:
        start = info.submitted if info.started is None else info.started
        return TrainResult.failure(reason, start_time=start, end_time=now, wall_time=now - start)

    def _expire_overdue(self) -> list[tuple[int, TrainResult]]:
        if self.eval_timeout is None:
            return []
        now, expired = time.time(), []
        for task, info in list(self._running.items()):
            if info.started is not None and now - info.started >= self.eval_timeout:
                self._cancel(task)
                reason = f"timeout: cancelled after the per-evaluation limit (eval_timeout) of {self.eval_timeout:g} s"
                expired.append((info.eval_id, self._failure(info, reason, now)))
        return expired

    def _cancel(self, task) -> None:
        """Stop a running evaluation: its task, or its worker (Ray cannot force an actor's call to end)."""
        import ray

        if self._end(task, failed=True).worker is None:
            with contextlib.suppress(Exception):  # already finished, or Ray already gone
                ray.cancel(task, force=True)

    def cancel_all(self):
        ids = [info.eval_id for info in self._running.values()] + [queued[0] for queued in self._queued]
        self._queued.clear()
        for task in list(self._running):
            self._cancel(task)
        return ids

    def close(self):
        """Cancel every evaluation still running (they stay resumable in the catalog); end the workers."""
        self.cancel_all()
        if self.workers is not None:
            self.workers.close()

    def describe(self):
        return {"kind": "ray", "slots": self.n_slots, "cpus_per_eval": self.cpus_per_eval,
                "gpus_per_eval": self.gpus_per_eval, "cluster": self.cluster,
                "runs_on": "tasks" if self.workers is None else "workers that keep their GPUs"}


def _reason(exc) -> str:
    """A failure reason for a task that raised instead of returning its result."""
    import ray

    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, ray.exceptions.OutOfMemoryError):
        return f"out of memory: {first}"
    if isinstance(exc, (ray.exceptions.WorkerCrashedError, ray.exceptions.RayActorError)):  # a task's, a PinnedWorker's
        return f"worker process died: {first}"
    if isinstance(exc, ray.exceptions.NodeDiedError):
        return f"node lost: {first}"
    if isinstance(exc, ray.exceptions.TaskCancelledError):
        return "cancelled"
    return f"{type(exc).__name__}: {first}"
