"""Ray evaluator: one Ray task per evaluation, on a local instance or an existing cluster (or, where
evaluations need GPUs that a reused task process could confuse, a pool of actors that keep theirs)."""
from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

from autodeuq.core.errors import AutoDEUQError, AutoDEUQWarning, ParameterError
from autodeuq.core.result import TrainResult
from autodeuq.engine.evaluator.base import Evaluator, check_eval_timeout, guarded

RAY_CONNECT_TIMEOUT = 20.0
"""Seconds allowed to reach an existing Ray cluster's address before giving up."""


class ConcurrencyWarning(AutoDEUQWarning):
    """Fewer evaluations run at once than asked: the Ray cluster's resources hold no more."""


class RayConnectionError(AutoDEUQError, RuntimeError):
    """Ray could not be started or joined."""


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


def init_ray(address: str | None = None, num_cpus: int | None = None,
             connect_timeout: float = RAY_CONNECT_TIMEOUT) -> None:
    """Start a local Ray instance, or join a cluster; once per process.

    Parameters
    ----------
    address : str, optional
        ``host:port``, ``"auto"`` or ``ray://host:port`` of a cluster to join. Without one, the
        ``RAY_ADDRESS`` environment variable is used when set; otherwise a new local instance
        is started (``"local"``), never one found in Ray's temporary folder (a stale pointer
        there to a dead head would make Ray wait for it).
    num_cpus : int, optional
        CPUs of a local instance (default: the machine's).
    connect_timeout : float
        Seconds allowed to reach the cluster's address when joining one; if something answers
        there, Ray's own connection attempt then takes about 40 s at most.

    Raises
    ------
    RayConnectionError
        One line saying what could not be started or reached, and what to do.

    Notes
    -----
    ``ray.init`` installs its own SIGTERM handlers: a Python one that exits the interpreter, and
    in its native core worker abseil's failure handler, which dumps a native stack and aborts
    (exit status 134). A SIGTERM during the seconds ``ray.init`` takes then ended the command
    with that dump, or an exit status 15 without a word. So while Ray starts, SIGTERM is only
    recorded (:func:`_sigterm_deferred`); afterwards the caller's handler is back and receives it
    (the search driver treats it like Ctrl-C: exit status 143, the run resumable).
    """
    ray = _import_ray()
    if ray.is_initialized():
        return
    source = "address"
    if address is None and os.environ.get("RAY_ADDRESS"):
        address, source = os.environ["RAY_ADDRESS"], "RAY_ADDRESS"
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    with _sigterm_deferred():
        if address in (None, "local"):
            if num_cpus is not None:
                kwargs["num_cpus"] = num_cpus
            reaper = _start_reaper()
            try:
                with _without_auth_banner():
                    _init(ray, "local", kwargs, "start a local Ray instance")
            except BaseException:  # Ctrl-C or a failure half-way: end what had started
                _request_reap(reaper)
                raise
        else:
            where = f"connect to Ray at {address!r}" + (" (from RAY_ADDRESS)" if source == "RAY_ADDRESS" else "")
            host_port = _bootstrap_host_port(address, where)
            if host_port is not None:
                _probe(*host_port, connect_timeout, where, address)
            with _single_gcs_attempt(), _quiet_stderr():
                _init(ray, address, kwargs, where)


_REAPER = None  # the pipe to the watchdog of this process's local Ray instance (ray_reaper), once started


def _start_reaper():
    """Start, once per process, the watchdog that ends the local instance's processes with this one.

    Ray ties its head processes to the driver, not those the raylet starts (dashboard and
    runtime-env agents, actors): after a ``kill -9`` of the driver or a Ctrl-C while Ray starts
    they stayed (:mod:`autodeuq.engine.evaluator.ray_reaper`).
    """
    global _REAPER
    if _REAPER is None:
        import ray

        from autodeuq.engine.evaluator import ray_reaper

        _REAPER = ray_reaper.start(os.path.dirname(os.path.abspath(ray.__file__)))
    return _REAPER


def _request_reap(reaper: int | None) -> None:
    if reaper is not None:
        with contextlib.suppress(OSError):
            os.write(reaper, b"reap\n")


