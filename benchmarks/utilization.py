"""Effective worker utilization of the asynchronous search loop on Ray.

The evaluations sleep (default 1 s) instead of training: what is measured is the driver (the
searcher's asks and tells, the catalog's writes) and Ray's dispatch. Every result is recorded in a
real catalog. Two kinds of workers:

- ``--workers N`` (default): each evaluation a Ray task in a worker process, as a search runs;
- ``--workers N --actors K``: the evaluations are asynchronous calls spread over K Ray actors, on a
  Ray instance that declares N CPUs. So N = 1,024 sleeping evaluations run at once on a small
  machine, where 1,024 worker processes would not fit in memory; the driver's side is the same
  (one Ray generator per evaluation, waited on together).

Printed, from the times the catalog records for each evaluation (submitted, started on the
worker, ended on the worker):

- the whole run: busy worker time / (slots x wall time), as the search's summary gives it. With a
  budget counted in evaluations it includes the start-up and the drain: once the budget is
  submitted, slots fall idle as their last evaluations end, about slots x task / 2 worker-seconds
  however fast the driver is;
- the steady state: the same over the window from the first result to the last submission, where
  the driver's only work is to keep every slot busy;
- where the idle time of the steady state goes: the refill (a slot's evaluation ended on the
  worker -> the next one submitted by the driver) and the dispatch (submitted -> started on the
  worker), and the share of the driver's time spent outside Ray's wait.

    python benchmarks/utilization.py [--workers 16] [--seconds 1] [--evals 320] [--search agebo]
    python benchmarks/utilization.py --workers 1024 --actors 16 --seconds 60 --evals 4096
"""
import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time

import numpy as np

from autodeuq.catalog.schema import DB_NAME
from autodeuq.core.result import Status, TrainResult
from autodeuq.engine.evaluator.ray import RayEvaluator, init_ray
from autodeuq.engine.runner import run_search
from autodeuq.search.space import load_space
from autodeuq.table.data import toy_sine


def sleep_result(config, n_valid, start) -> TrainResult:
    return TrainResult(Status.DONE, objective=float(np.log(config["hp"]["learning_rate"]) ** 2), epochs=1,
                       best_epoch=1, model_bytes=b"\0" * 20_000, valid_mean=np.zeros((n_valid, 1)),
                       valid_var=np.ones((n_valid, 1)), start_time=start, end_time=time.time())


class SleepObjective:
    def __init__(self, seconds, n_valid):
        self.seconds, self.n_valid = seconds, n_valid

    def __call__(self, eval_id, config):
        start = time.time()
        time.sleep(self.seconds)
        return sleep_result(config, self.n_valid, start)


class Sleeper:
    """A Ray actor running many sleeping evaluations at once (an asynchronous generator per call,
    as the search's Ray tasks are: the start reported first under a per-evaluation timeout only)."""

    async def evaluate(self, seconds, n_valid, config, report_start):
        if report_start:
            yield time.time()
        start = time.time()
        await asyncio.sleep(seconds)
        yield sleep_result(config, n_valid, start)


class TimedWait:
    """Counts the seconds the driver spends inside the evaluator's ``wait`` (the rest is its work)."""

    waited = 0.0

    def wait(self, timeout=None):
        tic = time.perf_counter()
        try:
            return super().wait(timeout)
        finally:
            self.waited += time.perf_counter() - tic


class TaskEvaluator(TimedWait, RayEvaluator):
    pass


