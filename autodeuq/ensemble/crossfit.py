"""The cross-fitted ensemble stage: every training and validation row both fits and checks.

On a small table the search's validation part (20 to 300 rows) decides everything after the
search: which members, their weights, the recalibration and, with a refit, nothing checks the
networks retrained on all the rows. Cross-fitting, as K-fold bagging does for stacked models
(van der Laan, Polley & Hubbard 2007, "Super learner"; Erickson et al. 2020, "AutoGluon-Tabular",
sec. 3.3), uses every row for both:

1. the ``configs`` best configurations of the search (by validation loss, distinct) are trained
   again on K folds of the training and validation rows together: configuration c's network k
   trains on every fold but k and stops early on fold k (the search's training otherwise: the
   same epoch budget, early stopping, learning-rate schedule and initial weights);
2. each configuration's out-of-fold prediction (fold k's rows predicted by the network that left
   them out) covers every row once; the greedy selection, the recalibration (std scale or
   temperature) and the conformal scores are fitted on these out-of-fold predictions of all the
   rows instead of on the validation part's;
3. the ensemble's members are the K fold networks of each selected configuration, each weighing
   its configuration's weight / K: the prediction is their mixture, so the split into
   aleatoric and epistemic parts stays the exact law-of-total-variance split of a mixture.

The fold networks are catalog entries (:mod:`autodeuq.catalog.folds`), recorded as each one
ends: a stage interrupted (or run again with the same plan) trains only the folds it lacks.
The fold assignment is a function of the number of folds, the seed and the rows (stratified by
class for a classifier), so the same command draws the same folds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from autodeuq.catalog.folds import is_fold_id
from autodeuq.core.errors import AutoDEUQError, ParameterError
from autodeuq.engine.evaluator.base import TrainingObjective, evaluation_seed, evaluation_threads
from autodeuq.table import data

#: Folds of the training and validation rows (K), and the configurations cross-fitted per ensemble
#: member asked for (the candidates of the out-of-fold selection: ``CONFIGS_PER_MEMBER * size``).
DEFAULT_FOLDS = 5
CONFIGS_PER_MEMBER = 2


#: How a configuration's K fold networks train: ``"separate"``, K trainings one after the other
#: (each through :func:`autodeuq.nn.train.train`), or ``"batched"``, as one program with a leading
#: fold dimension (:mod:`autodeuq.nn.batched`; a network with state falls back to one by one).
#: Separate by measurement on CPUs (docs/guide/crossfit.md, "What it costs").
FOLD_TRAINING = "separate"


class CrossFitError(AutoDEUQError, RuntimeError):
    """No configuration could be cross-fitted (every one had a fold whose training failed)."""


def is_cross_fitted(ensemble) -> bool:
    """Whether ``ensemble``'s members are the fold networks of a cross-fit."""
    return "crossfit" in ensemble.selection and any(is_fold_id(i) for i in ensemble.member_ids)


def refit_folds(refit) -> tuple[bool, str]:
    """Whether ``refit`` (True, False or "auto") retrains the configurations that a cross-fit
    selected on every training and validation row, in place of their fold networks, and why:
    only when asked for (the conformal scores and the recalibration were fitted on the fold
    networks' predictions, which a refit changes).

    >>> refit_folds("auto")[0], refit_folds(True)[0], refit_folds(False)[0]
    (False, True, False)
    """
    if refit is True:
        return True, "refit: the configurations selected retrain on every row (asked for)"
    if refit is False:
        return False, "not refitted: the members are the fold networks (turned off)"
    return False, "not refitted: the members are the fold networks (auto: cross-fitted)"


def fold_plan(n_rows: int, folds: int, seed: int) -> dict:
    """What fixes the fold assignment of ``n_rows`` rows (recorded with each fold entry)."""
    return {"folds": int(folds), "seed": int(seed), "rows": int(n_rows)}


