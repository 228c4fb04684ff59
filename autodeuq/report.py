"""Build an ensemble from a catalog (refitted on request), score it on validation/test data, and write
metrics and figures beside its manifest."""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autodeuq import metrics
from autodeuq.app import classification_plots as class_plots
from autodeuq.app import plots
from autodeuq.classification_metrics import classification_metrics
from autodeuq.core.fileio import atomic_write, refuse_linked_folders
from autodeuq.core.result import Status
from autodeuq.ensemble import Ensemble, conformal
from autodeuq.ensemble.categorical import CategoricalPrediction, log_probabilities
from autodeuq.ensemble.crossfit import configuration_view
from autodeuq.table.data import load_test_file
from autodeuq.tasks import get_task

TABLE_METRICS = ("nll", "nll_gaussian", "rmse", "mae", "crps", "coverage_50", "coverage_90", "coverage_gaussian_90",
                 "coverage_conformal_90", "coverage_95", "miscalibration_area", "sharpness")
CLASSIFICATION_TABLE_METRICS = ("log_loss", "accuracy", "balanced_accuracy", "brier", "ece",
                                "set_coverage_conformal_90", "set_size_conformal_90",
                                "auroc_misclassified_total_entropy", "auroc_misclassified_epistemic_mi")
#: The uncertainties of a classifier's prediction that metrics.json scores for flagging misclassified rows.
CLASS_UNCERTAINTIES = ("total_entropy", "aleatoric_entropy", "epistemic_mi")
#: The levels whose coverage metrics.json reports (``coverage_conformal_90``, ``set_coverage_90``, ...).
COVERAGE_LEVELS = (0.5, 0.9, 0.95)
MANIFEST_NAME = "ensemble.json"
METRICS_NAME = "metrics.json"


@dataclass
class Report:
    ensemble: Ensemble
    metrics: dict
    plots: list[Path] = field(default_factory=list)
    refit: str = ""  #: what the refit step did, one line
    #: The task's scores and figures (:attr:`Task.report <autodeuq.tasks.base.Task.report>`);
    #: None: those of the ensemble's task.
    scores: Any = None

    def table(self) -> str:
        scores = self.scores or get_task(self.ensemble.task).part("report")
        return scores.table(self.metrics)


def build_and_report(run_dir, config=None, *, test_file=None, manifest=None, deadline=None, refit_where=None,
                     seed=0) -> Report:
    """The command line's ensemble step: build the ensemble that ``config`` (an
    :class:`~autodeuq.options.EnsembleConfig`; default: the defaults) says
    (:func:`autodeuq.pipeline.select_ensemble`, :func:`autodeuq.pipeline.refit_ensemble`), score it
    on validation (cached) and test data, write metrics.json, the figures and the manifest.

    Every output goes to the folder of ``manifest`` (default ``run_dir/ensemble.json``):
    ``metrics.json`` and the figures sit beside the manifest they describe, so a second
    ensemble of the same run (``--out other/ensemble.json``) never overwrites the first one's.
    Nothing is written before every member has loaded and every score and figure is computed,
    and a catalog-backed manifest is written last: a failure (or a kill) leaves a previous
    ``ensemble.json`` in place. ``metrics.json`` records the member ids and weights it was
    computed for. The test set is ``test_file`` when given, else the one stored in the catalog at
    its creation (e.g. ``search --test FILE``), read before the refit starts. The scores are those
    of the ensemble's predictions, recalibrated when it is, and ``metrics.json``'s
    ``calibration`` block gives the coverage before and after.

    The refit (``config.refit``) retrains the members while each retraining fits before
    ``deadline`` (a :func:`time.monotonic` time; None: no limit), where ``refit_where`` says
    (:func:`autodeuq.pipeline.refit_where`). The refitted networks are written beside the
    manifest (``<stem>_refit/<id>.keras``), the test scores and figures are the refitted
    ensemble's, and ``validation`` stays the score of the selection before the refit (the
    refitted members have trained on those rows). ``metrics.json`` says whether the ensemble was
    refitted (``ensemble.refitted``) and how (``ensemble.selection.refit``).
    """
    from autodeuq.app.options import EnsembleConfig, resolve
    from autodeuq.app.pipeline import refit_ensemble, select_ensemble

    if config is None:
        config, = resolve({}, (EnsembleConfig,))
    run_dir = Path(run_dir)
    manifest = Path(manifest) if manifest else run_dir / MANIFEST_NAME
    out_dir = manifest.parent
    refuse_linked_folders(run_dir, out_dir)  # before any work: every output goes there
    lines = []
    # An unreadable member fails before any file is written.
    ensemble = select_ensemble(run_dir, config, seed=seed, deadline=deadline, where=refit_where, log=lines.append)
    catalog = ensemble.catalog
    task = catalog.task_object.part("report")
    validation, valid_targets = task.validation(ensemble, catalog)  # recalibrated when the ensemble is
    results = {"validation": task.scores(validation, valid_targets)}
    calibration = dict(ensemble.calibration) if ensemble.calibration else None
    test, train = _test_and_training_data(catalog, ensemble, test_file)
    ensemble, refit_line = refit_ensemble(ensemble, config.refit, deadline=deadline, where=refit_where)

    # The figures of the predictions show test data when there is some, else validation data.
    scored = ("validation", validation, valid_targets)
    if test is not None:
        predicted = task.test(ensemble, test, calibration)
        results["test"] = task.scores(predicted, test[1])
        scored = ("test", predicted, test[1])

    figures = {"search_trace.png": _trace_plot(catalog, ensemble.member_ids)}
    figures.update(task.figures(ensemble, *scored))
    figures.update(task.input_figures(ensemble, catalog, test, train, run_dir))
    document = {
        "search": search_counts(catalog),
        "ensemble": {"members": ensemble.member_ids, "weights": ensemble.weights.tolist(),
                     "refitted": ensemble.refitted_ids, "selection": ensemble.selection},
        **({"calibration": calibration} if calibration else {}),
        **results,
    }

    refuse_linked_folders(run_dir, out_dir)  # again: a link may have been planted meanwhile
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [atomic_write(out_dir / name, png) for name, png in figures.items()]
    atomic_write(out_dir / METRICS_NAME, json.dumps(document, indent=2).encode())
    ensemble.save(manifest)
    return Report(ensemble, results, written, "\n".join([*lines, refit_line]), task)


