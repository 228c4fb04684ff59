"""Building an ensemble: a catalog's entries -> selection -> calibration.

:func:`from_catalog` (behind :meth:`Ensemble.from_catalog
<autodeuq.ensemble.Ensemble.from_catalog>`) selects members on the catalog's cached validation
predictions (:mod:`autodeuq.ensemble.selection`), kept apart by :func:`member_groups` when asked,
fits the recalibration on out-of-fold selections (:mod:`autodeuq.ensemble.calibration`) and the
conformal scores on the same held-out predictions (:mod:`autodeuq.ensemble.conformal`),
warning (:class:`EnsembleSizeWarning`) when the ensemble has fewer members than asked or is
effectively one model.
"""
from __future__ import annotations

import json
import warnings

import numpy as np

from autodeuq.catalog import Catalog, CatalogError
from autodeuq.core.errors import AutoDEUQWarning, ParameterError
from autodeuq.ensemble import conformal as conformal_scores
from autodeuq.ensemble.calibration import apply_scale, cross_fitted_scale, pooled_coverage, resolve_calibration
from autodeuq.ensemble.categorical import (
    apply_temperature,
    cross_fitted_temperature,
    log_probabilities,
    pooled_log_loss,
)
from autodeuq.ensemble.members import EnsembleError, ensemble_class
from autodeuq.ensemble.options import CALIBRATIONS, DIVERSITY
from autodeuq.ensemble.selection import select, select_bagged, select_categorical, select_categorical_bagged

COVERAGE_LEVELS = (0.5, 0.9, 0.95)


class EnsembleSizeWarning(AutoDEUQWarning):
    """The ensemble has fewer distinct members than asked, or its weights make it effectively one
    model (effective size below :data:`ONE_MODEL_EFFECTIVE_SIZE`); the message says why."""


#: Below this effective size (``1 / sum(w**2)``) an ensemble of several members is reported as
#: effectively one model: its epistemic part is then mostly one network's distance to a few
#: lightly weighted others.
ONE_MODEL_EFFECTIVE_SIZE = 1.5


