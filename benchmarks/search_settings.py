"""Search settings under asynchronous workers, on cheap synthetic objectives (no TensorFlow).

Usage::

    python benchmarks/search_settings.py liar        # constant liar's lie: max, min, mean, qUCB
    python benchmarks/search_settings.py population  # aging evolution's P/S at 100 evaluations
    python benchmarks/search_settings.py failures    # failures in the population, or not
    python benchmarks/search_settings.py liar --seeds 5 --workers 8 --problems mixed  # reduced

The real searchers run against a simulated pool of W workers: each evaluation lasts a lognormal
time (median 1, sigma 0.5; the i-th evaluation of a seed gets the same duration whatever the
setting); the driver starts W evaluations, and whenever one ends it tells that result and asks one
configuration for the freed worker, so W - 1 configurations are pending at each ask (what the
constant liar's lie stands in for).

Problems:

* ``tabular``: an objective over the real joint space (``search_spaces/tabular.yaml``): a sum over
  the five cells of an architecture term (activation, width against a per-cell target width, skip
  connections that help wide cells and hurt narrow ones; an identity cell costs a fixed amount),
  plus a smooth function of the encoded training hyperparameters (a bowl in the log learning rate
  whose center depends on the optimizer, a bowl in the log batch size, an offset per optimizer, two
  shallow bowls in the patiences). Cells and the two halves are independent, so the optimum is
  exact (enumeration per cell and per hyperparameter).
* ``tabular-fail``: the same, where a fifth of random configurations fail (6-9 % of a search's
  evaluations: the searchers learn to avoid them): networks whose widths add up to more than 900
  units, and learning rates above the 90th percentile of the prior (a diverged training). The
  optimum (widths adding to 896) does not fail, but borders the failing region.
* ``mixed``, ``hartmann6``...: :mod:`benchmarks.surrogates`' problems, for VectorBO alone.

Prints markdown tables: median [quartiles] over seeds of the simple regret (best cost found minus
the optimum) after 50 and 100 evaluations (in the order they ended), and of the mean of the five
best costs found at 100, minus the optimum ("top-5 regret").
"""

import argparse
import heapq
import math
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from autodeuq.search.age import AgingEvolution, population_for_budget
from autodeuq.search.agebo import AgEBO
from autodeuq.search.bo import BayesianOptimization, VectorBO
from autodeuq.search.space import load_space
from benchmarks.surrogates import PROBLEMS

CHECKPOINTS = (50, 100)
SPACE = load_space("tabular")

# ---------------------------------------------------------------- the tabular objective
_ACT_COST = {"elu": 0.1, "gelu": 0.05, "hard_sigmoid": 0.8, "linear": 0.6, "relu": 0.1, "selu": 0.15,
             "sigmoid": 0.7, "softplus": 0.3, "softsign": 0.5, "swish": 0.0, "tanh": 0.25}
_TARGET_UNITS = (192, 224, 192, 160, 128)  # per cell; they add up to 896
_IDENTITY_COST = 0.9
_OPT_COST = {"sgd": 0.3, "rmsprop": 0.15, "adagrad": 0.4, "adam": 0.0, "adadelta": 0.6, "adamax": 0.1,
             "nadam": 0.05}
_OPT_LR_SHIFT = {"sgd": 0.2, "adagrad": 0.15, "adadelta": 0.3}  # the encoded learning rate they prefer, above 0.5
MAX_TOTAL_UNITS, MAX_LR_CODE = 900, 0.9  # tabular-fail: what fails


def _cell_cost(cell, dense, skips):
    if dense.units is None:
        return _IDENTITY_COST
    cost = _ACT_COST[dense.activation] + 0.15 * (math.log2(dense.units) - math.log2(_TARGET_UNITS[cell])) ** 2
    return cost + len(skips) * (-0.12 if dense.units >= 96 else 0.1)


def arch_cost(arch):
    return sum(_cell_cost(k, dense, skips) for k, (dense, skips) in enumerate(SPACE.cells(arch)))


def hp_cost(hp):
    h = SPACE.encode_hp(hp)[0]  # learning rate, batch size, optimizer, two patiences in [0, 1]
    lr_center = 0.5 + _OPT_LR_SHIFT.get(hp["optimizer"], 0.0)
    return (3.0 * (h[0] - lr_center) ** 2 + 1.0 * (h[1] - 0.3) ** 2 + _OPT_COST[hp["optimizer"]]
            + 0.2 * (h[3] - 0.4) ** 2 + 0.2 * (h[4] - 0.7) ** 2)


def fails(config):
    units = sum(dense.units or 0 for dense, _ in SPACE.cells(config["arch"]))
    return units > MAX_TOTAL_UNITS or SPACE.encode_hp(config["hp"])[0, 0] > MAX_LR_CODE


