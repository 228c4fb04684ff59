"""The 1-D toy problem of the method, with the search ablation.

Runs AgEBO, AgE over the architecture with fixed training hyperparameters, BO over the training
hyperparameters with a fixed architecture, and random search on the joint space, each with the same
evaluation budget; builds a greedy ensemble of 5 from each catalog; writes one PNG per variant and a
table of the uncertainty it recovers (aleatoric std should be about 0.5 on [-30, -20] and 1.0 on
[20, 30]; epistemic std should grow on [-20, 20] and beyond +-30).

    python examples/toy_sine.py [--max-evals 100] [--out examples/results] [--runs runs/toy_sine]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from autodeuq import metrics
from autodeuq.app import plots
from autodeuq.app.pipeline import fill_catalog
from autodeuq.ensemble import Ensemble
from autodeuq.search.space import load_space
from autodeuq.table.data import toy_sine

# Hand-fixed halves of a configuration for the two ablations.
FIXED_HP = {"learning_rate": 0.01, "batch_size": 16, "optimizer": "adam",
            "patience_reduce_lr": 10, "patience_early_stopping": 20}


def fixed_arch(space):
    """Three Dense(64, tanh) cells without skips: a standard MLP."""
    dense = 1 + (space.units.index(64)) * len(space.activations) + space.activations.index("tanh")
    return [dense if dim == space.dense_choices else 0 for dim in space.arch_dims]


def variants(space):
    return {
        "agebo": ("agebo", {}),
        "age-fixed-hp": ("age", {"fixed_hp": FIXED_HP}),
        "bo-fixed-arch": ("bo", {"fixed_arch": fixed_arch(space)}),
        "random": ("random", {}),
    }


def region_mean(x, values, lo, hi):
    inside = (x >= lo) & (x <= hi)
    return float(values[inside].mean())


def summarize(name, ensemble, data, grid):
    pred = ensemble.predict(grid)
    x = grid[:, 0]
    ale, epi = np.sqrt(pred.aleatoric[:, 0]), np.sqrt(pred.epistemic[:, 0])
    beyond = (np.abs(x) > 30)
    train_region = ((x >= -30) & (x <= -20)) | ((x >= 20) & (x <= 30))
    means, variances = ensemble.member_predictions(data.x_test)
    nll = float(metrics.mixture_nll(means, variances, ensemble.weights, data.y_test).mean())
    return {
        "variant": name,
        "aleatoric [-30,-20]": region_mean(x, ale, -30, -20),
        "aleatoric [20,30]": region_mean(x, ale, 20, 30),
        "epistemic train": float(epi[train_region].mean()),
        "epistemic [-20,20]": region_mean(x, epi, -20, 20),
        "epistemic |x|>30": float(epi[beyond].mean()),
        "test NLL": nll,
    }, pred


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-evals", type=int, default=100, help="evaluations per variant (default: 100)")
    p.add_argument("--epochs", type=int, default=None, help="override the toy space's 200 epochs")
    p.add_argument("--workers", type=int, default=None, help="parallel evaluations (default: all CPUs)")
    p.add_argument("--variants", nargs="*", default=None, help="subset of: agebo age-fixed-hp bo-fixed-arch random")
    p.add_argument("--out", default="examples/results", help="folder for the PNGs and the table")
    p.add_argument("--runs", default="runs/toy_sine", help="folder of the catalogs")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    out, runs = Path(args.out), Path(args.runs)
    out.mkdir(parents=True, exist_ok=True)
    space, data = load_space("toy"), toy_sine(seed=args.seed)
    grid = np.linspace(-40, 40, 400)[:, None]
    rows = []
    chosen = variants(space)
    for name in args.variants or list(chosen):
        search, options = chosen[name]
        started = time.time()
        summary = fill_catalog(space, data, runs / name, search=search, search_options=options,
                               max_evals=args.max_evals, seed=args.seed, epochs=args.epochs, workers=args.workers)
        summary.raise_for_error()
        ensemble = Ensemble.from_catalog(runs / name, size=5)
        row, pred = summarize(name, ensemble, data, grid)
        row["search s"] = round(summary.wall_time, 1)
        row["total s"] = round(time.time() - started, 1)
        rows.append(row)
        plots.plot_uncertainty_1d(grid, pred, out / f"toy_sine_{name}.png", x_train=data.x_train, y_train=data.y_train,
                                  y_true=2 * np.sin(grid), title=f"toy-sine, {name}")
        print(row, flush=True)
    table = format_table(rows)
    header = (f"# Toy sine: uncertainty recovered by each search\n\nCommand: `python examples/toy_sine.py "
              f"--max-evals {args.max_evals}{'' if args.epochs is None else f' --epochs {args.epochs}'}` "
              f"({summary.slots} parallel evaluations; ensembles: greedy, size 5)\n\n"
              "Expected: aleatoric std about 0.5 on [-30, -20] and 1.0 on [20, 30]; epistemic std small on the "
              "training regions and larger on [-20, 20] and beyond +-30. Times in seconds.\n\n")
    (out / "toy_sine.md").write_text(header + table + "\n")
    print(table)


def format_table(rows):
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join(f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for k in keys) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