def from_catalog(cls, run_dir, size: int = 5, selector: str = "greedy", score: str = "mixture", *,  # noqa: C901
                 stop: str = "size", diversity: str = "none", calibrate: str = "auto",
                 calibration_folds: int = 2, bags: int = 0, seed: int = 0, pool: float | str = "auto",
                 crossfit=None):
    """The ensemble of class ``cls`` selected and calibrated on the catalog in ``run_dir``.

    What :meth:`Ensemble.from_catalog <autodeuq.ensemble.Ensemble.from_catalog>` does; its
    documentation gives the parameters, the warnings and the errors. A classification run's
    members are selected on the log loss of their mixture and calibrated by a temperature
    (:class:`ClassifierCandidates`); its ensemble is a
    :class:`~autodeuq.ensemble.classifier.ClassifierEnsemble`.

    Parameters
    ----------
    cls : type
        The ensemble's class, called as ``cls(run_dir, member_ids, weights, selection=...,
        calibration=...)`` (:func:`~autodeuq.ensemble.predictive.ensemble_class` of the run's task).
    run_dir, size, selector, score, stop, diversity, calibrate, calibration_folds, bags, seed, pool :
        As :meth:`Ensemble.from_catalog <autodeuq.ensemble.Ensemble.from_catalog>` takes them.
    crossfit : CrossFit, optional
        The cross-fitted configurations (:func:`autodeuq.ensemble.crossfit.cross_fit`): selection
        and recalibration then run on their out-of-fold predictions of every training and
        validation row, and each configuration selected brings its fold networks as members,
        each of its weight / K. ``calibrate="auto"`` recalibrates there on any number of rows
        (the factor is fitted on all of them, not on the validation part).

    Returns
    -------
    cls
    """
    # noqa above: the steps in order (checks, selection, warnings, calibration), each branch a
    # check or a warning with its own message; selection and calibration are modules of their own.
    if diversity not in DIVERSITY:
        raise ParameterError("diversity", f"must be one of {list(DIVERSITY)}", diversity)
    if calibrate not in CALIBRATIONS:
        raise ParameterError("calibrate", f"must be one of {list(CALIBRATIONS)}", calibrate)
    catalog = run_dir if isinstance(run_dir, Catalog) else Catalog(run_dir)  # an open one is used as it is
    run_dir = catalog.run_dir if catalog is run_dir else run_dir  # as messages name it
    task = catalog.task_object
    cls = ensemble_class(task, cls)
    if selector == "auto":
        selector = task.auto_selector
    if pool == "auto":  # a cross-fit's candidates are the catalog's best already
        pool = task.auto_pool if crossfit is None else 1.0
    ids = catalog.model_ids() if crossfit is None else list(crossfit.entries)
    if not ids:
        raise EnsembleError(f"{run_dir}: the catalog has no successful evaluation to build an ensemble from")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ParameterError("size", "must be an integer >= 1", size)
    selection = {"size": min(int(size), len(ids)), "selector": selector, "score": score}
    if size > len(ids):
        selection["size_requested"] = int(size)
        warnings.warn(f"{run_dir}: ensemble size {size} asked, but the catalog has only {len(ids)} successful "
                      f"entries: selecting among those, at most {len(ids)} members", EnsembleSizeWarning,
                      stacklevel=3)
    kind = task.part("candidates")
    candidates = kind(catalog, ids) if crossfit is None else kind.of_arrays(ids, crossfit.arrays, crossfit.y)
    ids, n_valid = candidates.ids, candidates.n_rows
    selection["score"] = candidates.score_name(score)
    if crossfit is not None and calibrate == "auto":
        calibrate = task.calibration
        selection["calibration"] = f"recalibrated: out-of-fold predictions of {n_valid} rows (auto: cross-fitted)"
    else:
        counts = catalog.row_counts() if calibrate == "auto" else None
        calibrate, selection["calibration"] = resolve_calibration(calibrate, sum(counts) if counts else None,
                                                                  task)
    if calibrate != "none" and n_valid < calibration_folds:
        raise EnsembleError(f"{run_dir}: recalibration cross-fits on {calibration_folds} folds of the validation "
                            f"rows, and there are {n_valid}; give more validation rows or no recalibration",
                            parameters=("calibrate",))
    groups = None if diversity == "none" else member_groups(catalog, ids, diversity)

    selections = {}

    def select_rows(rows):
        # Each fold's selection runs once, for the recalibration and the conformal scores alike.
        key = np.asarray(rows, dtype=np.int64).tobytes()
        if key not in selections:
            selections[key] = candidates.select(rows, selection["size"], selector=selector, score=score, stop=stop,
                                                groups=groups, bags=bags, seed=seed, pool=pool)
        return selections[key]

    chosen = select_rows(np.arange(n_valid))
    members = [int(ids[i]) for i in chosen.indices]
    selection.update({"stop": stop, "diversity": diversity, "bags": bags, "pool": pool, "catalog_entries": len(ids),
                      "members": len(members), "effective_size": round(chosen.effective_size, 4),
                      "shortfall": chosen.reason})
    if "size_requested" in selection and chosen.reason is None:
        selection["shortfall"] = f"the catalog has only {len(ids)} successful entries"
    if chosen.reason is not None:
        warnings.warn(f"{run_dir}: the ensemble has {len(members)} distinct member(s), not {selection['size']}: "
                      f"{chosen.reason}", EnsembleSizeWarning, stacklevel=3)
    if len(members) > 1 and chosen.effective_size < ONE_MODEL_EFFECTIVE_SIZE:
        weights = ", ".join(f"{w:.3f}" for w in chosen.weights)
        warnings.warn(f"{run_dir}: the ensemble is effectively one model: its {len(members)} members weigh "
                      f"{weights} (effective size {chosen.effective_size:.2f}), so its epistemic part is "
                      f"mostly one network's distance to the others; selection without replacement "
                      f"weighs members equally", EnsembleSizeWarning, stacklevel=3)
    calibration = None
    if calibrate != "none":
        calibration = candidates.calibrate(select_rows, calibration_folds, seed)
    conformal = None
    if 2 <= calibration_folds <= n_valid:
        folds = held_out_selections(select_rows, n_valid, calibration_folds, seed)
        conformal = candidates.conformal(folds, calibration)
        rows = "validation rows" if crossfit is None else "training and validation rows' out-of-fold predictions"
        conformal.update({"held_out": f"{rows}, out of selection", "folds": calibration_folds, "seed": seed})
        selection["conformal"] = (f"{conformal['method']} scores of {n_valid} {rows}, each predicted by "
                                  f"an ensemble selected on the other {calibration_folds - 1} fold(s)")
    else:
        selection["conformal"] = (f"none: the held-out predictions need 2 or more folds of the validation rows, and "
                                  f"at least one row per fold ({calibration_folds} fold(s), {n_valid} row(s)); "
                                  f"intervals are the mixture's")
    weights = chosen.weights
    if crossfit is not None:  # each configuration selected: its K fold networks, each of its weight / K
        selection["crossfit"] = {**crossfit.record, "entries": members, "weights": [float(w) for w in weights]}
        members = [i for entry in members for i in crossfit.fold_ids[entry]]
        weights = np.repeat(np.asarray(weights, dtype=float) / crossfit.plan["folds"], crossfit.plan["folds"])
        weights = weights / weights.sum()
    return cls(catalog, members, weights, selection=selection, calibration=calibration, conformal=conformal)


