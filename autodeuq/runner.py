"""The search driver: the asynchronous loop joining a searcher, an evaluator and the catalog.

When any evaluation ends, the driver tells the searcher, submits a new configuration to the
freed slot at once, and then records the finished one in the catalog. It is the only writer of
the catalog. Resuming a run directory rebuilds the searcher from the catalog's history and
re-submits the evaluations that were running when the previous driver stopped.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

from autodeuq import search as searchers
from autodeuq.catalog import Catalog
from autodeuq.result import TrainResult


@dataclass
class SearchSummary:
    """What a search did: counts, the best entry, time and effective worker utilization."""

    run_dir: Path
    n_done: int
    n_failed: int
    best_id: int | None
    best_objective: float
    wall_time: float
    busy_time: float
    slots: int
    interrupted: bool = False
    stopped_by: str = "max_evals"

    @property
    def utilization(self) -> float:
        """Busy worker time / (slots x wall time) over this driver's lifetime."""
        return self.busy_time / (self.slots * self.wall_time) if self.wall_time > 0 else 0.0

    def __str__(self):
        best = f"{self.best_objective:.4f} (id {self.best_id})" if self.best_id is not None else "none"
        return (f"{self.n_done} done, {self.n_failed} failed, best validation NLL {best}, "
                f"{self.wall_time:.1f} s, utilization {100 * self.utilization:.1f} % of {self.slots} slot(s)")


def objective_of(result: TrainResult) -> float | None:
    return result.objective if result.ok and math.isfinite(result.objective) else None


def run_search(space, dataset, evaluator, run_dir, *, search: str = "agebo", search_options: dict | None = None,
               max_evals: int = 100, timeout: float | None = None, seed: int = 0, new_run: bool = False,
               progress: bool = True, run_options: dict | None = None,
               prefetch: bool | None = None) -> SearchSummary:
    """Search until ``max_evals`` evaluations have finished (done or failed) or ``timeout`` s.

    Parameters
    ----------
    space : SearchSpace
    dataset : Dataset
    evaluator : Evaluator
    run_dir : path
        Catalog directory; an existing one is resumed (same data and space required).
    search : str
        Searcher name (``agebo``, ``age``, ``bo``, ``random``), options in ``search_options``.
    max_evals : int
        Budget counted over the whole run directory, previous sessions included.
    timeout : float, optional
        Wall-clock seconds for this call; running evaluations are cancelled (and stay resumable).
    run_options : dict, optional
        Extra facts to record in the run metadata (epochs override, evaluator resources).
    prefetch : bool, optional
        Ask the searcher for the next configurations while all workers are busy, so a freed
        worker never waits for the searcher (default: on when the evaluator has several slots).
    """
    search_options = dict(search_options or {})
    writer = Catalog.create_or_resume(
        run_dir, space, dataset,
        search_options={"search": search, "options": search_options, "evaluator": evaluator.describe(),
                        **(run_options or {})},
        seed=seed, new_run=new_run,
    )
    searcher = searchers.create(search, space, seed=seed, **search_options)
    history = writer.history()
    if history:
        searcher.tell(history)
    configs: dict[int, dict] = {}
    started = time.time()
    busy = 0.0
    stopped_by, interrupted = "max_evals", False
    bar = _progress_bar(progress, max_evals, writer.n_finished)

    def submit(eval_id, config):
        configs[eval_id] = config
        evaluator.submit(eval_id, config)

    unrecorded: list[tuple[int, TrainResult]] = []

    ahead: list[dict] = []
    if prefetch is None:
        prefetch = evaluator.n_slots > 1

    def budget_left():
        return max_evals - writer.n_finished - len(unrecorded) - evaluator.n_running

    def refill():
        free = min(evaluator.n_slots - evaluator.n_running, budget_left())
        if free > 0 and not _out_of_time(started, timeout):
            batch = ahead[:free]
            del ahead[:free]
            batch += searcher.ask(free - len(batch)) if free > len(batch) else []
            for config in batch:
                submit(writer.submit(config), config)

    def ask_ahead():
        # While every worker is busy, prepare the next configurations, so a freed slot gets one
        # without waiting for the searcher; they miss only the result that frees the slot.
        wanted = min(evaluator.n_slots, budget_left()) - len(ahead)
        if prefetch and wanted > 0:
            ahead.extend(searcher.ask(wanted))

    def record(eval_id, result):
        nonlocal busy
        writer.record(eval_id, result)
        configs.pop(eval_id, None)
        busy += max(0.0, result.end_time - result.start_time)
        _update_bar(bar, writer, result, busy, evaluator.n_slots, started)

    try:
        for eval_id, config in writer.pending():
            if writer.n_finished + evaluator.n_running >= max_evals:
                break
            submit(eval_id, config)
        while True:
            refill()
            if evaluator.n_running == 0 and not unrecorded:
                break
            # Results wait in `unrecorded` while the catalog writes one of them at a time; between
            # two writes the driver polls again, so a slot freed meanwhile is refilled at once.
            if unrecorded:
                wait_for = 0.0
            else:
                ask_ahead()
                wait_for = None if timeout is None else max(0.0, started + timeout - time.time())
            finished = evaluator.wait(timeout=wait_for) if evaluator.n_running else []
            if finished:
                searcher.tell([(configs[i], objective_of(r)) for i, r in finished])
                unrecorded.extend(finished)
                refill()
            if unrecorded:
                record(*unrecorded.pop(0))
            if _out_of_time(started, timeout):
                stopped_by = "timeout"
                evaluator.cancel_all()
                break
    except KeyboardInterrupt:
        interrupted, stopped_by = True, "interrupted"
        evaluator.cancel_all()
    finally:
        # Whatever finished is paid for: record it even when stopping early.
        while unrecorded:
            record(*unrecorded.pop(0))
        if bar is not None:
            bar.close()
        wall = time.time() - started
        best, n_done, n_finished = writer.best(), writer.n_done, writer.n_finished
        writer.close()
    return SearchSummary(
        run_dir=Path(run_dir), n_done=n_done, n_failed=n_finished - n_done,
        best_id=None if best is None else best[0], best_objective=math.inf if best is None else best[1],
        wall_time=wall, busy_time=busy, slots=evaluator.n_slots, interrupted=interrupted,
        stopped_by=stopped_by,
    )


def _out_of_time(started, timeout):
    return timeout is not None and time.time() - started >= timeout


def _progress_bar(enabled, total, initial):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="search", unit="eval", dynamic_ncols=True)


def _update_bar(bar, writer, result, busy, slots, started):
    if bar is None:
        return
    best = writer.best()
    wall = max(time.time() - started, 1e-9)
    bar.update(1)
    bar.set_postfix(
        failed=writer.n_finished - writer.n_done,
        best=f"{best[1]:.4f}" if best else "-",
        util=f"{100 * busy / (slots * wall):.0f}%",
        refresh=False,
    )
