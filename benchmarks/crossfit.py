"""The cross-fitted ensemble stage against today's (selection on the validation part, refit), on the
UCI splits: one search per split, then both ensemble stages on its catalog.

For each dataset and split, the estimator's defaults search once with ``crossfit=False`` (the
ensemble stage of before: greedy selection on the validation part, the refit up to 1000 rows),
timed as a whole; then the ensemble stages of :data:`VARIANTS` run on its catalog: today's again
(timed on its own), the cross-fitted one with the fold networks as members (``--folds`` folds of
twice ``--size`` configurations: it trains the folds) and the cross-fitted one refitted (the folds
read back, the configurations selected retrained on every row). Test scores of each, as
``benchmarks/uci.py`` computes them (mixture and moment-matched Gaussian NLL, RMSE, the 90 %
coverage of the mixture) with the conformal 90 % interval's coverage, and the whole run's cost
with the cross-fitted stage: ``(search + stage) / (search + today's stage)``. ``--rescore``
redoes the stages of the splits recorded (records of an earlier version of this script keep their
scores under ``rescored_from``).

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

from uci import PUBLISHED, score  # noqa: E402
from uci_data import default_data_dir, load_split  # noqa: E402

#: The ensemble stages compared on each catalog: (crossfit, refit, crossfit_configs).
VARIANTS = {"today": (False, "auto", "auto"), "crossfit_folds": (True, False, "auto"),
            "crossfit_refit": (True, True, "auto")}


def ensemble_stage(run_dir, *, crossfit, refit, configs, folds: int, seed: int, evaluator: str):
    """The ensemble stage of the pipeline on ``run_dir``, its trainings where the search's ran:
    (ensemble, seconds)."""
    from autodeuq.app.options import EnsembleConfig, SearchConfig, configure
    from autodeuq.app.pipeline import refit_ensemble, refit_where, select_ensemble

    config = configure(EnsembleConfig, crossfit=crossfit, refit=refit, crossfit_configs=configs,
                       crossfit_folds=folds)
    where = refit_where(configure(SearchConfig, evaluator=evaluator))
    tic = time.monotonic()
    ensemble = select_ensemble(run_dir, config, seed=seed, where=where)
    ensemble, _ = refit_ensemble(ensemble, config.refit, where=where)
    return ensemble, time.monotonic() - tic


def scored(ensemble, data) -> dict:
    """Test scores (``benchmarks/uci.py``'s), the conformal 90 % interval's coverage where the
    ensemble has scores, and the effective size."""
    means, variances = ensemble.components(data.x_test)
    out = score(means, variances, ensemble.weights, data.y_test)
    if ensemble.conformal is not None:
        lower, upper = ensemble.interval(data.x_test, 0.9)
        out["coverage_conformal_90"] = float(np.mean((data.y_test >= lower) & (data.y_test <= upper)))
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


def stages(record: dict, data, run_dir, args) -> dict:
    """``record`` with each variant's scores and seconds (a variant whose folds exist reads them back)."""
    for name, (crossfit, refit, configs) in VARIANTS.items():
        ensemble, stage_s = ensemble_stage(run_dir, crossfit=crossfit, refit=refit, configs=configs,
                                           folds=args.folds, seed=data.split, evaluator=args.evaluator)
        record[name] = {**scored(ensemble, data), "stage_s": round(stage_s, 1)}
        if crossfit:
            record[name]["crossfit"] = ensemble.selection["crossfit"]
    return record


def run_split(name: str, split: int, args) -> dict:
    from autodeuq import AutoDEUQRegressor

    data = load_split(args.data_dir, name, split)
    run_dir = Path(args.runs_dir) / f"{name}-split{split}"
    searched_before = (run_dir / "catalog.sqlite").exists()
    tic = time.monotonic()
    model = AutoDEUQRegressor(run_dir=run_dir, seed=split, crossfit=False, progress=False, max_evals=args.max_evals,
                              evaluator=args.evaluator)
    model.fit(data.x_fit, data.y_fit, X_valid=data.x_valid, y_valid=data.y_valid)
    whole = time.monotonic() - tic
    record = stages({"dataset": name, "split": split, **data.sizes, "whole_run_s": round(whole, 1)}, data, run_dir,
                    args)
    record["fold_seconds"] = fold_seconds(run_dir)
    if searched_before:
        # An earlier run's catalog resumed: its search's seconds are not this run's, so no cost.
        record["catalog_searched_earlier"] = True
        return record
    search_s = whole - record["today"]["stage_s"]
    record["search_s"] = round(search_s, 1)
    # The first cross-fitted variant trained the folds; its stage is the cost (the refit adds its own).
    record["cost_ratio"] = round((search_s + record["crossfit_folds"]["stage_s"]) / whole, 3)
    return record


def rescore(record: dict, args) -> dict:
    """A recorded split's ensemble stages redone on its catalog (the folds read back)."""
    data = load_split(args.data_dir, record["dataset"], record["split"])
    run_dir = Path(args.runs_dir) / f"{record['dataset']}-split{record['split']}"
    earlier = [k for k in record if k in VARIANTS or k.startswith("crossfit_")]
    kept = {k: v for k, v in record.items() if k not in earlier}
    kept.setdefault("searched_by", record.get("command"))
    return stages({**kept, "rescored_from": {k: record[k] for k in earlier}}, data, run_dir, args)


#: The thesis' AutoDEUQ, moment-matched Gaussian test NLL (the page's reference): the UCI
#: benchmark's published numbers, for the tables this script runs.
THESIS = {name: PUBLISHED["AutoDEUQ (thesis)"]["nll"][name]
          for name in ("yacht", "boston", "energy", "concrete", "wine")}
SHOWN = (("nll_gaussian", "Gaussian NLL"), ("nll", "mixture NLL"), ("rmse", "RMSE"),
         ("coverage_90", "90 % coverage (mixture)"), ("coverage_conformal_90", "90 % coverage (conformal)"))


def _mean_se(values) -> str:
    values = np.asarray(values, dtype=float)
    if not len(values):
        return "-"
    se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
    return f"{values.mean():.3f} ± {se:.3f}"


def _refit_cost(record: dict) -> float:
    """The whole run's cost with the cross-fitted stage and its refit (the refitted variant's stage
    reads the folds back: its seconds are the refit's)."""
    return record["cost_ratio"] + record["crossfit_refit"]["stage_s"] / record["whole_run_s"]


def report(records: list[dict]) -> str:
    """Markdown: per dataset, the mean (and its standard error) over the splits recorded of each
    variant's test scores, and the whole run's cost with the cross-fitted stage."""
    commands = sorted({r[key] for r in records for key in ("searched_by", "command") if key in r})
    lines = ["# The cross-fitted ensemble stage on the UCI splits", "",
             "Commands: " + "; ".join(f"`{c}`" for c in commands) + " (each split searched once; `--rescore` "
             "redid the stages on its catalog).", "",
             "Machine: " + ", ".join(sorted({r.get("machine", "?") for r in records}))
             + " (2-core AMD EPYC), shared with other benchmarks and test runs (load 4-15): the seconds, and so "
               "the cost, carry that load; the scores do not depend on it.", ""]
    datasets = sorted({r["dataset"] for r in records}, key=list(THESIS).index)
    for key, title in SHOWN:
        lines += [f"**{title}** (mean ± SE over splits)", "",
                  "| dataset | splits | today | cross-fitted (fold networks) | cross-fitted, refitted |"
                  + (" thesis |" if key == "nll_gaussian" else ""),
                  "|---|---|---|---|---|" + ("---|" if key == "nll_gaussian" else "")]
        for name in datasets:
            rows = [r for r in records if r["dataset"] == name]
            cells = [_mean_se([r[variant][key] for r in rows if key in r.get(variant, {})]) for variant in VARIANTS]
            thesis = f" {THESIS[name]:.2f} |" if key == "nll_gaussian" else ""
            splits = ", ".join(str(r["split"]) for r in rows)
            lines.append(f"| {name} | {splits} | " + " | ".join(cells) + " |" + thesis)
        lines.append("")
    lines += ["**Whole run's cost** (search + cross-fitted stage) / (search + today's stage), per split", "",
              "| dataset | fold networks | with the refit |", "|---|---|---|"]
    for name in datasets:
        rows = [r for r in records if r["dataset"] == name and "cost_ratio" in r]
        folds = ", ".join(f"{r['cost_ratio']:.2f}" for r in rows) or "-"
        refit = ", ".join(f"{_refit_cost(r):.2f}" for r in rows if "crossfit_refit" in r) or "-"
        lines.append(f"| {name} | {folds} | {refit} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", default=["yacht", "boston", "concrete", "energy"])
    p.add_argument("--splits", nargs="+", type=int, default=[0])
    p.add_argument("--data-dir", default=str(default_data_dir(ROOT)))
    p.add_argument("--runs-dir", default="runs/crossfit")
    p.add_argument("--results", default="benchmarks/results/crossfit")
    p.add_argument("--max-evals", type=int, default=100)
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--evaluator", default="ray", choices=["ray", "serial"])
    p.add_argument("--rescore", action="store_true", help="redo the ensemble stages of the splits recorded")
    p.add_argument("--report", action="store_true", help="write crossfit.md from the records, nothing else")
    args = p.parse_args(argv)
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "crossfit_raw.json"
    records = json.loads(raw.read_text()) if raw.exists() else []
    command = "python benchmarks/crossfit.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    if args.report:
        (out / "crossfit.md").write_text(report(records))
        return
    for name in args.datasets:
        for split in args.splits:
            known = [i for i, r in enumerate(records) if r["dataset"] == name and r["split"] == split]
            if known and not args.rescore:
                continue
            if not known and args.rescore:
                continue
            record = rescore(records.pop(known[0]), args) if known else run_split(name, split, args)
            record.update({"command": command, "machine": f"{platform.machine()} {platform.processor()}".strip(),
                           "load_after": list(np.round(np.array(__import__("os").getloadavg()), 2))})
            records.append(record)
            raw.write_text(json.dumps(records, indent=1) + "\n")
            print(json.dumps({k: record.get(k) for k in ("dataset", "split", "cost_ratio")}),
                  {k: {m: round(v[m], 3) for m in ("nll", "nll_gaussian", "coverage_90", "coverage_conformal_90")
                       if m in v} for k, v in record.items() if k in VARIANTS}, flush=True)


if __name__ == "__main__":
    main()
