"""A recorded search's trainings replayed one after the other in one process: the trainer's cost
with the search's path held fixed.

A search's wall time moves with its path: with several workers, results come back in an order
that depends on timing, and the asynchronous search then proposes other configurations (other
batch sizes, other widths), so two runs of one commit can differ by 3x
(``benchmarks/results/search_speed/notes.md``). To compare two trainers on the same work, this
script trains a catalog's finished configurations again, in the catalog's order, each with the
seed its search gave it (:func:`autodeuq.engine.evaluator.base.evaluation_seed` of the catalog's seed and
the entry's id), on the training and validation rows the catalog stored, with the search's epoch
budget, single-threaded, in one process (so the pieces of spliced epochs and the trainer cache
carry over as on a worker). It reports the CPU and wall time of all of them, the medians of the
fixed parts (as ``benchmarks/search_costs.py``), and how many replays ended at the recorded
epoch count with the recorded objective (and those that did not): a trainer that changes no
number reproduces all of them.

The catalogs are only read. Usage (run it in checkouts of the commits to compare)::

    python benchmarks/search_replay.py RUNS_DIR/uci_read_back/yacht-split0-auto
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from search_costs import fixed_parts  # noqa: E402

from autodeuq.nn.train import configure_threads  # noqa: E402  (before TensorFlow runs anything)


def replay(run_dir, limit: int | None = None) -> dict:
    """Replay the finished trainings of the catalog at ``run_dir`` (the first ``limit``)."""
    from autodeuq.catalog import Catalog
    from autodeuq.engine.evaluator.base import evaluation_seed
    from autodeuq.nn.train import train
    from autodeuq.table.data import from_arrays

    catalog = Catalog(run_dir)
    meta = catalog.meta
    (x_train, y_train), (x_fit, y_fit) = catalog.training_data(), catalog.fit_data()
    n = len(x_train)
    dataset = from_arrays(x_train, y_train, x_fit[n:], y_fit[n:])
    space, seed = catalog.space, int(meta.get("seed", 0))
    epochs = (meta.get("search") or {}).get("epochs")
    ids = catalog.ids()[:limit]
    cpu, wall, differ, fixed, first = time.process_time(), time.perf_counter(), [], [], []
    for entry_id in ids:
        entry = catalog.entry(entry_id)
        result = train(entry["config"], space, dataset, seed=evaluation_seed(seed, entry_id), epochs=epochs)
        if not (result.epochs == entry["epochs"] and result.objective == entry["objective"]):
            differ.append((entry_id, entry["epochs"], result.epochs, entry["objective"], result.objective))
        first.append(result.extra["timing"]["first_epoch"])
        fixed.append(fixed_parts(result.extra["timing"], result.epochs)["fixed"])
    return {"trainings": len(ids), "reproduced": len(ids) - len(differ), "differ": differ,
            "cpu_s": time.process_time() - cpu,
            "wall_s": time.perf_counter() - wall, "fixed_ms": 1000 * statistics.median(fixed),
            "first_epoch_ms": 1000 * statistics.median(first)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", help="catalogs of recorded searches")
    parser.add_argument("--limit", type=int, default=None, help="replay only the first LIMIT trainings")
    args = parser.parse_args(argv)
    configure_threads(1)
    print("| catalog | trainings | reproduced | CPU s | wall s | median fixed (ms) | median first epoch (ms) |")
    print("|---|---|---|---|---|---|---|")
    for run_dir in args.run_dirs:
        r = replay(run_dir, args.limit)
        print(f"| {Path(run_dir).name} | {r['trainings']} | {r['reproduced']} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} "
              f"| {r['fixed_ms']:.0f} | {r['first_epoch_ms']:.0f} |")
        for entry_id, epochs, got_epochs, objective, got in r["differ"]:
            print(f"  entry {entry_id}: recorded {epochs} epochs, objective {objective!r}; "
                  f"replayed {got_epochs} epochs, objective {got!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
