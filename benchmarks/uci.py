"""Regression benchmark: AutoDEUQ vs a Deep Ensembles baseline on boston and concrete.

For each dataset and split seed: a seeded 90/10 train/test split, inside the training part the
method's 2/3-1/3 train/validation split; AgEBO on the tabular space with ``--max-evals``
evaluations; a greedy ensemble of 5; test NLL (exact mixture and moment-matched Gaussian) and RMSE
in original units. The baseline (Lakshminarayanan et al. 2017) is 5 networks of one hidden layer of
50 ReLU units trained with the Gaussian NLL, Adam, 40 epochs, on the same splits.

    python benchmarks/uci.py [--datasets boston concrete] [--splits 5] [--max-evals 100]
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from autodeuq import metrics
from autodeuq.data import load_builtin
from autodeuq.ensemble import Ensemble
from autodeuq.evaluator import TrainingObjective
from autodeuq.evaluator.ray import RayEvaluator
from autodeuq.runner import run_search
from autodeuq.space import SearchSpace, load_space

THESIS = {  # Table 6.1 of the thesis: mean test NLL / RMSE
    "boston": {"autodeuq_nll": 2.46, "autodeuq_rmse": 3.09, "de_nll": 2.41, "de_rmse": 3.28},
    "concrete": {"autodeuq_nll": 2.86, "autodeuq_rmse": 4.38, "de_nll": 3.06, "de_rmse": 6.03},
}

# One hidden layer of 50 ReLU units: a one-cell space with a single dense choice.
BASELINE_SPACE = {
    "name": "deep-ensembles-baseline",
    "architecture": {"num_cells": 1, "skip_window": 1, "units": [50], "activations": ["relu"]},
    "training": {
        "learning_rate": {"low": 1e-4, "high": 1e-1, "log": True},
        "batch_size": {"low": 1, "high": 256, "log": True},
        "optimizer": ["adam"],
        "patience_reduce_lr": {"low": 100, "high": 101},
        "patience_early_stopping": {"low": 100, "high": 101},
    },
    "epochs": 40,
}


def scores(means, variances, weights, y):
    mean, ale, epi = metrics.mixture_moments(means, variances, weights)
    return {
        "nll": float(metrics.mixture_nll(means, variances, weights, y).mean()),
        "nll_gaussian": float(metrics.gaussian_nll(mean, ale + epi, y).mean()),
        "rmse": float(metrics.rmse(mean, y).mean()),
    }


def deep_ensemble_baseline(data, seed, lr):
    from autodeuq.model import model_from_bytes
    from autodeuq.train import predict, train

    space = SearchSpace(BASELINE_SPACE, source="baseline")
    config = {"arch": [1, 0], "hp": {"learning_rate": lr, "batch_size": 100, "optimizer": "adam",
                                    "patience_reduce_lr": 100, "patience_early_stopping": 100}}
    means, variances = [], []
    for k in range(5):
        result = train(config, space, data, seed=1000 * seed + k)
        if not result.ok:
            raise RuntimeError(f"baseline training failed: {result.reason}")
        mean, var = predict(model_from_bytes(result.model_bytes), data.x_test)
        means.append(mean)
        variances.append(var)
    return scores(np.stack(means), np.stack(variances), np.full(5, 0.2), data.y_test)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="*", default=["boston", "concrete"])
    p.add_argument("--splits", type=int, default=5, help="split seeds 0..splits-1 (default: 5)")
    p.add_argument("--max-evals", type=int, default=100, help="AgEBO evaluations per split (default: 100)")
    p.add_argument("--epochs", type=int, default=None, help="override the tabular space's 100 epochs")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--baseline-lr", type=float, default=0.01, help="Adam learning rate of the baseline")
    p.add_argument("--runs", default="runs/uci", help="folder of the catalogs (default: runs/uci)")
    p.add_argument("--results", default="benchmarks/results", help="folder of uci.md and uci_raw.json")
    args = p.parse_args(argv)

    runs, out = Path(args.runs), Path(args.results)
    runs.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    space = load_space("tabular")
    results = {}
    started = time.time()
    for name in args.datasets:
        for seed in range(args.splits):
            data = load_builtin(name, seed=seed, test_fraction=0.1)
            run_dir = runs / f"{name}-split{seed}"
            t0 = time.time()
            objective = TrainingObjective(space, data, seed=seed, epochs=args.epochs, threads=1)
            with RayEvaluator(objective, workers=args.workers) as evaluator:
                summary = run_search(space, data, evaluator, run_dir, search="agebo", max_evals=args.max_evals,
                                     seed=seed, progress=False, run_options={"epochs": args.epochs})
            ensemble = Ensemble.from_catalog(run_dir, size=5)
            means, variances = ensemble.member_predictions(data.x_test)
            auto = scores(means, variances, ensemble.weights, data.y_test)
            search_time = time.time() - t0
            base = deep_ensemble_baseline(data, seed, args.baseline_lr)
            results[f"{name}/{seed}"] = {"autodeuq": auto, "deep_ensembles": base, "search_s": search_time,
                                         "failed": summary.n_failed, "members": ensemble.member_ids}
            print(f"{name} split {seed}: autodeuq {auto}  deep-ensembles {base}  ({search_time:.0f} s)", flush=True)
            (out / "uci_raw.json").write_text(json.dumps(results, indent=2))
    wall = time.time() - started
    write_table(results, args, wall, out / "uci.md")


def mean_se(values):
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.2f} ± {v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0:.2f}"


def write_table(results, args, wall, path):
    lines = [
        "# Regression benchmark: boston and concrete",
        "",
        f"Command: `python benchmarks/uci.py --datasets {' '.join(args.datasets)} --splits {args.splits} "
        f"--max-evals {args.max_evals}{'' if args.epochs is None else f' --epochs {args.epochs}'}`",
        "",
        f"Machine: {platform.machine()} CPU, {args.workers or 'all'} parallel evaluations; total wall time "
        f"{wall / 60:.1f} min. Budget: {args.max_evals} AgEBO evaluations per split (tabular space, "
        f"{args.epochs or 100} epochs), greedy ensemble of 5 (mixture NLL). Test sets: seeded 10 % splits "
        f"(seeds 0..{args.splits - 1}); values are mean ± standard error over splits, original units.",
        "",
        "| dataset | method | test NLL (mixture) | test NLL (Gaussian) | test RMSE | thesis NLL | thesis RMSE |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in args.datasets:
        rows = [v for k, v in results.items() if k.startswith(name + "/")]
        for key, label, thesis in (("autodeuq", "AutoDEUQ (ours)", "autodeuq"),
                                   ("deep_ensembles", "Deep Ensembles (ours)", "de")):
            lines.append(
                f"| {name} | {label} | {mean_se([r[key]['nll'] for r in rows])} | "
                f"{mean_se([r[key]['nll_gaussian'] for r in rows])} | {mean_se([r[key]['rmse'] for r in rows])} | "
                f"{THESIS[name][thesis + '_nll']} | {THESIS[name][thesis + '_rmse']} |"
            )
    lines += ["", "Per split (raw numbers): `benchmarks/results/uci_raw.json`.", ""]
    path.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