def tabular_optimum():
    """The exact minimum: cells and hyperparameters enter as independent terms."""
    total, pos = 0.0, 0
    for cell in range(SPACE.num_cells):
        n_anchors = len(SPACE.anchors(cell + 1))
        best = min(
            _cell_cost(cell, SPACE.decode_dense(d), [0] * n_skips)
            for d in range(SPACE.dense_choices) for n_skips in range(n_anchors + 1)
        )
        total += best
        pos += 1 + n_anchors
    # Hyperparameters: the learning-rate bowl reaches 0 for every optimizer (its center lies inside
    # [0, 1]); the batch size and patiences are integers, enumerated through their encodings.
    cs = SPACE.configspace
    bs = cs["batch_size"].to_vector(np.arange(cs["batch_size"].lower, cs["batch_size"].upper + 1, dtype=float))
    pr = cs["patience_reduce_lr"].to_vector(np.arange(10, 21, dtype=float))
    pe = cs["patience_early_stopping"].to_vector(np.arange(20, 31, dtype=float))
    total += (min(_OPT_COST.values()) + float(np.min((bs - 0.3) ** 2)) + 0.2 * float(np.min((pr - 0.4) ** 2))
              + 0.2 * float(np.min((pe - 0.7) ** 2)))
    return total


def tabular_cost(config, with_failures=False):
    if with_failures and fails(config):
        return None
    return arch_cost(config["arch"]) + hp_cost(config["hp"])


# ---------------------------------------------------------------- searchers under test
class FailuresAsWorst:
    """Mixin: a failed evaluation enters the aging population with the worst cost observed so far
    (DeepHyper's rule) instead of staying out of it (autodeuq's)."""

    def _tell(self, results):
        finite = [y for _, y in results if y is not None]
        self._worst = max([getattr(self, "_worst", -math.inf)] + finite)
        super()._tell(results)
        for config, objective in results:
            if objective is None:
                self._population.add(config, self._worst if math.isfinite(self._worst) else math.inf)


class AgEBOFailuresIn(FailuresAsWorst, AgEBO):
    pass


class AgingEvolutionFailuresIn(FailuresAsWorst, AgingEvolution):
    pass


class SearcherAdapter:
    """A :class:`~autodeuq.search.base.Searcher` driven one configuration per freed worker."""

    def __init__(self, searcher, cost):
        self.searcher, self.cost = searcher, cost

    def ask(self):
        return self.searcher.ask(1)[0]

    def evaluate(self, config):
        return self.cost(config)

    def tell(self, config, cost):
        self.searcher.tell([(config, cost)])

    def mutated(self, config):
        return self.searcher.parent_of(config) is not None


class VectorAdapter:
    """VectorBO on a box problem; the driver's pending points are passed to ``suggest``."""

    def __init__(self, bo, cost, seed):
        self.bo, self.cost = bo, cost
        self.rng = np.random.default_rng(seed)
        self.pending = {}

    def ask(self):
        busy = np.array(list(self.pending.values())) if self.pending else None
        x = self.bo.suggest(1, self.rng, busy)[0]
        key = object()
        self.pending[key] = x
        return key

    def evaluate(self, key):
        return float(self.cost(self.pending[key][None])[0])

    def tell(self, key, cost):
        self.bo.observe(self.pending.pop(key)[None], [cost])

    def mutated(self, key):
        return False


def simulate(adapter, workers, evals, seed):
    """Costs (None for a failure) in the order the evaluations ended, and the number of mutated
    children among the configurations asked."""
    durations = np.random.default_rng([seed, 12345]).lognormal(0.0, 0.5, size=evals)
    running, started, order, costs, mutated = [], 0, 0, [], 0
    now = 0.0

    def start():
        nonlocal started, mutated, order
        item = adapter.ask()
        mutated += adapter.mutated(item)
        heapq.heappush(running, (now + durations[started], order, item, adapter.evaluate(item)))
        started += 1
        order += 1

    for _ in range(min(workers, evals)):
        start()
    while running:
        now, _, item, cost = heapq.heappop(running)
        adapter.tell(item, cost)
        costs.append(cost)
        if started < evals:
            start()
    return costs, mutated


# ---------------------------------------------------------------- settings
def make_adapter(problem, searcher, seed, options):
    """``searcher``: "bo" (VectorBO alone on box problems, BayesianOptimization over the joint space
    on tabular ones), "agebo" or "age"."""
    if problem in PROBLEMS:
        _, sampler, cost, _ = PROBLEMS[problem]
        return VectorAdapter(VectorBO(sampler, **options.get("bo", {})), cost, seed)
    with_failures = problem == "tabular-fail"
    if searcher == "bo":
        made = BayesianOptimization(SPACE, seed=seed, **options.get("bo", {}))
        return SearcherAdapter(made, lambda c: tabular_cost(c, with_failures))
    failures_in = options.get("failures_in", False)
    population = {"population_size": options["P"], "sample_size": options["S"]}
    if searcher == "agebo":
        cls = AgEBOFailuresIn if failures_in else AgEBO
        made = cls(SPACE, seed=seed, **population, **options.get("bo", {}))
    else:
        cls = AgingEvolutionFailuresIn if failures_in else AgingEvolution
        made = cls(SPACE, seed=seed, **population)
    return SearcherAdapter(made, lambda c: tabular_cost(c, with_failures))


