"""Ray evaluator: one Ray task per evaluation, on a local instance or an existing cluster."""
from __future__ import annotations

import time
from typing import Any

from autodeuq.evaluator.base import Evaluator, guarded
from autodeuq.result import TrainResult


class RayConnectionError(RuntimeError):
    """Ray could not be started or joined."""


def _run_task(objective, eval_id: int, config: dict, gpus: float) -> TrainResult:
    if gpus:
        _enable_gpu_memory_growth()
    return guarded(objective, eval_id, config)


def _enable_gpu_memory_growth() -> None:
    # Several evaluations may share a GPU; without growth the first takes all its memory.
    try:
        import tensorflow as tf

        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)
    except (ImportError, RuntimeError, ValueError):
        pass


def init_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Start a local Ray instance (``address=None``) or join a cluster; once per process."""
    import ray

    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    if address is None and num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    try:
        ray.init(address=address, **kwargs)
    except Exception as exc:  # noqa: BLE001 - turned into one actionable message
        text = str(exc)
        hint = ""
        if "auth" in text.lower() or "token" in text.lower() or "Unauthenticated" in text:
            hint = (" The cluster uses token authentication (the default of `ray start --head`): run with "
                    "RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN or ~/.ray/auth_token, "
                    "or start the cluster with authentication disabled.")
        where = "start a local Ray instance" if address is None else f"connect to Ray at {address!r}"
        raise RayConnectionError(f"cannot {where}: {text.splitlines()[0] if text else type(exc).__name__}.{hint}") from None


class RayEvaluator(Evaluator):
    """Runs evaluations as Ray tasks with ``cpus_per_eval`` CPUs and ``gpus_per_eval`` GPUs each.

    Parameters
    ----------
    objective : callable
        ``objective(eval_id, config) -> TrainResult``; shipped once to the object store.
    workers : int, optional
        Concurrent evaluations; default: as many as the cluster's resources allow.
    cpus_per_eval, gpus_per_eval : float, optional
        Resources of one evaluation; default 1 GPU (and 1 CPU) when the cluster has GPUs,
        else 1 CPU.
    address : str, optional
        Ray cluster address or ``"auto"``; ``None`` starts (or reuses) a local instance.
    eval_timeout : float, optional
        Seconds after which a running evaluation is cancelled and recorded as a failure.
    num_cpus : int, optional
        CPUs of the local instance when one is started (default: the machine's).
    """

    def __init__(self, objective, workers: int | None = None, cpus_per_eval: float | None = None,
                 gpus_per_eval: float | None = None, address: str | None = None,
                 eval_timeout: float | None = None, num_cpus: int | None = None):
        import ray

        init_ray(address, num_cpus)
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
        fit = int(total_cpus // cpus_per_eval) if cpus_per_eval else 10**6
        if gpus_per_eval:
            fit = min(fit, int(total_gpus // gpus_per_eval))
        self.n_slots = max(1, int(workers) if workers else fit)
        self.cpus_per_eval, self.gpus_per_eval = cpus_per_eval, gpus_per_eval
        self.eval_timeout = eval_timeout
        self.cluster = {"CPU": total_cpus, "GPU": total_gpus}
        self._objective_ref = ray.put(objective)
        self._remote = ray.remote(_run_task).options(
            num_cpus=cpus_per_eval, num_gpus=gpus_per_eval, max_retries=0,
        )
        self._running: dict[Any, tuple[int, float]] = {}

    @property
    def n_running(self):
        return len(self._running)

    def submit(self, eval_id, config):
        ref = self._remote.remote(self._objective_ref, eval_id, config, self.gpus_per_eval)
        self._running[ref] = (eval_id, time.time())

    def wait(self, timeout=None):
        import ray

        if not self._running:
            return []
        wait_for = timeout
        if self.eval_timeout is not None:
            oldest = min(t for _, t in self._running.values())
            until_timeout = max(0.0, oldest + self.eval_timeout - time.time())
            wait_for = until_timeout if wait_for is None else min(wait_for, until_timeout)
        ready, _ = ray.wait(list(self._running), num_returns=1, timeout=wait_for)
        if ready:
            # Collect everything else that is already done too, without waiting.
            more, _ = ray.wait([r for r in self._running if r not in ready],
                               num_returns=len(self._running) - len(ready), timeout=0)
            ready = ready + more
        finished = [(self._running.pop(ref)[0], self._collect(ref)) for ref in ready]
        finished.extend(self._expire_overdue())
        return finished

    def _collect(self, ref) -> TrainResult:
        import ray

        try:
            return ray.get(ref)
        except ray.exceptions.WorkerCrashedError as exc:
            reason = f"worker process died: {str(exc).splitlines()[0]}"
        except ray.exceptions.OutOfMemoryError as exc:
            reason = f"out of memory: {str(exc).splitlines()[0]}"
        except ray.exceptions.NodeDiedError as exc:
            reason = f"node lost: {str(exc).splitlines()[0]}"
        except ray.exceptions.TaskCancelledError:
            reason = "cancelled"
        except ray.exceptions.RayError as exc:
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return TrainResult.failure(reason, end_time=time.time())

    def _expire_overdue(self) -> list[tuple[int, TrainResult]]:
        import ray

        if self.eval_timeout is None:
            return []
        now, expired = time.time(), []
        for ref, (eval_id, started) in list(self._running.items()):
            if now - started >= self.eval_timeout:
                ray.cancel(ref, force=True)
                del self._running[ref]
                expired.append((eval_id, TrainResult.failure(
                    f"timeout: cancelled after --eval-timeout {self.eval_timeout:g} s",
                    start_time=started, end_time=now, wall_time=now - started)))
        return expired

    def cancel_all(self):
        import ray

        ids = []
        for ref, (eval_id, _) in list(self._running.items()):
            ray.cancel(ref, force=True)
            ids.append(eval_id)
        self._running.clear()
        return ids

    def describe(self):
        return {"kind": "ray", "slots": self.n_slots, "cpus_per_eval": self.cpus_per_eval,
                "gpus_per_eval": self.gpus_per_eval, "cluster": self.cluster}