class RegressionScores:
    """What the report computes of a regression ensemble: its mixture's scores and figures.

    A task's report part (:attr:`Task.report <autodeuq.tasks.base.Task.report>`) has these
    methods: ``validation``, ``scores``, ``test``, ``figures``, ``input_figures``, ``table`` and
    ``trace_units``.
    """

    @staticmethod
    def table(metrics_by_split) -> str:
        """The scores of :data:`TABLE_METRICS`, one row each, a column per split."""
        splits = list(metrics_by_split)
        lines = [f"{'metric':<22}" + "".join(f"{s:>14}" for s in splits)]
        for name in TABLE_METRICS:  # coverage_conformal_90: "-" for an ensemble without conformal scores
            values = [metrics_by_split[s].get(name, {}).get("mean") for s in splits]
            lines.append(f"{name:<22}" + "".join(f"{'-':>14}" if v is None else f"{v:>14.4f}" for v in values))
        return "\n".join(lines)

    @staticmethod
    def trace_units(original: bool) -> str:
        """The search trace's units: the data's, or standardized where the catalog lacks their scale."""
        return "original units" if original else "standardized"

    @staticmethod
    def validation(ensemble, catalog):
        """The ensemble's prediction of the validation rows and their targets; a cross-fitted
        ensemble's out-of-fold prediction of every training and validation row."""
        if "crossfit" in ensemble.selection:
            view, (means, variances), y = configuration_view(ensemble)
            return view.mixture(means, variances), y
        _, means, variances = catalog.validation_predictions(ensemble.member_ids)
        return ensemble.mixture(means, variances), catalog.validation_targets()

    @staticmethod
    def scores(prediction, y) -> dict:
        """:func:`autodeuq.metrics.evaluate`'s scores, and ``coverage_conformal_50/90/95`` (rows
        inside the conformal intervals, :func:`autodeuq.ensemble.conformal.coverage`) when the
        ensemble keeps held-out scores."""
        scores = metrics.evaluate(prediction.means, prediction.variances, prediction.weights, y)
        if prediction.conformal is not None:
            mean, std = np.asarray(prediction.mean), np.asarray(prediction.std)
            for level in COVERAGE_LEVELS:
                values = conformal.coverage(prediction.conformal, mean, std, y, level)
                scores[f"coverage_conformal_{round(100 * level)}"] = {"per_target": [float(v) for v in values],
                                                                      "mean": float(np.mean(values))}
        return scores

    @staticmethod
    def test(ensemble, test, calibration):
        """The prediction on the test rows; the coverage before and after recalibration go to ``calibration``."""
        with _beyond_the_data():
            raw = ensemble.member_predictions(test[0], encoded=True)
        predicted = ensemble.mixture(*raw)
        if calibration is not None:
            for key, (m, v) in (("test_coverage_before", raw),
                                ("test_coverage_after", (predicted.means, predicted.variances))):
                calibration[key] = {str(level): metrics.coverage(m, v, ensemble.weights, test[1], level).tolist()
                                    for level in (0.5, 0.9, 0.95)}
        return predicted

    @staticmethod
    def figures(ensemble, data, prediction, y) -> dict[str, bytes]:
        return _prediction_plots(ensemble.target_names, data, prediction, y)

    @staticmethod
    def input_figures(ensemble, catalog, test, train, run_dir) -> dict[str, bytes]:
        if len(ensemble.feature_names) != 1:
            return {}
        return {"uncertainty.png": _uncertainty_plot(ensemble, catalog, test, train, run_dir)}


