"""Training speed of a classifier against a regression network of the same architecture.

The compiled trainer (``autodeuq.nn.train.train``) runs the same program for both tasks but its head
and loss: a Gaussian head (mean and variance per target) with the Gaussian NLL, or one logit per
class with the categorical NLL. This script trains, for ``--configs`` configurations sampled
(fixed seeds) from the ``tabular`` space, the same architecture and training hyperparameters on
a synthetic table of ``--rows`` rows and 13 features (generated here) three ways: a regression
target, the same rows with 2 classes, and with ``--classes`` classes; each for ``--epochs`` epochs
without early stopping (a schedule of the configuration's learning rate), in alternation (regression, 2 classes, K
classes for one configuration, then the next), so that a change of the machine's load falls on
every task alike.

Per training it takes the steady-state time per epoch: the seconds of the epochs after the first
(``extra["timing"]["other_epochs"]``) divided by their number; the first epoch traces the program
and is reported apart. The summary is the median over configurations of the ratio of each
classification's per-epoch time to the regression's.

Usage (from the repository root)::

    python benchmarks/classification_speed.py --markdown benchmarks/results/classification_speed.md
"""
from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autodeuq.nn.train import configure_threads  # (before TensorFlow runs anything)


def tables(rows: int, n_classes: int, seed: int = 0):
    """(regression, 2-class, n_classes-class) datasets of the same inputs and splits."""
    import pandas as pd

    from autodeuq.table.data import from_table

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 13))
    score = np.sin(x[:, 0]) + x[:, 1] * x[:, 2] + 0.5 * x[:, 3]
    y = score + rng.normal(0, 0.3, rows)
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(13)])
    cuts = np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1])
    out = {"regression": from_table(frame.assign(y=y), ["y"], "synthetic", seed=seed, task="regression")}
    for k, name in ((2, "2 classes"), (n_classes, f"{n_classes} classes")):
        labels = np.digitize(score, np.quantile(score, np.linspace(0, 1, k + 1)[1:-1])) if k != n_classes else \
            np.digitize(score, cuts)
        out[name] = from_table(frame.assign(y=[f"c{v}" for v in labels]), ["y"], "synthetic", seed=seed,
                               task="classification")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", type=int, default=10)
    p.add_argument("--rows", type=int, default=1500)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--machine", default=f"{os.cpu_count()}-core {platform.machine()} CPU")
    p.add_argument("--markdown", default=None, help="also write the results to this file")
    args = p.parse_args(argv)
    configure_threads(args.threads)
    from autodeuq.nn.train import train
    from autodeuq.search.space import load_space

    datasets = tables(args.rows, args.classes)
    space = load_space("tabular").for_rows(len(datasets["regression"].x_train))
    rows = []
    for i in range(args.configs):
        config = space.sample(np.random.default_rng(1000 + i))
        times = {}
        for name, dataset in datasets.items():
            # a schedule of the configuration's learning rate: exactly --epochs epochs, no early stop
            result = train(config, space, dataset, seed=i, schedule=[config["hp"]["learning_rate"]] * args.epochs)
            if not result.ok:
                print(f"config {i} {name}: {result.reason}", flush=True)
                times[name] = (float("nan"), float("nan"))
                continue
            timing = result.extra["timing"]
            times[name] = (1000 * timing["other_epochs"] / max(result.epochs - 1, 1), 1000 * timing["first_epoch"])
        rows.append((i, config["hp"]["batch_size"], times))
        print(i, {k: f"{v[0]:.2f} ms/epoch" for k, v in times.items()}, flush=True)
    names = list(datasets)
    command = " ".join(shlex.quote(a) for a in ["benchmarks/classification_speed.py", *(argv or sys.argv[1:])])
    lines = [f"Command: `python {command}`",
             f"Machine: {args.machine}; {args.threads} TensorFlow thread(s); {args.rows} rows "
             f"({len(datasets['regression'].x_train)} training), {args.epochs} epochs per training.", "",
             "| config | batch | " + " | ".join(f"{n} ms/epoch (first epoch ms)" for n in names) + " |",
             "|---|---|" + "---|" * len(names)]
    ratios = {n: [] for n in names[1:]}
    for i, batch, times in rows:
        cells = " | ".join(f"{times[n][0]:.2f} ({times[n][1]:.0f})" for n in names)
        lines.append(f"| {i} | {batch} | {cells} |")
        for n in names[1:]:
            if np.isfinite(times[n][0]) and np.isfinite(times["regression"][0]):
                ratios[n].append(times[n][0] / times["regression"][0])
    lines.append("")
    for n, r in ratios.items():
        lines.append(f"- {n} / regression, per epoch after the first: median {np.median(r):.3f} "
                     f"(range {min(r):.3f}-{max(r):.3f}) over {len(r)} configurations")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("# Classifier training speed against regression (same networks)\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