def held_out_selections(select_rows, n_rows: int, folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray,
                                                                                      np.ndarray]]:
    """Each fold of ``n_rows`` validation rows with the selection made without it: ``(held rows,
    catalog indices, weights)``, the rows split as :func:`~autodeuq.ensemble.calibration.cross_fitted_scale`
    and :func:`~autodeuq.ensemble.categorical.cross_fitted_temperature` split them (the same
    permutation of the same seed), so ``select_rows`` (memoized) runs once per fold."""
    order = np.random.default_rng(seed).permutation(n_rows)
    out = []
    for held in np.array_split(order, folds):
        indices, weights = select_rows(np.setdiff1d(np.arange(n_rows), held))
        out.append((np.sort(held), np.asarray(indices), np.asarray(weights, dtype=float)))
    return out


class GaussianCandidates:
    """A regression catalog's entries as selection candidates: their validation means and variances."""

    def __init__(self, catalog, ids):
        self.ids, self.means, self.variances = loaded = catalog.validation_predictions(ids)
        if not self.ids:
            raise CatalogError(f"{catalog.run_dir}: no successful entry has usable validation predictions "
                               f"({next(iter(loaded.skipped.values()))})")
        self.y = catalog.validation_targets()
        self.n_rows = len(self.y)

    @classmethod
    def of_arrays(cls, ids, arrays, y):
        """Candidates ``ids`` with predictions ``arrays = (means, variances)`` of the rows of ``y``
        (the out-of-fold predictions of a cross-fit)."""
        self = cls.__new__(cls)
        self.ids, (self.means, self.variances) = list(ids), arrays
        self.y, self.n_rows = np.asarray(y, dtype=np.float64), len(y)
        return self

    @staticmethod
    def score_name(score: str) -> str:
        """What the selection record calls the score members are selected on (``score`` as asked)."""
        return score

    def select(self, rows, size, *, selector, score, stop, groups, bags, seed, pool):
        options = dict(selector=selector, score=score, stop=stop, groups=groups, pool=pool)
        if bags and selector != "topk":  # top-k ranks single models: its weights stay uniform
            return select_bagged(self.means[:, rows], self.variances[:, rows], self.y[rows], size, bags=bags,
                                 seed=seed, **options)
        return select(self.means[:, rows], self.variances[:, rows], self.y[rows], size=size, **options)

    def calibrate(self, select_rows, folds: int, seed: int) -> dict:
        """A std scale per target fitted on out-of-fold selections, with the coverage before and after."""
        scale, chunks = cross_fitted_scale(select_rows, self.means, self.variances, self.y, folds=folds, seed=seed)
        return {
            "method": "scale", "scale": scale.tolist(), "folds": folds, "seed": seed,
            "validation_coverage_before": {str(level): pooled_coverage(chunks, level).tolist()
                                           for level in COVERAGE_LEVELS},
            "validation_coverage_after": {str(level): pooled_coverage(chunks, level, scale).tolist()
                                          for level in COVERAGE_LEVELS},
        }

    def conformal(self, folds, calibration: dict | None) -> dict:
        """Normalized conformal scores (:func:`autodeuq.ensemble.conformal.fit_regression`) of every
        validation row's out-of-selection mixture, recalibrated by ``calibration``'s scale when
        there is one."""
        rows, means, stds = [], [], []
        for held, indices, weights in folds:
            m, v = self.means[indices][:, held], self.variances[indices][:, held]
            if calibration is not None:
                m, v = apply_scale(m, v, weights, calibration["scale"])
            mean = np.tensordot(weights, m, axes=1)
            total = np.tensordot(weights, v + np.square(m - mean), axes=1)  # aleatoric + epistemic
            rows.append(held), means.append(mean), stds.append(np.sqrt(total))
        rows = np.concatenate(rows)
        return conformal_scores.fit_regression(self.y[rows], np.concatenate(means), np.concatenate(stds))