class ClassificationScores:
    """What the report computes of a classifier ensemble: log loss, accuracy, balanced accuracy,
    Brier score, expected calibration error, the AUROC of each uncertainty for flagging the
    misclassified rows (:func:`autodeuq.classification_metrics.classification_metrics`), and the
    reliability diagram, confusion matrix and uncertainty of right and wrong rows."""

    @staticmethod
    def table(metrics_by_split) -> str:
        """The scores of :data:`CLASSIFICATION_TABLE_METRICS`, one row each, a column per split."""
        splits = list(metrics_by_split)
        lines = [f"{'metric':<34}" + "".join(f"{s:>14}" for s in splits)]
        for name in CLASSIFICATION_TABLE_METRICS:
            values = [metrics_by_split[s].get(name) for s in splits]
            lines.append(f"{name:<34}" + "".join(f"{'-':>14}" if v is None else f"{v:>14.4f}" for v in values))
        return "\n".join(lines)

    @staticmethod
    def trace_units(original: bool) -> str:
        return "the log loss, nats"

    @staticmethod
    def validation(ensemble, catalog):
        """As :meth:`RegressionScores.validation`, of the class probabilities."""
        if "crossfit" in ensemble.selection:
            view, (probas,), y = configuration_view(ensemble)
            return view.mixture(log_probabilities(probas)), y
        _, probas, _ = catalog.validation_probabilities(ensemble.member_ids)
        return ensemble.mixture(log_probabilities(probas)), catalog.validation_targets()

    @staticmethod
    def scores(prediction, y) -> dict:
        """:func:`~autodeuq.classification_metrics.classification_metrics`, the coverage and mean size
        of the mixture's prediction sets (``set_coverage_90``, ``set_size_90``, ...) and, when the
        ensemble keeps held-out scores, of its conformal sets (``set_coverage_conformal_90``, ...)."""
        uncertainties = {name: getattr(prediction, name) for name in CLASS_UNCERTAINTIES}
        codes = _codes(y)
        scores = classification_metrics(prediction.proba, codes, uncertainties)
        labels = prediction.classes[codes]
        for level in COVERAGE_LEVELS:
            suffix = round(100 * level)
            sets = prediction.prediction_set(level, "mixture")
            scores[f"set_coverage_{suffix}"] = float(np.mean([label in s for label, s in zip(labels, sets)]))
            scores[f"set_size_{suffix}"] = float(np.mean([len(s) for s in sets]))
            if prediction.conformal is not None:
                covered, size = conformal.set_coverage(prediction.conformal, prediction.proba, codes, level)
                scores[f"set_coverage_conformal_{suffix}"], scores[f"set_size_conformal_{suffix}"] = covered, size
        return scores

    @staticmethod
    def test(ensemble, test, calibration):
        with _beyond_the_data():
            logits = ensemble.member_logits(test[0], encoded=True)  # the networks run once
        predicted = ensemble.mixture(logits)
        if calibration is not None:
            untempered = CategoricalPrediction.from_log_proba(logits, ensemble.weights, ensemble.classes)
            calibration["test_log_loss_before"] = classification_metrics(untempered.proba, _codes(test[1]))["log_loss"]
            calibration["test_log_loss_after"] = classification_metrics(predicted.proba, _codes(test[1]))["log_loss"]
        return predicted

    @staticmethod
    def figures(ensemble, data, prediction, y) -> dict[str, bytes]:
        codes = _codes(y)
        correct = prediction.proba.argmax(axis=1) == codes
        return {
            "reliability.png": class_plots.plot_reliability(None, prediction.proba, codes, data=data),
            "confusion.png": class_plots.plot_confusion(None, prediction.proba, codes, ensemble.classes, data=data),
            "uncertainty_right_wrong.png": class_plots.plot_uncertainty_correct_wrong(
                None, {name: getattr(prediction, name) for name in CLASS_UNCERTAINTIES}, correct, data=data),
        }

    @staticmethod
    def input_figures(ensemble, catalog, test, train, run_dir) -> dict[str, bytes]:
        """With two inputs, the entropies over the plane around the data (``uncertainty.png``)."""
        if len(ensemble.feature_names) != 2 or train is None:
            return {}
        x = train[0] if test is None else np.vstack([train[0], test[0]])
        lo, hi = x.min(axis=0), x.max(axis=0)
        pad = 0.5 * (hi - lo)
        xx, yy = np.meshgrid(np.linspace(lo[0] - pad[0], hi[0] + pad[0], 120),
                             np.linspace(lo[1] - pad[1], hi[1] + pad[1], 120))
        with _beyond_the_data():
            value = ensemble.predict(np.column_stack([xx.ravel(), yy.ravel()]), encoded=True)
        shaped = [getattr(value, name).reshape(xx.shape) for name in CLASS_UNCERTAINTIES]
        name = catalog.meta.get("data", {}).get("name")
        return {"uncertainty.png": class_plots.plot_decision_2d(
            None, xx, yy, *shaped, train[0], ensemble.labels.decode(_codes(train[1])),
            title=str(name or run_dir.name))}


