"""How many configurations to cross-fit: the cross-fitted ensemble of the best N configurations,
for several N, on catalogs whose best ten already have their fold networks.

The cross-fitted stage trains the K fold networks of the best ``crossfit_configs`` configurations
of the search (:mod:`autodeuq.ensemble.crossfit`); its cost grows with that number. The catalogs
of ``benchmarks/classification.py`` (method ``autodeuq-crossfit``) and ``benchmarks/crossfit.py``
hold the folds of the best ten (the default, twice ``--size`` 5), so the ensembles of the best N
<= 10 read their folds back: nothing trains. For each catalog and N the stage runs as the
pipeline runs it (greedy selection without replacement for classifiers and with replacement for
regression, on the out-of-fold predictions; temperature or scale fitted on them; no refit) and the
test rows of its split are scored as the two benchmarks score them.

    python benchmarks/crossfit_configs.py --classification-runs runs/classification \\
        --uci-runs runs/crossfit --results benchmarks/results/crossfit
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import classification as cls  # noqa: E402
from crossfit import ensemble_stage, scored  # noqa: E402
from uci_data import default_data_dir, load_split  # noqa: E402

COUNTS = (3, 5, 6, 8, 10)
CLASSIFICATION = ("wine", "penguins", "breast_cancer")
UCI = ("yacht", "boston", "concrete", "energy", "wine")
SHOWN = {"classification": ("log_loss", "test log loss"), "regression": ("nll_gaussian", "test Gaussian NLL")}


def _catalogs(runs: Path, names) -> list[tuple[str, int, Path]]:
    out = []
    for name in names:
        for run_dir in sorted(runs.glob(f"{name}-split*")):
            if (run_dir / "catalog.sqlite").exists() and run_dir.name.removeprefix(f"{name}-split").isdigit():
                out.append((name, int(run_dir.name.removeprefix(f"{name}-split")), run_dir))
    return out


def _fold_configs(run_dir: Path) -> int:
    from autodeuq.catalog import Catalog

    with Catalog(run_dir) as catalog:
        return len({int(f["entry"]) for f in catalog.fold_entries()})


def _cross_fitted(run_dir: Path, count: int, split: int):
    """The pipeline's cross-fitted ensemble of the best ``count`` configurations (no refit)."""
    ensemble, _ = ensemble_stage(run_dir, crossfit=True, refit=False, configs=count, folds=5, seed=split,
                                 evaluator="serial")
    return ensemble


def classification_scores(name: str, split: int, run_dir: Path, count: int) -> dict:
    data = cls.make_split(cls.load_table(name), split)
    ensemble = _cross_fitted(run_dir, count, split)
    proba = cls._label_columns(ensemble.predict_proba(data.x_test), ensemble.classes, data.n_classes)
    return {**cls.score(proba, data.y_test), "configurations": ensemble.selection["crossfit"]["configurations"]}


def regression_scores(name: str, split: int, run_dir: Path, count: int, data_dir: str) -> dict:
    data = load_split(data_dir, name, split)
    ensemble = _cross_fitted(run_dir, count, split)
    return {**scored(ensemble, data), "configurations": ensemble.selection["crossfit"]["configurations"]}


def report(records: list[dict], command: str) -> str:
    lines = ["# How many configurations to cross-fit", "", f"Command: `{command}` (no training: the folds of "
             "the best ten configurations were already in the catalogs).", "",
             "Each cell: the mean over the splits of the test score of the cross-fitted ensemble built from the "
             "best N configurations of the search (fold networks as members), and in brackets on how many of "
             "the splits N is at least as good as N = 10.", ""]
    for task, (key, title) in SHOWN.items():
        rows = [r for r in records if r["task"] == task]
        if not rows:
            continue
        lines += [f"**{title}** ({task})", "", "| table | splits | " + " | ".join(f"N = {n}" for n in COUNTS) + " |",
                  "|---|---|" + "---|" * len(COUNTS)]
        for name in dict.fromkeys(r["dataset"] for r in rows):
            mine = [r for r in rows if r["dataset"] == name]
            cells = []
            for n in COUNTS:
                values = [r["scores"][str(n)][key] for r in mine]
                as_good = sum(r["scores"][str(n)][key] <= r["scores"]["10"][key] + 1e-12 for r in mine)
                cells.append(f"{np.mean(values):.4f} ({as_good})")
            lines.append(f"| {name} | {len(mine)} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--classification-runs", type=Path, default=Path("runs/classification"))
    p.add_argument("--uci-runs", type=Path, default=Path("runs/crossfit"))
    p.add_argument("--data-dir", default=str(default_data_dir(ROOT)))
    p.add_argument("--results", type=Path, default=Path("benchmarks/results/crossfit"))
    args = p.parse_args(argv)
    command = "python benchmarks/crossfit_configs.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    args.results.mkdir(parents=True, exist_ok=True)
    raw = args.results / "crossfit_configs_raw.json"
    records = json.loads(raw.read_text()) if raw.exists() else []
    done = {(r["task"], r["dataset"], r["split"]) for r in records}
    jobs = [("classification", *c) for c in _catalogs(args.classification_runs, CLASSIFICATION)]
    jobs += [("regression", *c) for c in _catalogs(args.uci_runs, UCI)]
    for task, name, split, run_dir in jobs:
        if (task, name, split) in done or _fold_configs(run_dir) < max(COUNTS):
            continue  # recorded, or its folds are not all there (a benchmark may still be training them)
        scores = {}
        for n in COUNTS:
            scores[str(n)] = (classification_scores(name, split, run_dir, n) if task == "classification"
                              else regression_scores(name, split, run_dir, n, args.data_dir))
        records.append({"task": task, "dataset": name, "split": split, "scores": scores})
        raw.write_text(json.dumps(records, indent=1) + "\n")
        print(name, split, {n: round(s[SHOWN[task][0]], 4) for n, s in scores.items()}, flush=True)
    (args.results / "crossfit_configs.md").write_text(report(records, command))


if __name__ == "__main__":
    main()