def assign_folds(plan: dict, codes=None) -> np.ndarray:
    """The fold (0..K-1) of each row under ``plan``: a random permutation dealt round-robin, by
    class when ``codes`` (a classifier's class codes) are given, so that every fold holds each
    class in proportion.

    >>> folds = assign_folds({"folds": 3, "seed": 0, "rows": 10})
    >>> sorted(np.bincount(folds).tolist())
    [3, 3, 4]
    >>> folds = assign_folds({"folds": 2, "seed": 0, "rows": 6}, codes=[0, 0, 0, 0, 1, 1])
    >>> np.bincount(folds[:4]).tolist(), np.bincount(folds[4:]).tolist()
    ([2, 2], [1, 1])
    """
    n, k = int(plan["rows"]), int(plan["folds"])
    rng = np.random.default_rng([int(plan["seed"]), 0xC0F0])
    folds = np.empty(n, dtype=np.int64)
    groups = [np.arange(n)] if codes is None else [np.flatnonzero(np.asarray(codes) == c) for c in np.unique(codes)]
    offset = 0
    for rows in groups:
        rows = rng.permutation(rows)
        folds[rows] = (np.arange(len(rows)) + offset) % k
        offset += len(rows)
    return folds


def check_folds(folds, n_rows: int, codes=None) -> None:
    """Refuse ``folds`` that leave a fold without a row (or, for a classifier, a training part
    without a class: its network could not learn the class)."""
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
        raise ParameterError("crossfit_folds", "must be an integer >= 2", folds)
    if n_rows < 2 * folds:
        raise ParameterError("crossfit_folds", f"leaves fewer than 2 rows per fold: the catalog stores {n_rows} "
                                               f"training and validation rows", folds)
    if codes is not None:
        counts = np.bincount(np.asarray(codes, dtype=np.int64))
        rare = int(counts[counts > 0].min())
        if rare < 2:
            raise ParameterError("crossfit_folds", f"cannot cross-fit a class of {rare} row: every fold's training "
                                                   f"part must see each class", folds)


class FoldObjective(TrainingObjective):
    """Train a catalog entry's configuration on all folds but one: evaluation ``job`` trains
    ``jobs[job] = (entry, fold)``, from the initial weights of that entry's search training.

    Parameters
    ----------
    space : SearchSpace
    rows : tuple of ndarray
        ``(x, y)``: every training and validation row, original units (a classifier's class codes).
    folds : ndarray
        The fold of each row (:func:`assign_folds`).
    jobs : dict
        Evaluation id -> (catalog entry, fold left out).
    seed : int
        The search's base seed.
    epochs : int, optional
        The search's epoch budget, when it overrode the space's.
    dataset_options : dict
        ``feature_names``, ``target_names``, ``labels``, ``class_weight``, ``label_smoothing`` of
        :func:`autodeuq.data.from_arrays`, as the search's data had them.
    threads : int, optional
    """

    def __init__(self, space, rows, folds, jobs: dict, seed: int, epochs: int | None, dataset_options: dict,
                 threads: int | None = None):
        x, y = rows
        super().__init__(space, data.from_arrays(x, y, x, y, name="crossfit", **dataset_options), seed=seed,
                         epochs=epochs, threads=threads)
        self.folds = np.asarray(folds)
        self.jobs = {int(i): (int(e), int(k)) for i, (e, k) in jobs.items()}
        self.dataset_options = dataset_options

    def fold_dataset(self, fold: int):
        x, y = self.dataset.x_train, self.dataset.y_train
        keep, out = self.folds != fold, self.folds == fold
        return data.from_arrays(x[keep], y[keep], x[out], y[out], name=f"crossfit fold {fold}", **self.dataset_options)

    def __call__(self, job: int, config: dict):
        from autodeuq.nn.train import configure_threads, train
        from autodeuq.search.space import SearchSpace

        if self.threads:
            configure_threads(self.threads)
        if self._space is None:
            self._space = SearchSpace(self.space_spec, source=self.space_source)
        entry, fold = self.jobs[int(job)]
        return train(config, self._space, self.fold_dataset(fold), seed=evaluation_seed(self.seed, entry),
                     epochs=self.epochs)