@contextlib.contextmanager
def _beyond_the_data():
    """No :class:`OutOfRangeWarning` while scoring and drawing: the figures' grids reach past the data
    on purpose, and test rows beyond it are what a test set may hold (``predict`` warns of them)."""
    import warnings

    from autodeuq.ensemble.inputs import OutOfRangeWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfRangeWarning)
        yield


def _codes(y) -> np.ndarray:
    return np.asarray(y, dtype=np.float64).reshape(len(y), -1)[:, 0].astype(np.int64)


def search_counts(catalog) -> dict:
    """What metrics.json says of the search: its evaluations by status, and how many entries aging
    evolution mutated from an earlier one (``mutated``; the others were drawn at random or by the
    Bayesian optimization alone)."""
    frame = catalog.to_dataframe()
    counts = frame["status"].value_counts()
    return {"evaluations": len(frame), **{str(status): int(counts.get(status, 0)) for status in Status},
            "mutated": int(frame["parent"].notna().sum())}


def _prediction_plots(names, data, prediction, y) -> dict[str, bytes]:
    """The calibration curve, predicted vs observed values and error vs std of ``prediction`` (the
    ensemble's mixture, :class:`~autodeuq.ensemble.UncertaintyPrediction`) on the rows ``data`` names."""
    expected, observed = metrics.calibration_curve(prediction.means, prediction.variances, prediction.weights, y)
    return {
        "calibration.png": plots.plot_calibration(expected, observed, None, names, data=data, n_rows=len(y)),
        "predicted_vs_observed.png": plots.plot_predicted_vs_observed(y, prediction, None, names, data=data),
        "error_vs_std.png": plots.plot_error_vs_std(y, prediction, None, names, data=data),
    }


def _test_and_training_data(catalog, ensemble, test_file):
    """(x_test, y_test) or None, and for one feature the training points (x, y) or None: a
    ``test_file``'s rows, else the test rows the catalog stores (the built-in datasets', or
    ``search --test``'s)."""
    if test_file is not None:
        test = load_test_file(test_file, ensemble.feature_names, ensemble.target_names,
                              preprocessor=ensemble.preprocessor, labels=getattr(ensemble, "labels", None))
    else:
        test = catalog.test_data()
    train = catalog.training_data() if len(ensemble.feature_names) <= 2 else None
    return test, train


def _trace_plot(catalog, member_ids=()) -> bytes:
    frame = catalog.to_dataframe()
    frame = frame[frame["status"].isin([Status.DONE, Status.DISCARDED, Status.FAILED])].sort_values("id")
    # In the data's units, as metrics.json reports the ensemble's NLL (the standardized training
    # loss only where the catalog lacks the targets' scale).
    original = np.isfinite(catalog.nll_offset)
    column = "valid_nll" if original else "objective"
    objectives = np.where(frame["status"] != Status.FAILED, frame[column].astype(float), np.inf)
    position = {int(i): k + 1 for k, i in enumerate(frame["id"])}
    units = catalog.task_object.part("report").trace_units(original)
    return plots.plot_search_trace(objectives, None, units=units,
                                   status=frame["status"].to_numpy(),
                                   members=[position[i] for i in member_ids if i in position])


def _uncertainty_plot(ensemble, catalog, test, train, run_dir) -> bytes:
    if test is not None:
        lo, hi = float(np.min(test[0])), float(np.max(test[0]))
    elif train is not None:
        lo, hi = float(train[0].min()), float(train[0].max())
        pad = 0.25 * (hi - lo)
        lo, hi = lo - pad, hi + pad
    else:
        lo, hi = -1.0, 1.0
    grid = np.linspace(lo, hi, 400)[:, None]
    with _beyond_the_data():
        prediction = ensemble.predict(grid, encoded=True)
    name = catalog.meta.get("data", {}).get("name")
    truth = 2 * np.sin(grid) if name == "toy-sine" else None
    return plots.plot_uncertainty_1d(
        grid, prediction, None,
        x_train=None if train is None else train[0], y_train=None if train is None else train[1],
        y_true=truth, title=str(name or run_dir.name),
    )
