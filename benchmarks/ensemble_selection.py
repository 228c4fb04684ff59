"""Time greedy ensemble selection on synthetic catalogs.

Usage::

    python benchmarks/ensemble_selection.py [--repeats 7]

Prints a markdown table: median wall time of ``autodeuq.ensemble.select`` (greedy with
replacement, size 5) over a few repeats, for each catalog shape and score. Each timing
covers the whole call: input checks, per-model log-densities and every greedy step.
"""

import argparse
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from autodeuq.ensemble import select

SHAPES = [(100, 500), (500, 1000)]
SCORES = ["mixture", "gaussian"]
SIZE = 5


def synthetic_catalog(n_models, n_points, seed=0):
    """A heteroscedastic 1-D regression and models that each miss it in their own way.

    Model i predicts the truth plus a sinusoidal error of random frequency, phase and
    (log-normal) amplitude, with the true noise variance scaled by a log-normal factor:
    a mix of good, biased, over- and under-confident models, like a search catalog.
    """
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3.0, 3.0, n_points)
    noise_std = 0.3 + 0.2 * np.abs(x)
    truth = np.sin(2.0 * x)
    y = truth + noise_std * rng.normal(size=n_points)
    frequency = rng.uniform(0.5, 3.0, (n_models, 1))
    phase = rng.uniform(0.0, 2.0 * np.pi, (n_models, 1))
    amplitude = rng.lognormal(-2.0, 1.0, (n_models, 1))
    means = truth + amplitude * np.sin(frequency * x + phase)
    variances = (noise_std * rng.lognormal(0.0, 0.5, (n_models, 1))) ** 2
    return means[..., None], variances[..., None], y[:, None]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per case")
    args = parser.parse_args()

    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}.")
    print(f"`select(..., size={SIZE}, selector='greedy')`, median of {args.repeats} runs.")
    print()
    print("| models | points | score | median ms | min ms | members | weights |")
    print("|---:|---:|---|---:|---:|---:|---|")
    for n_models, n_points in SHAPES:
        means, variances, y = synthetic_catalog(n_models, n_points)
        for score in SCORES:
            select(means, variances, y, SIZE, "greedy", score)  # warm-up
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                indices, weights = select(means, variances, y, SIZE, "greedy", score)
                times.append(time.perf_counter() - start)
            print(
                f"| {n_models} | {n_points} | {score} | {1e3 * np.median(times):.1f} "
                f"| {1e3 * np.min(times):.1f} | {len(indices)} "
                f"| {', '.join(f'{w:.3f}' for w in weights)} |"
            )


if __name__ == "__main__":
    main()
