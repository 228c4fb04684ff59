"""What successive halving would have kept of a search without early discarding: ASHA replayed.

For each catalog of a search without early discarding (every network trained to its own early
stop, its validation loss recorded per epoch), asynchronous successive halving
(:class:`autodeuq.discard.SuccessiveHalving`) is replayed on the same trainings in the order their
rung epochs were reached: a training's epoch ``e`` is placed at ``start + e * (end - start) /
epochs`` of its recorded run, so the rung records fill up as they did during the search. A
training stops at the first rung whose decision is "discard". Per schedule (first rung and
reduction factor, ``--schedules 1:3 3:3``), the script reports:

- the epochs successive halving would have spent, and how many times fewer than the search's;
- how many of the catalog's 5 best networks (lowest final validation loss) would have run to
  their end, and at which rung the others would have stopped;
- the best final validation loss among the trainings run to their end (standardized, the
  catalog's ``objective``), against the catalog's best.

It also gives Spearman's rank correlation between the best validation loss by each rung epoch and
the final one (with ``--first N``, also among the first N trainings submitted alone). This replays
the same configurations: a real search with successive halving steers its searcher by the losses
at the stopping points and so visits others (the configurations that start fast). Usage::

    python benchmarks/sha_replay.py /work/runs/uci_floor/kin8nm-split1 /work/runs/uci_floor/concrete-split0
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from autodeuq.catalog import Catalog  # noqa: E402
from autodeuq.discard import SuccessiveHalving  # noqa: E402
from benchmarks.iepoch_fidelity import spearman  # noqa: E402

SCHEDULES, TRUE_TOP, RANK_EPOCHS = ("1:3", "3:3", "9:3", "3:2"), 5, (1, 3, 9, 27)


def running_best(history) -> np.ndarray:
    """Best validation loss by each epoch (a missing or non-finite loss counts as infinite)."""
    losses = [float(v) if v is not None and math.isfinite(v) else math.inf for v in history]
    return np.minimum.accumulate(losses)


def stopping_epochs(entries, rule: SuccessiveHalving, max_epochs: int = 100) -> list[int]:
    """The epoch at which ``rule`` stops each training of an epoch budget ``max_epochs``, replaying
    rung events in time order."""
    events = []
    for index, entry in enumerate(entries):
        n = len(entry["best"])
        per_epoch = (entry["end_time"] - entry["start_time"]) / n
        events += [(entry["start_time"] + epoch * per_epoch, index, epoch) for epoch in rule.rungs(max_epochs)
                   if epoch < n]
    stop = [len(entry["best"]) for entry in entries]
    for _, index, epoch in sorted(events):
        if stop[index] > epoch and not rule.should_continue(epoch, entries[index]["best"][epoch - 1]):
            stop[index] = epoch
    return stop


def rank_correlations(entries) -> list[float]:
    """Spearman's correlation between the best loss by each of :data:`RANK_EPOCHS` and the final one."""
    final = [entry["objective"] for entry in entries]
    return [spearman([e["best"][min(k, len(e["best"])) - 1] for e in entries], final) for k in RANK_EPOCHS]


def replay(run_dir: Path, schedules=SCHEDULES, first_trainings: int = 0) -> dict:
    """The rank correlations of one catalog, and what each schedule ``first:reduction`` keeps of it.

    With ``first_trainings`` > 0, also the rank correlations among the catalog's first trainings
    (by id, the order they were submitted: the searcher's random start when it is at most
    ``n_initial``)."""
    with Catalog(run_dir) as cat:
        entries = [cat.entry(i) for i in cat.model_ids()]
        max_epochs = cat.space.epochs
    for entry in entries:
        entry["best"] = running_best(entry["history"]["val_loss"])
    final = np.array([entry["objective"] for entry in entries])
    spent = sum(len(entry["best"]) for entry in entries)
    top = np.argsort(final, kind="stable")[:TRUE_TOP]
    out = {"name": run_dir.name, "trainings": len(entries), "schedules": {},
           "spearman": rank_correlations(entries)}
    if first_trainings:
        out["spearman_first"] = rank_correlations(entries[:first_trainings])  # model_ids() is in id order
    for schedule in schedules:
        first, reduction = (int(part) for part in schedule.split(":"))
        stop = stopping_epochs(entries, SuccessiveHalving(first, reduction), max_epochs)
        ran_out = [i for i, entry in enumerate(entries) if stop[i] == len(entry["best"])]
        out["schedules"][(first, reduction)] = {
            "epochs": sum(stop), "fewer": spent / sum(stop), "hits": sum(i in ran_out for i in top),
            "stopped_at": ", ".join(str(stop[i]) if i not in ran_out else "end" for i in top),
            "best_kept": final[ran_out].min(), "best": final.min()}
    return out


def dataset_of(name: str) -> str:
    """``concrete`` for the catalog ``concrete-split3``."""
    return name.split("-split")[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+", type=Path, help="catalogs searched without early discarding")
    p.add_argument("--schedules", nargs="+", default=list(SCHEDULES), metavar="FIRST:REDUCTION",
                   help=f"first rung and reduction factor of each replay (default: {' '.join(SCHEDULES)})")
    p.add_argument("--first", type=int, default=0, metavar="N",
                   help="also give the rank correlations among the first N trainings submitted")
    args = p.parse_args(argv)
    results = [replay(run_dir, args.schedules, args.first) for run_dir in args.run_dirs]
    print("| catalog | trainings | " + " | ".join(f"Spearman, epoch {k}" for k in RANK_EPOCHS) + " |")
    print("|---" * (2 + len(RANK_EPOCHS)) + "|")
    for r in results:
        print(f"| {r['name']} | {r['trainings']} | " + " | ".join(f"{v:.2f}" for v in r["spearman"]) + " |")
    if args.first:
        print("\n| catalog | " + " | ".join(f"epoch {k}: first {args.first} / all" for k in RANK_EPOCHS) + " |")
        print("|---" * (1 + len(RANK_EPOCHS)) + "|")
        for r in results:
            pairs = zip(r["spearman_first"], r["spearman"])
            print(f"| {r['name']} | " + " | ".join(f"{a:.2f} / {b:.2f}" for a, b in pairs) + " |")
    print(f"\n| catalog | first rung, reduction | epochs | top-{TRUE_TOP} run to their end (where each stops) "
          "| best final loss run to its end / catalog's best |")
    print("|---" * 5 + "|")
    for r in results:
        for (first, reduction), s in r["schedules"].items():
            print(f"| {r['name']} | {first}, {reduction} | {s['epochs']} ({s['fewer']:.1f}x fewer) | "
                  f"{s['hits']} ({s['stopped_at']}) | {s['best_kept']:.3f} / {s['best']:.3f} |")
    print(f"\nMeans over the catalogs of each dataset:\n\n| dataset | catalogs | first rung, reduction | "
          f"epochs fewer (range) | top-{TRUE_TOP} run to their end | best kept minus best |")
    print("|---" * 6 + "|")
    datasets = dict.fromkeys(dataset_of(r["name"]) for r in results)
    for dataset in datasets:
        group = [r for r in results if dataset_of(r["name"]) == dataset]
        for schedule in group[0]["schedules"]:
            cells = [r["schedules"][schedule] for r in group]
            fewer = [c["fewer"] for c in cells]
            print(f"| {dataset} | {len(group)} | {schedule[0]}, {schedule[1]} | {min(fewer):.1f}-{max(fewer):.1f}x | "
                  f"{np.mean([c['hits'] for c in cells]):.1f} | "
                  f"{np.mean([c['best_kept'] - c['best'] for c in cells]):+.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
