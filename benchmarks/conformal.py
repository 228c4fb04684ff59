"""Test coverage of the conformal and the mixture's intervals on the built-in regression tables.

Runs ``autodeuq run`` (CLI defaults but a small budget) on each built-in regression table for
several seeds and reads each run's ``metrics.json``: the test coverage of the 50/90/95 %
intervals of the mixture (``coverage_*``), of the moment-matched Gaussian
(``coverage_gaussian_*``) and conformal (``coverage_conformal_*``), and the test NLL. Prints a
markdown table of the means over seeds (and each seed's 90 % coverages).

    python benchmarks/conformal.py --out /tmp/conformal --seeds 1 2 3 4 5 --max-evals 12

``--quantiles MANIFEST_NAME`` then prints, per table and seed, the 90 % quantile of the normalized
scores ``|y - mean| / std``: the conformal one (held-out selections of the validation rows), the
saved ensemble's own on the validation rows, and its own on the test rows (e.g.
``--quantiles norefit/ensemble.json`` after ``autodeuq ensemble --no-refit --out RUN/norefit/ensemble.json``).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

LEVELS = (50, 90, 95)


def run(dataset: str, seed: int, out: Path, max_evals: int) -> dict:
    run_dir = out / f"{dataset}-{seed}"
    if not (run_dir / "metrics.json").is_file():
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "autodeuq", "run", "--dataset", dataset, "--evaluator", "serial",
                        "--max-evals", str(max_evals), "--seed", str(seed), "--run-dir", str(run_dir),
                        "--no-progress"], check=True, capture_output=True)
        (run_dir / "seconds.txt").write_text(f"{time.monotonic() - started:.1f}")
    document = json.loads((run_dir / "metrics.json").read_text())
    test = document["test"]
    conformal = json.loads((run_dir / "ensemble.json").read_text()).get("conformal", {})
    record = {"dataset": dataset, "seed": seed, "nll": test["nll"]["mean"], "n_valid": conformal.get("n")}
    for level in LEVELS:
        for kind in ("", "gaussian_", "conformal_"):
            record[f"coverage_{kind}{level}"] = test[f"coverage_{kind}{level}"]["mean"]
    return record


def table(records: list[dict]) -> str:
    lines = ["| dataset | seeds | validation rows | test NLL | " + " | ".join(
        f"{level} % mixture | Gaussian | conformal" for level in LEVELS) + " |", "|---" * (4 + 3 * len(LEVELS)) + "|"]
    for dataset in dict.fromkeys(r["dataset"] for r in records):
        rows = [r for r in records if r["dataset"] == dataset]
        cells = [dataset, str(len(rows)), str(rows[0]["n_valid"]), f"{np.mean([r['nll'] for r in rows]):.3f}"]
        for level in LEVELS:
            cells += [f"{np.mean([r[f'coverage_{kind}{level}'] for r in rows]):.3f}"
                      for kind in ("", "gaussian_", "conformal_")]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Per seed, 90 % (mixture / conformal): " + "; ".join(
        f"{r['dataset']} {r['seed']}: {r['coverage_90']:.3f} / {r['coverage_conformal_90']:.3f}" for r in records))
    return "\n".join(lines)


def quantiles(out: Path, datasets, seeds, manifest: str) -> str:
    """The 90 % quantiles of the normalized scores: conformal (held-out), on validation, on test."""
    import warnings

    from autodeuq.ensemble import conformal, load_ensemble

    lines = []
    for dataset in datasets:
        held, valid, test = [], [], []
        for seed in seeds:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ens = load_ensemble(out / f"{dataset}-{seed}" / manifest, engine="tensorflow")
                x, y = ens.catalog.test_data()
                predicted = ens.predict(x, encoded=True)
            _, means, variances = ens.catalog.validation_predictions(ens.member_ids)
            own = ens.without_refit().mixture(means, variances) if ens.refitted_ids else ens.mixture(means, variances)
            held.append(conformal.quantile(ens.conformal, 0.9)[0])
            valid.append(np.quantile(np.abs(ens.catalog.validation_targets() - own.mean) / own.std, 0.9))
            test.append(np.quantile(np.abs(y - predicted.mean) / predicted.std, 0.9))
        lines.append(f"{dataset}: held-out selections {np.round(held, 2).tolist()} (mean {np.mean(held):.2f}); "
                     f"the ensemble on validation {np.round(valid, 2).tolist()} (mean {np.mean(valid):.2f}); "
                     f"on test {np.round(test, 2).tolist()} (mean {np.mean(test):.2f})")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of the runs (a run already there is read)")
    parser.add_argument("--datasets", nargs="+", default=["boston", "concrete"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--max-evals", type=int, default=12)
    parser.add_argument("--quantiles", metavar="MANIFEST_NAME", default=None,
                        help="print the 90 %% quantiles of the normalized scores of the runs' ensembles saved there")
    args = parser.parse_args(argv)
    if args.quantiles:
        print(quantiles(args.out, args.datasets, args.seeds, args.quantiles))
        return
    records = [run(d, s, args.out, args.max_evals) for d in args.datasets for s in args.seeds]
    print(table(records))


if __name__ == "__main__":
    main()
