"""The job's two stages, the one implementation that the command line and the estimator call.

:func:`fill_catalog` is the search stage: training objective -> evaluator -> search driver,
filling (or resuming) a catalog. :func:`select_ensemble` and :func:`refit_ensemble` are the
ensemble stage: selection and calibration on the catalog's validation predictions, then the
refit of the members. Both take the configurations of :mod:`autodeuq.app.options`, checked once
before any work. Scoring, figures and files (the command line's) are :mod:`autodeuq.report`'s.
Heavy modules (TensorFlow, Ray, ConfigSpace) are imported only when a stage runs.
"""
from __future__ import annotations

import os
import time

from autodeuq.core.errors import ParameterError
from autodeuq.search import evolution_options  # its former home: the searchers' package owns it now

__all__ = ["discarder", "ensemble_deadline", "evolution_options", "fill_catalog", "refit_ensemble", "refit_where",
           "search_timeout", "searcher_options", "select_ensemble", "should_crossfit"]

#: Part of a whole-run time budget (search, then ensemble) kept for the ensemble step: this share
#: of the budget, within these bounds in seconds, and never more than half of it. Selecting from a
#: 100-model catalog, loading the members, scoring and plotting takes well under a minute.
ENSEMBLE_SHARE, ENSEMBLE_MIN_S, ENSEMBLE_MAX_S = 0.1, 30.0, 300.0
#: Seconds of that part kept, after a refit, for scoring the ensemble and writing its files.
REPORT_RESERVE_S = 15.0


def search_timeout(timeout: float | None) -> float | None:
    """The search's part of a wall-clock budget of ``timeout`` seconds for a whole run (search, then ensemble).

    >>> search_timeout(600.0), search_timeout(3600.0), search_timeout(40.0), search_timeout(None)
    (540.0, 3300.0, 20.0, None)
    """
    if timeout is None:
        return None
    return timeout - min(max(ENSEMBLE_MIN_S, ENSEMBLE_SHARE * timeout), ENSEMBLE_MAX_S, timeout / 2)


def ensemble_deadline(started: float, timeout: float | None) -> float | None:
    """The :func:`time.monotonic` time by which a run started at ``started`` with a whole-run budget
    of ``timeout`` seconds must have built its ensemble, less a reserve for scoring, plotting and
    writing it (:data:`REPORT_RESERVE_S`); None without a budget.

    >>> ensemble_deadline(100.0, 600.0), ensemble_deadline(100.0, None)
    (685.0, None)
    """
    return None if timeout is None else started + timeout - min(REPORT_RESERVE_S, timeout / 10)


def discarder(early_discarding="none", **options):
    """The early-discarding rule named ``early_discarding`` (a name of
    :data:`autodeuq.discard.RULES`; None for ``"none"``), built from ``options`` (option name ->
    value; those not given keep the table's defaults) as it reads them
    (:meth:`~autodeuq.discard.base.DiscardRule.from_options`).

    >>> discarder("iepoch", iepoch_top_k=20).describe()
    {'policy': 'iepoch', 'epochs': 1, 'top_k': 20}
    """
    from autodeuq import discard
    from autodeuq.app.options import OPTIONS

    return discard.create(early_discarding, {**{o.name: o.default for o in OPTIONS}, **options})


def discarding_policy(early_discarding, recorded=None) -> str:
    """The policy that ``early_discarding`` stands for: as asked, or for ``"auto"`` the successive
    halving that the catalog being resumed turned on (``recorded``:
    :func:`autodeuq.engine.runner.recorded_rule`), else ``"cost"``: decided from the trainings' cost
    (:mod:`autodeuq.discard.cost`), in a resumed search from the trainings of this run, as a search
    resumed to a larger budget may cost more than the one that decided. A catalog searched with
    successive halving before decisions were recorded keeps it.

    >>> discarding_policy("auto", {"policy": "none", "decision": {"policy": "none"}})
    'cost'
    >>> discarding_policy("auto", {"policy": "sha", "decision": {"policy": "sha"}}), discarding_policy("none")
    ('sha', 'none')
    """
    if early_discarding != "auto":
        return early_discarding
    if recorded is not None and recorded["policy"] != "none":
        return recorded["policy"]
    return "cost"


