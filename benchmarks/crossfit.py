"""The cross-fitted ensemble stage against today's (selection on the validation part, refit), on the
UCI splits: one search per split, then both ensemble stages on its catalog.

For each dataset and split, the estimator's defaults search once with ``crossfit=False`` (the
ensemble stage of before: greedy selection on the validation part, the refit up to 1000 rows),
timed as a whole; then that ensemble stage is timed again on its own, and the cross-fitted stage
runs on the same catalog (``crossfit=True`` with ``--folds`` folds of the ``--configs`` best
configurations; smaller numbers of configurations are read back from the same fold entries, so
they cost no training here and their cost is the sum of their fold trainings' seconds). Test
scores of each, as ``benchmarks/uci.py`` computes them (mixture and moment-matched Gaussian NLL,
RMSE, the 90 % coverage of the mixture), and the whole run's cost with each stage:
``(search + stage) / (search + today's stage)``.

    python benchmarks/crossfit.py --datasets yacht boston concrete energy --splits 0 \
        --runs-dir runs/crossfit --results benchmarks/results/crossfit
"""
from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from uci import score  # noqa: E402
from uci_data import default_data_dir, load_split  # noqa: E402


def ensemble_stage(run_dir, *, crossfit: bool, configs, folds: int, seed: int, evaluator: str):
    """The ensemble stage of the pipeline on ``run_dir``, its trainings where the search's ran:
    (ensemble, seconds)."""
    from autodeuq.options import EnsembleConfig, SearchConfig, configure
    from autodeuq.pipeline import refit_ensemble, refit_where, select_ensemble

    config = configure(EnsembleConfig, crossfit=crossfit, crossfit_configs=configs, crossfit_folds=folds)
    where = refit_where(configure(SearchConfig, evaluator=evaluator))
    tic = time.monotonic()
    ensemble = select_ensemble(run_dir, config, seed=seed, where=where)
    ensemble, _ = refit_ensemble(ensemble, config.refit, where=where)
    return ensemble, time.monotonic() - tic


def scored(ensemble, data) -> dict:
    means, variances = ensemble.components(data.x_test)
    out = score(means, variances, ensemble.weights, data.y_test)
    out["effective_size"] = float(1.0 / np.sum(np.square(ensemble.weights)))
    return out


def fold_seconds(run_dir) -> dict:
    """Seconds of the fold trainings of each cross-fitted configuration (by search entry)."""
    from autodeuq.catalog import Catalog

    with Catalog(run_dir) as catalog:
        folds = catalog.fold_entries()
    out: dict[int, float] = {}
    for f in folds:
        out[int(f["entry"])] = round(out.get(int(f["entry"]), 0.0) + (f["wall_time"] or 0.0), 2)
    return out


def run_split(name: str, split: int, args) -> dict:
    from autodeuq import AutoDEUQRegressor

    data = load_split(args.data_dir, name, split)
    run_dir = Path(args.runs_dir) / f"{name}-split{split}"
    tic = time.monotonic()
    model = AutoDEUQRegressor(run_dir=run_dir, seed=split, crossfit=False, progress=False, max_evals=args.max_evals,
                              evaluator=args.evaluator)
    model.fit(data.x_fit, data.y_fit, X_valid=data.x_valid, y_valid=data.y_valid)
    whole = time.monotonic() - tic
    record = {"dataset": name, "split": split, **data.sizes, "whole_run_s": round(whole, 1)}
    before, before_s = ensemble_stage(run_dir, crossfit=False, configs="auto", folds=args.folds, seed=split,
                                      evaluator=args.evaluator)
    record["today"] = {**scored(before, data), "stage_s": round(before_s, 1)}
    search_s = whole - before_s
    record["search_s"] = round(search_s, 1)
    for configs in args.configs:
        ensemble, stage_s = ensemble_stage(run_dir, crossfit=True, configs=configs, folds=args.folds, seed=split,
                                           evaluator=args.evaluator)
        info = ensemble.selection["crossfit"]
        record[f"crossfit_{configs}"] = {**scored(ensemble, data), "stage_s": round(stage_s, 1), "record": info}
        if configs == max(args.configs):  # trained here; the smaller ones are read back
            record["cost_ratio"] = round((search_s + stage_s) / whole, 3)
    record["fold_seconds"] = fold_seconds(run_dir)
    return record


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", default=["yacht", "boston", "concrete", "energy"])
    p.add_argument("--splits", nargs="+", type=int, default=[0])
    p.add_argument("--data-dir", default=str(default_data_dir(ROOT)))
    p.add_argument("--runs-dir", default="runs/crossfit")
    p.add_argument("--results", default="benchmarks/results/crossfit")
    p.add_argument("--max-evals", type=int, default=100)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--configs", nargs="+", type=int, default=[10, 6],
                   help="configurations cross-fitted; the largest is trained, the others read back")
    p.add_argument("--evaluator", default="ray", choices=["ray", "serial"])
    args = p.parse_args(argv)
    args.configs = sorted(set(args.configs), reverse=True)  # the largest trains, the others read back
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "crossfit_raw.json"
    records = json.loads(raw.read_text()) if raw.exists() else []
    command = "python benchmarks/crossfit.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    for name in args.datasets:
        for split in args.splits:
            if any(r["dataset"] == name and r["split"] == split for r in records):
                continue
            record = run_split(name, split, args)
            record.update({"command": command, "machine": f"{platform.machine()} {platform.processor()}".strip(),
                           "load_after": list(np.round(np.array(__import__("os").getloadavg()), 2))})
            records.append(record)
            raw.write_text(json.dumps(records, indent=1) + "\n")
            print(json.dumps({k: record[k] for k in ("dataset", "split", "cost_ratio")}),
                  {k: {m: round(v[m], 3) for m in ("nll", "nll_gaussian", "coverage_90")}
                   for k, v in record.items() if isinstance(v, dict) and "nll" in v}, flush=True)


if __name__ == "__main__":
    main()
