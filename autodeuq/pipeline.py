"""The one path from a dataset to a filled catalog, shared by the command line and the estimator.

:func:`fill_catalog` wires training objective -> evaluator -> search driver; the checks below
refuse bad parameter values before any of it starts, with the same rules (and the same
parameter names) for :class:`~autodeuq.AutoDEUQRegressor` and ``autodeuq search``. Heavy modules
(TensorFlow, Ray, ConfigSpace) are imported only when a search runs, so the command line's
``--help`` stays fast.
"""
from __future__ import annotations

import numbers
import os
import time

from autodeuq.errors import ParameterError

__all__ = ["check_ensemble_parameters", "check_search_parameters", "discarder", "ensemble_deadline", "fill_catalog",
           "search_timeout"]

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


#: Upper bounds of the numeric parameters. Past them a value is a slip of the keyboard, not a
#: setting, and it would fail deep inside (a seed beyond SQLite's and NumPy's integer range, a CPU
#: count Ray cannot schedule) or run until killed (a billion selection bags).
MAXIMUM = {
    "seed": 2**32 - 1,  # what numpy.random.seed and keras.utils.set_random_seed accept
    "max_evals": 10**6, "epochs": 10**5, "workers": 10**5, "iepoch_epochs": 10**5, "iepoch_top_k": 10**6,
    "sha_min_epochs": 10**5, "sha_reduction": 1000,
    "timeout": 10 * 365 * 86400.0, "eval_timeout": 10 * 365 * 86400.0, "eval_budget": 10 * 365 * 86400.0,
    "cpus_per_eval": 4096.0, "gpus_per_eval": 1024.0,
    "ensemble_size": 1000, "selection_bags": 10**4, "population_size": 10**5, "tournament_size": 10**5,
}


def _integer(name, value, minimum, *, optional=False):
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ParameterError(name, f"must be an integer >= {minimum}", value)
    if name in MAXIMUM and value > MAXIMUM[name]:
        raise ParameterError(name, f"must be an integer <= {MAXIMUM[name]}", value)


def _positive(name, value, *, strict=True):
    if value is None:
        return
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and (value > 0 if strict else value >= 0)
    if not ok:
        raise ParameterError(name, "must be > 0" if strict else "must be >= 0", value)
    if not value <= MAXIMUM[name]:  # also infinity
        raise ParameterError(name, f"must be a finite number <= {MAXIMUM[name]:g}", value)


def _one_of(name, value, allowed):
    if not isinstance(value, str) or value not in allowed:
        raise ParameterError(name, f"must be one of {list(allowed)}", value)


