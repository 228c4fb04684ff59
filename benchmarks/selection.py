"""Ensemble selection study: which selection keeps an honest epistemic part and the best test NLL.

Every variant selects from the same catalogs, on the same cached validation predictions, so
differences come from the selection alone. Ensemble size K = 5; "greedy" is Caruana et al.'s (2004)
greedy selection with replacement on the exact mixture NLL.

- ``greedy-early``: greedy, stopping when no addition improves the validation NLL (the rule of
  the original method);
- ``greedy-k``: the same, continued to K distinct members (each non-improving step adds the best
  model not yet in the ensemble; Zaidi et al. 2021) -- the default;
- ``greedy-k-bag``: ``greedy-k`` repeated on 10 random halves of the validation rows, weights
  summed (bagged ensemble selection, Caruana et al. 2006);
- ``noreplace-k``: greedy without replacement to K members, uniform weights;
- ``greedy-k-em``, ``-em05``, ``-em10``: the members of ``greedy-k``, weights refitted to the
  maximum of the validation mixture likelihood (EM), each at least 0, 1/(4K) or 1/(2K);
- ``greedy-k-shrink``: the weights of ``greedy-k`` halfway to uniform (each >= 1/(2K));
- ``greedy-k-bag-em10``: the members of ``greedy-k-bag``, EM weights >= 1/(2K);
- ``holdout-em05`` / ``holdout-em10``: 10 times, ``greedy-k`` on a random half of the rows and EM
  weights (>= 1/(4K) / 1/(2K)) on the other half; weights summed, the K heaviest kept;
- ``crossfit-em05`` / ``crossfit-em10``: the same on the two halves of one split, each half
  selecting once and weighting once;
- ``stack-em05`` / ``stack-em10``: EM weights over the whole catalog (stacking of predictive
  distributions, Yao et al. 2018), the K heaviest models kept, their weights refitted (>= 1/(4K)
  / 1/(2K)).

Catalogs: toy-sine AgEBO runs (``--toy-seeds``; made here when missing) and the standard UCI
splits searched by ``benchmarks/uci.py`` (``--uci-runs``; ``--uci-method`` picks whose).

    python benchmarks/selection.py --toy-seeds 0 1 --uci boston concrete energy yacht --splits 0-4
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from autodeuq import metrics  # noqa: E402
from autodeuq.catalog import Catalog  # noqa: E402
from autodeuq.ensemble import Ensemble  # noqa: E402
from autodeuq.ensemble.selection import fit_weights, select, select_bagged  # noqa: E402

SIZE = 5
BAGS = 10


def _greedy(stop="size"):
    return lambda m, v, y, k: tuple(select(m, v, y, k, stop=stop))


def _bagged(m, v, y, k):
    return tuple(select_bagged(m, v, y, k, bags=BAGS))


def _refit(base, floor):
    """The members of ``base``, their weights refitted by EM, each >= floor / K."""
    def variant(m, v, y, k):
        idx, _ = base(m, v, y, k)
        return idx, fit_weights(m[idx], v[idx], y, floor / len(idx))
    return variant


def _shrink(m, v, y, k):
    idx, w = select(m, v, y, k)
    return idx, 0.5 * w + 0.5 / len(idx)


def _heaviest(totals, k):
    ranked = np.argsort(-totals, kind="stable")
    ranked = ranked[totals[ranked] > 0][:k]
    return ranked, totals[ranked] / totals[ranked].sum()


def _select_then_weigh(m, v, y, k, choose, weigh, floor):
    idx = select(m[:, choose], v[:, choose], y[choose], k).indices
    return idx, fit_weights(m[idx][:, weigh], v[idx][:, weigh], y[weigh], floor / len(idx))


def _holdout(floor, bags=BAGS, seed=0):
    """Select on a random half of the rows, weigh on the other half; ``bags`` times, summed."""
    def variant(m, v, y, k):
        rng, totals, n = np.random.default_rng(seed), np.zeros(m.shape[0]), len(y)
        for _ in range(bags):
            perm = rng.permutation(n)
            idx, w = _select_then_weigh(m, v, y, k, np.sort(perm[: n // 2]), np.sort(perm[n // 2:]), floor)
            totals[idx] += w
        return _heaviest(totals, k)
    return variant


def _crossfit(floor, seed=0):
    """Two halves of the rows: each selects once and weighs the other's selection once."""
    def variant(m, v, y, k):
        perm = np.random.default_rng(seed).permutation(len(y))
        halves, totals = (np.sort(perm[: len(y) // 2]), np.sort(perm[len(y) // 2:])), np.zeros(m.shape[0])
        for choose, weigh in (halves, halves[::-1]):
            idx, w = _select_then_weigh(m, v, y, k, choose, weigh, floor)
            totals[idx] += w
        return _heaviest(totals, k)
    return variant


def _stack(floor):
    """EM weights over every usable model, the K heaviest kept and reweighted (Yao et al. 2018)."""
    def variant(m, v, y, k):
        with np.errstate(all="ignore"):
            usable = np.flatnonzero(np.all(np.isfinite(m) & np.isfinite(v) & (v > 0), axis=(1, 2)))
        w = fit_weights(m[usable], v[usable], y, 0.0, tol=1e-10, max_iter=3000)
        idx = usable[np.argsort(-w, kind="stable")[:k]]
        return idx, fit_weights(m[idx], v[idx], y, floor / len(idx))
    return variant


VARIANTS = {
    "greedy-early": _greedy("improvement"),
    "greedy-k": _greedy(),
    "greedy-k-bag": _bagged,
    "noreplace-k": lambda m, v, y, k: tuple(select(m, v, y, k, selector="greedy-noreplace")),
    "greedy-k-em": _refit(_greedy(), 0.0),
    "greedy-k-em05": _refit(_greedy(), 0.25),
    "greedy-k-em10": _refit(_greedy(), 0.5),
    "greedy-k-shrink": _shrink,
    "greedy-k-bag-em10": _refit(_bagged, 0.5),
    "holdout-em05": _holdout(0.25),
    "holdout-em10": _holdout(0.5),
    "crossfit-em05": _crossfit(0.25),
    "crossfit-em10": _crossfit(0.5),
    "stack-em05": _stack(0.25),
    "stack-em10": _stack(0.5),
}


def parse_splits(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(t) for t in text.split(",")]


def build_variants(run_dir: Path) -> dict[str, Ensemble]:
    """Every variant's ensemble, selected on the catalog's cached validation predictions."""
    catalog = Catalog(run_dir)
    ids, means, variances = catalog.validation_predictions(catalog.model_ids())
    y = catalog.validation_targets()
    out = {}
    for name, variant in VARIANTS.items():
        indices, weights = variant(means, variances, y, SIZE)
        out[name] = Ensemble(run_dir, [ids[i] for i in indices], weights)
    return out


def member_table(ensembles: dict[str, Ensemble], x) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Every member's test predictions, each model loaded once whatever the number of variants."""
    first = next(iter(ensembles.values()))
    ids = sorted({i for ens in ensembles.values() for i in ens.member_ids})
    union = Ensemble(first.run_dir, ids, np.full(len(ids), 1.0 / len(ids)))
    means, variances = union.member_predictions(x)
    return {i: (means[k], variances[k]) for k, i in enumerate(ids)}


def components(ens: Ensemble, table) -> tuple[np.ndarray, np.ndarray]:
    means = np.stack([table[i][0] for i in ens.member_ids])
    variances = np.stack([table[i][1] for i in ens.member_ids])
    return means, variances


def describe(ens: Ensemble) -> dict:
    return {"members": len(ens.member_ids), "effective_size": float(1 / np.sum(ens.weights**2)),
            "max_weight": float(ens.weights.max())}


def score_tabular(ens, table, y) -> dict:
    means, variances = components(ens, table)
    mean, _, _ = metrics.mixture_moments(means, variances, ens.weights)
    return {
        "nll": float(metrics.mixture_nll(means, variances, ens.weights, y).mean()),
        "rmse": float(metrics.rmse(y, mean).mean()),
        "coverage_90": float(metrics.coverage(means, variances, ens.weights, y, 0.9).mean()),
        **describe(ens),
    }


def score_toy(ens, table, grid) -> dict:
    means, variances = components(ens, table)
    mean, ale, epi = metrics.mixture_moments(means, variances, ens.weights)
    x = grid[:, 0]
    train = ((x >= -30) & (x <= -20)) | ((x >= 20) & (x <= 30))
    gap = (x >= -15) & (x <= 15)
    beyond = np.abs(x) > 32
    epi_std = np.sqrt(epi[:, 0])
    ale_std = np.sqrt(ale[:, 0])
    return {
        "nll": float(metrics.mixture_nll(means, variances, ens.weights, 2 * np.sin(grid)).mean()),
        "aleatoric left": float(ale_std[(x >= -30) & (x <= -20)].mean()),
        "aleatoric right": float(ale_std[(x >= 20) & (x <= 30)].mean()),
        "epistemic train": float(epi_std[train].mean()),
        "epistemic gap": float(epi_std[gap].mean()),
        "epistemic beyond": float(epi_std[beyond].mean()),
        **describe(ens),
    }


def draw_toy(ens: Ensemble, table, grid, run_dir: Path, path: Path, evals: int) -> None:
    from autodeuq.app import plots
    from autodeuq.catalog import Catalog
    from autodeuq.ensemble import UncertaintyPrediction

    means, variances = components(ens, table)
    mean, ale, epi = metrics.mixture_moments(means, variances, ens.weights)
    prediction = UncertaintyPrediction(mean, ale, epi, ale + epi, np.sqrt(ale + epi))
    x_train, y_train = Catalog(run_dir).training_data()
    path.parent.mkdir(parents=True, exist_ok=True)
    plots.plot_uncertainty_1d(grid, prediction, path, x_train=x_train, y_train=y_train, y_true=2 * np.sin(grid),
                              title=f"toy-sine, AgEBO, {evals} evaluations, ensemble of {len(ens.member_ids)}")


def toy_catalog(seed: int, runs: Path, max_evals: int, epochs: int | None = None) -> Path:
    from autodeuq.app.options import SearchConfig, configure
    from autodeuq.app.pipeline import fill_catalog
    from autodeuq.search.space import load_space
    from autodeuq.table.data import toy_sine

    run_dir = runs / f"toy-seed{seed}"
    space, data = load_space("toy"), toy_sine(seed=seed)
    config = configure(SearchConfig, search="agebo", max_evals=max_evals, seed=seed, epochs=epochs, progress=False)
    fill_catalog(space, data, run_dir, config).raise_for_error()
    return run_dir


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--toy-seeds", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--toy-evals", type=int, default=100)
    p.add_argument("--toy-epochs", type=int, default=None, help="override the toy space's epochs (smoke tests)")
    p.add_argument("--toy-runs", default="runs/selection")
    p.add_argument("--uci", nargs="*", default=["boston", "concrete", "energy", "yacht"])
    p.add_argument("--splits", default="0-4")
    p.add_argument("--uci-runs", default="runs/uci", help="catalogs of benchmarks/uci.py --methods autodeuq")
    p.add_argument("--uci-method", default="autodeuq", choices=["autodeuq", "autodeuq-sha"],
                   help="whose catalogs: autodeuq (<dataset>-split<i>) or autodeuq-sha (<dataset>-split<i>-sha)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--raw", default="benchmarks/results/selection_raw.json")
    p.add_argument("--figure-variant", default="greedy-k",
                   help="variant whose toy-sine ensemble (first seed) is drawn (default: greedy-k, the default)")
    p.add_argument("--figure", default="examples/results/toy_sine_agebo_100.png")
    args = p.parse_args(argv)

    raw_path = Path(args.raw)
    rows = json.loads(raw_path.read_text()) if raw_path.exists() else []
    done = {(r["problem"], r["split"]) for r in rows}

    def save():
        raw_path.parent.mkdir(parents=True, exist_ok=True)
        raw_path.write_text(json.dumps(rows, indent=1))

    grid = np.linspace(-40, 40, 400)[:, None]
    for seed in args.toy_seeds:
        if ("toy-sine", seed) in done:
            continue
        started = time.time()
        run_dir = toy_catalog(seed, Path(args.toy_runs), args.toy_evals, args.toy_epochs)
        ensembles = build_variants(run_dir)
        table = member_table(ensembles, grid)
        for name, ens in ensembles.items():
            rows.append({"problem": "toy-sine", "split": seed, "variant": name, **score_toy(ens, table, grid)})
        if seed == args.toy_seeds[0] and args.figure:
            draw_toy(ensembles[args.figure_variant], table, grid, run_dir, Path(args.figure), args.toy_evals)
        print(f"toy-sine seed {seed}: {time.time() - started:.0f} s", flush=True)
        save()

    if args.uci:
        import uci_data

        data_dir = Path(args.data_dir) if args.data_dir else uci_data.default_data_dir(ROOT)
        for name in args.uci:
            for split in parse_splits(args.splits):
                suffix = "-sha" if args.uci_method == "autodeuq-sha" else ""
                run_dir = Path(args.uci_runs) / f"{name}-split{split}{suffix}"
                if (name, split) in done or not (run_dir / "catalog.sqlite").exists():
                    continue
                data = uci_data.load_split(data_dir, name, split)
                ensembles = build_variants(run_dir)
                table = member_table(ensembles, data.x_test)
                for variant, ens in ensembles.items():
                    rows.append({"problem": name, "split": split, "variant": variant,
                                 **score_tabular(ens, table, data.y_test)})
                print(f"{name} split {split}: scored", flush=True)
                save()
    print(report(rows, " ".join(sys.argv[1:] if argv is None else argv)))


def _mean_se(values) -> str:
    values = np.asarray(values, dtype=float)
    se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
    return f"{values.mean():.3f} ± {se:.3f}"


TOY_COLUMNS = ("nll", "aleatoric left", "aleatoric right", "epistemic train", "epistemic gap", "epistemic beyond",
               "members", "effective_size", "max_weight")
TABULAR_COLUMNS = ("nll", "rmse", "coverage_90", "members", "effective_size", "max_weight")


def report(rows, command: str) -> str:
    """Markdown tables, mean ± standard error over seeds/splits of every column."""
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    problems = list(dict.fromkeys(r["problem"] for r in rows))
    lines = [f"Command: `python benchmarks/selection.py {command}`; machine: 2-core {platform.machine()} CPU "
             f"dev machine."]
    for problem in problems:
        columns = TOY_COLUMNS if problem == "toy-sine" else TABULAR_COLUMNS
        n = len({r["split"] for r in rows if r["problem"] == problem})
        lines += ["", f"### {problem} ({n} {'seeds' if problem == 'toy-sine' else 'splits'})", "",
                  "| variant | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
        for variant in variants:
            sel = [r for r in rows if r["problem"] == problem and r["variant"] == variant]
            if sel:
                cells = [_mean_se([np.nan if r[c] is None else r[c] for r in sel]) for c in columns]
                lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
