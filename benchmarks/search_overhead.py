"""Time per ask as the number of observations grows, for each searcher.

For each size N, a fresh searcher over the tabular space is told N synthetic results (random
configurations, a smooth synthetic cost, 5 % failures), then asked for 8 configurations; this is
repeated with different seeds and the median latency is reported (and the minimum, as a floor
when the machine is shared), with the median surrogate-fit and acquisition parts (candidate
sampling, prediction, constant-liar selection).

Usage::

    python benchmarks/search_overhead.py [--sizes 100 500 1000] [--repeats 21] [--trees N]
        [--batch 8] [--searchers agebo bo age random]

"fit" and "acquisition" are those of Bayesian optimization's surrogate ("–" for the searchers
without one).
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autodeuq.search import create, surrogate
from autodeuq.search.space import load_space


def synthetic_history(space, n, seed=0):
    rng = np.random.default_rng(seed)
    configs = [space.sample(rng) for _ in range(n)]
    target = rng.random(space.dimension)
    costs = ((space.encode(configs) - target) ** 2).sum(axis=1)
    return [(c, None if rng.random() < 0.05 else float(y)) for c, y in zip(configs, costs)]


def measure(name, space, history, repeats, batch):
    total, fit, acq, tell = [], [], [], []
    for seed in range(repeats):
        searcher = create(name, space, seed=seed)
        tic = time.perf_counter()
        searcher.tell(history)
        tell.append(time.perf_counter() - tic)
        tic = time.perf_counter()
        searcher.ask(batch)
        total.append(time.perf_counter() - tic)
        timing = searcher.bo.last_timing if hasattr(searcher, "bo") else {"fit": np.nan, "acquisition": np.nan}
        fit.append(timing["fit"])
        acq.append(timing["acquisition"])
    row = {k: 1e3 * float(np.median(v)) for k, v in
           {"ask": total, "fit": fit, "acquisition": acq, "tell": tell}.items()}
    row["ask_min"] = 1e3 * min(total)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 500, 1000])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--trees", type=int, default=None,
                        help="trees of the ET surrogate (default: surrogate.BO_N_ESTIMATORS)")
    parser.add_argument("--searchers", nargs="+", default=["agebo", "bo"],
                        choices=["agebo", "bo", "age", "random"])
    args = parser.parse_args(argv)
    if args.trees is not None:
        surrogate.BO_N_ESTIMATORS = args.trees  # the "et" factory reads it at each fit

    space = load_space("tabular")
    print(f"space: tabular ({len(space.arch_dims)} architecture + {len(space.hp_names)} hyperparameter variables); "
          f"options: ET surrogate with {surrogate.BO_N_ESTIMATORS} trees, 10,000 candidates, constant liar; "
          f"median of {args.repeats} seeds; python {platform.python_version()}")
    print()
    print(f"| searcher | observations | ask({args.batch}) ms, median | min | fit ms | acquisition ms "
          "| tell(history) ms |")
    print("|---|---|---|---|---|---|---|")
    for name in args.searchers:
        for n in args.sizes:
            row = measure(name, space, synthetic_history(space, n), args.repeats, args.batch)
            cells = [row[key] for key in ("ask", "ask_min", "fit", "acquisition", "tell")]
            shown = ("–" if np.isnan(value) else f"{value:.1f}" for value in cells)
            print(f"| {name} | {n} | " + " | ".join(shown) + " |", flush=True)


if __name__ == "__main__":
    main()
