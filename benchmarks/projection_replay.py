"""When ``early_discarding="auto"`` would have decided, replayed on finished searches.

For each catalog, the finished trainings are fed in the order they ended to the driver's own
decision (:class:`autodeuq.discard.scheduler.DiscardByCost`, the budget and the number of workers given
here), which projects from each training's modelled seconds (its epochs, steps, batch size and
parameters); the time each ended since the first was submitted is shown beside. Per catalog, the
script prints:

- the search's time (the last end, from the first submission) and how many trainings it
  discarded;
- the first projection, after two rounds of the workers' trainings (at least 4), and what it
  decides;
- for a search that ran without discarding, the later projections: the largest one, and the
  training after which a projection first passed the budget, with the time and the projection
  then (where the decision projected again after each training turns successive halving on).

A search that turned successive halving on ran its later trainings under it, so only its first
projection replays what happened. Usage::

    python benchmarks/projection_replay.py RUNS_DIR/uci_auto/kin8nm-split3-auto RUNS_DIR/uci_auto/yacht-split0-auto
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from autodeuq.catalog import Catalog  # noqa: E402
from autodeuq.discard.scheduler import DiscardByCost, decide_after  # noqa: E402


def finished_trainings(frame) -> list[tuple]:
    """``(seconds since the first submission when it ended, its wall seconds, status, epochs,
    batch size, parameters)`` of each finished training, in the order they ended."""
    frame = frame[frame["end_time"].notna() & (frame["end_time"] > 0)]
    start = float(frame["submit_time"].min())
    rows = sorted(zip(frame["end_time"].astype(float) - start, frame["wall_time"].astype(float), frame["status"],
                      frame["epochs"].fillna(0).astype(int), frame["batch_size"].fillna(1).astype(int),
                      frame["n_params"].fillna(0).astype(int)))
    return [(float(e), float(w), str(s), int(ep), int(b), int(p)) for e, w, s, ep, b, p in rows]


def replay(trainings, max_evals: int, budget_s: float, workers: int, rows: int) -> dict:
    """The decisions that ``DiscardByCost`` takes on ``trainings`` (:func:`finished_trainings`) of a
    search over ``rows`` training rows: ``first`` (the first decision), ``switch`` (the decision that
    turned successive halving on, with the search's timed seconds then, or None) and ``largest_s``
    (the largest projection while it was off). The decisions use the modelled seconds of the
    trainings (:func:`autodeuq.discard.scheduler.training_cost`), never the timed ones."""
    cost = DiscardByCost(rule=None, budget_s=budget_s, after=decide_after(workers), rows=rows)
    done, first, switch, largest = [], None, None, 0.0
    for ended, _, _, epochs, batch_size, n_params in trainings:
        done.append((epochs, batch_size, n_params))
        on = cost.decide(done, remaining=max_evals - len(done), slots=workers)
        if cost.decision is not None and first is None:
            first = dict(cost.decision)
        if on:
            switch = {**cost.decision, "elapsed_s": round(ended, 1)}
            break
        if cost.decision is not None:
            largest = max(largest, cost.projection(done, max_evals - len(done), workers))
    return {"first": first, "switch": switch, "largest_s": largest}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--budget", type=float, default=600.0, help="discard budget, seconds (default 600)")
    parser.add_argument("--workers", type=int, default=2, help="workers the searches ran on (default 2)")
    parser.add_argument("--max-evals", type=int, default=100)
    args = parser.parse_args(argv)
    print(f"budget {args.budget:.0f} s, {args.workers} workers, {args.max_evals} evaluations")
    print("| catalog | search s | discarded | first projection | its decision | largest later projection "
          "| passed the budget after |")
    print("|---|---|---|---|---|---|---|")
    for run_dir in args.run_dirs:
        with Catalog(run_dir) as catalog:
            trainings = finished_trainings(catalog.to_dataframe())
            rows = (catalog.row_counts() or (0, 0))[0]
        discarded = sum(t[2] == "discarded" for t in trainings)
        found = replay(trainings, args.max_evals, args.budget, args.workers, rows)
        first, switch = found["first"], found["switch"]
        if first is None:
            print(f"| {run_dir.name} | {trainings[-1][0] if trainings else 0:.0f} | {discarded} | – | too few "
                  "trainings | – | – |")
            continue
        ran_full = discarded == 0
        later = f"{found['largest_s']:.0f} s" if ran_full and first["policy"] == "none" else "–"
        passed = "–"
        if switch is not None and switch["after_trainings"] > first["after_trainings"]:
            passed = (f"{switch['after_trainings']} trainings, {switch['elapsed_s']:.0f} s in "
                      f"(projected {switch['projected_s']:.0f} s)") if ran_full else "–"
        elif ran_full and first["policy"] == "none":
            passed = "never"
        print(f"| {run_dir.name} | {trainings[-1][0]:.0f} | {discarded} | {first['projected_s']:.0f} s "
              f"| {'successive halving' if first['policy'] == 'sha' else 'none'} | {later} | {passed} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
