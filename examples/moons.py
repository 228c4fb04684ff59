"""The 2-D classification example: where an ensemble of classifiers is unsure, and why.

Runs ``autodeuq run --dataset moons`` for each ``--seeds`` (a catalog per seed under
``--runs-dir``, resumed when it exists), then measures, on a 200 x 200 grid over the plane
around the data, the two parts of the ensemble's entropy in two regions:

* *near the data*: grid points within 0.15 of a training point; there the aleatoric entropy
  should be high along the boundary between the classes (where the two moons overlap) and the
  epistemic part low (the members agree where they were trained);
* *away from the data*: grid points farther than 1.0 from every training point; there the
  epistemic part (the members' disagreement) should be higher than near the data.

For each ensemble it prints the mean aleatoric entropy near the data on the boundary (grid points
near the data whose ensemble probability of either class is between 0.2 and 0.8) and elsewhere
near the data, the mean epistemic part near and away from the data, and the share of the plane
away from the data where the epistemic part exceeds 0.1 nats. ``--selector`` re-selects each
catalog with another selector too (``autodeuq ensemble --selector ...``, written under
``<run>/<selector>/``).

Usage (from the repository root)::

    python examples/moons.py --seeds 0 1 2 --selector greedy-noreplace --markdown examples/results/moons_table.md
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
NEAR, FAR, BOUNDARY = 0.15, 1.0, (0.2, 0.8)


def regions(ensemble, x_train):
    from scipy.spatial import cKDTree

    lo, hi = x_train.min(axis=0), x_train.max(axis=0)
    pad = 0.5 * (hi - lo)
    xx, yy = np.meshgrid(np.linspace(lo[0] - pad[0], hi[0] + pad[0], 200),
                         np.linspace(lo[1] - pad[1], hi[1] + pad[1], 200))
    grid = np.column_stack([xx.ravel(), yy.ravel()])
    value = ensemble.predict(grid, encoded=True)
    distance = cKDTree(x_train).query(grid)[0]
    near, far = distance < NEAR, distance > FAR
    boundary = near & (value.proba.max(axis=1) < BOUNDARY[1])
    return {
        "aleatoric_boundary": float(value.aleatoric_entropy[boundary].mean()),
        "aleatoric_near_elsewhere": float(value.aleatoric_entropy[near & ~boundary].mean()),
        "epistemic_near": float(value.epistemic_mi[near].mean()),
        "epistemic_far": float(value.epistemic_mi[far].mean()),
        "far_share_above_0.1": float(np.mean(value.epistemic_mi[far] > 0.1)),
    }


def run(args_list):
    subprocess.run([sys.executable, "-m", "autodeuq", *args_list], check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--runs-dir", type=Path, default=Path("runs"))
    p.add_argument("--selector", default=None, help="also re-select each catalog with this selector")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--markdown", type=Path, default=None)
    args = p.parse_args(argv)
    from autodeuq.catalog import Catalog
    from autodeuq.ensemble import load_ensemble

    lines = ["| seed | selector | effective size | test log loss | aleatoric, boundary | aleatoric, elsewhere near "
             "| epistemic, near | epistemic, away | away with epistemic > 0.1 |", "|---" * 9 + "|"]
    for seed in args.seeds:
        run_dir = args.runs_dir / f"moons_s{seed}"
        if not (run_dir / "ensemble.json").exists():
            run(["run", "--dataset", "moons", "--seed", str(seed), "--run-dir", str(run_dir),
                 "--workers", str(args.workers), "--no-progress"])
        manifests = [("greedy", run_dir / "ensemble.json")]
        if args.selector:
            out = run_dir / args.selector / "ensemble.json"
            if not out.exists():
                run(["ensemble", "--run-dir", str(run_dir), "--selector", args.selector, "--out", str(out)])
            manifests.append((args.selector, out))
        with Catalog(run_dir) as catalog:
            x_train = catalog.training_data()[0]
        import json

        for selector, manifest in manifests:
            ensemble = load_ensemble(manifest)
            metrics = json.loads((manifest.parent / "metrics.json").read_text())
            r = regions(ensemble, x_train)
            lines.append(f"| {seed} | {selector} | {ensemble.selection['effective_size']:.2f} | "
                         f"{metrics['test']['log_loss']:.3f} | {r['aleatoric_boundary']:.3f} | "
                         f"{r['aleatoric_near_elsewhere']:.3f} | {r['epistemic_near']:.3f} | "
                         f"{r['epistemic_far']:.3f} | {r['far_share_above_0.1']:.2f} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
