"""Build an ensemble from a catalog, score it on validation/test data, and write metrics and plots."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autodeuq import metrics, plots
from autodeuq.catalog import Catalog
from autodeuq.data import BUILTIN_DATASETS, DataError, load_builtin, load_files, load_test_file
from autodeuq.ensemble import Ensemble

TABLE_METRICS = ("nll", "nll_gaussian", "rmse", "mae", "crps", "coverage_50", "coverage_90", "coverage_95",
                 "miscalibration_area", "sharpness")


@dataclass
class Report:
    ensemble: Ensemble
    metrics: dict
    plots: list[Path] = field(default_factory=list)

    def table(self) -> str:
        splits = list(self.metrics)
        lines = [f"{'metric':<22}" + "".join(f"{s:>14}" for s in splits)]
        for name in TABLE_METRICS:
            lines.append(f"{name:<22}" + "".join(f"{self.metrics[s][name]['mean']:>14.4f}" for s in splits))
        return "\n".join(lines)


def dataset_of_run(catalog: Catalog):
    """Rebuild the run's Dataset from its metadata (built-in, or files that still exist), else None."""
    data = catalog.meta.get("data", {})
    split = data.get("split", {})
    name = data.get("name")
    try:
        if name in BUILTIN_DATASETS:
            return load_builtin(name, seed=split.get("seed", 0), valid_fraction=split.get("fraction", 1 / 3),
                                test_fraction=split.get("test_fraction"))
        if name and Path(name).exists():
            valid = split.get("path") if split.get("kind") == "file" else None
            return load_files(name, data.get("targets"), valid=valid,
                              valid_fraction=split.get("fraction", 1 / 3), seed=split.get("seed", 0))
    except DataError:
        return None
    return None


def build_and_report(run_dir, size=5, method="greedy", objective="mixture", test_file=None,
                     manifest=None) -> Report:
    """Select, save the manifest, score validation (cached) and test data, write metrics.json and plots."""
    run_dir = Path(run_dir)
    ensemble = Ensemble.from_catalog(run_dir, size=size, method=method, objective=objective)
    ensemble.save(manifest or run_dir / "ensemble.json")
    catalog = ensemble.catalog
    _, means, variances = catalog.validation_predictions(ensemble.member_ids)
    results = {"validation": metrics.evaluate(means, variances, ensemble.weights, catalog.validation_targets())}

    dataset = dataset_of_run(catalog)
    x_test = y_test = None
    if test_file is not None:
        x_test, y_test = load_test_file(test_file, ensemble.feature_names, ensemble.target_names)
    elif dataset is not None and dataset.x_test is not None:
        x_test, y_test = dataset.x_test, dataset.y_test
    # The calibration curve is drawn on test data when there is some, else on validation data.
    scored = (means, variances, catalog.validation_targets())
    if x_test is not None:
        t_means, t_vars = ensemble.member_predictions(x_test)
        results["test"] = metrics.evaluate(t_means, t_vars, ensemble.weights, y_test)
        scored = (t_means, t_vars, y_test)
    _write_json(run_dir / "metrics.json", results)

    written = [_trace_plot(catalog, run_dir)]
    expected, observed = metrics.calibration_curve(scored[0], scored[1], ensemble.weights, scored[2])
    written.append(plots.plot_calibration(expected, observed, run_dir / "calibration.png", ensemble.target_names))
    if len(ensemble.feature_names) == 1:
        written.append(_uncertainty_plot(ensemble, dataset, x_test, y_test, run_dir))
    return Report(ensemble, results, written)


def _trace_plot(catalog, run_dir):
    frame = catalog.to_dataframe()
    frame = frame[frame["status"].isin(["done", "failed"])].sort_values("id")
    objectives = np.where(frame["status"] == "done", frame["objective"].astype(float), np.inf)
    return plots.plot_search_trace(objectives, run_dir / "search_trace.png")


def _uncertainty_plot(ensemble, dataset, x_test, y_test, run_dir):
    if x_test is not None:
        lo, hi = float(np.min(x_test)), float(np.max(x_test))
    elif dataset is not None:
        lo, hi = float(dataset.x_train.min()), float(dataset.x_train.max())
        pad = 0.25 * (hi - lo)
        lo, hi = lo - pad, hi + pad
    else:
        lo, hi = -1.0, 1.0
    grid = np.linspace(lo, hi, 400)[:, None]
    prediction = ensemble.predict(grid)
    truth = None
    if dataset is not None and dataset.name == "toy-sine":
        truth = 2 * np.sin(grid)
    return plots.plot_uncertainty_1d(
        grid, prediction, run_dir / "uncertainty.png",
        x_train=None if dataset is None else dataset.x_train, y_train=None if dataset is None else dataset.y_train,
        y_true=truth, title=f"{dataset.name if dataset is not None else run_dir.name}",
    )


def _write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)