class BatchedFoldObjective(FoldObjective):
    """Train a configuration's missing folds together: evaluation ``group`` trains the jobs
    ``groups[group]`` (one entry's folds) as one program (:func:`autodeuq.nn.batched.train_copies`),
    or one after the other where the network cannot be batched. Its result is a placeholder whose
    ``extra["fold_results"]`` maps each job to its fold's own result."""

    def __init__(self, *args, groups: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.groups = {int(g): [int(j) for j in jobs] for g, jobs in groups.items()}

    def __call__(self, group: int, config: dict):
        from autodeuq.core.result import Status, TrainResult
        from autodeuq.nn import batched
        from autodeuq.nn.plan import NetworkPlan
        from autodeuq.nn.train import configure_threads
        from autodeuq.search.space import SearchSpace

        if self.threads:
            configure_threads(self.threads)
        if self._space is None:
            self._space = SearchSpace(self.space_spec, source=self.space_source)
        jobs = self.groups[int(group)]
        started = time.time()
        datasets = [self.fold_dataset(self.jobs[job][1]) for job in jobs]
        first = datasets[0]
        arch, hp = self._space.split(config)
        plan = NetworkPlan.from_arch(self._space, arch, first.x_train.shape[1], first.y_train.shape[1],
                                     first.labels.n_classes if first.is_classification else None)
        if len(jobs) > 1 and batched.batchable(plan) and hp.get("optimizer") in batched.SLOTS:
            entry = self.jobs[jobs[0]][0]
            results = batched.train_copies(config, self._space, datasets, seed=evaluation_seed(self.seed, entry),
                                           epochs=self.epochs)
        else:
            results = [FoldObjective.__call__(self, job, config) for job in jobs]
        return TrainResult(status=Status.DONE, objective=0.0, start_time=started, end_time=time.time(),
                           extra={"fold_results": dict(zip(jobs, results))})


@dataclass
class CrossFit:
    """What :func:`cross_fit` made: the configurations with every fold, their fold entries and
    their out-of-fold predictions of every row."""

    plan: dict
    entries: list[int]  #: the search entries cross-fitted, by validation loss
    fold_ids: dict[int, list[int]]  #: entry -> its fold entries, fold 0 first
    arrays: tuple[np.ndarray, ...]  #: out-of-fold predictions, each (len(entries), n_rows, width)
    y: np.ndarray  #: every row's targets (original units; a classifier's class codes)
    record: dict = field(default_factory=dict)  #: what was trained, resumed, dropped, how long it took


def cross_fit(catalog, configs: int, folds: int = DEFAULT_FOLDS, *, seed: int = 0, deadline: float | None = None,
              evaluator: str = "serial", evaluator_options: dict | None = None, log=None) -> CrossFit:
    """Train the ``configs`` best configurations of ``catalog`` on ``folds`` folds of its
    training and validation rows (see the module documentation), recording each fold network in
    the catalog; folds already recorded under the same plan are read, not trained again.

    Parameters
    ----------
    catalog : Catalog
        A catalog that stores its training and validation rows (every catalog of this version).
    configs, folds : int
    seed : int
        Seed of the fold assignment (the networks' initial weights are their search entries').
    deadline : float, optional
        A :func:`time.monotonic` time: a configuration whose fold trainings are not all expected
        to end before it (each estimated from its search training's seconds, scaled by the rows)
        is left out.
    evaluator, evaluator_options
        Where the trainings run, as for the refit (:func:`autodeuq.ensemble.refit.refit`).
    log : callable, optional
        Receives a line when configurations are left out.

    Raises
    ------
    CrossFitError
        No configuration has all its folds.
    """
    from autodeuq.catalog import CatalogError

    started = time.monotonic()
    rows = catalog.fit_data()
    if rows is None:
        raise CatalogError(f"{catalog.run_dir}: its catalog does not store the training and validation rows, so "
                           f"it cannot be cross-fitted; search again in a new run directory",
                           parameters=("crossfit", "run_dir"))
    x, y = rows
    codes = None if catalog.labels is None else y[:, 0].astype(np.int64)
    check_folds(folds, len(x), codes)
    plan = fold_plan(len(x), folds, seed)
    assignment = assign_folds(plan, codes)
    entries = catalog.best_configurations(configs)
    if not entries:
        from autodeuq.ensemble.members import EnsembleError

        raise EnsembleError(f"{catalog.run_dir}: the catalog has no successful evaluation to build an ensemble from")
    done = {(f["entry"], f["fold"]): f["id"] for f in catalog.fold_entries(plan)}
    jobs, estimates, configs_of = _missing_folds(catalog, entries, assignment, done)
    failed, late = {}, set()
    if jobs:
        failed, late = _train_folds(catalog, rows, plan, assignment, jobs, estimates, configs_of, done, deadline,
                                    evaluator, evaluator_options)
    usable = [e for e in entries if e not in failed and e not in late and all((e, k) in done for k in range(folds))]
    if log is not None and (failed or late):
        left = [f"{e} (a fold's training failed: {failed[e]})" for e in failed] + \
               [f"{e} (no time left)" for e in sorted(late - set(failed))]
        log(f"cross-fitting: configuration(s) of entry {', '.join(left)} left out")
    if not usable:
        raise CrossFitError(f"{catalog.run_dir}: no configuration could be cross-fitted on {folds} folds"
                            + (f" ({'; '.join(f'entry {e}: {r}' for e, r in failed.items())})" if failed else ""))
    fold_ids = {e: [int(done[(e, k)]) for k in range(folds)] for e in usable}
    trained = [j for j in jobs.values() if j[0] in usable]
    record = {"folds": int(folds), "plan": plan, "configurations": len(usable), "asked": int(configs),
              "trained": len(trained), "resumed": len(usable) * folds - len(trained),
              "left_out": {str(e): failed.get(e, "no time left") for e in sorted(set(failed) | late)},
              "seconds": round(time.monotonic() - started, 1)}
    return CrossFit(plan, usable, fold_ids, out_of_fold(catalog, [fold_ids[e] for e in usable]), y, record)


def _missing_folds(catalog, entries, assignment, done) -> tuple[dict, dict, dict]:
    """The fold trainings still to run: ``(jobs, estimates, configurations)``, job -> (entry, fold),
    job -> expected seconds (the entry's search training scaled by the rows), entry -> configuration."""
    jobs, estimates, configs_of = {}, {}, {}
    n_train = (catalog.row_counts() or (len(assignment), 0))[0]
    for entry_id in entries:
        entry = catalog.entry(entry_id)
        configs_of[entry_id] = entry["config"]
        for fold in range(int(assignment.max()) + 1):
            if (entry_id, fold) not in done:
                job = len(jobs)
                jobs[job] = (entry_id, fold)
                fit_rows = int(np.sum(assignment != fold))
                estimates[job] = float(entry.get("wall_time") or 0.0) * fit_rows / max(n_train, 1)
    return jobs, estimates, configs_of


def _train_folds(catalog, rows, plan, assignment, jobs, estimates, configs_of, done, deadline, evaluator,
                 evaluator_options) -> tuple[dict, set]:
    """Run the fold trainings ``jobs`` that fit before ``deadline``, recording each in the catalog
    (and in ``done``) as it ends; ``(failed entries -> reason, entries left out for time)``."""
    from autodeuq.engine import evaluator as evaluators
    from autodeuq.ensemble.refit import plan_within_deadline

    recorded = catalog.meta.get("data") or {}
    options = {"feature_names": list(recorded.get("features") or []) or None,
               "target_names": list(recorded.get("targets") or []) or None, "labels": catalog.labels,
               "class_weight": recorded.get("class_weight", "none"),
               "label_smoothing": recorded.get("label_smoothing", 0.0)}
    threads = evaluation_threads((evaluator_options or {}).get("cpus_per_eval")) if evaluator == "ray" else None
    arguments = (catalog.space, rows, assignment, jobs, int(catalog.meta.get("seed") or 0),
                 (catalog.meta.get("search") or {}).get("epochs"), options, threads)
    objective, groups, estimates = _fold_objective(arguments, jobs, estimates)
    failed = {}
    with evaluators.create(evaluator, objective, **(evaluator_options or {})) as runner, \
            catalog.fold_writer() as writer:
        planned, late_ids = plan_within_deadline(estimates, runner.n_slots, time.monotonic(), deadline)
        late = {jobs[groups[i][0] if groups else i][0] for i in late_ids}
        for i in planned:
            entry_id = jobs[groups[i][0] if groups else i][0]
            if entry_id not in late:
                runner.submit(i, configs_of[entry_id])
        while runner.n_running:
            for i, result in runner.wait():
                for job, fold_result in _fold_results(i, result, groups):
                    entry_id, fold = jobs[job]
                    if not fold_result.ok:
                        failed[entry_id] = str(fold_result.reason)
                        continue
                    arrays = {name: getattr(fold_result, f"valid_{name}") for name in catalog.prediction_arrays}
                    done[(entry_id, fold)] = writer.record(entry_id, fold, plan, fold_result,
                                                           np.flatnonzero(assignment == fold), arrays, slot=job)
    return failed, late


def _fold_objective(arguments: tuple, jobs: dict, estimates: dict) -> tuple:
    """The objective of the fold trainings under :data:`FOLD_TRAINING`, its groups (evaluation ->
    the jobs it trains, one configuration's folds; None when each job is an evaluation) and the
    evaluations' expected seconds."""
    if FOLD_TRAINING == "separate":
        return FoldObjective(*arguments), None, estimates
    if FOLD_TRAINING != "batched":
        raise ValueError(f"FOLD_TRAINING must be 'batched' or 'separate', got {FOLD_TRAINING!r}")
    by_entry: dict[int, list[int]] = {}
    for job, (entry_id, _) in jobs.items():
        by_entry.setdefault(entry_id, []).append(job)
    groups = dict(enumerate(by_entry.values()))
    return (BatchedFoldObjective(*arguments, groups=groups), groups,
            {g: sum(estimates[j] for j in group) for g, group in groups.items()})


def _fold_results(evaluation: int, result, groups) -> list:
    """``(job, its result)`` of each fold training that ``evaluation`` ran."""
    if groups is None:
        return [(evaluation, result)]
    if "fold_results" in (result.extra or {}):
        return list(result.extra["fold_results"].items())
    return [(job, result) for job in groups[evaluation]]  # the whole group failed before any fold's result


def out_of_fold(catalog, groups) -> tuple[np.ndarray, ...]:
    """The out-of-fold predictions of every row by each group of fold entries (a configuration's
    K networks): arrays of shape (len(groups), n_rows, width), in the order of
    :attr:`~autodeuq.catalog.Catalog.prediction_arrays`."""
    out = counts = None
    for g, ids in enumerate(groups):
        for fold_id in ids:
            rows, arrays = catalog.fold_predictions(fold_id)
            if out is None:
                n_rows = catalog.fold_entry(fold_id)["plan"]["rows"]
                out = tuple(np.full((len(groups), n_rows, a.shape[1]), np.nan) for a in arrays)
                counts = np.zeros((len(groups), n_rows), dtype=np.int64)
            for target, values in zip(out, arrays):
                target[g, rows] = values
            counts[g, rows] += 1
        if out is None or np.any(counts[g] != 1):
            raise AutoDEUQError(f"{catalog.run_dir}: the fold entries {ids} do not predict every row exactly once")
    return out


def configuration_view(ensemble):
    """``(view, arrays, y)`` of a cross-fitted ensemble: ``view`` an ensemble of the same class,
    calibration and conformal scores whose members are the selected search entries with their
    configurations' weights (it holds no networks), and ``arrays`` their out-of-fold predictions of every training and
    validation row, so that ``view.mixture(*arrays)`` (a classifier's ``view.mixture(log
    probabilities)``) is the ensemble's out-of-fold prediction of ``y``."""
    catalog = ensemble.catalog
    folds = {f["id"]: f for f in catalog.fold_entries()}  # read once: each member's entry and fold
    by_entry: dict[int, list[int]] = {}
    weights: dict[int, float] = {}
    for member, weight in zip(ensemble.member_ids, ensemble.weights):
        entry = folds[member]["entry"]
        by_entry.setdefault(entry, []).append(member)
        weights[entry] = weights.get(entry, 0.0) + float(weight)
    entries = list(by_entry)
    arrays = out_of_fold(catalog, [sorted(by_entry[e], key=lambda i: folds[i]["fold"]) for e in entries])
    w = np.array([weights[e] for e in entries])
    view = type(ensemble)(ensemble.catalog, entries, w / w.sum(), selection=ensemble.selection,
                          calibration=ensemble.calibration, conformal=ensemble.conformal)
    return view, arrays, catalog.fit_data()[1]