def optimum(problem):
    return PROBLEMS[problem][3] if problem in PROBLEMS else tabular_optimum()


def run_setting(problem, searcher, options, workers, seeds, evals, opt):
    rows = []
    for seed in range(seeds):
        costs, mutated = simulate(make_adapter(problem, searcher, seed, options), workers, evals, seed)
        y = np.array([np.inf if c is None else c for c in costs])
        best = np.minimum.accumulate(y) - opt
        top5 = np.sort(y)[:5].mean() - opt
        rows.append([best[c - 1] for c in CHECKPOINTS if c <= evals] + [top5, mutated, float(np.mean(~np.isfinite(y)))])
    return np.array(rows)


def _quartiles(values):
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return f"{med:.3g} [{q1:.3g}, {q3:.3g}]"


def settings_for(measurement, evals, searchers):
    default_ps = population_for_budget(evals)
    if measurement == "liar":
        lies = [(f"liar={lie}", {"bo": {"liar": lie}}) for lie in ("max", "min", "mean")]
        lies.append(("qucb", {"bo": {"multi_point": "qucb"}}))
        return [(s, name, {**opts, "P": default_ps[0], "S": default_ps[1]}) for s in searchers for name, opts in lies]
    if measurement == "population":
        searchers = [s for s in searchers if s != "bo"]
        sizes = [(100, 10), default_ps, (25, 5), (10, 3)]
        return [(s, f"P={p}, S={k}", {"P": p, "S": k}) for s in searchers for p, k in sizes]
    rules = [("failures out (autodeuq)", False), ("failures in as worst (DeepHyper)", True)]
    return [(s, name, {"P": default_ps[0], "S": default_ps[1], "failures_in": flag})
            for s in searchers for name, flag in rules]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("measurement", choices=("liar", "population", "failures"))
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--evals", type=int, default=100)
    parser.add_argument("--workers", default="2,8,16", help="comma-separated numbers of workers")
    parser.add_argument("--problems", default=None,
                        help="comma-separated; default: liar tabular,mixed; population tabular; "
                             "failures tabular-fail")
    parser.add_argument("--searchers", default=None,
                        help="comma-separated among agebo, age, bo (tabular problems; bo: BayesianOptimization "
                             "over the joint space); box problems use VectorBO")
    parser.add_argument("--candidates", type=int, default=10_000, help="BO acquisition candidates per ask")
    args = parser.parse_args()
    default_problems = {"liar": "tabular,mixed", "population": "tabular", "failures": "tabular-fail"}
    problems = (args.problems or default_problems[args.measurement]).split(",")
    workers = [int(w) for w in args.workers.split(",")]
    searchers = (args.searchers or ("agebo" if args.measurement == "liar" else "agebo,age")).split(",")

    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs; {args.seeds} seeds, {args.evals} evaluations, {args.candidates} "
          "candidates per BO ask, lognormal durations (sigma 0.5).")
    print()
    cols = " | ".join(f"regret @{c}" for c in CHECKPOINTS if c <= args.evals)
    print(f"| problem | searcher | setting | W | {cols} | top-5 regret @{args.evals} | wins @{args.evals} "
          "| mutated | failed | s |")
    print("|---|---|---|---:|" + "---:|" * (len(CHECKPOINTS) + 5))
    baseline = {}  # (problem, searcher, W) -> the first setting's regrets at the end, per seed
    for problem in problems:
        opt = optimum(problem)
        for searcher, name, options in settings_for(args.measurement, args.evals,
                                                    ["bo"] if problem in PROBLEMS else searchers):
            if "bo" in options or searcher in ("agebo", "bo"):
                options = {**options, "bo": {**options.get("bo", {}), "n_candidates": args.candidates}}
            for w in workers:
                tic = time.perf_counter()
                r = run_setting(problem, searcher, options, w, args.seeds, args.evals, opt)
                n = r.shape[1] - 3
                cells = " | ".join(_quartiles(r[:, j]) for j in range(n + 1))
                base = baseline.setdefault((problem, searcher, w), r[:, n - 1])
                wins = f"{int(np.sum(r[:, n - 1] < base))}-{int(np.sum(r[:, n - 1] > base))}"
                print(f"| {problem} | {searcher} | {name} | {w} | {cells} | {wins} | {np.mean(r[:, n + 1]):.1f} | "
                      f"{100 * np.mean(r[:, n + 2]):.0f} % | {time.perf_counter() - tic:.0f} |", flush=True)
    print()
    print("Median [first quartile, third quartile] over seeds. regret: best cost among the first k "
          "evaluations to end, minus the optimum; top-5 regret: mean of the 5 best costs minus the "
          "optimum; wins: seeds where the regret at the end is lower-higher than with the first "
          "setting of the same searcher and W (a seed: the same durations and searcher seed); "
          "mutated: mean number of configurations asked as mutated children (parent_of); "
          "failed: share of evaluations that failed; s: seconds for all seeds.")


if __name__ == "__main__":
    main()
