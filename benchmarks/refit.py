"""Does refitting the selected members on training + validation rows improve the test scores?

For each (dataset, split) the script copies an existing catalog of ``benchmarks/uci.py`` (its
``<dataset>-split<i>-sha`` run directories; the originals are only read), selects the ensemble as
the estimator does (5 distinct members, its default greedy selection, seed = split), and scores on the
split's test rows (a) that ensemble and (b) the same members refitted on the fitting and
validation rows together (:mod:`autodeuq.ensemble.refit`). Scores: mixture NLL, RMSE and the
share of test targets inside the central 90 % interval, as in ``benchmarks/uci.py``.

    python benchmarks/refit.py --runs-dir /work/runs/uci --datasets yacht boston energy concrete --splits 0-2

writes ``benchmarks/results/refit.md`` (and ``refit_raw.json``, one record per split).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from uci import parse_splits, score  # noqa: E402
from uci_data import default_data_dir, load_split  # noqa: E402

from autodeuq.ensemble import Ensemble  # noqa: E402
from autodeuq.ensemble.refit import refit  # noqa: E402

KEYS = ("nll", "rmse", "coverage_90")


def copy_catalog(source: Path, into: Path) -> Path:
    """A private copy of a run directory (without its lock file), so the original is never written."""
    target = into / source.name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("catalog.lock", "ensemble.json", "*.png",
                                                                  "metrics.json", "ensemble_refit"))
    return target


def run_split(runs_dir: Path, data_dir: Path, dataset: str, split: int, size: int, scratch: Path) -> dict:
    data = load_split(data_dir, dataset, split)
    run_dir = copy_catalog(runs_dir / f"{dataset}-split{split}-sha", scratch)
    ensemble = Ensemble.from_catalog(run_dir, size=size, seed=split)
    record = {"dataset": dataset, "split": split, "members": ensemble.member_ids, **data.sizes}
    record["selected"] = score(*ensemble.components(data.x_test), ensemble.weights, data.y_test)
    started = time.perf_counter()
    refitted = refit(ensemble, np.vstack([data.x_fit, data.x_valid]), np.vstack([data.y_fit, data.y_valid]),
                     threads=None)
    record["refit_s"] = time.perf_counter() - started
    record["refit_epochs"] = refitted.selection["refit"]["epochs"]
    record["refitted"] = score(*refitted.components(data.x_test), refitted.weights, data.y_test)
    return record


def report(records: list[dict], command: str) -> str:
    lines = [
        "# Refit of the selected members on training + validation rows",
        "",
        "Test scores of the same ensemble (5 distinct members, the default greedy selection, seed = split) before",
        "and after refitting each member on the fitting and validation rows together, for the epochs of its",
        "best validation loss with its recorded learning rates (`--refit`). Catalogs: the 100-evaluation AgEBO",
        "searches with successive halving of `benchmarks/uci.py` (copied, never written). A refitted network",
        "that fits the refit rows worse than the original member is replaced by the original (column `kept`:",
        "members kept as they were). Lower NLL/RMSE is better; coverage_90 should be near 0.90.",
        "",
        f"Command (2-core shared dev machine): `{command}`",
        "",
        "| dataset | split | n fit+valid | NLL selected | NLL refit | RMSE selected | RMSE refit "
        "| cov90 selected | cov90 refit | kept | refit s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        s, f = r["selected"], r["refitted"]
        lines.append(f"| {r['dataset']} | {r['split']} | {r['n_fit'] + r['n_valid']} | {s['nll']:.3f} | {f['nll']:.3f} "
                     f"| {s['rmse']:.3f} | {f['rmse']:.3f} | {s['coverage_90']:.2f} | {f['coverage_90']:.2f} "
                     f"| {len(r['members']) - len(r['refit_epochs'])} | {r['refit_s']:.0f} |")
    lines += ["", "| dataset | splits | mean NLL change (refit - selected) | refit better (NLL) | mean RMSE change |",
              "|---|---|---|---|---|"]
    for dataset in dict.fromkeys(r["dataset"] for r in records):
        rs = [r for r in records if r["dataset"] == dataset]
        d_nll = [r["refitted"]["nll"] - r["selected"]["nll"] for r in rs]
        d_rmse = [r["refitted"]["rmse"] - r["selected"]["rmse"] for r in rs]
        lines.append(f"| {dataset} | {len(rs)} | {np.mean(d_nll):+.3f} | {sum(d < 0 for d in d_nll)} of {len(rs)} "
                     f"| {np.mean(d_rmse):+.3f} |")
    d_all = [r["refitted"]["nll"] - r["selected"]["nll"] for r in records]
    lines += ["", f"Over all {len(records)} splits: mean NLL change {np.mean(d_all):+.3f}, refit better on "
                  f"{sum(d < 0 for d in d_all)} of {len(records)}.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs-dir", type=Path,
                   help="folder of the <dataset>-split<i>-sha catalogs (required unless --report)")
    p.add_argument("--data-dir", type=Path, default=default_data_dir(ROOT))
    p.add_argument("--datasets", nargs="+", default=["yacht", "boston", "energy", "concrete"])
    p.add_argument("--splits", type=parse_splits, default=[0, 1, 2])
    p.add_argument("--size", type=int, default=5)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "refit.md")
    p.add_argument("--report", metavar="COMMAND",
                   help="only rewrite the report from refit_raw.json, quoting COMMAND as the one that made it")
    args = p.parse_args(argv)
    raw = args.out.with_name(args.out.stem + "_raw.json")
    if args.report:
        args.out.write_text(report(json.loads(raw.read_text()), args.report))
        return 0
    if args.runs_dir is None:
        p.error("--runs-dir is required")
    command = "python benchmarks/refit.py " + " ".join(sys.argv[1:] if argv is None else argv)
    records = []
    with tempfile.TemporaryDirectory(prefix="autodeuq-refit-") as scratch:
        for dataset in args.datasets:
            for split in args.splits:
                if not (args.runs_dir / f"{dataset}-split{split}-sha").is_dir():
                    print(f"{dataset} split {split}: no catalog, skipped", flush=True)
                    continue
                record = run_split(args.runs_dir, args.data_dir, dataset, split, args.size, Path(scratch))
                records.append(record)
                before, after = record["selected"], record["refitted"]
                print(f"{dataset} split {split}: NLL {before['nll']:.3f} -> {after['nll']:.3f}, "
                      f"RMSE {before['rmse']:.3f} -> {after['rmse']:.3f} "
                      f"({record['refit_s']:.0f} s)", flush=True)
    raw.write_text(json.dumps(records, indent=1))
    args.out.write_text(report(records, command))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
