"""The uncertainty a saved toy-sine ensemble recovers, region by region.

For each ensemble manifest (``DIR/ensemble.json`` of ``autodeuq run --dataset toy-sine``, i.e.
the estimator's defaults, refit included) prints one markdown row: aleatoric std on the two
training regions (truth 0.5 on [-30, -20] and 1.0 on [20, 30]), epistemic std on the training
regions, in the gap [-15, 15] and beyond +-32 (with their ratios to the training-region value),
the test NLL on the noiseless grid, the members and their effective number, and how many networks
of the run's catalog learned the sine at all (see :func:`fitted_networks`).

    for s in 0 1 2; do autodeuq run --dataset toy-sine --space toy --max-evals 100 --seed $s \\
        --run-dir runs/toy/seed$s --workers 2 --no-progress; done
    python benchmarks/toy_uncertainty.py runs/toy/seed0 runs/toy/seed1 runs/toy/seed2
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from autodeuq import metrics
from autodeuq.catalog import Catalog
from autodeuq.catalog.folds import is_fold_id
from autodeuq.ensemble import load_ensemble
from autodeuq.tasks import RegressionTask

FIT_MARGIN = 0.5  # nats below predicting the validation targets' mean and variance

HEADER = ("| run | aleatoric [-30,-20] | aleatoric [20,30] | epistemic train | epistemic gap | gap / train "
          "| epistemic beyond | beyond / train | test NLL | members | effective size | networks that fit |")


def fitted_networks(run_dir: Path) -> tuple[int, int]:
    """(networks that fit the data, networks) in the run's catalog.

    A network fits when its validation NLL (data units) is at least :data:`FIT_MARGIN` nats below
    that of the constant Gaussian with the validation targets' own mean and variance. On toy-sine
    that constant scores about 1.9; a network that predicts each region's variance but not the
    sine scores about the same (1.88), and one that follows the sine about 1.1.
    """
    with Catalog(run_dir) as catalog:
        y = catalog.validation_targets()
        offset = catalog.nll_offset
        nll = np.array([catalog.entry(i)["objective"] + offset for i in catalog.model_ids()])
    return int(np.sum(nll < RegressionTask().constant_nll(y) - FIT_MARGIN)), len(nll)


def measures(run_dir: Path) -> dict:
    """The numbers of a run directory's ``ensemble.json`` (or of a manifest given by its path): the
    row's columns, and the effective size over configurations as well as over networks (a
    cross-fitted ensemble's members are each configuration's fold networks)."""
    ens = load_ensemble(run_dir if run_dir.suffix == ".json" else run_dir / "ensemble.json")
    grid = np.linspace(-40, 40, 801)[:, None]
    means, variances = ens.components(grid)
    _, ale, epi = metrics.mixture_moments(means, variances, ens.weights)
    x, ale_std, epi_std = grid[:, 0], np.sqrt(ale[:, 0]), np.sqrt(epi[:, 0])
    left, right = (x >= -30) & (x <= -20), (x >= 20) & (x <= 30)
    train, gap, beyond = left | right, np.abs(x) <= 15, np.abs(x) > 32
    base = epi_std[train].mean()
    fitted, total = fitted_networks(ens.run_dir)
    weights = np.asarray(ens.weights, dtype=float)
    with Catalog(ens.run_dir) as catalog:
        configs = [catalog.fold_entry(i)["entry"] if is_fold_id(i) else i for i in ens.member_ids]
    per_config: dict[int, float] = {}
    for config, w in zip(configs, weights):
        per_config[int(config)] = per_config.get(int(config), 0.0) + float(w)
    return {"aleatoric_left": float(ale_std[left].mean()), "aleatoric_right": float(ale_std[right].mean()),
            "epistemic_train": float(base), "epistemic_gap": float(epi_std[gap].mean()),
            "gap_ratio": float(epi_std[gap].mean() / base), "epistemic_beyond": float(epi_std[beyond].mean()),
            "beyond_ratio": float(epi_std[beyond].mean() / base),
            "test_nll": float(metrics.mixture_nll(means, variances, ens.weights, 2 * np.sin(grid)).mean()),
            "members": len(ens.member_ids), "effective_size": float(1 / np.sum(weights**2)),
            "configurations": len(per_config),
            "effective_configurations": float(1 / np.sum(np.square(list(per_config.values())))),
            "fitted_networks": fitted, "networks": total}


def row(run_dir: Path) -> str:
    """The markdown row of :func:`measures`."""
    m = measures(run_dir)
    return (f"| {run_dir} | {m['aleatoric_left']:.3f} | {m['aleatoric_right']:.3f} | {m['epistemic_train']:.3f} "
            f"| {m['epistemic_gap']:.3f} | {m['gap_ratio']:.1f}x | {m['epistemic_beyond']:.3f} "
            f"| {m['beyond_ratio']:.1f}x | {m['test_nll']:.2f} | {m['members']} "
            f"| {m['effective_size']:.2f} | {m['fitted_networks']} of {m['networks']} |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories holding ensemble.json, or manifests")
    args = p.parse_args(argv)
    print(HEADER)
    print("|---" * 12 + "|")
    for run in args.runs:
        print(row(run), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