def check_search_parameters(*, search="agebo", max_evals=100, epochs=None, seed=0, timeout=None, eval_timeout=None,
                            eval_budget=None, evaluator="ray", workers=None, cpus_per_eval=None, gpus_per_eval=None,
                            valid_fraction=1 / 3, early_discarding="auto", sha_min_epochs="auto", sha_reduction=3,
                            sha_rungs="auto", iepoch_epochs=1, iepoch_top_k=10, population_size="auto",
                            tournament_size="auto") -> None:
    """Refuse, before any work, a search parameter that would fail later or make every evaluation fail.

    ``None`` means "not given" wherever it is allowed (``seed`` None is 0).

    Raises
    ------
    ParameterError
        Naming the first bad parameter, what it must be and the value given.
    """
    from autodeuq.discard import POLICIES, RUNG_UNITS
    from autodeuq.evaluator import EVALUATORS
    from autodeuq.search import ABLATIONS, SEARCHERS

    _one_of("search", search, (*SEARCHERS, *ABLATIONS))
    _integer("max_evals", max_evals, 1)
    _integer("epochs", epochs, 1, optional=True)
    _integer("seed", seed, 0, optional=True)
    _positive("timeout", timeout)
    _positive("eval_timeout", eval_timeout)
    _positive("eval_budget", eval_budget)
    _one_of("evaluator", evaluator, EVALUATORS)
    _integer("workers", workers, 1, optional=True)
    _positive("cpus_per_eval", cpus_per_eval)
    _positive("gpus_per_eval", gpus_per_eval, strict=False)
    if isinstance(valid_fraction, bool) or not isinstance(valid_fraction, numbers.Real) or not 0 < valid_fraction < 1:
        raise ParameterError("valid_fraction", "must be a number strictly between 0 and 1", valid_fraction)
    _one_of("early_discarding", early_discarding, POLICIES)
    # "auto" may become successive halving: its settings are checked as well.
    if early_discarding in ("auto", "sha"):
        integer = isinstance(sha_min_epochs, numbers.Integral) and not isinstance(sha_min_epochs, bool)
        if sha_min_epochs != "auto" and not (integer and sha_min_epochs >= 1):
            raise ParameterError("sha_min_epochs", 'must be "auto" or an integer >= 1', sha_min_epochs)
        if sha_min_epochs != "auto":
            _integer("sha_min_epochs", sha_min_epochs, 1)
        _integer("sha_reduction", sha_reduction, 2)
        _one_of("sha_rungs", sha_rungs, RUNG_UNITS)
    if early_discarding == "iepoch":
        _integer("iepoch_epochs", iepoch_epochs, 1)
        _integer("iepoch_top_k", iepoch_top_k, 1)
    discarder("sha" if early_discarding == "auto" else early_discarding,
              sha_min_epochs=1 if sha_min_epochs == "auto" else sha_min_epochs,
              sha_reduction=sha_reduction, iepoch_epochs=iepoch_epochs, iepoch_top_k=iepoch_top_k)
    if early_discarding == "iepoch" and epochs is not None and iepoch_epochs >= epochs:
        raise ParameterError("iepoch_epochs", f"must be below the epoch budget ({epochs})", iepoch_epochs)
    evolution_options(search, population_size, tournament_size, max_evals)


def evolution_options(search, population_size="auto", tournament_size="auto", max_evals=100) -> dict:
    """The options of aging evolution (P, S) for ``search``: those given, ``"auto"`` sized for a
    budget of ``max_evals`` evaluations (:func:`autodeuq.search.age.population_for_budget`); {}
    for a searcher without aging evolution, which refuses any other value than ``"auto"``.

    >>> evolution_options("agebo"), evolution_options("agebo", 40, max_evals=500), evolution_options("bo")
    ({'population_size': 20, 'sample_size': 7}, {'population_size': 40, 'sample_size': 13}, {})
    """
    from autodeuq.search import evolution_searchers
    from autodeuq.search.age import population_for_budget, tournament_for

    for name, value in (("population_size", population_size), ("tournament_size", tournament_size)):
        if value != "auto":
            if search not in evolution_searchers():
                raise ParameterError(name, f'must be "auto" with search {search!r}: only aging evolution '
                                           f'({", ".join(evolution_searchers())}) has a population', value)
            _integer(name, value, 2 if name == "population_size" else 1)
    size = population_for_budget(max_evals)[0] if population_size == "auto" else population_size
    tournament = tournament_for(size) if tournament_size == "auto" else tournament_size
    if tournament > size:
        raise ParameterError("tournament_size", f"must be at most the population size ({size})", tournament_size)
    if search not in evolution_searchers():
        return {}
    return {"population_size": size, "sample_size": tournament}


def discarder(early_discarding="none", *, sha_min_epochs=1, sha_reduction=3, sha_reference_batch=None,
              iepoch_epochs=1, iepoch_top_k=10):
    """The early-discarding rule named ``early_discarding`` with its settings (None for ``"none"``);
    ``sha_reference_batch`` counts the rungs of successive halving in optimizer steps.

    >>> discarder("iepoch", iepoch_top_k=20).describe()
    {'policy': 'iepoch', 'epochs': 1, 'top_k': 20}
    """
    from autodeuq.discard import IEpoch, SuccessiveHalving

    if early_discarding == "sha":
        return SuccessiveHalving(min_epochs=sha_min_epochs, reduction=sha_reduction,
                                 reference_batch=sha_reference_batch)
    if early_discarding == "iepoch":
        return IEpoch(epochs=iepoch_epochs, top_k=iepoch_top_k)
    if early_discarding == "auto":
        raise ValueError('early_discarding="auto" depends on the data: resolve it first (discarding_policy)')
    return None