def searcher_options(config, space) -> dict:
    """The options of the searcher that ``config`` (a :class:`~autodeuq.app.options.SearchConfig`)
    names on ``space`` (sized for the data): surrogate and acquisition of the BO-based searchers,
    the fixed halves of the ablations, P and S of aging evolution.

    Raises
    ------
    ParameterError
        A fixed half that the space refuses.
    """
    from autodeuq.search import ablation_fixed_arch, ablation_fixed_hp, surrogate_searchers
    from autodeuq.search.space import SpaceError

    options = {}
    if config.search in surrogate_searchers():
        options = {"surrogate": config.surrogate, "acq": config.acq,
                   "random_interleave": config.random_interleave or 0.0}
    for name, search, resolve in (("fixed_hp", "age-fixed-hp", ablation_fixed_hp),
                                  ("fixed_arch", "bo-fixed-arch", ablation_fixed_arch)):
        if config.search == search:
            try:
                options[name] = resolve(space, getattr(config, name))
            except SpaceError as exc:
                raise ParameterError(name, f"does not fit the space: {exc}", getattr(config, name)) from None
    return {**options, **evolution_options(config.search, config.population_size, config.tournament_size,
                                           config.max_evals)}


def fill_catalog(space, dataset, run_dir: str | os.PathLike, config, *, timeout: float | None = None,
                 on_start=None, log=None):
    """The search stage: search ``space`` on ``dataset`` as ``config`` says, filling (or resuming)
    the catalog in ``run_dir``.

    Parameters
    ----------
    space : SearchSpace
        Already sized for the data (:meth:`SearchSpace.for_rows`).
    dataset : Dataset
    run_dir : path
    config : SearchConfig
        Checked by :func:`autodeuq.app.options.resolve`. Early discarding ``"auto"`` is settled here
        from the data and the catalog being resumed (:func:`discarding_policy`, and each rule's
        :meth:`~autodeuq.discard.base.DiscardRule.from_options`); ``"iepoch"`` runs i-Epoch's
        search, then trains the best configurations to the full budget, in this call (with a timeout its search
        phase uses at most half of it).
    timeout : float, optional
        Wall-clock seconds for this call, starting the evaluator included (see
        :func:`autodeuq.engine.runner.run_search`); :func:`search_timeout` gives the search's part of a
        budget for a whole run. None: no limit (``config.timeout`` is the caller's to split).
    on_start : callable, optional
        Called with the evaluator once it is ready, before the search starts (the command line
        prints the number of parallel evaluations).
    log : callable, optional
        Receives the lines saying what "auto" settings chose and that a run resumes.

    Returns
    -------
    SearchSummary
        Call its ``raise_for_error()`` to raise :class:`~autodeuq.engine.runner.SearchError` when the
        search produced nothing usable; ``interrupted`` is set when Ctrl-C or SIGTERM stopped it.

    Raises
    ------
    ParameterError
        A setting the space or the data refuse, before anything starts.
    """
    from autodeuq import discard
    from autodeuq.discard.cost import DiscardByCost, decide_after
    from autodeuq.discard.scheduler import Scheduler
    from autodeuq.engine import evaluator as evaluators
    from autodeuq.engine.evaluator.base import evaluation_threads
    from autodeuq.engine.runner import read_recorded, recorded_rule, run_search

    c = config
    deadline = None if timeout is None else time.monotonic() + timeout
    search_options = searcher_options(c, space)
    seed = 0 if c.seed is None else int(c.seed)
    # What a resumed catalog recorded, read once: "auto" settings keep its rule, and the driver
    # checks the resume against it without reading it again.
    recorded_search = None if c.new_run else read_recorded(run_dir)
    recorded = recorded_rule(recorded_search)
    policy = discarding_policy(c.early_discarding, recorded)
    # The rule reads its own options, settles their "auto" values from the data, the space and the
    # resumed catalog, and checks them against the epoch budget. The cost policy holds successive
    # halving until it turns it on (its "auto" choices are then not worth a line).
    rule = discard.create("sha" if policy == "cost" else policy, vars(c), epochs=c.epochs or space.epochs,
                          dataset=dataset, space=space, recorded=recorded, log=None if policy == "cost" else log)
    # The driver owns the rule and hands it to the evaluator ("auto": none until the first trainings
    # tell what the search costs).
    objective = evaluators.TrainingObjective(space, dataset, seed=seed, epochs=c.epochs,
                                             threads=evaluation_threads(c.cpus_per_eval), time_limit=c.eval_budget)
    if c.evaluator == "serial":
        runner = evaluators.create("serial", objective, eval_timeout=c.eval_timeout)
    else:
        runner = evaluators.create("ray", objective, workers=c.workers, cpus_per_eval=c.cpus_per_eval,
                                   gpus_per_eval=c.gpus_per_eval, address=c.ray_address, eval_timeout=c.eval_timeout)
    with runner:
        if on_start is not None:
            on_start(runner)
        scheduler = (Scheduler(by_cost=DiscardByCost(rule, budget_s=c.discard_budget,
                                                     after=decide_after(runner.n_slots), rows=len(dataset.x_train)))
                     if policy == "cost" else Scheduler(rule))
        return run_search(space, dataset, runner, run_dir, search=c.search, search_options=search_options,
                          max_evals=c.max_evals, seed=seed, new_run=c.new_run, progress=c.progress, log=log,
                          # Starting the workers (a Ray instance, say) counts against the limit too.
                          timeout=None if deadline is None else max(deadline - time.monotonic(), 1e-3),
                          run_options={"epochs": c.epochs, "eval_timeout": c.eval_timeout,
                                       "eval_budget": c.eval_budget}, scheduler=scheduler,
                          recorded=recorded_search)


