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
from autodeuq.ensemble import load_ensemble
from autodeuq.ensemble.refit import _constant_nll

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
    return int(np.sum(nll < _constant_nll(y) - FIT_MARGIN)), len(nll)


def row(run_dir: Path) -> str:
    """The row of a run directory's ``ensemble.json``, or of a manifest given by its path."""
    ens = load_ensemble(run_dir if run_dir.suffix == ".json" else run_dir / "ensemble.json")
    shown, run_dir = run_dir, ens.run_dir
    grid = np.linspace(-40, 40, 801)[:, None]
    means, variances = ens.components(grid)
    _, ale, epi = metrics.mixture_moments(means, variances, ens.weights)
    x, ale_std, epi_std = grid[:, 0], np.sqrt(ale[:, 0]), np.sqrt(epi[:, 0])
    left, right = (x >= -30) & (x <= -20), (x >= 20) & (x <= 30)
    train, gap, beyond = left | right, np.abs(x) <= 15, np.abs(x) > 32
    base = epi_std[train].mean()
    fitted, total = fitted_networks(run_dir)
    nll = metrics.mixture_nll(means, variances, ens.weights, 2 * np.sin(grid)).mean()
    return (f"| {shown} | {ale_std[left].mean():.3f} | {ale_std[right].mean():.3f} | {base:.3f} "
            f"| {epi_std[gap].mean():.3f} | {epi_std[gap].mean() / base:.1f}x | {epi_std[beyond].mean():.3f} "
            f"| {epi_std[beyond].mean() / base:.1f}x | {nll:.2f} | {len(ens.member_ids)} "
            f"| {1 / np.sum(np.asarray(ens.weights) ** 2):.2f} | {fitted} of {total} |")


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
