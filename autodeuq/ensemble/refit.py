"""Refit an ensemble's members on the training and validation rows together.

The search holds out validation rows for early stopping and for selecting the ensemble; on
small data that is a large share of the rows that no member ever learns from. Once the members
are chosen, each one's configuration is trained again on all the rows, for the number of epochs
at which it reached its best validation loss and with the learning rates it used then (its
recorded schedule, plateau reductions included), keeping the last epoch's weights: the usual
final step after a hold-out model selection (Hastie, Tibshirani & Friedman 2009, sec. 7.10; Goodfellow,
Bengio & Courville 2016, sec. 7.8, "retrain on all the data for the same number of steps").
Each member starts from the same initial weights as its original training (same seed).

A refit cannot be checked on held-out rows (there are none left), and a retraining can fail: the
last epoch of a noisy training (small batches, plain SGD) can land far from where the best one
was, and a network that found a fit by a rare start may not find it again on other rows. So a
refitted network replaces its member unless it fits the rows it was refitted on clearly worse
than the original did (Gaussian NLL): worse by more than :data:`REFIT_TOLERANCE` of what the
original gained over the constant Gaussian of those rows (:func:`refit_failed`). A retraining
that is as good within the noise of two trainings is kept, since it learned from more rows. The
original members kept are listed in ``selection["refit"]["kept_original"]``.

The weights of the mixture and a recalibration factor, when there is one, are the selection's:
they were fitted on the validation rows, which the refitted members have now seen, so they are
kept rather than fitted again.

When to refit (:func:`should_refit`, the default ``refit="auto"`` of the command line and the
estimator): when the training and validation rows make a small table
(:data:`autodeuq.data.SMALL_DATA_ROWS`), where it was measured to lower the test NLL;
``refit=True`` asks for it on any data. The measurements are in the documentation
(docs/decisions/refit.md).
Under a time limit a member is refitted only when its estimated retraining time (its search
training's seconds per epoch, times the epochs replayed, scaled by the rows) fits in the time
left; the others keep their original network (``selection["refit"]["out_of_time"]``).

The members' retrainings are independent: with ``evaluator="ray"`` they run in parallel on the
search's Ray options (as tasks, the worker processes of the search that just ended are still up,
so nothing starts again; where evaluations run on workers that keep their GPUs, new ones start),
with ``"serial"`` one after the other in this process. Each retraining is seeded
by its member, so both retrain the same members for the same epochs and keep the same ones. The
networks can differ by floating-point rounding, which a training may amplify: a Ray task's
TensorFlow runs one thread per CPU it is given, as the search's evaluations did, while this
process' runs as many as it was started with (``benchmarks/results/refit_parallel.md``).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from autodeuq.core.errors import AutoDEUQError, AutoDEUQWarning, ParameterError
from autodeuq.engine.evaluator.base import TrainingObjective, evaluation_threads
from autodeuq.ensemble.predictive import CatalogMembers, Ensemble
from autodeuq.table import data


class RefitError(AutoDEUQError, RuntimeError):
    """A member could not be refitted (the message names it and gives the training's reason)."""


class RefitTimeWarning(AutoDEUQWarning):
    """Members were not refitted because too little time was left under the run's time limit."""


def member_schedule(entry: dict[str, Any]) -> list[float]:
    """Learning rates of a catalog entry's training up to its best epoch (inclusive).

    From the recorded per-epoch rates when there are enough of them, else the configuration's
    initial rate for each of those epochs.
    """
    best = int(entry.get("best_epoch") or 0)
    if best < 1:
        raise RefitError(f"entry {entry['id']} has no best epoch recorded; it cannot be refitted")
    rates = (entry.get("history") or {}).get("lr") or []
    if len(rates) >= best and all(isinstance(r, (int, float)) and r > 0 for r in rates[:best]):
        return [float(r) for r in rates[:best]]
    return [float(entry["config"]["hp"]["learning_rate"])] * best


def should_refit(refit, n_rows: int) -> tuple[bool, str]:
    """Whether to refit the members on ``n_rows`` training and validation rows, and why (or why not).

    >>> should_refit("auto", 500)
    (True, 'refit: 500 training and validation rows (auto: at most 1000)')
    >>> should_refit("auto", 5000)[0], should_refit(True, 5000)[0], should_refit(False, 10)[0]
    (False, True, False)
    """
    if refit is True:
        return True, "refit: asked for"
    if refit is False:
        return False, "not refitted: turned off"
    limit = data.SMALL_DATA_ROWS
    if data.is_small(n_rows):
        return True, f"refit: {n_rows} training and validation rows (auto: at most {limit})"
    return False, (f"not refitted: {n_rows} training and validation rows, more than the {limit} up to which "
                   f"refitting is on by default (refit=True, --refit on the command line, refits anyway)")


def check_refit(refit) -> None:
    """Refuse a ``refit`` value other than True, False or "auto"."""
    if not (isinstance(refit, (bool, np.bool_)) or (isinstance(refit, str) and refit == "auto")):
        raise ParameterError("refit", 'must be True, False or "auto"', refit)


def estimated_seconds(entry: dict[str, Any], n_rows: int, n_train: int) -> float:
    """Expected duration of a member's refit: its search training's time per epoch, for the epochs
    replayed, scaled from the search's ``n_train`` training rows to the ``n_rows`` refitted."""
    epochs = max(int(entry.get("epochs") or 0), 1)
    wall = float(entry.get("wall_time") or 0.0)
    return wall / epochs * int(entry.get("best_epoch") or 0) * n_rows / max(n_train, 1)


#: Share of the original member's gain over the constant Gaussian (in NLL on the refit rows) that a
#: refitted network may lose and still replace it (:func:`refit_failed`). The measurements behind
#: it: docs/decisions/refit.md.
REFIT_TOLERANCE = 0.1


def refit_failed(refit_nll: float, original_nll: float, constant_nll: float) -> bool:
    """Whether a refitted network with NLL ``refit_nll`` on the refit rows failed against the
    original member's ``original_nll``: worse by more than :data:`REFIT_TOLERANCE` of the
    original's gain over ``constant_nll``, the NLL of the constant Gaussian of those rows.

    >>> refit_failed(1.083, 1.080, 1.907), refit_failed(1.679, 1.134, 1.907)  # noise; a failed retraining
    (False, True)
    >>> refit_failed(1.95, 1.95, 1.907), refit_failed(1.96, 1.95, 1.907)  # an original that fits nothing
    (False, True)
    """
    return refit_nll - original_nll > REFIT_TOLERANCE * max(constant_nll - original_nll, 0.0)


class RefitObjective(TrainingObjective):
    """Retrain catalog members on all the rows: evaluation ``entry_id`` replays that member's learning-rate
    schedule (:func:`member_schedule`) from the seed of its search training.

    Parameters
    ----------
    space : SearchSpace
    dataset : Dataset
        Every row to fit, as both its training and its validation rows.
    seed : int
        The search's base seed.
    schedules : dict
        Entry id -> learning rate of each epoch to replay.
    threads : int, optional
        TensorFlow intra-op threads of each retraining.
    """

    def __init__(self, space, dataset, seed: int, schedules: dict, threads: int | None = None):
        super().__init__(space, dataset, seed=seed, threads=threads)
        self.schedules = {int(i): [float(lr) for lr in rates] for i, rates in schedules.items()}

    def _training_options(self, eval_id: int) -> dict:
        return {"schedule": self.schedules[int(eval_id)]}


def plan_within_deadline(estimates: dict, n_slots: int, now: float, deadline: float | None) -> tuple[list, list]:
    """Which retrainings to start, in the order to start them: ``(ids to run, ids left out)``.

    The longest retrainings first (ties in the order given: the longest-processing-time rule,
    which keeps the slots' finishing times close), each to the slot that frees first
    (``n_slots`` run at once); one whose estimated end (``estimates[id]`` seconds after its
    start) would pass ``deadline`` is left out and frees nothing.

    >>> plan_within_deadline({1: 2.0, 2: 9.0, 3: 3.0, 4: 8.0}, 2, now=0.0, deadline=None)
    ([2, 4, 3, 1], [])
    >>> plan_within_deadline({1: 10.0, 2: 10.0, 3: 10.0}, 2, now=0.0, deadline=15.0)
    ([1, 2], [3])
    >>> plan_within_deadline({1: 10.0, 2: 30.0, 3: 4.0}, 1, now=0.0, deadline=15.0)
    ([1, 3], [2])
    """
    free = [float(now)] * max(1, int(n_slots))
    run, late = [], []
    for entry_id, seconds in sorted(estimates.items(), key=lambda item: -float(item[1])):
        slot = min(range(len(free)), key=free.__getitem__)
        end = free[slot] + float(seconds)
        if deadline is not None and end > deadline:
            late.append(entry_id)
            continue
        free[slot] = end
        run.append(entry_id)
    return run, late


def refit(ensemble: Ensemble, x, y, *, threads: int | None = None, deadline: float | None = None,
          evaluator: str = "serial", evaluator_options: dict | None = None) -> Ensemble:
    """The ensemble with every member retrained on ``(x, y)`` (see the module documentation).

    Parameters
    ----------
    ensemble : Ensemble
        An ensemble selected from a catalog (it gives each member's configuration, seed, best
        epoch and learning-rate schedule).
    x : array-like of shape (n, n_features)
        All the rows to fit: the search's training and validation rows together.
    y : array-like of shape (n, n_targets)
    threads : int, optional
        TensorFlow threads of each retraining (only effective before TensorFlow runs its first
        operation in the process that trains).
    deadline : float, optional
        A :func:`time.monotonic` time: a member whose estimated refit (:func:`estimated_seconds`)
        would end after it, given the retrainings before it (:func:`plan_within_deadline`), keeps
        its original network.
    evaluator : {"serial", "ray"}
        Where the retrainings run (:func:`autodeuq.evaluator.create`): one after the other in
        this process, or as parallel Ray tasks (on the instance this process already runs or
        joins, else a new local one).
    evaluator_options : dict, optional
        Options of that evaluator (``workers``, ``cpus_per_eval``, ``address``, ...).

    Returns
    -------
    Ensemble
        Same catalog, member ids, weights and calibration, the refitted networks in place of the
        catalog's (held in memory; ``save`` writes them beside the manifest,
        :meth:`Ensemble.without_refit` gives the ensemble before the refit).
        ``selection["refit"]`` records ``refitted`` (whether any member was), the rows, each
        refitted member's epochs, the members kept as they were (``kept_original``: a worse
        fit, or a retraining that failed, whose reason ``failed`` gives by member;
        ``out_of_time``: no time left for them), the retrainings run at once (``parallel``) and
        the seconds it took.

    Raises
    ------
    ParameterError
        The ensemble has no catalog, ``x``/``y`` do not match its features and targets, or the
        evaluator is unknown.
    RefitError
        A member has no best epoch recorded. A retraining that fails (a non-finite loss, say)
        is no error: that member keeps the search's network.
    """
    from autodeuq.catalog import load_network
    from autodeuq.engine import evaluator as evaluators

    catalog = ensemble.catalog
    if catalog is None:
        raise ParameterError("ensemble", "must come from a catalog (it gives the members' configurations and "
                             "training histories), not from a self-contained folder", str(ensemble.source.location))
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    y = y.reshape(len(y), -1)
    if x.ndim != 2 or x.shape[1] != len(ensemble.feature_names) or len(x) != len(y):
        raise ParameterError("x", f"must have {len(ensemble.feature_names)} columns and as many rows as y", np.shape(x))
    if y.shape[1] != len(ensemble.target_names):
        raise ParameterError("y", f"must have {len(ensemble.target_names)} column(s)", np.shape(y))
    # Every row trains; the same rows stand in for the validation data, whose loss is only reported.
    labels = catalog.labels
    recorded = catalog.meta.get("data") or {}  # the training loss the search used
    dataset = data.from_arrays(x, y, x, y, feature_names=ensemble.feature_names,
                               target_names=ensemble.target_names, name="refit", labels=labels,
                               class_weight=recorded.get("class_weight", "none"),
                               label_smoothing=recorded.get("label_smoothing", 0.0))
    n_train = (catalog.row_counts() or (len(x), 0))[0]
    started = time.monotonic()
    entries = {entry_id: catalog.entry(entry_id) for entry_id in dict.fromkeys(ensemble.member_ids)}
    schedules = {entry_id: member_schedule(entry) for entry_id, entry in entries.items()}
    if threads is None and evaluator == "ray":  # as a search's evaluations: one thread per CPU given
        threads = evaluation_threads((evaluator_options or {}).get("cpus_per_eval"))
    objective = RefitObjective(catalog.space, dataset, int(catalog.meta.get("seed") or 0), schedules, threads)
    results = {}
    with evaluators.create(evaluator, objective, **(evaluator_options or {})) as runner:
        estimates = {i: estimated_seconds(entry, len(x), n_train) for i, entry in entries.items()}
        planned, late = plan_within_deadline(estimates, runner.n_slots, time.monotonic(), deadline)
        for entry_id in planned:
            runner.submit(entry_id, entries[entry_id]["config"])
        while runner.n_running:
            results.update(runner.wait())
        parallel = min(runner.n_slots, len(planned))
    models, epochs, kept, failed = {}, {}, [], {}
    task = catalog.task_object
    constant = task.constant_nll(y, labels)
    for entry_id in planned:
        result = results.get(entry_id)
        if result is None or not result.ok:  # a retraining that failed: the member keeps the search's network
            failed[str(entry_id)] = "no result" if result is None else str(result.reason)
            kept.append(entry_id)
            continue
        where = f"{catalog.run_dir}: member {entry_id}"
        original = load_network(catalog.model_bytes(entry_id), where)
        refitted = load_network(result.model_bytes, where)
        if not refit_failed(task.network_nll(refitted, x, y), task.network_nll(original, x, y), constant):
            models[entry_id], epochs[entry_id] = result.model_bytes, len(schedules[entry_id])
        else:
            kept.append(entry_id)
    record = {"refitted": bool(epochs), "rows": int(len(x)), "epochs": {str(i): e for i, e in epochs.items()},
              "kept_original": kept, "failed": failed, "out_of_time": late, "parallel": parallel,
              "seconds": round(time.monotonic() - started, 1)}
    source = CatalogMembers(catalog, models)
    return type(ensemble)(source, ensemble.member_ids, ensemble.weights,
                          selection={**ensemble.selection, "refit": record}, calibration=ensemble.calibration,
                          conformal=ensemble.conformal)


def refit_selected(ensemble: Ensemble, x, y, when="auto", *, deadline: float | None = None,
                   threads: int | None = None, evaluator: str = "serial",
                   evaluator_options: dict | None = None) -> tuple[Ensemble, str]:
    """The selected ensemble refitted on ``(x, y)`` when ``when`` says so (:func:`should_refit`), and a
    line saying what was done.

    The ensemble returned records the decision in ``selection["refit"]`` (``refitted``: False and
    the ``reason`` when it is returned as it was). ``deadline``, ``evaluator`` and
    ``evaluator_options`` as in :func:`refit`.

    Warns
    -----
    RefitTimeWarning
        Some members (or all) kept their original network for lack of time.
    """
    import warnings

    go, why = should_refit(when, len(x))
    if go and deadline is not None and time.monotonic() >= deadline:
        go, why = False, "not refitted: no time left under the time limit"
    if go:
        refitted = refit(ensemble, x, y, threads=threads, deadline=deadline, evaluator=evaluator,
                         evaluator_options=evaluator_options)
        info = refitted.selection["refit"]
        at_once = f", {info['parallel']} at a time" if info.get("parallel", 1) > 1 else ""
        line = (f"{why}; {len(info['epochs'])} of {len(ensemble.member_ids)} member(s) retrained on {info['rows']} "
                f"rows in {info['seconds']:.1f} s{at_once}")
        failed = info.get("failed") or {}
        worse = [i for i in info["kept_original"] if str(i) not in failed]
        if worse:  # a safeguard that worked, not an error: one clause for all of them
            line += (f"; the search's network kept for member(s) {', '.join(map(str, worse))}, whose "
                     f"retrained network fitted the rows clearly worse (--no-refit / refit=False keeps every "
                     f"member's)")
        if failed:
            line += (f"; the search's network kept for member(s) {', '.join(failed)}, whose retraining failed ("
                     f"{'; '.join(f'{i}: {why}' for i, why in failed.items())})")
        if info["out_of_time"]:
            line += f"; no time left to retrain member(s) {', '.join(map(str, info['out_of_time']))}"
        if info["out_of_time"]:
            warnings.warn(f"{len(info['out_of_time'])} ensemble member(s) not refitted: no time left under the time "
                          f"limit ({', '.join(map(str, info['out_of_time']))})", RefitTimeWarning, stacklevel=2)
        return (refitted if info["refitted"] else not_refitted(ensemble, info)), line
    if "time" in why:
        warnings.warn(f"ensemble {why}", RefitTimeWarning, stacklevel=2)
    return not_refitted(ensemble, why), why


def not_refitted(ensemble: Ensemble, why: str | dict) -> Ensemble:
    """``ensemble`` itself (the catalog's networks), its ``selection["refit"]`` saying why it was not
    refitted (a reason, or the record of a refit that kept every original network)."""
    record = why if isinstance(why, dict) else {"refitted": False, "reason": why}
    same = type(ensemble)(ensemble.source, ensemble.member_ids, ensemble.weights,
                          selection={**ensemble.selection, "refit": record}, calibration=ensemble.calibration,
                          conformal=ensemble.conformal)
    same._models = ensemble._models  # the same networks: loaded once
    return same
