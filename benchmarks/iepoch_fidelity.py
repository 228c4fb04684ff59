"""How well the first i epochs rank configurations: i-Epoch replayed on catalogs searched without early discarding.

For each catalog of a search without early discarding (every network trained to its own early
stop, its validation loss recorded per epoch) and each ``i``, the configurations are ranked by the
best validation loss of their first ``i`` epochs, as i-Epoch's search phase would rank them
(Egele 2024, ch. 5). For each ``k`` the script reports what training the top ``k`` to the full
budget would have found: the best final validation NLL among them (standardized, the catalog's
``objective``), how many of the catalog's 5 best networks they include, and the epochs i-Epoch
would have spent (``i`` per configuration, plus the recorded epochs of the ``k``). It also gives
Spearman's rank correlation between the i-epoch and the final losses.

This replays the same configurations: a real i-Epoch search steers its searcher by the i-epoch
losses and so visits others. Usage::

    python benchmarks/iepoch_fidelity.py /work/runs/uci/concrete-split0 /work/runs/uci/kin8nm-split0
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from autodeuq.catalog import Catalog  # noqa: E402

EPOCHS, TOP_K, TRUE_TOP = (1, 2, 3, 5, 9), (5, 10, 20), 5


def spearman(a, b) -> float:
    """Rank correlation (average ranks for ties)."""
    from scipy.stats import rankdata

    return float(np.corrcoef(rankdata(a), rankdata(b))[0, 1])


def replay(run_dir: Path, epochs=EPOCHS, top_k=TOP_K) -> list[str]:
    """Markdown rows (one per i) for one catalog."""
    with Catalog(run_dir) as cat:
        entries = [cat.entry(i) for i in cat.model_ids()]
    final = np.array([e["objective"] for e in entries])
    spent = np.array([e["epochs"] for e in entries])
    true_top = set(np.argsort(final, kind="stable")[:TRUE_TOP])
    rows = []
    for i in epochs:
        early = np.array([min(e["history"]["val_loss"][:i]) for e in entries])
        order = np.argsort(early, kind="stable")
        cells = []
        for k in top_k:
            top = order[:k]
            cells.append(f"{final[top].min():.3f} / {len(true_top & set(top))} / {len(entries) * i + spent[top].sum()}")
        rows.append(f"| {run_dir.name} | {i} | {spearman(early, final):.2f} | " + " | ".join(cells) + " |")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+", type=Path, help="catalogs searched without early discarding")
    args = p.parse_args(argv)
    print("| catalog | i | Spearman | " + " | ".join(f"k={k}: best / top-{TRUE_TOP} hits / epochs" for k in TOP_K)
          + " |")
    print("|---" * (3 + len(TOP_K)) + "|")
    for run_dir in args.run_dirs:
        for row in replay(run_dir):
            print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
