"""Where the trainings of real searches spend their fixed time, from what each catalog recorded.

Every training records a timing breakdown (``extra["timing"]``, :func:`autodeuq.nn.train.train`):
``setup`` (Keras' session reset, building the network, making or reusing the compiled trainer,
loading the initial weights), ``first_epoch`` (tracing and instantiating the epoch on a new
network, and running that epoch), ``other_epochs`` and ``finish`` (loading the best weights and
writing the ``.keras`` bytes). Per catalog, over its trainings that ran to their end, the script
reports the medians of:

- setup, the first epoch less one later epoch (the trace and instantiation), and finish; their
  sum is the fixed cost of a training;
- the whole training, and the fixed cost's share of it;
- the worker's gap: from the end of one training to the start of the next on the same worker (the
  result's way back to the driver, the driver's work on it, and the next task's way out).

Unlike ``benchmarks/training_costs.py`` (one process, CPU time), these are wall times of searches as
they ran, on however many workers shared the machine. Usage::

    python benchmarks/search_costs.py RUNS_DIR/uci_auto/yacht-split0-auto RUNS_DIR/uci_auto/boston-split0-auto
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from autodeuq.catalog import Catalog  # noqa: E402


def fixed_parts(timing: dict, epochs: int) -> dict[str, float]:
    """A training's fixed parts in seconds, from its recorded ``timing`` and epochs run: the trace
    is the first epoch less the mean of the later ones (all of the first epoch when it ran one).

    >>> fixed_parts({"setup": 0.2, "first_epoch": 0.5, "other_epochs": 0.9, "finish": 0.1}, 10)
    {'setup': 0.2, 'trace': 0.4, 'finish': 0.1, 'fixed': 0.7000000000000001, 'training': 1.7}
    """
    later = timing["other_epochs"] / (epochs - 1) if epochs > 1 else 0.0
    trace = timing["first_epoch"] - later
    parts = {"setup": timing["setup"], "trace": trace, "finish": timing["finish"]}
    parts["fixed"] = parts["setup"] + trace + parts["finish"]
    parts["training"] = timing["setup"] + timing["first_epoch"] + timing["other_epochs"] + timing["finish"]
    return parts


def worker_gaps(trainings) -> list[float]:
    """Seconds from the end of each training to the start of the next on the same worker
    (``trainings``: ``(worker, start_time, end_time)``)."""
    by_worker = defaultdict(list)
    for worker, start, end in trainings:
        by_worker[worker].append((start, end))
    gaps = []
    for runs in by_worker.values():
        runs.sort()
        gaps += [later[0] - earlier[1] for earlier, later in zip(runs, runs[1:])]
    return gaps


def catalog_costs(run_dir) -> dict[str, float] | None:
    """Medians over the catalog's trainings that ran to their end: the parts of
    :func:`fixed_parts`, ``share`` (fixed / training) and ``gap`` (:func:`worker_gaps`), with
    ``trainings``, their count; None without any that recorded a timing."""
    catalog = Catalog(run_dir)
    frame = catalog.to_dataframe()
    parts = defaultdict(list)
    for entry_id in frame.loc[frame["status"] == "done", "id"]:
        entry = catalog.entry(int(entry_id))
        timing = (entry.get("extra") or {}).get("timing")
        if not timing or not entry["epochs"]:
            continue
        one = fixed_parts(timing, int(entry["epochs"]))
        one["share"] = one["fixed"] / one["training"] if one["training"] > 0 else float("nan")
        for key, value in one.items():
            parts[key].append(value)
    if not parts:
        return None
    ran = frame[frame["start_time"].notna() & frame["end_time"].notna() & (frame["start_time"] > 0)]
    gaps = worker_gaps(zip(ran["worker"], ran["start_time"].astype(float), ran["end_time"].astype(float)))
    out = {key: statistics.median(values) for key, values in parts.items()}
    out["gap"] = statistics.median(gaps) if gaps else float("nan")
    out["trainings"] = len(parts["fixed"])
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    print("medians over each catalog's trainings run to their end; milliseconds unless marked")
    print("| catalog | trainings | setup | trace | finish | fixed | whole training (s) | fixed share | worker gap |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run_dir in args.run_dirs:
        costs = catalog_costs(run_dir)
        if costs is None:
            print(f"| {run_dir.name} | 0 | – | – | – | – | – | – | – |")
            continue
        ms = " | ".join(f"{costs[k] * 1e3:.0f}" for k in ("setup", "trace", "finish", "fixed"))
        print(f"| {run_dir.name} | {costs['trainings']} | {ms} | {costs['training']:.2f} | {costs['share']:.0%} "
              f"| {costs['gap'] * 1e3:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
