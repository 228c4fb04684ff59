"""The search driver: the asynchronous loop joining a searcher, an evaluator and the catalog.

When any evaluation ends, the driver tells the searcher, submits a new configuration to the
freed slot at once, and then records the finished one in the catalog. It is the only writer of
the catalog. Resuming a run directory rebuilds the searcher from the catalog's history and
re-submits the evaluations that were running when the previous driver stopped.

Under an early-discarding rule with a second phase (i-Epoch, :class:`autodeuq.discard.iepoch.IEpoch`),
the search is followed, in the same call, by the full trainings of the entries the rule names
(:meth:`~autodeuq.discard.base.DiscardRule.after_search`):
entries of their own, each naming the one it trains again, run by the same loop.

A search whose first evaluations all fail the same way stops there (:data:`EARLY_FAILURES`):
the cause is then the setup, not the configurations, and the summary's ``error`` says it.
SIGTERM stops a search like Ctrl-C (:class:`Terminated`).
"""
from __future__ import annotations

import contextlib
import math
import re
import signal
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from autodeuq import search as searchers
from autodeuq.catalog import DISCARDING_DECISION, MUTATED_FROM, PROMOTED_FROM, Catalog, CatalogError
from autodeuq.core.errors import AutoDEUQError, ParameterError
from autodeuq.core.result import Status, TrainResult
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


class SearchError(AutoDEUQError, RuntimeError):
    """A search produced no usable result: every evaluation failed, or the first ones all failed alike."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived during a search: it stops as on Ctrl-C, leaving the run resumable."""

    exit_status = 143  # 128 + SIGTERM, what a shell reports for a process killed by it


@dataclass
class SearchSummary:
    """What a search did: counts, the best entry, time and effective worker utilization.

    ``best_objective`` is the best entry's validation NLL in standardized units (the training
    loss, the catalog's ``objective``); ``best_valid_nll`` the same in the data's units (the
    catalog's ``valid_nll``), which is what the summary line shows.
    """

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
    failure_reason: str | None = None
    failure_count: int = 0
    n_discarded: int = 0
    n_out_of_time: int = 0
    epochs: int = 0
    best_valid_nll: float = math.nan
    n_mutated: int = 0  #: entries of the run that aging evolution mutated from an earlier one
    measure: str = "NLL"  #: what the objective is: the Gaussian NLL, or a classifier's "log loss"

    @property
    def error(self) -> str | None:
        """Why this search produced nothing usable, or None.

        Set when the first evaluations of the search all failed the same way
        (``stopped_by == "failing"``), or when the run directory holds no successful
        evaluation after a search that was not interrupted; it names the most common failure.
        """
        if self.interrupted:
            return None
        if self.stopped_by == "failing":
            return (f"the first {self.failure_count} evaluations of this search all failed the same way, so it "
                    f"stopped: {self.failure_reason} (see {self.run_dir / 'results.csv'})")
        if self.n_done + self.n_discarded > 0:
            return None
        if self.n_failed == 1:
            return f"the only evaluation failed: {self.failure_reason} (see {self.run_dir / 'results.csv'})"
        if self.n_failed:
            return (f"all {self.n_failed} evaluations failed; the most common reason ({self.failure_count} of "
                    f"{self.n_failed}): {self.failure_reason} (see {self.run_dir / 'results.csv'})")
        return f"no evaluation finished (stopped by {self.stopped_by}); {self.run_dir} holds no trained network"

    def raise_for_error(self) -> None:
        """Raise :class:`SearchError` with :attr:`error` when the search produced nothing usable."""
        if self.error:
            raise SearchError(self.error)

    @property
    def utilization(self) -> float:
        """Busy worker time / (slots x wall time) over this driver's lifetime."""
        return self.busy_time / (self.slots * self.wall_time) if self.wall_time > 0 else 0.0

    def __str__(self):
        if self.best_id is None:
            best = "none"
        elif math.isfinite(self.best_valid_nll):
            best = f"{self.best_valid_nll:.4f} (id {self.best_id})"
        else:  # a catalog without the targets' scale: say which scale the number is on
            best = f"{self.best_objective:.4f} (standardized, id {self.best_id})"
        discarded = f"{self.n_discarded} discarded early, " if self.n_discarded else ""
        budget = f" ({self.n_out_of_time} ended by the evaluation budget)" if self.n_out_of_time else ""
        mutated = f"{self.n_mutated} mutated from earlier ones, " if self.n_mutated else ""
        return (f"{self.n_done} done{budget}, {discarded}{self.n_failed} failed, {mutated}best validation "
                f"{self.measure} {best}, {self.wall_time:.1f} s, "
                f"utilization {100 * self.utilization:.1f} % of {self.slots} slot(s)")


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


