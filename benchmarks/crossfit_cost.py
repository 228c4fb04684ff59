"""What the cross-fitted stage costs in training seconds, from the catalogs themselves.

For each run directory: the seconds the search's trainings took (every entry's recorded wall
time), the seconds of its fold trainings (the ``folds`` table), their numbers, and the ratio
``(search + folds) / search``: the whole run's training work with the cross-fitted stage over the
search's alone (today's stage adds a refit of the members, a few trainings more, so the ratio to
today's whole run is a little lower). The seconds are those the catalog recorded, under whatever
load the machine had; both parts of a catalog ran under the same.

    python benchmarks/crossfit_cost.py RUNS/classification/*-split* RUNS/crossfit/*-split*
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def row(run_dir: Path) -> str:
    from autodeuq.catalog import Catalog

    with Catalog(run_dir) as catalog:
        search = [catalog.entry(i)["wall_time"] or 0.0 for i in catalog.ids(None)
                  if catalog.entry(i)["wall_time"] is not None]
        folds = [f["wall_time"] or 0.0 for f in catalog.fold_entries()]
        rows = sum(catalog.row_counts() or (0, 0))
    ratio = (sum(search) + sum(folds)) / sum(search) if search else float("nan")
    return (f"| {run_dir.name} | {rows} | {len(search)} | {sum(search):.0f} | {len(folds)} | {sum(folds):.0f} "
            f"| {ratio:.2f} |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories")
    args = p.parse_args(argv)
    print("| run | training + validation rows | search trainings | their seconds | fold trainings | their seconds "
          "| (search + folds) / search |")
    print("|---" * 7 + "|")
    for run in args.runs:
        print(row(run), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