def select_ensemble(run_dir, config, *, seed: int | None = 0, deadline: float | None = None,
                    where: dict | None = None, log=None):
    """The first half of the ensemble stage: the ensemble that ``config`` (an
    :class:`~autodeuq.options.EnsembleConfig`) selects and calibrates from the catalog in
    ``run_dir`` (:meth:`autodeuq.ensemble.Ensemble.from_catalog`), its members loaded, so that a
    member that cannot be read fails before anything is refitted or written.

    When ``config.crossfit`` says so (:func:`should_crossfit`), the best configurations are
    first cross-fitted (:func:`autodeuq.ensemble.crossfit.cross_fit`, on the evaluator ``where``
    names, :func:`refit_where`, each while it fits before ``deadline``) and the ensemble is
    selected and calibrated on their out-of-fold predictions; ``log`` receives the line saying
    whether it was cross-fitted.
    """
    from autodeuq.catalog import Catalog
    from autodeuq.ensemble import Ensemble
    from autodeuq.ensemble.crossfit import CONFIGS_PER_MEMBER, cross_fit

    seed = 0 if seed is None else int(seed)
    options = dict(size=config.ensemble_size, selector=config.selector, score=config.selection_score,
                   stop=config.selection_stop, diversity=config.diversity, calibrate=config.calibrate,
                   bags=config.selection_bags, seed=seed, pool=config.selection_pool)
    crossfit = None
    # Opened once for the stage: the decision, the cross-fit, the selection, and the ensemble's members,
    # whose source keeps it (its predictions read once, autodeuq.catalog.predictions).
    catalog = Catalog(run_dir)
    try:
        go, why = should_crossfit(config.crossfit, catalog)
        if go:
            configs = (CONFIGS_PER_MEMBER * config.ensemble_size if config.crossfit_configs == "auto"
                       else config.crossfit_configs)
            crossfit = cross_fit(catalog, configs, config.crossfit_folds, seed=seed, deadline=deadline,
                                 evaluator=(where or {}).get("evaluator", "serial"),
                                 evaluator_options=(where or {}).get("evaluator_options"), log=log)
            record = crossfit.record
            why += (f"; {record['configurations']} configuration(s) x {record['folds']} folds, {record['trained']} "
                    f"network(s) trained, {record['resumed']} read back, in {record['seconds']:.1f} s")
        if log is not None:
            log(why)
        ensemble = Ensemble.from_catalog(catalog, **options, crossfit=crossfit)
        ensemble.load_members()
    except BaseException:
        catalog.close()
        raise
    return ensemble


