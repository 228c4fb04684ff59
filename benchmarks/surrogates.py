"""BO surrogates compared on synthetic functions: simple regret and time per ask.

Usage::

    python benchmarks/surrogates.py                       # full run: 10 seeds, 100 evaluations
    python benchmarks/surrogates.py --seeds 3 --evals 50  # reduced run
    python benchmarks/surrogates.py --surrogates et,deep-ensemble --problems branin

For every problem, surrogate and seed, :class:`~autodeuq.search.bo.VectorBO` (LCB, its defaults:
10 random initial points, kappa 1.96 with periodic decay, min-max-log cost scaling) makes one
suggestion at a time; ``random`` draws every point from the prior. Prints markdown: median and
quartiles over seeds of the simple regret (best cost found minus the known optimum) after 25, 50
and 100 evaluations (those within ``--evals``), the median time per model-based ask (fit +
acquisition over ``--candidates`` random candidates), and the time of one refit of each ensemble
surrogate at 100 and 500 observations.
"""

import argparse
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import autodeuq.search.ensemble_surrogates  # noqa: F401  (registers the ensemble surrogates)
from autodeuq.search.bo import VectorBO
from autodeuq.search.space import decode_index, encode_index
from autodeuq.search.surrogate import make_surrogate

CHECKPOINTS = (25, 50, 100)
SURROGATE_NAMES = ("et", "rf", "gp", "deep-ensemble", "ranking-ensemble")


# ---------------------------------------------------------------- problems
# Each problem: (dimension, sampler(rng, n) -> points of [0, 1]^d, cost(U) on such points, optimum).
def _box(lo, hi):
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    return lambda U: lo + U * (hi - lo)


