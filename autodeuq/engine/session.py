"""One call's search loop (:class:`_SearchSession`): the searcher asked and told, the evaluator's
slots refilled, the results written to the catalog, the progress shown; and the rules it applies
(stopping on early failures alike, the batches it records and asks ahead). The search driver
(:mod:`autodeuq.engine.runner`) opens the catalog, builds the searcher and runs sessions.
"""
from __future__ import annotations

import math
import re
import statistics
import time
from collections import Counter

from autodeuq.catalog import MUTATED_FROM, PROMOTED_FROM
from autodeuq.core.result import Status, TrainResult
from autodeuq.engine.progress import _progress_bar, _update_bar
from autodeuq.search.base import config_key

EARLY_FAILURES = 5
"""A search with more evaluations to run stops when this many first ones all fail the same way."""

RECORD_BATCH = 4
"""The driver writes at most this many waiting results to the catalog at once (their files made
durable together, one transaction), then looks for freed slots again."""

PROGRESS_INTERVAL = 0.5
"""Seconds between two refreshes of what the progress bar shows besides the count."""

ASK_SHARE = 0.25
"""While every worker is busy, the driver asks the searcher ahead in batches large enough that
asking takes at most this share of its time (:meth:`_SearchSession.ahead_sizes`)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived during a search: it stops as on Ctrl-C, leaving the run resumable."""

    exit_status = 143  # 128 + SIGTERM, what a shell reports for a process killed by it


def objective_of(result: TrainResult) -> float | None:
    return result.objective if result.ok and math.isfinite(result.objective) else None


def _recorded_reason(writer, result: TrainResult) -> str | None:
    """Why the catalog will record ``result`` as failed, or None when it will record it done.

    The rule of ``CatalogWriter.record`` (a done result without a usable model or predictions is
    stored as failed), applied before the result is written, so that the searcher learns what
    the catalog keeps: a resumed searcher, rebuilt from the catalog, then agrees with it.
    """
    if not result.ok:
        return str(result.reason or "unknown failure")
    problem = writer.result_problem(result)
    return f"invalid result: {problem}" if problem else None


def _failure_kind(reason: str) -> str:
    """A failure reason without its numbers and ids, so that failures of one cause compare equal."""
    first = (reason.strip().splitlines() or ["unknown failure"])[0]
    return re.sub(r"\b0x[0-9a-f]+\b|\b[0-9a-f]{12,}\b|\d+(?:\.\d+)?(?:e[-+]?\d+)?", "#", first, flags=re.I)


def _most_common_failure(reasons: list[str]) -> tuple[str | None, int]:
    """(an example of the most common kind of failure, how many failed that way)."""
    if not reasons:
        return None, 0
    kinds = Counter(_failure_kind(r) for r in reasons)
    kind, count = kinds.most_common(1)[0]
    return next(r for r in reasons if _failure_kind(r) == kind), count