def _init(ray, address, kwargs, where):
    try:
        ray.init(address=address, **kwargs)
    except Exception as exc:  # turned into one actionable message
        raise RayConnectionError(connection_failure(exc, where)) from None


#: Words of Ray's errors when a cluster's token authentication refuses a connection (Ray 2.60:
#: "RPC error: InvalidAuthToken: Authentication token is missing or incorrect", a gRPC
#: "Unauthenticated" status, or an AuthenticationError when no token was found here).
_AUTH_WORDS = ("invalidauthtoken", "unauthenticated", "authenticationerror", "authentication token",
               "token authentication")
AUTH_FIX = ("run with RAY_AUTH_MODE=token and the cluster's token (the head's ~/.ray/auth_token) in RAY_AUTH_TOKEN, "
            "in ~/.ray/auth_token or in the file RAY_AUTH_TOKEN_PATH names; or start the cluster with "
            "authentication disabled (RAY_AUTH_MODE=disabled ray start --head)")


def connection_failure(exc: BaseException, where: str, environ=None) -> str:
    """One line for a failed ``ray.init``: what failed, why, and what to do.

    ``ray.init`` says only "Failed to connect to Ray cluster at ..." when the cluster refuses the
    connection; the reason is in the exceptions it chains (``__cause__``, ``__context__``). When
    that reason is the cluster's token authentication (a token missing or not the cluster's),
    the line quotes it, says what this process sent (from ``environ``, default ``os.environ``)
    and how to fix it.
    """
    environ = os.environ if environ is None else environ
    first = _first_line(exc)
    reason = None
    for link in _chain(exc):
        reason = reason or _auth_reason(link)
    if reason is None:
        return f"cannot {where}: {first}."
    mode = environ.get("RAY_AUTH_MODE")
    if mode != "token":
        sent = (f"this process has RAY_AUTH_MODE {'unset' if mode is None else repr(mode)}, so it sent no "
                f"token")
    elif "no authentication token was found" in reason.lower():
        sent = "this process has RAY_AUTH_MODE=token but found no token"
    else:
        source = ("RAY_AUTH_TOKEN" if environ.get("RAY_AUTH_TOKEN") else
                  f"the file {environ['RAY_AUTH_TOKEN_PATH']}" if environ.get("RAY_AUTH_TOKEN_PATH") else
                  "~/.ray/auth_token")
        sent = f"the token this process sent (from {source}) is not the cluster's"
    if reason in first:  # Ray's own words name the refusal: its first sentence is enough
        first, told = reason, ""
    else:
        told = f": the cluster refused it ({reason})"
    return (f"cannot {where}: {first}{told}; the cluster uses token authentication (the default of "
            f"`ray start --head`) and {sent}: {AUTH_FIX}.")


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during, each once."""
    out = []
    while exc is not None and all(exc is not e for e in out):
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].rstrip(".") if text else type(exc).__name__


def _auth_reason(exc: BaseException) -> str | None:
    """The words of ``exc`` that say a token authentication refused the connection, else None:
    its line naming the refusal (a chained traceback's last such line), to its first sentence."""
    lines = [type(exc).__name__ + ": " + line for line in str(exc).strip().splitlines()]
    refusals = [line for line in lines if any(w in line.lower() for w in _AUTH_WORDS)]
    if not refusals:
        return None
    line = refusals[-1]
    # "ray.exceptions.AuthenticationError: RPC error: ...": the text after the exception's name.
    line = re.sub(r"^\w+: (?:[\w.]*(?:Error|Exception): )?", "", line)
    return line.split(". ")[0].strip().rstrip(".")


def _bootstrap_host_port(address: str, where: str) -> tuple[str, int] | None:
    """The host and port Ray will dial for ``address`` (None when that cannot be told)."""
    from urllib.parse import urlsplit

    if "://" in address:
        parts = urlsplit(address)
        return (parts.hostname, parts.port or 10001) if parts.hostname else None
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # Ray moved it: no probe, ray.init still makes one bounded attempt
        return None
    try:
        resolved = canonicalize_bootstrap_address(address)
    except Exception as exc:  # e.g. "auto" and no cluster found
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RayConnectionError(f"cannot {where}: {first}") from None
    if not resolved or ":" not in resolved:
        return None
    host, _, port = resolved.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        return None


def _probe(host: str, port: int, timeout: float, where: str, address: str) -> None:
    """Refuse at once an ``address`` (that Ray dials as ``host:port``) where nothing listens."""
    # Ray itself retries an unreachable head for minutes; a plain TCP connection says at once
    # (or within `timeout`) whether anything listens there.
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        why = (f"no answer within {timeout:g} s" if isinstance(exc, TimeoutError)
               else (exc.strerror or type(exc).__name__).lower())
        # Ray dials a loopback address as this machine's own address: name that only as an aside.
        dialled = "" if address.rsplit("://", 1)[-1] == f"{host}:{port}" else f" (which Ray dials as {host}:{port})"
        raise RayConnectionError(
            f"cannot {where}: nothing answers at {address}{dialled}: {why}; "
            f"is the cluster's head running (`ray start --head`) and is the address right?"
        ) from None


@contextlib.contextmanager
def _single_gcs_attempt():
    """Let ``ray.init`` try the cluster once (about 40 s at most) instead of ~20 times.

    The probe has already found something listening; if that is no Ray head, retrying for
    minutes only hides the error. A user's own ``RAY_gcs_server_port_wait_time_s`` wins.
    """
    key = "RAY_gcs_server_port_wait_time_s"
    saved = os.environ.get(key)
    os.environ.setdefault(key, "1")
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = saved


@contextlib.contextmanager
def _without_auth_banner():
    """Start a local instance without Ray's banner saying that it enabled token authentication.

    Ray 2.60 prints it (a logging warning) on every local start whose ``RAY_AUTH_MODE`` is unset;
    the instance is autodeuq's own and the behaviour is unchanged (authentication stays on), so
    the line only adds noise. Other warnings of that logger still show.
    """
    import logging

    class DropBanner(logging.Filter):
        def filter(self, record):
            return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")

    logger = logging.getLogger("ray._private.authentication.authentication_token_setup")
    banner = DropBanner()
    logger.addFilter(banner)
    try:
        yield
    finally:
        logger.removeFilter(banner)


@contextlib.contextmanager
def _quiet_stderr():
    """Hold back what Ray's native code writes to stderr while joining; replay it unless joining fails.

    A failed join then reads as the one line of :class:`RayConnectionError`, not as pages of
    retry warnings.
    """
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if not failed:
                held.seek(0)
                with contextlib.suppress(OSError):
                    os.write(2, held.read())


FAILURE_HANDLER_VARIABLE = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"


def _import_ray():
    """``import ray``, the first time with abseil's native failure-signal handler off in this process.

    Ray reads ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER`` when it is imported; set, the driver's core
    worker does not install the handler that turns a SIGTERM into a native stack dump and an
    abort. The variable is set only for the import (unless the environment sets it), so the
    processes of a local instance, started later, keep their handler for real crashes. When
    something imported Ray before, it is left as it is.
    """
    if "ray" in sys.modules:
        import ray

        return ray
    given = os.environ.get(FAILURE_HANDLER_VARIABLE)
    os.environ.setdefault(FAILURE_HANDLER_VARIABLE, "1")
    try:
        import ray
    finally:
        if given is None:
            os.environ.pop(FAILURE_HANDLER_VARIABLE, None)
    return ray


@contextlib.contextmanager
def _sigterm_deferred():
    """Within this block (Ray starting), a SIGTERM is recorded, then delivered to the caller's handler.

    Ray's Python handler (``sys.exit`` in the middle of ``ray.init``, which can also crash the
    half-started native core worker: exit status 139) is kept out by skipping Ray's
    ``set_sigterm_handler``; abseil's native one by :func:`_import_ray`. Outside the main
    thread, where Python delivers no signal, this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    import ray._private.utils as ray_utils

    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    set_handler = ray_utils.set_sigterm_handler
    ray_utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = set_handler
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        if received and previous is not signal.SIG_IGN:
            if callable(previous):
                previous(signal.SIGTERM, None)  # the search driver's raises: it stops like Ctrl-C
            else:
                os.kill(os.getpid(), signal.SIGTERM)  # the default action: terminated, status 143


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