class SigtermWatch:
    """What :func:`sigterm_interrupts` saw: ``received`` is True once SIGTERM arrived."""

    received = False


@contextlib.contextmanager
def sigterm_interrupts():
    """Within this block, SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``).

    So a terminated search stops the way Ctrl-C stops it: running evaluations cancelled (and
    resumable), finished results recorded, the catalog closed. Only the first SIGTERM raises;
    later ones are ignored until the block is left, so that they cannot cut that clean-up
    short. Outside the main thread this does nothing (Python delivers signals there only).

    Yields
    ------
    SigtermWatch
        Says whether SIGTERM arrived: code that the exception crosses (Ray's ``wait``) may turn
        it into a plain ``KeyboardInterrupt``.
    """
    watch = SigtermWatch()
    if threading.current_thread() is not threading.main_thread():
        yield watch
        return

    def handler(signum, frame):
        if not watch.received:
            watch.received = True
            raise Terminated(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield watch
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


#: ``recorded`` of :func:`run_search` when the caller has not read the catalog.
NOT_READ = "not read"


def read_recorded(run_dir) -> dict | None:
    """What the catalog in ``run_dir`` recorded of its search: ``{"search": its search options,
    "n_finished": finished entries}``, read in one opening; None when there is no catalog yet
    (or a broken one, which :meth:`Catalog.create_or_resume` reports)."""
    try:
        with Catalog(run_dir) as catalog:
            return {"search": catalog.meta.get("search") or {}, "n_finished": catalog.n_finished}
    except CatalogError:
        return None


def recorded_rule(recorded: dict | None) -> dict | None:
    """The early-discarding rule that a catalog was searched with (``recorded``: from
    :func:`read_recorded`), as ``describe()`` gives it (``{"policy": "none"}`` without one), with
    the ``decision`` of ``early_discarding="auto"`` when one was taken (:mod:`autodeuq.discard.cost`);
    None when there is no catalog or it has no finished entry."""
    if not recorded or not recorded["n_finished"]:
        return None
    search = recorded["search"]
    rule = search.get("early_discarding") or {"policy": "none"}
    decision = search.get(DISCARDING_DECISION)
    return {**rule, "decision": decision} if decision else rule


def _check_resume(recorded, run_dir, space, epochs, discarder) -> None:
    """Refuse to resume a run with another epoch budget or early-discarding rule: its entries
    would not be comparable. ``recorded``: :func:`read_recorded`'s."""
    if recorded is None:
        return  # no catalog yet
    n_finished, recorded = recorded["n_finished"], recorded["search"]
    before = recorded.get("epochs") or None
    if int(before or space.epochs) != int(epochs or space.epochs):
        def budget(e):
            return f"an epoch budget of {e}" if e else f"the space's {space.epochs} epochs"

        raise CatalogError(f"{run_dir}: its catalog was trained with {budget(before)}, this run asks for "
                           f"{budget(epochs)}; resuming would mix epoch budgets in one catalog. Use {budget(before)} "
                           f"or a new run directory", parameters=("epochs", "run_dir"))
    rule, wanted = recorded.get("early_discarding"), None if discarder is None else discarder.describe()
    if n_finished and rule != wanted:
        def name(r):
            return "no early discarding" if r is None else ", ".join(f"{k} {v}" for k, v in r.items())

        raise CatalogError(f"{run_dir}: its catalog was searched with {name(rule)}, this run asks for "
                           f"{name(wanted)}; resuming would mix the two in one catalog. Use the same rule or a "
                           f"new run directory", parameters=("early_discarding", "run_dir"))


def run_search(space, dataset, evaluator, run_dir, *, search: str = "agebo", search_options: dict | None = None,
               max_evals: int = 100, timeout: float | None = None, seed: int = 0, new_run: bool = False,
               progress: bool = True, run_options: dict | None = None,
               prefetch: bool | None = None, log=None, scheduler=None, recorded=NOT_READ) -> SearchSummary:
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
        Wall-clock seconds for this call (> 0). Once the time left is shorter than the median
        duration of this call's finished evaluations, no new one starts (it would be cancelled
        unfinished); at the limit, running evaluations are cancelled (and stay resumable).
    run_options : dict, optional
        Extra facts to record in the run metadata (epochs override, evaluator resources). An
        ``epochs`` entry must give the same epoch budget as the run's first session.
    prefetch : bool, optional
        Ask the searcher for the next configurations while all workers are busy, so a freed
        worker never waits for the searcher (default: on when the evaluator has several slots).
    log : callable, optional
        Receives one line when an existing run is resumed (how many evaluations are done and
        how many interrupted ones run again), and the line of a decision the ``scheduler``
        took; nothing is logged per evaluation.
    scheduler : Scheduler, optional
        The early discarding of the search (:class:`autodeuq.discard.scheduler.Scheduler`): its rule is
        handed to ``evaluator`` for the trainings it starts, and for ``early_discarding="auto"``
        its decision is taken once the first trainings tell what the search will cost, reviewed
        after each later result while discarding is off, and recorded in the catalog
        (:meth:`CatalogWriter.record_discarding`). Default: the rule the evaluator's objective
        holds.
    recorded : dict or None, optional
        What the catalog in ``run_dir`` recorded (:func:`read_recorded`; None: no catalog), when
        the caller read it already: the run directory is then opened once more, for writing, and
        not read again.

    Returns
    -------
    SearchSummary
        Its ``error`` is set when the search produced nothing usable (see
        :attr:`SearchSummary.error`); ``interrupted`` when Ctrl-C or SIGTERM stopped it.

    Raises
    ------
    CatalogError
        ``run_dir`` cannot be used (other data, space or epoch budget; another writer).
    ValueError
        ``timeout`` is not positive.

    Notes
    -----
    Evaluations still running when the driver stops for any reason (an exception included) are
    cancelled; they stay in the catalog as running and are trained again on resume.

    With i-Epoch, ``max_evals`` counts the search phase's evaluations; the full trainings of the
    promoted ones follow (skipped after Ctrl-C, SIGTERM or early failures; resumed with the run),
    and a ``timeout`` gives the search phase at most :attr:`~autodeuq.discard.iepoch.IEpoch.search_share`
    of it.
    """
    if timeout is not None and not timeout > 0:
        raise ParameterError("timeout", "must be > 0 seconds", timeout)
    with sigterm_interrupts() as sigterm:
        return _run_search(space, dataset, evaluator, run_dir, search=search, search_options=search_options,
                           max_evals=max_evals, timeout=timeout, seed=seed, new_run=new_run, progress=progress,
                           run_options=run_options, prefetch=prefetch, sigterm=sigterm, log=log,
                           scheduler=scheduler, recorded=recorded)


def _resume_line(writer, run_dir, n_pending: int) -> str:
    n_discarded, n_failed = writer.n_discarded, writer.n_finished - writer.n_done - writer.n_discarded
    discarded = f", {n_discarded} discarded early" if n_discarded else ""
    return (f"resuming {run_dir}: {writer.n_finished} evaluation(s) finished ({writer.n_done} done{discarded}, "
            f"{n_failed} failed); {n_pending} interrupted evaluation(s) run again")


def _run_search(space, dataset, evaluator, run_dir, *, search, search_options, max_evals, timeout, seed, new_run,
                progress, run_options, prefetch, sigterm, log=None, scheduler=None,
                recorded=NOT_READ) -> SearchSummary:
    from autodeuq.discard.scheduler import Scheduler

    search_options = dict(search_options or {})
    scheduler = Scheduler(evaluator.discarder) if scheduler is None else scheduler
    if not new_run:
        recorded = read_recorded(run_dir) if recorded is NOT_READ else recorded
        _check_resume(recorded, run_dir, space, (run_options or {}).get("epochs"), scheduler.rule)
    writer = Catalog.create_or_resume(
        run_dir, space, dataset,
        search_options={"search": search, "options": search_options, "evaluator": evaluator.describe(),
                        "early_discarding": scheduler.describe(),
                        **(run_options or {})},
        seed=seed, new_run=new_run,
    )
    try:
        searcher = searchers.create(search, space, seed=seed, **search_options)
        history = writer.history(with_ids=True)
        if log is not None and (history or writer.pending()):
            rerun = min(len(writer.pending()), max(0, max_evals - writer.n_finished))
            log(_resume_line(writer, run_dir, rerun))
        entries = {config_key(config): entry_id for entry_id, config, _ in history}  # equal configs: the last
        history = [(config, objective) for _, config, objective in history]
        if history:
            searcher.tell(history)
        scheduler.attach(evaluator, writer)  # a resumed run's rungs keep what its finished trainings reported
        full = writer.full_trainings()
        finished_full = sum(writer.entry(i)["status"] != Status.RUNNING for i in full)
        # With a second phase (i-Epoch), the search phase leaves the full trainings their share of the time.
        share = scheduler.search_share
        session = _SearchSession(writer, searcher, evaluator, max_evals=max_evals + finished_full,
                                 timeout=None if timeout is None else timeout * share, prefetch=prefetch,
                                 progress=progress, pending=[(i, c) for i, c in writer.pending() if i not in full],
                                 entries=entries, scheduler=scheduler, log=log)
        session.run(sigterm)
        sessions = [session]
        if scheduler.rule is not None and not session.interrupted and session.stopped_by != "failing":
            left = None if timeout is None else session.started + timeout - time.time()
            promoted = _promoted_session(writer, searcher, evaluator, scheduler, timeout=left, progress=progress)
            if promoted is not None:
                handle = evaluator.discarder
                evaluator.set_discarder(None)  # full trainings: no cap
                try:
                    promoted.run(sigterm)
                finally:
                    evaluator.set_discarder(handle)
                sessions.append(promoted)
        return _summary(Path(run_dir), sessions)
    finally:
        writer.close()


def _promoted_session(writer, searcher, evaluator, scheduler, *, timeout, progress) -> "_SearchSession | None":
    """The session training to the full budget what the rule names after the search
    (:meth:`~autodeuq.discard.base.DiscardRule.after_search`: i-Epoch's second phase), and the
    interrupted ones of an earlier such session; None when there is nothing to train or no time.

    Its evaluations are entries of their own, each naming the entry it trains again
    (:data:`autodeuq.catalog.PROMOTED_FROM`); interrupted ones are re-run first.
    """
    full = writer.full_trainings()
    queue = scheduler.after_search(writer)
    pending = [(i, c) for i, c in writer.pending() if i in full]
    if not (queue or pending) or (timeout is not None and timeout <= 0):
        return None
    return _SearchSession(writer, searcher, evaluator, max_evals=writer.n_finished + len(pending) + len(queue),
                          timeout=timeout, prefetch=False, progress=progress, pending=pending, promotions=queue)


def _summary(run_dir: Path, sessions: list["_SearchSession"]) -> SearchSummary:
    """What the sessions of one call did together (the search phase, then any full trainings)."""
    last = sessions[-1]
    writer = last.writer
    wall = time.time() - sessions[0].started
    best, n_done, n_finished, n_discarded = writer.best(), writer.n_done, writer.n_finished, writer.n_discarded
    frame = writer.to_dataframe()
    failing = next((s for s in sessions if s.stopped_by == "failing"), None)
    if failing is not None:
        failure_reason, failure_count = failing.session_reasons[0], failing.early_failures
    elif n_finished > n_done + n_discarded:
        failure_reason, failure_count = _most_common_failure(
            [str(r) for r in frame.loc[frame["status"] == Status.FAILED, "reason"]])
    else:
        failure_reason, failure_count = None, 0
    stops = [s.stopped_by for s in sessions if s.stopped_by != "max_evals"]
    return SearchSummary(
        run_dir=run_dir, n_done=n_done, n_failed=n_finished - n_done - n_discarded, n_discarded=n_discarded,
        n_out_of_time=writer.n_out_of_time, epochs=int(frame["epochs"].fillna(0).sum()),
        best_id=None if best is None else best[0], best_objective=math.inf if best is None else best[1],
        best_valid_nll=math.inf if best is None else best[1] + writer.nll_offset,
        wall_time=wall, busy_time=sum(s.busy for s in sessions), slots=last.evaluator.n_slots,
        interrupted=any(s.interrupted for s in sessions), stopped_by=stops[-1] if stops else "max_evals",
        failure_reason=failure_reason, failure_count=failure_count, n_mutated=int(frame["parent"].notna().sum()),
        measure="log loss" if writer.task == "classification" else "NLL",
    )


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


def _progress_bar(enabled, total, initial):
    """tqdm's bar on a terminal; elsewhere (a log file, a pipe) :class:`PlainProgress`'s lines."""
    if not enabled:
        return None
    import sys

    if not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return PlainProgress(total, initial)
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="search", unit="eval", dynamic_ncols=True)


class PlainProgress:
    """The search's progress as plain lines on stderr, one every :attr:`STEP` of ``total`` and one at
    the end: tqdm's bar, redrawn with carriage returns, filled a redirected log with ~10 KB of
    updates nobody could read."""

    STEP = 0.1  #: a line every tenth of the evaluations (every 10 when their number is not known)

    def __init__(self, total, initial=0):
        self.total, self.n = total, int(initial)
        self.every = max(1, math.ceil(total * self.STEP)) if total else 10
        self.postfix: dict = {}
        self._printed = None

    def update(self, n=1):
        before, self.n = self.n, self.n + n
        if n and (self.n // self.every > before // self.every or (self.total and before < self.total <= self.n)):
            self._line()

    def set_postfix(self, refresh=True, **values):
        self.postfix = values

    def close(self):
        if self._printed != self.n:
            self._line()

    def _line(self):
        import sys

        done = f"{self.n}/{self.total} evals ({100 * self.n / self.total:.0f}%)" if self.total else f"{self.n} evals"
        extra = "".join(f", {k} {v}" for k, v in self.postfix.items())
        print(f"search: {done}{extra}", file=sys.stderr, flush=True)
        self._printed = self.n


def _update_bar(bar, writer, n, busy, slots, started, postfix=True):
    """Count ``n`` more finished evaluations on ``bar``; with ``postfix``, first refresh what it
    shows besides the count (failures, the best NLL, the utilization: catalog queries)."""
    if postfix:
        _set_postfix(bar, writer, busy, slots, started)
    bar.update(n)


def _set_postfix(bar, writer, busy, slots, started):
    best = writer.best()
    wall = max(time.time() - started, 1e-9)
    # The NLL in the data's units, as metrics.json and results.csv's valid_nll give it; the
    # standardized training loss (the objective) would read as another, unexplained number.
    offset = writer.nll_offset
    if best is None:
        shown = {"best_nll": "-"}
    elif math.isfinite(offset):
        shown = {"best_nll": f"{best[1] + offset:.4f}"}
    else:  # a catalog without the targets' scale: say which scale the number is on
        shown = {"best_nll_standardized": f"{best[1]:.4f}"}
    bar.set_postfix(
        failed=writer.n_finished - writer.n_done - writer.n_discarded,
        **shown,
        util=f"{100 * busy / (slots * wall):.0f}%",
        refresh=False,
    )