def first_rung(sha_min_epochs, dataset, recorded=None) -> tuple[int, str | None]:
    """The first rung of successive halving that ``sha_min_epochs`` stands for on ``dataset``
    (see :func:`autodeuq.discard.resolve_min_epochs`; ``"auto"`` keeps the first rung of the
    ``recorded`` rule of a catalog being resumed, :func:`autodeuq.runner.recorded_rule`), and a
    line for the user when ``"auto"`` chose a rung other than 1."""
    from autodeuq.data import SMALL_DATA_ROWS
    from autodeuq.discard import resolve_min_epochs

    if sha_min_epochs == "auto" and (recorded or {}).get("policy") == "sha":
        return int(recorded["min_epochs"]), None
    rows = len(dataset.x_train) + len(dataset.x_valid)
    epochs = resolve_min_epochs(sha_min_epochs, rows)
    if sha_min_epochs != "auto" or epochs == 1:
        return epochs, None
    return epochs, (f"successive halving: first rung at epoch {epochs}, {rows} training and validation rows "
                    f"(auto: epoch {epochs} up to {SMALL_DATA_ROWS})")


def rung_unit(sha_rungs, space, recorded=None) -> int | None:
    """The reference batch size of successive halving's rungs that ``sha_rungs`` stands for: with
    ``"steps"``, the geometric middle of the batch sizes of ``space`` (already sized for the data;
    :func:`autodeuq.discard.middle_batch`), None (rungs in epochs) with ``"epochs"``; ``"auto"``
    keeps the unit of the ``recorded`` rule of a catalog being resumed, else
    :data:`autodeuq.discard.AUTO_RUNG_UNIT`."""
    from autodeuq.discard import AUTO_RUNG_UNIT, middle_batch

    if sha_rungs == "auto" and (recorded or {}).get("policy") == "sha":
        return recorded.get("reference_batch")
    unit = AUTO_RUNG_UNIT if sha_rungs == "auto" else sha_rungs
    return middle_batch(space.batch_size_min, space.batch_size_max) if unit == "steps" else None


def discarding_policy(early_discarding, dataset, recorded=None) -> tuple[str, str | None]:
    """The policy that ``early_discarding`` stands for on ``dataset`` (see
    :func:`autodeuq.discard.resolve_policy`; ``"auto"`` keeps the policy of the ``recorded`` rule
    of a catalog being resumed, :func:`autodeuq.runner.recorded_rule`), and a line for the user
    when ``"auto"`` turned successive halving on (else None)."""
    from autodeuq.discard import resolve_policy

    if early_discarding == "auto" and recorded is not None:
        return recorded["policy"], None
    policy, why = resolve_policy(early_discarding, len(dataset.x_train) + len(dataset.x_valid))
    return policy, (why if early_discarding == "auto" and policy != "none" else None)


def check_ensemble_parameters(*, ensemble_size=5, selector="greedy", selection_score="mixture", selection_stop="size",
                              diversity="none", selection_bags=0, calibrate="auto", refit="auto") -> None:
    """Refuse, before any work, a bad ensemble-selection parameter (see
    :meth:`autodeuq.ensemble.Ensemble.from_catalog`).

    Raises
    ------
    ParameterError
        Naming the first bad parameter, what it must be and the value given.
    """
    from autodeuq.ensemble.options import CALIBRATIONS, DIVERSITY
    from autodeuq.ensemble.refit import check_refit
    from autodeuq.ensemble.selection import METHODS, SCORES, STOPS

    _integer("ensemble_size", ensemble_size, 1)
    _one_of("selector", selector, METHODS)
    _one_of("selection_score", selection_score, SCORES)
    _one_of("selection_stop", selection_stop, STOPS)
    _one_of("diversity", diversity, DIVERSITY)
    _integer("selection_bags", selection_bags, 0)
    _one_of("calibrate", calibrate, CALIBRATIONS)
    check_refit(refit)


