"""Where a UCI split's test NLL comes from: the Gaussian NLL of each test row under AutoDEUQ's
ensemble, and how much of the split's mean its worst rows carry.

    python benchmarks/uci_tails.py --runs-dir RUNS_DIR --datasets energy concrete --splits 0-4 \\
        [--method autodeuq-auto] [--data-dir DATA_DIR] [--json FILE]

For each dataset and split, the catalog that ``benchmarks/uci.py`` searched with ``--method``
(``autodeuq`` by default: ``RUNS_DIR/<dataset>-split<i>``; ``autodeuq-auto``: ``...-auto``; complete) is
copied to a temporary folder and the ensemble step is redone there as ``uci.py`` does it (same
estimator, same settings; nothing is searched). The refit
retrains the members, so a split's NLL differs from its record by the refit's randomness.

The measure is the one of the published results: the NLL of one Gaussian with the ensemble's mean
and total variance (moment matching), per test row, original units. A table in Markdown: the mean,
the share of the mean carried by the worst row, the mean without the worst row and without the
three worst, the median row, the share of rows more than 3 standard deviations off (0.27 % under a
Gaussian), and the worst row's error in standard deviations.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from anywhere: import the checkout's packages
    sys.path.insert(0, str(REPO))

from autodeuq import metrics  # noqa: E402
from benchmarks.uci import EARLY_DISCARDING, OURS, RUNNERS, catalog_name, parse_splits  # noqa: E402
from benchmarks.uci import build_parser as uci_parser  # noqa: E402
from benchmarks.uci_data import DATASETS, default_data_dir, load_split  # noqa: E402

#: Share of a Gaussian's mass more than 3 standard deviations from its mean.
GAUSSIAN_BEYOND_3 = 0.0027


def tail_summary(y, mean, var) -> dict:
    """How much of the mean Gaussian NLL of ``y`` under N(``mean``, ``var``) its worst rows carry.

    Returns ``nll`` (mean over rows), ``worst_share`` (the worst row's NLL / n, its part of the
    mean), ``nll_without_1`` and ``nll_without_3`` (the mean without the 1 or 3 worst rows),
    ``median``, ``beyond_3`` (share of rows with |y - mean| > 3 std) and ``worst_z`` (the worst
    row's signed error in standard deviations).

    >>> s = tail_summary([0.0, 0.0, 0.0, 10.0], [0.0] * 4, [1.0] * 4)
    >>> round(s["worst_share"], 3), round(s["nll_without_1"], 3), s["worst_z"], s["beyond_3"]
    (12.73, 0.919, 10.0, 0.25)
    """
    y, mean, var = (np.asarray(a, dtype=np.float64).ravel() for a in (y, mean, var))
    if y.size < 4:
        raise ValueError(f"need at least 4 rows to set the 3 worst apart, got {y.size}")
    per_row = -metrics.gaussian_logpdf(y, mean, var)
    z = (y - mean) / np.sqrt(var)
    order = np.argsort(-per_row)
    return {"rows": int(per_row.size), "nll": float(per_row.mean()),
            "worst_share": float(per_row[order[0]] / per_row.size),
            "nll_without_1": float(np.delete(per_row, order[:1]).mean()),
            "nll_without_3": float(np.delete(per_row, order[:3]).mean()),
            "median": float(np.median(per_row)), "beyond_3": float(np.mean(np.abs(z) > 3)),
            "worst_z": float(z[order[0]])}


def split_tails(data_dir: Path, runs_dir: Path, dataset: str, split: int, method: str = "autodeuq") -> dict:
    """The ensemble step of one recorded split again, on a copy of the catalog ``method`` searched;
    its tail summary."""
    args = uci_parser().parse_args(["--methods", method, "--workers", "1"])
    args.settings_base = ""  # only read for the record's "settings", which this script does not keep
    source = runs_dir / catalog_name(dataset, split, EARLY_DISCARDING[method], args)
    if not (source / "catalog.sqlite").is_file():
        raise SystemExit(f"{source}: no catalog (run benchmarks/uci.py --methods {method} first)")
    data = load_split(data_dir, dataset, split)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / source.name
        shutil.copytree(source, run_dir)
        means, variances, weights, info = RUNNERS[method](data, args, run_dir=run_dir)
    if info["catalog_entries"] < args.max_evals:
        raise SystemExit(f"{source}: {info['catalog_entries']} entries, fewer than {args.max_evals}: the copy searched")
    mean, ale, epi = metrics.mixture_moments(means, variances, weights)
    return {"dataset": dataset, "split": split, **tail_summary(data.y_test, mean, ale + epi)}


def table(rows: list[dict]) -> str:
    lines = ["| dataset | split | test rows | Gaussian NLL | worst row's part | without the worst row "
             "| without the 3 worst | median row | rows beyond 3 std | worst row (std) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['split']} | {r['rows']} | {r['nll']:.3f} | {r['worst_share']:.3f} "
                     f"| {r['nll_without_1']:.3f} | {r['nll_without_3']:.3f} | {r['median']:.3f} "
                     f"| {100 * r['beyond_3']:.1f} % | {r['worst_z']:+.1f} |")
    for name in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == name]
        means = {k: np.mean([r[k] for r in mine]) for k in ("nll", "worst_share", "nll_without_1",
                                                          "nll_without_3", "median", "beyond_3")}
        lines.append(f"| {name} | mean of {len(mine)} | | {means['nll']:.3f} | {means['worst_share']:.3f} "
                     f"| {means['nll_without_1']:.3f} | {means['nll_without_3']:.3f} | {means['median']:.3f} "
                     f"| {100 * means['beyond_3']:.1f} % | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs-dir", type=Path, required=True, help="the catalogs of benchmarks/uci.py (its --runs-dir)")
    p.add_argument("--datasets", nargs="+", choices=DATASETS, required=True)
    p.add_argument("--method", choices=OURS, default="autodeuq",
                   help="whose catalogs: the benchmark method that searched them (default: autodeuq)")
    p.add_argument("--splits", type=parse_splits, default=parse_splits("0-4"), help="e.g. 0-4 (default) or 0,2,5")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="folder of the nine dataset folders (default: <repo>/../shared/datasets/uci)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as a JSON list")
    args = p.parse_args(argv)
    data_dir = args.data_dir if args.data_dir is not None else default_data_dir(REPO)
    rows = []
    for name in args.datasets:
        for split in args.splits:
            rows.append(split_tails(data_dir, args.runs_dir, name, split, args.method))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
