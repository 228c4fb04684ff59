"""What an XLA-compiled epoch costs and saves: the same trainings with and without XLA.

For the tabular space's first ``--configs`` configurations (seeds 1000+i, as in
``benchmarks/training_speed.py``) at each ``--batch-sizes`` value, one training of ``--epochs``
epochs (patience 30, so none stops early) on each path of ``autodeuq.train``, each from an empty
trainer cache, so each traces (and, with XLA, compiles) its epoch. Reported per path: the first
epoch (tracing, compilation, one epoch) and the time per step of the later epochs; then how many
steps a training needs before XLA's cheaper steps have paid for its compilation. This is what
``autodeuq.train.XLA_MIN_STEPS`` is chosen from. Wall times, one TensorFlow thread: run it on an
otherwise idle machine.

The data: the fitting rows of one split of a UCI dataset (``--dataset``, default energy: 553
rows, where small batches made the search slowest) from ``--data-dir``.

``--replay RUN_DIR --path {xla,plain}`` instead trains again, on one path, every configuration of
a search's catalog (made by ``benchmarks/uci.py`` on the same dataset and split) whose budget
qualifies for XLA, with the search's seeds and epoch budget, and prints the total wall time. Two
such processes on the same path, each with half the configurations (``--shard 0/2``, ``1/2``),
started together on a 2-core machine, share it as the search's two workers did.

Usage (from the repository root)::

    python benchmarks/xla_epochs.py --data-dir ../shared/datasets/uci
    python benchmarks/xla_epochs.py --replay runs/uci/energy-split0 --path xla --shard 0/2 &
    python benchmarks/xla_epochs.py --replay runs/uci/energy-split0 --path xla --shard 1/2
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from autodeuq.train import configure_threads  # noqa: E402  (before TensorFlow runs anything)


def one_training(train, config, space, dataset, epochs, xla):
    """(first epoch seconds, seconds per later step) of one training on the chosen path, or None
    if it failed (a diverging configuration)."""
    train.XLA_MIN_STEPS = 0 if xla else math.inf
    train.clear_trainer_cache()
    result = train.train(config, space, dataset, seed=0, epochs=epochs)
    if not result.ok:
        return None
    assert result.extra["xla_from"] == (0 if xla else None)
    timing = result.extra["timing"]
    steps = math.ceil(len(dataset.x_train) / result.extra["batch_size"]) * (result.epochs - 1)
    return timing["first_epoch"], timing["other_epochs"] / steps


def replay(train, run_dir, path, space, dataset, shard=(0, 1)):
    """Train the XLA-qualifying configurations of a catalog on one path; print their total time."""
    from autodeuq.catalog import Catalog
    from autodeuq.evaluator.base import evaluation_seed

    catalog = Catalog(run_dir)
    space = catalog.space  # what the search searched (adapted to its rows)
    seed, epochs = catalog.meta["seed"], space.epochs
    entries = [(i, catalog.config(i)) for i in catalog.ids(status=None)]
    entries = [(i, c) for i, c in entries
               if train.uses_xla(len(dataset.x_train), min(c["hp"]["batch_size"], len(dataset.x_train)), epochs)]
    entries = entries[shard[0]::shard[1]]
    train.XLA_MIN_STEPS = 0 if path == "xla" else math.inf
    total, same, epochs_run = 0.0, 0, 0
    for entry_id, config in entries:
        result = train.train(config, space, dataset, seed=evaluation_seed(seed, entry_id))
        total += result.wall_time
        epochs_run += result.epochs
        same += result.objective == catalog.entry(entry_id)["objective"]
    print(f"{run_dir} (shard {shard[0]}/{shard[1]}): {len(entries)} trainings on the {path} path, {epochs_run} epochs, {total:.1f} s "
          f"({same} with the catalog's exact objective)")


def main(argv=None):
    from uci_data import default_data_dir, load_split

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=str(default_data_dir(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))))
    parser.add_argument("--dataset", default="energy")
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--configs", type=int, default=4)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[2, 4, 8, 32, 128])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--replay", help="a catalog of benchmarks/uci.py on --dataset / --split")
    parser.add_argument("--path", choices=["xla", "plain"], default="xla")
    parser.add_argument("--shard", default="0/1", help="with --replay, I/N: every N-th configuration from the I-th")
    args = parser.parse_args(argv)
    configure_threads(1)

    from autodeuq import train
    from autodeuq.data import from_arrays
    from autodeuq.space import load_space

    split = load_split(args.data_dir, args.dataset, args.split)
    dataset = from_arrays(split.x_fit, split.y_fit, split.x_valid, split.y_valid, name=args.dataset)
    space = load_space("tabular").for_rows(len(dataset.x_train))
    if args.replay:
        shard = tuple(int(v) for v in args.shard.split("/"))
        return replay(train, args.replay, args.path, space, dataset, shard)
    configs = [space.sample(np.random.default_rng(1000 + i)) for i in range(args.configs)]
    train.train(configs[0], space, dataset, seed=0, epochs=2)  # warm-up: kernels, imports
    print(f"{args.dataset} split {args.split}: {len(dataset.x_train)} fitting rows, {args.configs} configurations, "
          f"{args.epochs} epochs each, one thread; {platform.machine()}, {os.cpu_count()} cores")
    print("| batch | steps/epoch | first epoch plain (s) | first epoch XLA (s) | µs/step plain | µs/step XLA "
          "| XLA pays off after (steps) | trainings |")
    print("|---:|---:|---|---|---|---|---|---:|")
    for batch_size in args.batch_sizes:
        rows = []
        for base in configs:
            config = {"arch": base["arch"], "hp": {**base["hp"], "batch_size": batch_size,
                                                   "patience_early_stopping": 30, "patience_reduce_lr": 20}}
            plain = one_training(train, config, space, dataset, args.epochs, xla=False)
            compiled = one_training(train, config, space, dataset, args.epochs, xla=True)
            if plain is None or compiled is None:
                continue
            saved = plain[1] - compiled[1]
            rows.append((*plain, *compiled, (compiled[0] - plain[0]) / saved if saved > 0 else math.inf))
        if not rows:
            print(f"| {batch_size} | every training diverged |")
            continue
        rows = np.array(rows)

        def span(column, scale=1.0, digits=2):
            values = rows[:, column] * scale
            return f"{values.min():.{digits}f}-{values.max():.{digits}f}"

        print(f"| {batch_size} | {math.ceil(len(dataset.x_train) / batch_size)} | {span(0)} | {span(2)} "
              f"| {span(1, 1e6, 0)} | {span(3, 1e6, 0)} | {span(4, 1, 0)} | {len(rows)} |", flush=True)


if __name__ == "__main__":
    main()