def should_crossfit(crossfit, catalog) -> tuple[bool, str]:
    """Whether ``crossfit`` (True, False or "auto") cross-fits the ensemble of ``catalog`` (a
    :class:`~autodeuq.catalog.Catalog`, or its run directory), and why: "auto" does for the tasks
    whose :attr:`Task.auto_crossfit_rows <autodeuq.tasks.base.Task.auto_crossfit_rows>` is set
    (classification), up to that many training and validation rows."""
    from autodeuq.catalog import Catalog
    from autodeuq.tasks import TASKS, get_task

    if crossfit is True:
        return True, "cross-fitted: asked for"
    if crossfit is False:
        return False, "not cross-fitted: turned off"
    if not isinstance(catalog, Catalog):
        with Catalog(catalog) as opened:
            return should_crossfit(crossfit, opened)
    counts, task = catalog.row_counts(), catalog.task
    limit = catalog.task_object.auto_crossfit_rows
    if not limit:
        auto = [name for name in TASKS if get_task(name).auto_crossfit_rows]
        return False, (f"not cross-fitted: a {task} run (auto cross-fits {' and '.join(auto)} runs; "
                       f"crossfit=True, --crossfit, cross-fits anyway)")
    if counts is None:
        return False, "not cross-fitted: the catalog does not record its number of rows"
    rows = sum(counts)
    if rows <= limit:
        return True, f"cross-fitted: {rows} training and validation rows (auto: at most {limit})"
    return False, (f"not cross-fitted: {rows} training and validation rows, more than the {limit} up to "
                   f"which cross-fitting is on by default (crossfit=True, --crossfit, cross-fits anyway)")


def refit_where(config) -> dict:
    """Where the members of an ensemble retrain after the search ``config`` (a
    :class:`~autodeuq.options.SearchConfig`) ran: at once on its Ray workers (still up, or
    started again with the same options), else one after the other in this process (also for
    ``config`` None: an ensemble built on its own, by ``autodeuq ensemble``)."""
    if config is None or config.evaluator != "ray":
        return {}
    return {"evaluator": "ray",
            "evaluator_options": {"workers": config.workers, "cpus_per_eval": config.cpus_per_eval,
                                  "gpus_per_eval": config.gpus_per_eval, "address": config.ray_address}}


def refit_ensemble(ensemble, when="auto", *, deadline: float | None = None, where: dict | None = None):
    """The second half of the ensemble stage: ``ensemble`` refitted on the training and
    validation rows its catalog stores when ``when`` (True, False or "auto":
    :func:`autodeuq.ensemble.refit.should_refit`) says so, each member while its retraining fits
    before ``deadline`` (a :func:`time.monotonic` time), on the evaluator ``where`` names
    (:func:`refit_where`); and the line saying what was done.

    Raises
    ------
    CatalogError
        The catalog does not store the rows (every catalog of this version does).
    """
    from autodeuq.catalog import CatalogError
    from autodeuq.ensemble.crossfit import configuration_view, is_cross_fitted, refit_folds
    from autodeuq.ensemble.refit import not_refitted, refit_selected, should_refit

    if is_cross_fitted(ensemble):
        go, why = refit_folds(when)
        if not go:
            return not_refitted(ensemble, why), why
        # The configurations selected, with their weights and the out-of-fold calibration, retrain on every row.
        ensemble, when = configuration_view(ensemble)[0], True
    if when is False:
        why = should_refit(False, 0)[1]
        return not_refitted(ensemble, why), why
    rows = ensemble.catalog.fit_data()
    if rows is None:
        raise CatalogError(f"{ensemble.catalog.run_dir}: its catalog does not store the training and validation "
                           f"rows, so its members cannot be refitted here; search again in a new run directory, "
                           f"or refit in Python with autodeuq.ensemble.refit.refit(ensemble, x, y)",
                           parameters=("refit", "run_dir"))
    where = where or {}
    refitted, line = refit_selected(ensemble, rows[0], rows[1], when, deadline=deadline,
                                    evaluator=where.get("evaluator", "serial"),
                                    evaluator_options=where.get("evaluator_options"))
    if "crossfit" in ensemble.selection and line.startswith("refit: asked for"):
        line = why + line[len("refit: asked for"):]
    return refitted, line