class ActorEvaluator(TimedWait, RayEvaluator):
    """:class:`RayEvaluator` whose evaluations are calls on ``actors`` :class:`Sleeper` actors."""

    def __init__(self, seconds, n_valid, workers, actors):
        super().__init__(SleepObjective(seconds, n_valid), workers=workers)
        import ray

        concurrency = -(-self.n_slots // actors)
        remote = ray.remote(num_cpus=0, max_concurrency=concurrency)(Sleeper)
        self._actors = [remote.remote() for _ in range(actors)]
        self._seconds, self._n_valid, self._next = seconds, n_valid, 0
        ray.get([a.__ray_ready__.remote() for a in self._actors])

    def _start(self, eval_id, config):
        actor = self._actors[self._next % len(self._actors)]
        self._next += 1
        return actor.evaluate.options(num_returns="streaming").remote(self._seconds, self._n_valid, config,
                                                                      self.eval_timeout is not None)


def evaluation_times(run_dir) -> np.ndarray:
    """(submit, start, end) of each evaluation the catalog recorded, in order of submission."""
    with sqlite3.connect(os.path.join(run_dir, DB_NAME)) as conn:
        rows = conn.execute("SELECT submit_time, start_time, end_time FROM evaluations WHERE status = ? "
                            "ORDER BY id", (Status.DONE,)).fetchall()
    return np.array(rows, dtype=float)


def busy_within(start, end, a, b) -> float:
    """Worker seconds of the evaluations [start, end] that fall within [a, b]."""
    return float(np.clip(np.minimum(end, b) - np.maximum(start, a), 0.0, None).sum())


def analyse(times, slots) -> dict:
    """The steady state's utilization and where its idle time goes (see the module's text)."""
    submit, start, end = times.T
    a, b = end.min(), submit.max()  # the first result; the last submission
    later = np.argsort(submit)[slots:]  # submissions that refilled a freed slot
    ends = np.sort(end)
    freed = ends[np.searchsorted(ends, submit[later]) - 1]  # the latest end before each: the slot it took
    drain = float(np.sum(end.max() - np.sort(end)[-slots:]))
    return {"steady": busy_within(start, end, a, b) / (slots * (b - a)) if b > a else float("nan"),
            "window": b - a, "refill_ms": 1000 * np.mean(submit[later] - freed),
            "dispatch_ms": 1000 * np.mean((start - submit)[later]),
            "dispatch_p99_ms": 1000 * np.percentile((start - submit)[later], 99),
            "first_dispatch_ms": 1000 * np.mean((start - submit)[np.argsort(submit)[:slots]]),
            "drain": drain}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--evals", type=int, default=320)
    p.add_argument("--search", default="agebo")
    p.add_argument("--actors", type=int, default=0,
                   help="run the evaluations as calls on this many Ray actors (0: Ray tasks)")
    args = p.parse_args(argv)
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # Ray starts a worker process per declared CPU for the first driver unless told not to:
    # with actors, the CPUs are declared, not used.
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0" if args.actors else "1")
    init_ray(num_cpus=args.workers)
    space, data = load_space("tabular"), toy_sine()
    n_valid = len(data.y_valid)
    if args.actors:
        evaluator = ActorEvaluator(args.seconds, n_valid, args.workers, args.actors)
    else:
        evaluator = TaskEvaluator(SleepObjective(args.seconds, n_valid), workers=args.workers)
        # Warm the worker processes so their start-up (a Ray cost, paid once) is not counted.
        run_search(space, data, evaluator, tempfile.mkdtemp(), search="random", max_evals=args.workers,
                   progress=False)
    evaluator.waited = 0.0
    run_dir = tempfile.mkdtemp()
    summary = run_search(space, data, evaluator, run_dir, search=args.search, max_evals=args.evals, progress=False)
    found = analyse(evaluation_times(run_dir), evaluator.n_slots)
    ideal = args.evals * args.seconds / evaluator.n_slots
    kind = f"calls on {args.actors} Ray actors" if args.actors else "Ray tasks"
    print(f"workers {evaluator.n_slots} ({kind}), task {args.seconds:g} s, evaluations {args.evals}, "
          f"searcher {args.search}")
    print(f"wall time {summary.wall_time:.2f} s (ideal {ideal:.2f} s); whole run: utilization "
          f"{100 * summary.utilization:.2f} % (the drain of the budget: {found['drain']:.1f} worker-s)")
    print(f"steady state ({found['window']:.1f} s from the first result to the last submission): utilization "
          f"{100 * found['steady']:.2f} %")
    print(f"per evaluation: refill {found['refill_ms']:.1f} ms (ended on the worker -> next submitted), dispatch "
          f"{found['dispatch_ms']:.1f} ms (p99 {found['dispatch_p99_ms']:.1f}; submitted -> started; the first "
          f"wave {found['first_dispatch_ms']:.0f} ms)")
    print(f"driver busy outside Ray's wait: {100 * (1 - evaluator.waited / summary.wall_time):.1f} % of the wall "
          f"time, {1000 * (summary.wall_time - evaluator.waited) / args.evals:.1f} ms per result")


if __name__ == "__main__":
    main()