class _SearchSession:
    """One call's search loop over an open catalog writer, and what its steps share.

    When any evaluation ends, the searcher learns its result and the freed slot gets a new
    configuration at once; the result is written to the catalog afterwards, with the others
    waiting (at most :data:`RECORD_BATCH` at a time), so that a slot freed meanwhile is refilled
    without waiting for the writes.
    """

    def __init__(self, writer, searcher, evaluator, *, max_evals, timeout, prefetch, progress, pending,
                 promotions=None, entries=None, scheduler=None, log=None):
        self.writer, self.searcher, self.evaluator = writer, searcher, evaluator
        self.scheduler, self.log = scheduler, log  # early discarding, and where to say what it decides
        self.pending = pending  # (id, config) of interrupted evaluations, submitted again first
        # (entry id, config) to train to the full budget instead of asking the searcher, or None.
        self.promotions = None if promotions is None else list(promotions)
        self.max_evals, self.timeout = max_evals, timeout
        # Ask the searcher ahead while all workers are busy (default: when there are several).
        self.prefetch = evaluator.n_slots > 1 if prefetch is None else prefetch
        self.started = time.time()
        self.busy = 0.0  # worker seconds of the results recorded by this call
        self.stopped_by, self.interrupted = "max_evals", False
        self.bar = _progress_bar(progress, max_evals, writer.n_finished)
        # Only a stop that saves evaluations counts as one: with a budget this small, all of it runs.
        self.early_failures = EARLY_FAILURES if max_evals - writer.n_finished > EARLY_FAILURES else 0
        self.configs: dict[int, dict] = {}  # running evaluations' configurations
        self.ahead: list[dict] = []  # configurations asked for ahead of a free slot
        self.ask_seconds: list[float] = []  # how long the searcher's last asks took, newest last
        self.postfix_at = -math.inf  # when the progress bar's postfix was last refreshed (time.monotonic)
        self.unrecorded: list[tuple[int, TrainResult]] = []  # finished, waiting for the catalog
        self.verdicts: dict[int, str | None] = {}  # failure reason the catalog will record (None: done)
        self.session_reasons: list[str | None] = []  # the same, for each result recorded by this call
        self.durations: list[float] = []  # wall seconds of the evaluations finished in this call
        # (epochs, batch size, parameters) of the same: what early discarding's decision is modelled from
        self.trainings: list[tuple[int, int, int]] = []
        # Entry id of each configuration told to the searcher (the last one of equal configurations):
        # where a mutated child's parent is found.
        self.entries: dict[tuple, int] = dict(entries or {})

    def submit(self, eval_id, config):
        self.configs[eval_id] = config
        self.evaluator.submit(eval_id, config)

    def budget_left(self):
        return self.max_evals - self.writer.n_finished - len(self.unrecorded) - self.evaluator.n_running

    def time_left(self) -> float | None:
        """Seconds until the timeout (None: no timeout)."""
        return None if self.timeout is None else self.started + self.timeout - time.time()

    def out_of_time(self):
        left = self.time_left()
        return left is not None and left <= 0

    def time_for_another(self):
        """Whether a new evaluation can be expected to finish before the timeout."""
        left = self.time_left()
        return left is None or left > (statistics.median(self.durations) if self.durations else 0.0)

    def refill(self):
        free = min(self.evaluator.n_slots - self.evaluator.n_running, self.budget_left())
        if free > 0 and self.time_for_another():
            for config, extra in self.take(free):
                self.submit(self.writer.submit(config, extra=extra), config)

    def take(self, n) -> list[tuple[dict, dict | None]]:
        """The next ``n`` configurations to start, each with what its catalog entry records at submission."""
        if self.promotions is not None:
            batch, self.promotions = self.promotions[:n], self.promotions[n:]
            return [(config, {PROMOTED_FROM: entry_id}) for entry_id, config in batch]
        batch = self.ahead[:n]
        del self.ahead[:n]
        batch += self.ask(n - len(batch)) if n > len(batch) else []
        return [(config, self.lineage(config)) for config in batch]

    def ask(self, n) -> list[dict]:
        """The searcher's next ``n`` configurations, timing the call (:meth:`ahead_sizes`)."""
        tic = time.perf_counter()
        configs = self.searcher.ask(n)
        self.ask_seconds = [*self.ask_seconds[-7:], time.perf_counter() - tic]
        return configs

    def lineage(self, config) -> dict | None:
        """What a configuration's entry records of its origin: the entry it was mutated from."""
        parent = self.searcher.parent_of(config)
        entry_id = None if parent is None else self.entries.get(config_key(parent))
        return None if entry_id is None else {MUTATED_FROM: entry_id}

    def ahead_sizes(self) -> tuple[int, int]:
        """(low, high): ask ahead once at most ``low`` configurations are waiting, up to ``high``.

        ``high`` is the number of slots: a freed slot takes a configuration asked earlier and
        does not wait for the searcher, even when every worker finishes at once. The searcher
        is asked for ``high - low`` at a time: the number of results that arrive during one of
        its asks (its recent asks' median time x the rate at which the workers finish, from the
        recent evaluations' median duration), over :data:`ASK_SHARE`, so that asking takes at
        most that share of the driver's time. A cheap searcher or slow evaluations ask for one
        at a time, as each result arrives.
        """
        slots = self.evaluator.n_slots
        if not (self.ask_seconds and self.durations):
            return slots - 1, slots  # nothing measured yet
        rate = slots / max(statistics.median(self.durations[-64:]), 1e-6)  # results per second, all slots busy
        during_ask = rate * statistics.median(self.ask_seconds)
        return slots - min(slots, max(1, math.ceil(during_ask / ASK_SHARE))), slots

    def ask_ahead(self):
        # While every worker is busy, prepare the next configurations, so a freed slot gets one
        # without waiting for the searcher (they miss the results that arrive meanwhile).
        if not self.prefetch or self.promotions is not None:
            return
        low, high = self.ahead_sizes()
        wanted = min(high, self.budget_left()) - len(self.ahead)
        if wanted > 0 and len(self.ahead) <= low:
            self.ahead.extend(self.ask(wanted))

    def record_waiting(self, most=RECORD_BATCH):
        """Write up to ``most`` of the finished results waiting for the catalog, together; they
        leave the waiting list once written (a Ctrl-C during the write leaves them there)."""
        batch = self.unrecorded[:most]
        stored_all = self.writer.record_many(batch)
        del self.unrecorded[:len(batch)]
        for (eval_id, result), stored in zip(batch, stored_all):
            self.configs.pop(eval_id, None)
            self.verdicts.pop(eval_id, None)
            self.session_reasons.append(stored["reason"])  # as the catalog keeps it: None for an entry with a model
            # Counted within this driver's lifetime: a start time that is missing (0) or earlier than
            # the driver (a clock apart) must not inflate the utilization.
            self.busy += max(0.0, result.end_time - max(result.start_time, self.started))
        self.progress(len(batch))
        if self.scheduler is not None:
            line = self.scheduler.after_record(self.evaluator, self.writer, self.trainings,
                                               remaining=self.max_evals - self.writer.n_finished)
            if line is not None and self.log is not None:
                self.log(line)

    def progress(self, n, force=False):
        """Count ``n`` results on the progress bar; what it shows besides the count is refreshed
        at most every :data:`PROGRESS_INTERVAL` s (it costs catalog queries, about 2 ms at 4,000
        entries), and always for the bar's last count and when ``force``."""
        if self.bar is None:
            return
        now = time.monotonic()
        fresh = force or now - self.postfix_at >= PROGRESS_INTERVAL or self.bar.n + n >= self.bar.total
        if fresh:
            self.postfix_at = now
        _update_bar(self.bar, self.writer, n, self.busy, self.evaluator.n_slots, self.started, postfix=fresh)

    def failing_alike(self):
        # The first results of this call (recorded, then waiting to be) all failed the same way.
        first = (self.session_reasons + [self.verdicts[i] for i, _ in self.unrecorded])[:self.early_failures]
        return (0 < self.early_failures == len(first) and None not in first
                and len({_failure_kind(r) for r in first}) == 1)

    def learn(self, finished):
        """Tell the searcher what the catalog will record of ``finished``; queue them for it."""
        for i, r in finished:
            self.verdicts[i] = _recorded_reason(self.writer, r)
            if r.end_time > r.start_time > 0:
                self.durations.append(r.end_time - r.start_time)
            self.trainings.append((int(r.epochs), int(self.configs[i]["hp"]["batch_size"]), int(r.n_params)))
        self.searcher.tell([(self.configs[i], None if self.verdicts[i] else objective_of(r)) for i, r in finished])
        self.entries.update((config_key(self.configs[i]), i) for i, _ in finished)
        self.unrecorded.extend(finished)

    def run(self, sigterm) -> None:  # noqa: C901 - the driver's event loop, read as one sequence (issue: scheduler)
        """Loop until the budget, the timeout, Ctrl-C/SIGTERM or early failures stop it."""
        writer, evaluator = self.writer, self.evaluator
        try:
            for eval_id, config in self.pending:
                if writer.n_finished + evaluator.n_running >= self.max_evals:
                    break
                self.submit(eval_id, config)
            while True:
                self.refill()
                if evaluator.n_running == 0 and not self.unrecorded:
                    if self.budget_left() > 0 and not self.time_for_another():
                        self.stopped_by = "timeout"  # too little time left for another evaluation
                    break
                # Between two catalog writes the driver polls again, so a freed slot is refilled at once.
                if self.unrecorded:
                    wait_for = 0.0
                else:
                    self.ask_ahead()
                    left = self.time_left()
                    wait_for = None if left is None else max(0.0, left)
                finished = evaluator.wait(timeout=wait_for) if evaluator.n_running else []
                if finished:
                    self.learn(finished)
                    if sigterm.received:
                        # Code between the handler and here swallowed its Terminated: stop all the same.
                        raise Terminated("SIGTERM")
                    if self.failing_alike():
                        self.stopped_by = "failing"
                        evaluator.cancel_all()
                        break
                    self.refill()
                if self.unrecorded:
                    self.record_waiting()
                if self.out_of_time():
                    self.stopped_by = "timeout"
                    evaluator.cancel_all()
                    break
        except KeyboardInterrupt as exc:
            terminated = isinstance(exc, Terminated) or sigterm.received
            self.interrupted, self.stopped_by = True, "terminated" if terminated else "interrupted"
            evaluator.cancel_all()
        except BaseException:
            evaluator.cancel_all()  # no evaluation outlives a driver that failed
            raise
        finally:
            # Whatever finished is paid for: record it even when stopping early (but for what a
            # Ctrl-C interrupted after its commit: the catalog holds that already).
            self.unrecorded = [(i, r) for i, r in self.unrecorded if writer.entry(i)["status"] == Status.RUNNING]
            while self.unrecorded:
                self.record_waiting()
            if self.bar is not None:
                self.progress(0, force=True)
                self.bar.close()