def branin(U):
    x1, x2 = _box([-5.0, 0.0], [10.0, 15.0])(U).T
    b, c, t = 5.1 / (4 * np.pi**2), 5 / np.pi, 1 / (8 * np.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * np.cos(x1) + 10


_H_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
_H_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                 [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
_H_P = 1e-4 * np.array([[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
                        [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]])


def hartmann6(U):
    inner = np.sum(_H_A[None] * (U[:, None, :] - _H_P[None]) ** 2, axis=2)
    return -np.sum(_H_ALPHA * np.exp(-inner), axis=1)


def ackley5(U):
    X = _box([-32.768] * 5, [32.768] * 5)(U)
    d = X.shape[1]
    return (-20 * np.exp(-0.2 * np.sqrt(np.sum(X**2, axis=1) / d))
            - np.exp(np.sum(np.cos(2 * np.pi * X), axis=1) / d) + 20 + np.e)


# Mixed: 3 continuous variables in [0, 1] and 2 categorical ones with 5 levels each, in the
# search space's encoding of a categorical (level / 4, autodeuq.search.space.encode_index). Each level of
# the first moves the bowl's center and its floor, the second scales the bowl and adds its own
# offset; the minimum (0) is at level 3 of the first, level 1 of the second and x = that level's
# center.
_MIX_K = 5
_MIX_CENTERS = np.array([[0.2, 0.8, 0.5], [0.7, 0.3, 0.1], [0.5, 0.5, 0.9], [0.15, 0.35, 0.75], [0.9, 0.9, 0.2]])
_MIX_FLOOR1 = np.array([0.3, 0.5, 0.2, 0.0, 0.4])
_MIX_SCALE2 = np.array([1.0, 2.0, 0.5, 3.0, 1.5])
_MIX_FLOOR2 = np.array([0.2, 0.0, 0.3, 0.1, 0.4])


def _mixed_sampler(rng, n):
    cats = encode_index(rng.integers(0, _MIX_K, size=(n, 2)), _MIX_K)
    return np.hstack([rng.random((n, 3)), cats])


def mixed(U):
    x = U[:, :3]
    c1 = decode_index(U[:, 3], _MIX_K)
    c2 = decode_index(U[:, 4], _MIX_K)
    bowl = np.sum((x - _MIX_CENTERS[c1]) ** 2, axis=1) * _MIX_SCALE2[c2]
    return bowl + 5 * bowl**2 * np.abs(np.sin(9 * x[:, 0])) + _MIX_FLOOR1[c1] + _MIX_FLOOR2[c2]


def _uniform(d):
    return lambda rng, n: rng.random((n, d))


PROBLEMS = {
    "branin": (2, _uniform(2), branin, 0.397887357729739),
    "hartmann6": (6, _uniform(6), hartmann6, -3.322368011391339),
    "ackley5": (5, _uniform(5), ackley5, 0.0),
    "mixed": (5, _mixed_sampler, mixed, 0.0),
}


# ---------------------------------------------------------------- runs
def run_one(problem, surrogate, seed, evals, n_candidates):
    """Best-so-far cost after each evaluation, and the seconds of each model-based ask."""
    _, sampler, cost, _ = PROBLEMS[problem]
    rng = np.random.default_rng(seed)
    if surrogate == "random":
        return np.minimum.accumulate(cost(sampler(rng, evals))), []
    bo = VectorBO(sampler, surrogate=surrogate, n_candidates=n_candidates)
    ask_times = []
    for t in range(evals):
        x = bo.suggest(1, rng)
        if t >= bo.n_initial:
            ask_times.append(bo.last_timing["total"])
        bo.observe(x, cost(x))
    return np.minimum.accumulate(bo.y), ask_times


def refit_times(names, sizes=(100, 500), d=6, repeats=3):
    """Seconds of one fit at each size: the first call (with tracing/compiling) and the median
    of ``repeats`` later ones."""
    rows = []
    rng = np.random.default_rng(0)
    for name in names:
        for n in sizes:
            X = rng.random((n, d))
            y = np.log(hartmann6(X) + 3.4)
            times = []
            for r in range(repeats + 1):
                model = make_surrogate(name, seed=r)
                tic = time.perf_counter()
                model.fit(X, y)
                times.append(time.perf_counter() - tic)
            rows.append((name, n, times[0], float(np.median(times[1:]))))
    return rows


def _quartiles(values):
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return f"{med:.3g} [{q1:.3g}, {q3:.3g}]"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds per (problem, surrogate)")
    parser.add_argument("--evals", type=int, default=100, help="evaluations per search")
    parser.add_argument("--candidates", type=int, default=10_000, help="acquisition candidates per ask")
    parser.add_argument("--surrogates", default=",".join(SURROGATE_NAMES + ("random",)),
                        help="comma-separated surrogate names; 'random' is random search")
    parser.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated problems")
    parser.add_argument("--no-refit-timing", action="store_true", help="skip the refit timings")
    args = parser.parse_args()
    surrogates = [s.strip() for s in args.surrogates.split(",") if s.strip()]
    problems = [p.strip() for p in args.problems.split(",") if p.strip()]
    checkpoints = [c for c in CHECKPOINTS if c <= args.evals] or [args.evals]

    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs.")
    print(f"{args.seeds} seeds, {args.evals} evaluations, {args.candidates} candidates per ask, "
          "VectorBO defaults (LCB, 10 random initial points).")
    print()
    regret_cols = " | ".join(f"regret @{c}" for c in checkpoints)
    print(f"| problem | surrogate | {regret_cols} | ask s (median) | run s |")
    print("|---|---|" + "---:|" * (len(checkpoints) + 2))
    for problem in problems:
        optimum = PROBLEMS[problem][3]
        for surrogate in surrogates:
            tic = time.perf_counter()
            curves, asks = [], []
            for seed in range(args.seeds):
                best, ask_times = run_one(problem, surrogate, seed, args.evals, args.candidates)
                curves.append(best - optimum)
                asks.extend(ask_times)
            curves = np.array(curves)
            cells = " | ".join(_quartiles(curves[:, c - 1]) for c in checkpoints)
            ask = f"{np.median(asks):.3f}" if asks else "-"
            print(f"| {problem} | {surrogate} | {cells} | {ask} | {time.perf_counter() - tic:.0f} |", flush=True)
    print()
    print("Regret: median [first quartile, third quartile] over seeds of (best cost so far - optimum).")
    ensembles = [s for s in surrogates if s in ("deep-ensemble", "ranking-ensemble")]
    if ensembles and not args.no_refit_timing:
        print()
        print("One refit (6 features, costs of Hartmann-6 at random points):")
        print()
        print("| surrogate | observations | first fit s (incl. tracing/compiling) | later fit s (median of 3) |")
        print("|---|---:|---:|---:|")
        for name, n, first, later in refit_times(ensembles):
            print(f"| {name} | {n} | {first:.2f} | {later:.3f} |", flush=True)


if __name__ == "__main__":
    main()