def fill_catalog(space, dataset, run_dir: str | os.PathLike, *, search: str = "agebo",
                 search_options: dict | None = None, max_evals: int = 100, timeout: float | None = None,
                 seed: int = 0, epochs: int | None = None, early_discarding: str = "auto",
                 sha_min_epochs: int | str = "auto", sha_rungs: str = "auto",
                 sha_reduction: int = 3, iepoch_epochs: int = 1, iepoch_top_k: int = 10, evaluator: str = "ray",
                 workers: int | None = None, cpus_per_eval: float | None = None, gpus_per_eval: float | None = None,
                 ray_address: str | None = None, eval_timeout: float | None = None,
                 eval_budget: float | None = None, new_run: bool = False, progress: bool = True, on_start=None,
                 log=None, population_size: int | str = "auto", tournament_size: int | str = "auto"):
    """Search ``space`` on ``dataset``, filling (or resuming) the catalog in ``run_dir``.

    Parameters
    ----------
    space : SearchSpace
        Already sized for the data (:meth:`SearchSpace.for_rows`).
    dataset : Dataset
    run_dir : path
    search, search_options, max_evals, seed, new_run, progress, log
        Of :func:`autodeuq.runner.run_search` (``log`` receives the line saying a run resumes).
    timeout : float, optional
        Wall-clock seconds for this call, starting the evaluator included (see
        :func:`autodeuq.runner.run_search`); :func:`search_timeout` gives the search's part of a
        budget for a whole run.
    epochs : int, optional
        Override of the space's epoch budget.
    early_discarding : {"auto", "none", "sha", "iepoch"}
        ``"auto"``: ``"sha"`` when the dataset's training and validation rows number more than
        :data:`autodeuq.data.SMALL_DATA_ROWS`, else ``"none"``; a resumed run keeps the policy its
        catalog was searched with. ``"sha"``: asynchronous successive halving (Li et al. 2020) with rungs at
        ``sha_min_epochs * sha_reduction**k`` epochs (:class:`autodeuq.discard.SuccessiveHalving`);
        ``sha_min_epochs="auto"`` is epoch 3 on small tables and 1 above (or the first rung of the
        catalog being resumed; :func:`first_rung`). ``sha_rungs="steps"`` counts the rungs in
        optimizer steps, those of as many epochs with the middle batch size of the space (geometric
        mean of its range), so that a training with larger batches reaches each rung after more
        epochs and one with smaller batches after fewer; ``"epochs"`` counts epochs; ``"auto"`` is
        ``"epochs"`` (or the unit of the catalog being resumed; :func:`rung_unit`).
        ``"iepoch"``: every search evaluation trains ``iepoch_epochs`` epochs, then the
        ``iepoch_top_k`` best configurations are trained to the full budget, in this call
        (Egele 2024; :class:`autodeuq.discard.IEpoch`); with a ``timeout`` the search phase
        uses at most half of it.
    evaluator : {"ray", "serial"}
        ``"serial"`` runs one evaluation at a time in this process and ignores the Ray options
        (``workers``, ``cpus_per_eval``, ``gpus_per_eval``, ``ray_address``).
    cpus_per_eval : float, optional
        CPUs of each evaluation; its TensorFlow uses that many threads (default 1).
    eval_timeout : float, optional
        Seconds an evaluation may run on a worker before it is cancelled as failed.
    eval_budget : float, optional
        Seconds each training may take: it ends after the epoch when another one as long would
        pass them, keeping its best epoch so far (``time_limit`` of :func:`autodeuq.train.train`),
        instead of being cancelled. Bounds the cost of one evaluation on large data.
    on_start : callable, optional
        Called with the evaluator once it is ready, before the search starts (the command line
        prints the number of parallel evaluations).
    population_size, tournament_size : int or "auto"
        P and S of aging evolution (searchers ``age``, ``agebo``, ``age-fixed-hp``); ``"auto"``
        sizes them for ``max_evals`` (:func:`evolution_options`), so that evolution runs for most
        of the budget.

    Returns
    -------
    SearchSummary
        Call its ``raise_for_error()`` to raise :class:`~autodeuq.runner.SearchError` when the
        search produced nothing usable; ``interrupted`` is set when Ctrl-C or SIGTERM stopped it.

    Raises
    ------
    ParameterError
        A bad parameter, before anything starts.
    """
    from autodeuq import evaluator as evaluators
    from autodeuq.evaluator.base import evaluation_threads
    from autodeuq.runner import recorded_rule, run_search

    deadline = None if timeout is None else time.monotonic() + timeout
    check_search_parameters(search=search, max_evals=max_evals, epochs=epochs, seed=seed, timeout=timeout,
                            eval_timeout=eval_timeout, eval_budget=eval_budget, evaluator=evaluator, workers=workers,
                            cpus_per_eval=cpus_per_eval, gpus_per_eval=gpus_per_eval,
                            early_discarding=early_discarding, sha_min_epochs=sha_min_epochs,
                            sha_reduction=sha_reduction, sha_rungs=sha_rungs, iepoch_epochs=iepoch_epochs,
                            iepoch_top_k=iepoch_top_k, population_size=population_size,
                            tournament_size=tournament_size)
    search_options = {**(search_options or {}),
                      **evolution_options(search, population_size, tournament_size, max_evals)}
    if early_discarding == "iepoch" and iepoch_epochs >= (epochs or space.epochs):
        raise ParameterError("iepoch_epochs", f"must be below the epoch budget ({epochs or space.epochs})",
                             iepoch_epochs)
    seed = 0 if seed is None else int(seed)
    # The rule a resumed catalog was searched with, read once: "auto" settings keep it.
    recorded = None if new_run or early_discarding not in ("auto", "sha") else recorded_rule(run_dir)
    early_discarding, news = discarding_policy(early_discarding, dataset, recorded)
    if news and log is not None:
        log(news)
    reference_batch = None
    if early_discarding == "sha":
        sha_min_epochs, why = first_rung(sha_min_epochs, dataset, recorded)
        if why and log is not None:
            log(why)
        reference_batch = rung_unit(sha_rungs, space, recorded)
    rule = discarder(early_discarding, sha_min_epochs=sha_min_epochs, sha_reduction=sha_reduction,
                     sha_reference_batch=reference_batch, iepoch_epochs=iepoch_epochs, iepoch_top_k=iepoch_top_k)
    objective = evaluators.TrainingObjective(space, dataset, seed=seed, epochs=epochs,
                                             threads=evaluation_threads(cpus_per_eval), discarder=rule,
                                             time_limit=eval_budget)
    if evaluator == "serial":
        runner = evaluators.create("serial", objective, eval_timeout=eval_timeout)
    else:
        runner = evaluators.create("ray", objective, workers=workers, cpus_per_eval=cpus_per_eval,
                                   gpus_per_eval=gpus_per_eval, address=ray_address, eval_timeout=eval_timeout)
    with runner:
        if on_start is not None:
            on_start(runner)
        return run_search(space, dataset, runner, run_dir, search=search, search_options=search_options,
                          max_evals=max_evals, seed=seed, new_run=new_run, progress=progress, log=log,
                          # Starting the workers (a Ray instance, say) counts against the limit too.
                          timeout=None if deadline is None else max(deadline - time.monotonic(), 1e-3),
                          run_options={"epochs": epochs, "eval_timeout": eval_timeout, "eval_budget": eval_budget})
