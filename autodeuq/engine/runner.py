"""The search driver: the asynchronous loop joining a searcher, an evaluator and the catalog.

When any evaluation ends, the driver tells the searcher, submits a new configuration to the
freed slot at once, and then records the finished one in the catalog. It is the only writer of
the catalog. Resuming a run directory rebuilds the searcher from the catalog's history and
re-submits the evaluations that were running when the previous driver stopped.

Under an early-discarding rule with a second phase (i-Epoch, :class:`autodeuq.discard.iepoch.IEpoch`),
the search is followed, in the same call, by the full trainings of the entries the rule names
(:meth:`~autodeuq.discard.base.DiscardRule.after_search`):
entries of their own, each naming the one it trains again, run by the same loop.

A search whose first evaluations all fail the same way stops there (:data:`~autodeuq.engine.session.EARLY_FAILURES`):
the cause is then the setup, not the configurations, and the summary's ``error`` says it.
SIGTERM stops a search like Ctrl-C (:class:`Terminated`).
"""
from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from autodeuq import search as searchers
from autodeuq.catalog import DISCARDING_DECISION, Catalog, CatalogError
from autodeuq.core.errors import AutoDEUQError, ParameterError
from autodeuq.core.result import Status
from autodeuq.engine.progress import PlainProgress, _progress_bar, _set_postfix, _update_bar  # noqa: F401
from autodeuq.engine.session import (  # noqa: F401  (re-exported: they lived here)
    ASK_SHARE,
    EARLY_FAILURES,
    PROGRESS_INTERVAL,
    RECORD_BATCH,
    Terminated,
    _failure_kind,
    _most_common_failure,
    _recorded_reason,
    _SearchSession,
    objective_of,
)
from autodeuq.search.base import config_key


class SearchError(AutoDEUQError, RuntimeError):
    """A search produced no usable result: every evaluation failed, or the first ones all failed alike."""


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