class ClassifierCandidates:
    """A classification catalog's entries as selection candidates: their validation class probabilities,
    selected on the log loss of their mixture (``score`` does not apply)."""

    def __init__(self, catalog, ids):
        self.ids, self.probas, skipped = catalog.validation_probabilities(ids)
        if not self.ids:
            raise CatalogError(f"{catalog.run_dir}: no successful entry has usable validation predictions "
                               f"({next(iter(skipped.values()))})")
        self.y = catalog.validation_targets()[:, 0].astype(np.int64)
        self.n_rows = len(self.y)

    @classmethod
    def of_arrays(cls, ids, arrays, y):
        """Candidates ``ids`` with class probabilities ``arrays = (probas,)`` of the rows whose
        class codes are ``y`` (the out-of-fold predictions of a cross-fit)."""
        self = cls.__new__(cls)
        self.ids, (self.probas,) = list(ids), arrays
        self.y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)[:, 0].astype(np.int64)
        self.n_rows = len(self.y)
        return self

    @staticmethod
    def score_name(score: str) -> str:
        return "log_loss"

    def select(self, rows, size, *, selector, score, stop, groups, bags, seed, pool):
        if score != "mixture":
            raise ParameterError("score", "must be 'mixture' for a classification run: its members are selected on "
                                          "the log loss of their mixture", score)
        options = dict(selector=selector, stop=stop, groups=groups, pool=pool)
        if bags and selector != "topk":
            return select_categorical_bagged(self.probas[:, rows], self.y[rows], size, bags=bags, seed=seed,
                                             **options)
        return select_categorical(self.probas[:, rows], self.y[rows], size=size, **options)

    def calibrate(self, select_rows, folds: int, seed: int) -> dict:
        """One temperature fitted on out-of-fold selections, with the validation log loss before and after."""
        temperature, chunks = cross_fitted_temperature(select_rows, log_probabilities(self.probas), self.y,
                                                       folds=folds, seed=seed)
        return {"method": "temperature", "temperature": float(temperature), "folds": folds, "seed": seed,
                "validation_log_loss_before": pooled_log_loss(chunks),
                "validation_log_loss_after": pooled_log_loss(chunks, temperature)}

    def conformal(self, folds, calibration: dict | None) -> dict:
        """LAC conformal scores (:func:`autodeuq.ensemble.conformal.fit_classification`) of every
        validation row's out-of-selection mixture, tempered by ``calibration``'s temperature when
        there is one."""
        temperature = 1.0 if calibration is None else calibration["temperature"]
        rows, probas = [], []
        for held, indices, weights in folds:
            members = apply_temperature(log_probabilities(self.probas[indices][:, held]), temperature)
            rows.append(held), probas.append(np.tensordot(weights, members, axes=1))
        rows = np.concatenate(rows)
        return conformal_scores.fit_classification(self.y[rows], np.concatenate(probas))


def member_groups(catalog, ids, by: str) -> list[str]:
    """A label per catalog entry for diverse selection: its architecture, or its activation set."""
    space = catalog.space
    labels = []
    for entry_id in ids:
        arch = catalog.config(entry_id)["arch"]
        if by == "architecture":
            labels.append(json.dumps(list(arch)))
        else:
            used = sorted({dense.activation for dense, _ in space.cells(arch) if dense.activation})
            labels.append("+".join(used) or "identity")
    return labels
