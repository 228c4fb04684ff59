"""The standard UCI regression benchmark: nine datasets, fixed splits, AutoDEUQ and three baselines.

Data: the nine datasets and fixed train/test splits of PBP (Hernández-Lobato & Adams 2015), also
used by MC dropout (Gal & Ghahramani 2016) and Deep Ensembles (Lakshminarayanan et al. 2017); see
``benchmarks/uci_data.py`` for the folder layout (``--data-dir``).

Protocol, the same for every method: for split ``i``, a seeded 20 % of the training rows (seed
``i``) is the validation part (early stopping, search, ensemble selection), the rest is fitted;
the test rows are scored once, at the end. Scores per split, in original target units: mean
test NLL per point (natural log), both the exact NLL of the predictive mixture (``nll``) and the
NLL of one Gaussian with its mean and total variance (``nll_gaussian``, moment matching: the
measure of the AutoDEUQ thesis and the Deep Ensembles paper), RMSE of the predictive mean, and
the fraction of test targets inside the central 90 % interval of the predictive distribution.
The report gives the mean ± standard error over splits.

Methods (``--methods``):

* ``autodeuq``: AgEBO on the tabular space, ``--max-evals`` evaluations (100), greedy ensemble of
  ``--ensemble-size`` (5), through :class:`autodeuq.AutoDEUQRegressor`, one catalog per
  dataset/split under ``--runs-dir``; a stopped run resumes its catalogs. The estimator's
  defaults, the refit on training + validation rows included (``--refit auto``: up to 1000
  rows), but without early discarding (``early_discarding="none"``). ``--rescore`` redoes only
  the ensemble step of splits already recorded, on their complete catalogs, with the current
  defaults: the table then shows what the package does today, and each record keeps its earlier
  scores (``info.rescored.previous``).
* ``autodeuq-sha``: the same with early discarding by asynchronous successive halving (rungs at
  epochs 1, 3, 9, 27, 81, or 3, 9, 27, 81; the best third continue), catalogs
  ``<dataset>-split<i>-sha``. The first rung is the estimator's ``sha_min_epochs="auto"`` (epoch 3
  up to 1000 training + validation rows, else 1; a resumed catalog keeps its own); ``--sha-min-epochs N`` puts it at
  epoch N (rungs N, 3N, 9N, ...; catalogs ``<dataset>-split<i>-sha-min<N>``), and
  ``--sha-rungs steps`` counts the rungs in optimizer steps (catalogs ``...-sha-steps``): keep those
  records apart with ``--results``.
* ``autodeuq-iepoch``: the same with i-Epoch (Egele 2024): every search evaluation trains 1
  epoch, then the 10 configurations of lowest validation loss are trained to the full budget;
  catalogs ``<dataset>-split<i>-iepoch``.
* ``autodeuq-auto``: the same with the estimator's ``early_discarding="auto"``: no discarding
  until the first trainings project what the search costs, successive halving from then on if
  the projection exceeds ``discard_budget`` (:mod:`autodeuq.discard.scheduler`); catalogs
  ``<dataset>-split<i>-auto``; the decision is in each record's ``info.discarding_decision``, and the
  report lists each dataset's decisions with the search times they projected.
* The report's row "AutoDEUQ (defaults)" is not run on its own: for each dataset it shows
  ``autodeuq-auto`` where there are such records, else the method that ``early_discarding="auto"``
  chose before it was decided by cost (``autodeuq`` up to 1000 training + validation rows,
  ``autodeuq-sha`` above: :data:`ROWS_RULE`).
* ``deep-ensembles``: as in Lakshminarayanan et al. 2017 (Section 3.3 and Table 1, "ML-5"):
  5 networks with one hidden layer of 50 ReLU units (100 for protein), a mean output and a
  softplus variance output (+1e-6), Gaussian NLL, Adam with a fixed learning rate, batch 100,
  40 epochs, the weights of the last epoch, no adversarial training; Torch's default
  initialization (uniform within 1/sqrt(fan_in)). Inputs and targets standardized on the fitting
  rows; the validation rows are not used. The equal-weight mixture of the 5 is scored.
  Learning rate: the paper states 0.1 (Section 3.1). With 0.1, members of this implementation
  diverge on several datasets (split 0 test RMSE: yacht 3.13, energy 49.4; boston split 1: 8.6)
  and the scores miss the paper's Table 1 by far; with 0.01 they match it (boston, concrete,
  energy splits 0-1 within the published spread). The default is therefore 0.01;
  ``--de-lr 0.1`` runs the stated value. The learning rate is stored with every record.
* ``ngboost``: NGBoost (Normal), 2000 estimators, learning rate 0.01, early stopping after 50
  rounds without improvement on the validation rows; predictions from the best iteration.
* ``catboost``: CatBoost ``RMSEWithUncertainty``, learning rate 0.03, up to 3000 iterations,
  overfitting detector ``Iter`` with 200 rounds on the validation rows (best iteration kept),
  ``posterior_sampling=True``; depth 4 or 6, whichever gives the lower validation NLL; predictions
  from 10 virtual ensembles, variance = knowledge + data uncertainty.

Results: ``--results``/uci_raw.json gets one record per (method, dataset, split), written as soon
as it is finished; records already there are skipped, so a stopped run picks up where it was.
``--results``/uci.md is regenerated from it after every record, or alone with ``--report``.

    python benchmarks/uci.py --methods deep-ensembles ngboost catboost --splits 0-4 \\
        --data-dir ../shared/datasets/uci
    python benchmarks/uci.py --report
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
if str(REPO) not in sys.path:  # run as a script from anywhere: import the checkout's packages
    sys.path.insert(0, str(REPO))

from autodeuq import metrics  # noqa: E402
from autodeuq.app.options import BY_NAME  # noqa: E402
from autodeuq.core.errors import ParameterError  # noqa: E402
from autodeuq.core.fileio import atomic_write  # noqa: E402
from autodeuq.discard import RUNG_UNITS  # noqa: E402
from autodeuq.ensemble.options import CALIBRATIONS, DIVERSITY, SCORES  # noqa: E402
from autodeuq.table.data import DataError  # noqa: E402
from benchmarks.uci_data import DATASETS, VALID_FRACTION, default_data_dir, load_split, n_splits  # noqa: E402

METHODS = ("autodeuq", "autodeuq-sha", "autodeuq-iepoch", "autodeuq-auto", "deep-ensembles", "ngboost", "catboost")
LABELS = {"autodeuq": "AutoDEUQ", "autodeuq-sha": "AutoDEUQ + successive halving",
          "autodeuq-auto": "AutoDEUQ + discarding by cost",
          "autodeuq-iepoch": "AutoDEUQ + i-Epoch", "deep-ensembles": "Deep Ensembles", "ngboost": "NGBoost",
          "catboost": "CatBoost"}
#: Our methods: the same search, with the early discarding each names.
EARLY_DISCARDING = {"autodeuq": "none", "autodeuq-sha": "sha", "autodeuq-iepoch": "iepoch", "autodeuq-auto": "auto"}
OURS = tuple(EARLY_DISCARDING)
#: Training + validation rows above which ``early_discarding="auto"`` chose successive halving
#: before the choice was made by cost: which method the earlier records' "defaults" row shows.
ROWS_RULE = 1000
DEFAULTS = "autodeuq-defaults"  # a report row: per dataset, the method early_discarding="auto" picks
LABELS[DEFAULTS] = "AutoDEUQ (defaults)"
COVERAGE_LEVEL = 0.9
OUTLIER_NATS = 1.0  # report splits whose NLL is this far above the median of their (method, dataset)

# Published test NLL / RMSE (mean over splits) on the same datasets and splits.
# AutoDEUQ: Egele et al. 2022, thesis Table 6.1 (500-model catalog, ensemble of 5).
# Deep Ensembles: Lakshminarayanan et al. 2017, Table 1 (20 splits, 5 for protein).
# MC dropout: Gal & Ghahramani 2016, Table 1 (test log-likelihood; NLL = -LL), same splits.
PUBLISHED = {
    "AutoDEUQ (thesis)": {
        "nll": {"boston": 2.46, "concrete": 2.86, "energy": 0.61, "kin8nm": -1.40, "naval": -8.24,
                "power": 2.66, "protein": 2.48, "wine": 1.00, "yacht": -0.17},
        "rmse": {"boston": 3.09, "concrete": 4.38, "energy": 0.39, "kin8nm": 0.06, "naval": 0.00,
                 "power": 3.43, "protein": 3.52, "wine": 0.62, "yacht": 0.44},
    },
    "Deep Ensembles (paper)": {
        "nll": {"boston": 2.41, "concrete": 3.06, "energy": 1.38, "kin8nm": -1.20, "naval": -5.63,
                "power": 2.79, "protein": 2.83, "wine": 0.94, "yacht": 1.18},
        "rmse": {"boston": 3.28, "concrete": 6.03, "energy": 2.09, "kin8nm": 0.09, "naval": 0.00,
                 "power": 4.11, "protein": 4.71, "wine": 0.64, "yacht": 1.58},
    },
    "MC dropout (paper)": {
        "nll": {"boston": 2.46, "concrete": 3.04, "energy": 1.99, "kin8nm": -0.95, "naval": -3.80,
                "power": 2.80, "protein": 2.89, "wine": 0.93, "yacht": 1.55},
        "rmse": {"boston": 2.97, "concrete": 5.23, "energy": 1.66, "kin8nm": 0.10, "naval": 0.01,
                 "power": 4.02, "protein": 4.36, "wine": 0.62, "yacht": 1.11},
    },
}

# The NLL each published column reports: "gaussian" is the NLL of one Gaussian with the ensemble's
# mean and total variance (moment matching; the records' ``nll_gaussian``), "mixture" the NLL of a
# mixture (the records' ``nll``). MC dropout's published test log-likelihood is the log of the mean
# of the Gaussian densities of its T dropout samples (the authors' code): a mixture.
PUBLISHED_MEASURE = {"AutoDEUQ (thesis)": "gaussian", "Deep Ensembles (paper)": "gaussian",
                     "MC dropout (paper)": "mixture"}

# The lowest published test NLL per dataset (mean over the standard splits) of a method with one
# predictive distribution per point, and its source: DER = Deep Evidential Regression (Amini et al.
# 2020, Table 1), WGBoost = Wasserstein gradient boosting (Matsubara 2024, arXiv 2405.09536,
# Table 1), thesis = AutoDEUQ (thesis) above.
BEST_PUBLISHED = {"boston": (2.35, "DER"), "concrete": (2.83, "WGBoost"), "energy": (0.53, "WGBoost"),
                  "kin8nm": (-1.40, "thesis"), "naval": (-8.24, "thesis"), "power": (2.60, "WGBoost"),
                  "protein": (2.48, "thesis"), "wine": (0.89, "DER"), "yacht": (-0.17, "thesis")}
BEST_LABEL = "best published (source)"

#: Path options whose absolute values (paths of the machine that ran) the report shows as placeholders.
PATH_PLACEHOLDERS = {"--data-dir": "DATA_DIR", "--runs-dir": "RUNS_DIR", "--results": "RESULTS_DIR"}

# Deep Ensembles, Lakshminarayanan et al. 2017, Section 3.1 and 3.3. The paper states Adam with a
# fixed learning rate of 0.1; here 0.1 makes members diverge on several datasets and misses the
# paper's Table 1 by far, 0.01 reproduces it (module docstring), so 0.01 is the default.
DE_MEMBERS, DE_EPOCHS, DE_BATCH, DE_LR, DE_PAPER_LR, DE_MIN_VAR = 5, 40, 100, 0.01, 0.1, 1e-6
DE_HIDDEN = {"protein": 100}  # 50 elsewhere
NGB_ESTIMATORS, NGB_LR, NGB_PATIENCE = 2000, 0.01, 50
CB_LR, CB_ITERATIONS, CB_OD_WAIT, CB_DEPTHS, CB_VIRTUAL = 0.03, 3000, 200, (4, 6), 10


class MethodError(RuntimeError):
    """A method produced no usable prediction on a split (the record says why)."""


# --------------------------------------------------------------------------- scoring
def score(means, variances, weights, y) -> dict:
    """Test scores of a Gaussian mixture (a single Gaussian is M = 1), original units.

    Parameters
    ----------
    means, variances : ndarray, shape (M, n, 1)
    weights : ndarray, shape (M,)
    y : ndarray, shape (n, 1)

    Returns
    -------
    dict
        ``nll`` (exact mixture NLL per point), ``nll_gaussian`` (moment-matched Gaussian), ``rmse``
        (of the mixture mean) and ``coverage_90`` (share of ``y`` in the central 90 % interval).
    """
    means, variances = np.asarray(means, float), np.asarray(variances, float)
    if not (np.all(np.isfinite(means)) and np.all(np.isfinite(variances)) and np.all(variances > 0)):
        raise MethodError("non-finite mean or non-positive variance in the test predictions")
    mean, ale, epi = metrics.mixture_moments(means, variances, weights)
    return {
        "nll": float(metrics.mixture_nll(means, variances, weights, y)[0]),
        "nll_gaussian": float(metrics.gaussian_nll(y, mean, ale + epi)[0]),
        "rmse": float(metrics.rmse(y, mean)[0]),
        "coverage_90": float(metrics.coverage(means, variances, weights, y, COVERAGE_LEVEL)[0]),
    }


def _gaussian(mean, var):
    return np.asarray(mean, float).reshape(1, -1, 1), np.asarray(var, float).reshape(1, -1, 1), np.ones(1)


# --------------------------------------------------------------------------- methods
def run_deep_ensembles(data, args, *, members=DE_MEMBERS, epochs=DE_EPOCHS, batch_size=DE_BATCH, lr=None):
    """Deep Ensembles as published: see the module docstring. Returns (means, variances, weights, info)."""
    lr = getattr(args, "de_lr", DE_LR) if lr is None else lr
    import keras
    import tensorflow as tf
    from keras import ops

    try:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    except RuntimeError:  # already set by an earlier split in this process
        pass
    x_mu, x_sd = data.x_fit.mean(0), data.x_fit.std(0)
    x_sd = np.where(x_sd > 0, x_sd, 1.0)  # naval has constant columns
    y_mu, y_sd = data.y_fit.mean(0), data.y_fit.std(0)
    xs = ((data.x_fit - x_mu) / x_sd).astype(np.float32)
    ys = ((data.y_fit - y_mu) / y_sd).astype(np.float32)
    xt = ((data.x_test - x_mu) / x_sd).astype(np.float32)
    hidden = DE_HIDDEN.get(data.name, 50)

    def nll(y_true, out):
        var = ops.softplus(out[:, 1:]) + DE_MIN_VAR
        return ops.mean(0.5 * ops.log(var) + 0.5 * ops.square(y_true - out[:, :1]) / var)

    def torch_dense(units, fan_in, activation=None):
        # Torch's default: weights and biases uniform in +-1/sqrt(fan_in) (variance scale 1/3).
        bound = 1.0 / np.sqrt(fan_in)
        return keras.layers.Dense(units, activation=activation,
                                  kernel_initializer=keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform"),
                                  bias_initializer=keras.initializers.RandomUniform(-bound, bound))

    means, variances = [], []
    for k in range(members):
        keras.utils.clear_session()
        keras.utils.set_random_seed(1000 * data.split + k)
        model = keras.Sequential([keras.Input((xs.shape[1],)), torch_dense(hidden, xs.shape[1], "relu"),
                                  torch_dense(2, hidden)])
        model.compile(optimizer=keras.optimizers.Adam(lr), loss=nll)
        model.fit(xs, ys, batch_size=batch_size, epochs=epochs, shuffle=True, verbose=0)
        out = np.asarray(model(xt, training=False), dtype=np.float64)
        var = np.logaddexp(0.0, out[:, 1:]) + DE_MIN_VAR  # softplus, as in training
        means.append(out[:, :1] * y_sd + y_mu)
        variances.append(var * y_sd**2)
    info = {"epochs": members * epochs, "hidden_units": hidden, "learning_rate": lr}
    return np.stack(means), np.stack(variances), np.full(members, 1.0 / members), info


def run_ngboost(data, args, *, n_estimators=NGB_ESTIMATORS, learning_rate=NGB_LR, patience=NGB_PATIENCE):
    """NGBoost (Normal) with early stopping on the validation rows. Returns (means, variances, weights, info)."""
    from ngboost import NGBRegressor
    from ngboost.distns import Normal

    model = NGBRegressor(Dist=Normal, n_estimators=n_estimators, learning_rate=learning_rate, verbose=False,
                         random_state=data.split)
    model.fit(data.x_fit, data.y_fit[:, 0], X_val=data.x_valid, Y_val=data.y_valid[:, 0],
              early_stopping_rounds=patience)
    best = model.best_val_loss_itr
    # pred_dist(max_iter=m) uses the first m boosting stages; stage `best` is the (best + 1)-th.
    dist = model.pred_dist(data.x_test, max_iter=None if best is None else best + 1)
    info = {"best_iteration": None if best is None else int(best), "stages_fitted": len(model.base_models)}
    return (*_gaussian(dist.loc, dist.scale**2), info)


def catboost_predictive(model, x, count=CB_VIRTUAL):
    """Mean and total variance of a CatBoost ``RMSEWithUncertainty`` model from virtual ensembles.

    ``virtual_ensembles_predict(prediction_type="TotalUncertainty")`` returns, per row, the mean
    prediction, the knowledge uncertainty (variance of the virtual members' means) and the data
    uncertainty (mean of their predicted variances), both variances in squared target units.
    """
    out = model.virtual_ensembles_predict(x, prediction_type="TotalUncertainty", virtual_ensembles_count=count)
    return out[:, 0], out[:, 1] + out[:, 2]


def run_catboost(data, args, *, iterations=CB_ITERATIONS, depths=CB_DEPTHS, od_wait=CB_OD_WAIT, cat_features=None):
    """CatBoost RMSEWithUncertainty, depth chosen on validation NLL. Returns (means, variances, weights, info).

    ``cat_features``: columns of ``data.x_*`` (frames) that CatBoost encodes as categories itself.
    """
    from catboost import CatBoostRegressor

    best = None
    for depth in depths:
        model = CatBoostRegressor(loss_function="RMSEWithUncertainty", learning_rate=CB_LR, iterations=iterations,
                                  od_type="Iter", od_wait=od_wait, posterior_sampling=True, depth=depth,
                                  cat_features=cat_features or None, thread_count=args.threads,
                                  random_seed=data.split, verbose=False, allow_writing_files=False)
        model.fit(data.x_fit, data.y_fit[:, 0], eval_set=(data.x_valid, data.y_valid[:, 0]), use_best_model=True)
        mean, var = catboost_predictive(model, data.x_valid)
        valid_nll = float(metrics.gaussian_nll(data.y_valid, mean[:, None], var[:, None])[0])
        if best is None or valid_nll < best[0]:
            best = (valid_nll, depth, model)
    valid_nll, depth, model = best
    mean, var = catboost_predictive(model, data.x_test)
    info = {"depth": depth, "valid_nll": valid_nll, "trees": int(model.tree_count_)}
    return (*_gaussian(mean, var), info)


def catalog_name(dataset: str, split: int, early_discarding: str, args) -> str:
    """The folder under ``--runs-dir`` of one split's catalog searched with ``early_discarding``:
    ``<dataset>-split<i>``, then ``-<early discarding>`` unless none, and for successive halving
    ``-min<N>`` / ``-steps`` where ``--sha-min-epochs`` / ``--sha-rungs`` are not the defaults."""
    suffix = "" if early_discarding == "none" else f"-{early_discarding}"  # "auto": -auto
    if early_discarding == "sha" and args.sha_min_epochs != "auto":
        suffix += f"-min{args.sha_min_epochs}"
    if early_discarding == "sha" and args.sha_rungs == "steps":
        suffix += "-steps"
    return f"{dataset}-split{split}{suffix}"


def run_autodeuq(data, args, early_discarding="none", run_dir=None):
    """AgEBO search + greedy ensemble through the scikit-learn estimator, one resumable catalog per
    split (``run_dir``, default ``--runs-dir``/<dataset>-split<i>[-<early discarding>])."""
    from autodeuq import AutoDEUQRegressor
    from autodeuq.catalog import Catalog

    run_dir = (Path(args.runs_dir) / catalog_name(data.name, data.split, early_discarding, args) if run_dir is None
               else Path(run_dir))
    resumed_entries = catalog_entries(run_dir) or 0
    model = AutoDEUQRegressor(space=args.space, search="agebo", max_evals=args.max_evals,
                              ensemble_size=args.ensemble_size, workers=args.workers, run_dir=run_dir,
                              seed=data.split, epochs=args.epochs, evaluator=args.evaluator,
                              early_discarding=early_discarding, refit=REFIT_CHOICES[args.refit],
                              calibrate=args.calibrate, eval_budget=args.eval_budget,
                              sha_min_epochs=args.sha_min_epochs, sha_rungs=args.sha_rungs, progress=False,
                              random_interleave=args.random_interleave,
                              **{name: getattr(args, name) for name in ENSEMBLE_OPTIONS if getattr(args, name)})
    model.fit(data.x_fit, data.y_fit, X_valid=data.x_valid, y_valid=data.y_valid)
    means, variances = model.ensemble_.components(data.x_test)
    with Catalog(run_dir) as catalog:  # what the run searched and trained, as recorded
        frame, full_trainings = catalog.to_dataframe(), len(catalog.full_trainings())
        space_sizes = catalog.space.describe_sizes()
        rule = (catalog.meta.get("search") or {}).get("early_discarding") or {}
        decision = (catalog.meta.get("search") or {}).get("discarding_decision")
    info = {"epochs": int(frame["epochs"].fillna(0).sum()), "catalog_entries": int(len(frame)),
            "failed": int(model.search_summary_.n_failed), "members": model.ensemble_.member_ids,
            "discarded": int(model.search_summary_.n_discarded), "early_discarding": early_discarding,
            "discarding_decision": decision,
            "full_trainings": full_trainings,
            "train_s_total": float(frame["wall_time"].fillna(0).sum()), "run_dir": str(run_dir),
            "weights": [float(w) for w in model.ensemble_.weights], "refit": args.refit,
            "refitted": model.ensemble_.refitted_ids, "selection_bags": model.selection_bags,
            "calibrate": args.calibrate, "std_scale": _std_scale(model.ensemble_),
            "resumed_entries": resumed_entries, "eval_budget": args.eval_budget,
            "random_interleave": args.random_interleave,
            "sha_min_epochs": rule.get("min_epochs"),
            "sha_reference_batch": rule.get("reference_batch"),
            "out_of_time": int(model.search_summary_.n_out_of_time),
            "space": str(args.space), "space_sizes": space_sizes,
            "settings": rescore_settings(args, data.sizes)}
    return means, variances, model.ensemble_.weights, info


def _std_scale(ensemble):
    # The recalibration's factor per target (None without recalibration).
    return None if ensemble.scale is None else [float(v) for v in ensemble.scale]


#: ``--refit`` values and the estimator's ``refit`` parameter they stand for.
REFIT_CHOICES = {"auto": "auto", "never": False, "always": True}
#: Options of the estimator's ensemble step that ``--selection-score``, ``--diversity`` and
#: ``--selection-pool`` set (unset: the estimator's defaults).
ENSEMBLE_OPTIONS = ("selection_score", "diversity", "selection_pool")

RUNNERS = {**{method: functools.partial(run_autodeuq, early_discarding=rule)
              for method, rule in EARLY_DISCARDING.items()},
           "deep-ensembles": run_deep_ensembles, "ngboost": run_ngboost,
           "catboost": run_catboost}
RESCORABLE = OURS  # every search of ours can have its ensemble step redone


# --------------------------------------------------------------------------- raw results
def load_raw(path: Path) -> list[dict]:
    """Records of ``uci_raw.json`` (an empty list when the file does not exist)."""
    if not path.exists():
        return []
    try:
        raw = json.loads(path.read_text())
        records = raw["records"]
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{path}: not a results file of this script ({exc}); move it away or pass another --results")
    return records


def save_raw(path: Path, records: list[dict]) -> None:
    atomic_write(path, json.dumps({"format": "autodeuq-uci-raw/1", "records": records}, indent=1).encode())


def update_raw(path: Path, record: dict) -> list[dict]:
    """Write one record into ``uci_raw.json``, replacing the record of the same (method, dataset,
    split); read, changed and written under a lock, so several runs of this script (a rescore
    beside a running benchmark) never drop each other's records. Returns all records."""
    import fcntl

    key = (record["method"], record["dataset"], record["split"])
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        records = [r for r in load_raw(path) if (r["method"], r["dataset"], r["split"]) != key]
        records.append(record)
        save_raw(path, records)
    return records


def add_space_option(p: argparse.ArgumentParser) -> None:
    """``--space``: the space autodeuq searches (this script's and the mixed-table benchmark's)."""
    p.add_argument("--space", default="tabular",
                   help="autodeuq: a shipped space's name or a space file (default: tabular); keep records "
                        "of other spaces apart with --results and --runs-dir")


def check_space(parser: argparse.ArgumentParser, space: str) -> None:
    """Refuse a ``--space`` that does not load, before any run (exit 2 with the reason)."""
    from autodeuq.search.space import SpaceError, load_space

    try:
        load_space(space)
    except SpaceError as exc:
        parser.error(f"--space: {exc}")


def catalog_entries(run_dir: Path) -> int | None:
    """Entries of the catalog in ``run_dir``; None when there is none."""
    from autodeuq.catalog import Catalog

    return len(Catalog(run_dir).to_dataframe()) if (run_dir / "catalog.sqlite").exists() else None


def ensemble_settings(refit, pool: float | None, others: dict | None = None) -> str:
    """How a record names the settings of its ensemble step (less the recalibration, which
    :func:`rescore_settings` adds per split): the estimator's ``selection_bags``, the refit, the
    pool as the fraction used (None: the regression default's; "auto" has meant the whole catalog
    before, so the fraction is always named), then ``others`` (options set apart from the defaults)."""
    from autodeuq import AutoDEUQRegressor
    from autodeuq.tasks import get_task

    pool = get_task("regression").auto_pool if pool is None else pool
    return (f"selection_bags={AutoDEUQRegressor().selection_bags}, refit={refit}, selection_pool={pool:g}"
            + "".join(f", {name}={value}" for name, value in (others or {}).items()))


def due_for_rescore(record: dict, args) -> bool:
    """Whether a recorded split of ours is done and its ensemble step had other settings than a
    rescore with ``args`` applies (:func:`rescore_settings`)."""
    return (record.get("status") == "done"
            and record["info"].get("rescored", record["info"]).get("settings") != rescore_settings(args, record))


def rescore_settings(args, record: dict) -> str:
    """The ensemble-step settings a rescore of ``record`` applies: the selection and refit
    defaults, and the recalibration ``--calibrate`` stands for on that split's rows."""
    from autodeuq.ensemble.calibration import resolve_calibration

    calibrate = resolve_calibration(args.calibrate, record.get("n_fit", 0) + record.get("n_valid", 0))[0]
    return args.settings_base + ("" if calibrate == "none" else f", calibrate={calibrate}")


def redone_record(previous: dict, recorded_entries: int, redo, settings: str, command: str) -> dict:
    """A recorded split of ours with its ensemble step redone on its complete catalog (no training:
    the search resumes with nothing left to do); ``redo(run_dir)`` fits the estimator there and
    returns ``(scores, info)``.

    The scores are replaced; the earlier ones stay under ``info["rescored"]["previous"]``. The
    wall time stays the recorded one (the search and the ensemble step it ran then), so that the
    cost of a split does not count two ensemble steps; the new step's own time is
    ``info["rescored"]["ensemble_s"]``.
    """
    run_dir = Path(previous["info"]["run_dir"])
    entries = catalog_entries(run_dir)
    if entries != recorded_entries:
        raise RuntimeError(f"{run_dir}: {entries} catalog entries, the record had {recorded_entries}; "
                           f"a rescore would train")
    t0 = time.time()
    scores, info = redo(run_dir)
    elapsed = time.time() - t0
    record = {**previous, **scores}
    info.pop("epochs", None)
    info.pop("resumed_entries", None)  # the catalog was complete: that is not a resumed search
    earlier = {k: previous.get(k) for k in ("nll", "nll_gaussian", "rmse", "coverage_90", "wall_s", "finished")}
    earlier["members"] = previous["info"].get("members")
    earlier["weights"] = previous["info"].get("weights")
    earlier["settings"] = previous["info"].get("rescored", {}).get(
        "settings", "the estimator's defaults on the day recorded, no refit")
    record["info"] = {**previous["info"], **info, "rescored": {
        "ensemble_s": round(elapsed, 3), "command": command, "settings": settings, "previous": earlier}}
    record["wall_s"] = previous["wall_s"]
    record["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    return record


def rescore_one(previous: dict, data, args) -> dict:
    """The ensemble step again, with the current defaults and the ensemble options given, on the
    complete catalog of a recorded autodeuq split (:func:`redone_record`)."""
    args = argparse.Namespace(**{**vars(args), "sha_min_epochs": "auto", "sha_rungs": "auto"})  # the catalog's own

    def redo(run_dir):
        means, variances, weights, info = RUNNERS[previous["method"]](data, args, run_dir=run_dir)
        return score(means, variances, weights, data.y_test), info

    return redone_record(previous, previous["info"]["catalog_entries"], redo, rescore_settings(args, previous),
                         args.command)


def run_one(method, data, args) -> dict:
    """Run one method on one split; the record holds the scores or, on failure, the reason."""
    record = {"method": method, "dataset": data.name, "split": data.split, "seed": data.seed, **data.sizes,
              "valid_fraction": args.valid_fraction}
    t0 = time.time()
    try:
        means, variances, weights, info = RUNNERS[method](data, args)
        record.update(score(means, variances, weights, data.y_test))
        record["status"] = "done"
    except MethodError as exc:
        record.update(status="failed", reason=str(exc))
        info = {}
    record["wall_s"] = round(time.time() - t0, 3)
    record["epochs"] = info.pop("epochs", None)
    record["info"] = info
    record["command"] = args.command
    record["machine"] = args.machine
    record["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    return record


# --------------------------------------------------------------------------- report
def _mean_se(values, digits=2):
    v = np.asarray(values, dtype=float)
    se = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0
    return f"{v.mean():.{digits}f} ± {se:.{digits}f}"


def _digits(dataset, key):
    # naval's targets are about 1e-3 wide; two decimals would print every RMSE as 0.00.
    return 4 if (dataset == "naval" and key == "rmse") else 2


def _resumed(record: dict) -> bool:
    # A search resumed from a partial catalog timed only its last part: no wall time to report.
    return bool(record.get("info", {}).get("resumed_entries"))


def defaults_method(dataset: str, records: list[dict]) -> str:
    """The benchmark method that stands for the estimator's ``early_discarding="auto"`` on
    ``dataset``: ``autodeuq-auto`` when ``records`` hold it, else the method the rule before it
    chose (``autodeuq-sha`` above :data:`ROWS_RULE` training + validation rows, else ``autodeuq``)."""
    if any(r["dataset"] == dataset and r["method"] == "autodeuq-auto" for r in records):
        return "autodeuq-auto"
    rows = [r["n_fit"] + r["n_valid"] for r in records if r["dataset"] == dataset and "n_fit" in r and "n_valid" in r]
    if not rows:
        return "autodeuq"
    return "autodeuq-sha" if max(rows) > ROWS_RULE else "autodeuq"


def rescore_note(ours: list[dict]) -> list[str]:
    """The report's lines on which of these records of ours had their ensemble step redone, and
    with what settings (none when none was)."""
    settings = Counter(r["info"].get("rescored", {}).get("settings") for r in ours)
    if not ours or list(settings) == [None]:
        return []
    parts = ", ".join(f"{n} as first recorded" if s is None else f"{n} with {s}" for s, n in settings.most_common())
    return [f"Ensemble step of the {len(ours)} AutoDEUQ splits (`--rescore` redoes it on the same catalogs, "
            f"the earlier scores kept in each record): {parts}. A redone split's wall time is the recorded "
            f"run's (its search and the ensemble step it ran then); the new step's own time is in its "
            f"record (`rescored.ensemble_s`).", ""]


def write_report(records: list[dict], path: Path) -> str:
    """Regenerate ``uci.md`` from the raw records; returns the text."""
    done = [r for r in records if r.get("status") == "done"]
    methods = [m for m in METHODS if any(r["method"] == m for r in done)]
    datasets = [d for d in DATASETS if any(r["dataset"] == d for r in done)]
    cell = {(m, d): [r for r in done if r["method"] == m and r["dataset"] == d] for m in methods for d in datasets}
    if any(m in methods for m in OURS[:2]):
        methods.insert(0, DEFAULTS)
        cell.update({(DEFAULTS, d): cell.get((defaults_method(d, done), d), []) for d in datasets})
    full = max((len(v) for v in cell.values()), default=0)

    def ours(m, d, key):
        # Records without ``key`` (``nll_gaussian`` of records scored before it existed) are left out
        # and counted in the cell; nothing is recomputed.
        rows = [r for r in cell[(m, d)] if key in r]
        lacking = len(cell[(m, d)]) - len(rows)
        if not rows:
            return "–" if not lacking else f"– ({lacking} split{'s' if lacking > 1 else ''} without {key})"
        text = _mean_se([r[key] for r in rows], _digits(d, key))
        if lacking:
            return f"{text} ({lacking} split{'s' if lacking > 1 else ''} without {key})"
        return text if len(rows) == full else f"{text} ({len(rows)} split{'s' if len(rows) > 1 else ''})"

    def mean_of(m, d, key):
        # The mean over the records of (m, d) that hold ``key``; None when none does.
        values = [r[key] for r in cell[(m, d)] if key in r]
        return float(np.mean(values)) if values else None

    def table(key, title, published=(), best=False):
        # ``published``: names of PUBLISHED whose ``key`` values are shown; ``key`` "nll_gaussian" and
        # "nll" show the published "nll" of the columns of that measure.
        head = [LABELS[m] for m in methods] + list(published) + ([BEST_LABEL] if best else [])
        lines = [f"**{title}**", "", "| dataset | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
        column = "nll" if key.startswith("nll") else key
        for d in datasets:
            row = [ours(m, d, key) for m in methods] + [f"{PUBLISHED[p][column][d]:.2f}" for p in published]
            if best:
                row.append(f"{BEST_PUBLISHED[d][0]:.2f} ({BEST_PUBLISHED[d][1]})")
            lines.append(f"| {d} | " + " | ".join(row) + " |")
        return lines + [""]

    def measures():
        # Which NLL each column holds, above the two NLL tables.
        gauss = [p for p in PUBLISHED if PUBLISHED_MEASURE[p] == "gaussian"]
        mixed = [p for p in PUBLISHED if PUBLISHED_MEASURE[p] == "mixture"]
        return ["Two test NLLs per split: the exact NLL of the predictive mixture (the records' `nll`) and the NLL of "
                "one Gaussian with the mixture's mean and total variance (moment matching, `nll_gaussian`); NGBoost "
                "and CatBoost predict one Gaussian per row, so their two coincide. The published numbers: "
                + " and ".join(gauss) + " report the moment-matched Gaussian NLL of their ensembles, so they stand in "
                "the first table; " + " and ".join(mixed) + " reports the log-likelihood of the equal-weight mixture "
                "of the Gaussians of its dropout samples (the authors' code), so it stands in the second; in the "
                f"\"{BEST_LABEL}\" column, thesis is the moment-matched Gaussian NLL of AutoDEUQ (thesis), DER "
                "(Deep Evidential Regression, Amini et al. 2020, Table 1) the NLL of its Student-t predictive, and "
                "WGBoost (Matsubara 2024, arXiv 2405.09536, Table 1) the NLL of its predictive distribution, the "
                "average over its particles.", ""]

    def gaussian_summary():
        # On the moment-matched Gaussian NLL: where "AutoDEUQ (defaults)" is below the thesis and the best published.
        if DEFAULTS not in methods:
            return []
        ours_g = {d: mean_of(DEFAULTS, d, "nll_gaussian") for d in datasets}
        ds = [d for d in datasets if ours_g[d] is not None]
        if not ds:
            return [f"{LABELS[DEFAULTS]}: no record holds `nll_gaussian`; no comparison with the published "
                    "numbers.", ""]
        refs = {"the thesis' AutoDEUQ": {d: PUBLISHED["AutoDEUQ (thesis)"]["nll"][d] for d in ds},
                "the best published result": {d: BEST_PUBLISHED[d][0] for d in ds}}
        parts = []
        for name, ref in refs.items():
            below = [d for d in ds if ours_g[d] < ref[d]]
            parts.append(f"below {name} on {len(below)} of {len(ds)}" + (f" ({', '.join(below)})" if below else ""))
        return [f"On the moment-matched Gaussian NLL, {LABELS[DEFAULTS]} is " + " and ".join(parts) + ".", ""]

    def rmse_summary():
        # Where "AutoDEUQ (defaults)" has a lower test RMSE than the thesis, compared at the two decimals
        # the thesis publishes (its naval RMSE is 0.00: only a mean that rounds to 0.00 ties it).
        if DEFAULTS not in methods:
            return []
        thesis = PUBLISHED["AutoDEUQ (thesis)"]["rmse"]
        ours_r = {d: mean_of(DEFAULTS, d, "rmse") for d in datasets if d in thesis}
        ds = [d for d in ours_r if ours_r[d] is not None]
        if not ds:
            return []
        groups = {"below": [], "level with": [], "above": []}
        for d in ds:
            ours_2, theirs = round(ours_r[d], 2), thesis[d]
            groups["below" if ours_2 < theirs else "level with" if ours_2 == theirs else "above"].append(d)
        parts = [f"{name} it on {len(g)} of {len(ds)}" + (f" ({', '.join(g)})" if g else "")
                 for name, g in groups.items()]
        return [f"On the test RMSE, compared at the two decimals the thesis publishes, {LABELS[DEFAULTS]} is "
                f"{parts[0]}, {parts[1]} and {parts[2]}.", ""]

    def cost_table():
        lines = ["**Cost per split** (mean wall time in seconds; epochs for the networks)", "",
                 "| dataset | " + " | ".join(LABELS[m] for m in methods) + " |", "|---" * (len(methods) + 1) + "|"]
        for d in datasets:
            row = []
            for m in methods:
                rows = cell[(m, d)]
                if not rows:
                    row.append("–")
                    continue
                timed = [r["wall_s"] for r in rows if not _resumed(r)]
                text = f"{np.mean(timed):.0f} s" if timed else "resumed"
                if timed and len(timed) < len(rows):
                    n = len(rows) - len(timed)
                    text += f" ({n} resumed split{'s' if n > 1 else ''} left out)"
                epochs = [r["epochs"] for r in rows if r.get("epochs") is not None]
                row.append(text + (f", {np.mean(epochs):.0f} epochs" if epochs else ""))
            lines.append(f"| {d} | " + " | ".join(row) + " |")
        return lines + [""]

    def discarding_table():
        # Splits run without and with early discarding: what each policy saves and what it costs in test NLL.
        by = {(r["method"], r["dataset"], r["split"]): r for r in done}
        pairs = sorted({(d, i) for (m, d, i) in by if m == "autodeuq"
                        and any((o, d, i) in by for o in OURS[1:])}, key=lambda p: (DATASETS.index(p[0]), p[1]))
        if not pairs:
            return []
        lines = ["**Early discarding** (the same splits searched without and with it)", "",
                 "| dataset | split | early discarding | epochs | fewer epochs | test NLL | difference | wall time |",
                 "|---" * 8 + "|"]
        names = {"none": "none", "sha": "successive halving", "iepoch": "i-Epoch", "auto": "by cost"}
        for d, i in pairs:
            base = by[("autodeuq", d, i)]
            for m in OURS:
                policy = names[EARLY_DISCARDING[m]]
                r = by.get((m, d, i))
                if r is None:
                    continue
                if m == "autodeuq-sha":  # records from before the first rung was recorded ran with 1
                    policy = f"successive halving, first rung {r['info'].get('sha_min_epochs') or 1}"
                    if r["info"].get("sha_reference_batch"):
                        policy += f", rungs in steps of batches of {r['info']['sha_reference_batch']}"
                if m == "autodeuq-auto" and r["info"].get("discarding_decision"):
                    chose = r["info"]["discarding_decision"]["policy"]
                    policy += ": successive halving" if chose == "sha" else ": none"
                fewer = "" if m == "autodeuq" else f"{base['epochs'] / max(r['epochs'], 1):.1f}×"
                diff = "" if m == "autodeuq" else f"{r['nll'] - base['nll']:+.3f}"
                wall = "resumed" if _resumed(r) else f"{r['wall_s']:.0f} s"
                lines.append(f"| {d} | {i} | {policy} | {r['epochs']} | {fewer} | {r['nll']:.3f} | {diff} "
                             f"| {wall} |")
        return lines + [""]

    def decision_table():
        # What early_discarding="auto" chose on each split, and the search time it projected when it chose.
        auto = [r for r in done if r["method"] == "autodeuq-auto" and r["info"].get("discarding_decision")]
        if not auto:
            return []
        lines = ["**Early discarding decided by cost** (`autodeuq-auto`: after its first trainings each search "
                 "projected its whole time and turned successive halving on above the budget; after 0.3.0 a search "
                 "projected within the budget projects again after each later training. In brackets: the projection "
                 "of the decision recorded last, and the trainings finished when it was taken)", "",
                 "| dataset | budget | no discarding: splits (projected) | successive halving: splits (projected) |",
                 "|---|---|---|---|"]
        for d in datasets:
            mine = sorted((r for r in auto if r["dataset"] == d), key=lambda r: r["split"])
            if not mine:
                continue
            budgets = sorted({r["info"]["discarding_decision"]["budget_s"] for r in mine})
            cells = []
            for policy in ("none", "sha"):
                chosen = [r for r in mine if r["info"]["discarding_decision"]["policy"] == policy]
                cells.append(", ".join(f"{r['split']} ({r['info']['discarding_decision']['projected_s']:.0f} s, "
                                       f"{r['info']['discarding_decision']['after_trainings']})"
                                       for r in chosen) or "–")
            lines.append(f"| {d} | {' / '.join(f'{b:.0f} s' for b in budgets)} | {cells[0]} | {cells[1]} |")
        return lines + [""]

    def standing():
        # For each of our methods: on how many datasets its mean test NLL is below each reference.
        lines = []
        for m in (m for m in (DEFAULTS, *OURS) if m in methods):
            ds = [d for d in datasets if cell[(m, d)]]
            # The methods run here on the exact mixture NLL; the thesis on its measure, the Gaussian NLL.
            refs = {(LABELS[o], "nll"): {d: mean_of(o, d, "nll") for d in ds if cell[(o, d)]}
                    for o in methods if o not in (DEFAULTS, *OURS)}
            refs[("AutoDEUQ (thesis)", "nll_gaussian")] = {d: PUBLISHED["AutoDEUQ (thesis)"]["nll"][d] for d in ds
                                                           if mean_of(m, d, "nll_gaussian") is not None}
            parts, losses = [], []
            for (name, key), ref in refs.items():
                if not ref:  # no record of m holds key
                    continue
                ours = {d: mean_of(m, d, key) for d in ref}
                wins = [d for d in ref if ours[d] < ref[d]]
                on = " (Gaussian NLL)" if key == "nll_gaussian" else ""
                parts.append(f"{name}{on} on {len(wins)} of {len(ref)}")
                behind = ", ".join(f"{d} by {ours[d] - ref[d]:.3f}" for d in ref if d not in wins)
                if behind:
                    losses.append(f"{name}{on} on {behind}")
            plural = "s" if len(ds) > 1 else ""
            lines.append(f"- {LABELS[m]} ({len(ds)} dataset{plural} so far): mean test NLL below "
                         + ", ".join(parts) + "." + (" Above " + "; ".join(losses) + "." if losses else ""))
        return lines + [""] if lines else []

    def notes(file: Path) -> list[str]:
        # hand-written findings kept next to the generated report (what was measured about a result)
        return [file.read_text().strip(), ""] if file.is_file() else []

    failed = [r for r in records if r.get("status") != "done"]
    shown = [portable_command(r["command"]) for r in records if r.get("command")]
    commands = sorted({c for c, _ in shown})
    holders = sorted(set().union(*(u for _, u in shown)))
    holder_text = {"DATA_DIR": "DATA_DIR (the folder of the nine datasets)", "RUNS_DIR": "RUNS_DIR (a folder of "
                   "catalogs)", "RESULTS_DIR": "RESULTS_DIR (a scratch results folder)", "DIR": "DIR (a folder)"}
    machines = Counter(r["machine"] for r in records if r.get("machine"))
    if len(machines) > 1:  # machine descriptions hold commas: quote them, and say which runs each one did
        machines = {f"`{m}` ({n} run{'s' if n > 1 else ''})": n for m, n in sorted(machines.items())}
    splits = sorted({r["split"] for r in done})
    lines = [
        "# UCI regression benchmark (standard splits)",
        "",
        "Data: the nine regression datasets with the fixed train/test splits of PBP (Hernández-Lobato & Adams "
        "2015), also used by MC dropout (Gal & Ghahramani 2016) and Deep Ensembles (Lakshminarayanan et al. "
        "2017); files from the public repository of the MC-dropout experiments, read from `--data-dir` "
        "(see `benchmarks/uci_data.py`).",
        "",
        f"Protocol, the same for every method: for split i, a seeded {100 * VALID_FRACTION:.0f} % of the training rows "
        "(seed i) is the validation part (early stopping, search, ensemble selection); the rest is fitted; the test "
        "rows are scored once. Values: mean ± standard error over splits "
        f"{', '.join(map(str, splits)) if splits else '–'} of the per-point test NLL (natural log, original units), "
        "the test RMSE, and the share of test targets inside the central 90 % interval. Method settings: "
        "docstring of `benchmarks/uci.py`.",
        "",
        "Command(s): " + ("; ".join(f"`{c}`" for c in commands) if commands else "–"),
        "",
        *([f"Paths of the machine that ran them are shown as {', '.join(holder_text[h] for h in holders)}.", ""]
          if holders else []),
        "Machine: " + ("; ".join(machines) if machines else "–") + "; single-threaded (TensorFlow, OpenMP and "
        "CatBoost threads 1). Wall times are those of that machine in the state it names.",
        "",
        *rescore_note([r for r in records if r["method"] in RESCORABLE and r["status"] == "done"]),
        *measures(),
        *table("nll_gaussian", "Test NLL, moment-matched Gaussian (the measure of the published results; lower is "
               "better)", [p for p in PUBLISHED if PUBLISHED_MEASURE[p] == "gaussian"], best=True),
        *table("nll", "Test NLL, exact mixture (lower is better)",
               [p for p in PUBLISHED if PUBLISHED_MEASURE[p] == "mixture"]),
        *gaussian_summary(),
        *table("rmse", "Test RMSE", list(PUBLISHED)),
        *rmse_summary(),
        *table("coverage_90", "Coverage of the central 90 % interval (nominal 0.90)"),
        *cost_table(),
        *discarding_table(),
        *decision_table(),
        *standing(),
        *notes(path.parent / "uci_notes.md"),
        "Published columns (means over their splits; not measured here): AutoDEUQ (thesis): Egele et al. 2022, "
        "thesis Table 6.1 (500-model catalog, ensemble of 5, random train/validation splits). Deep Ensembles "
        "(paper): Lakshminarayanan et al. 2017, Table 1 (20 splits, 5 for protein; trained on the whole training "
        "part). MC dropout (paper): Gal & Ghahramani 2016, Table 1, test log-likelihood with the sign flipped "
        "(NLL = −LL) and RMSE. Our Deep Ensembles fit 80 % of each training part (the protocol above), so they "
        "see less data than the published ones.",
        "",
    ]
    de_lrs = sorted({r["info"].get("learning_rate") for r in done if r["method"] == "deep-ensembles"} - {None})
    if de_lrs:
        lines += [f"Deep Ensembles here: Adam learning rate {', '.join(map(str, de_lrs))}. The paper states 0.1; with "
                  "0.1 this implementation's members diverge on several datasets and miss the paper's Table 1 by "
                  "far, while 0.01 matches it (docstring of `benchmarks/uci.py`).", ""]
    outliers = [(m, d, r) for (m, d), rows in cell.items() for r in rows
                if m != DEFAULTS and len(rows) > 2 and r["nll"] > np.median([x["nll"] for x in rows]) + OUTLIER_NATS]
    if outliers:
        lines += [f"Single splits whose test NLL exceeds the median of their cell by more than {OUTLIER_NATS:g} "
                  "(they dominate the mean): "
                  + "; ".join(f"{LABELS[m]} {d} split {r['split']}: {r['nll']:.2f} (median "
                              f"{np.median([x['nll'] for x in cell[(m, d)]]):.2f})" for m, d, r in outliers) + ".", ""]
    if failed:
        lines += ["Failed runs: " + "; ".join(f"{r['method']} {r['dataset']} split {r['split']}: {r.get('reason')}"
                                            for r in failed), ""]
    earlier = Path(os.path.relpath(RESULTS / "uci_random_splits.md", path.parent)).as_posix()
    lines += [f"Per split (raw numbers): `{_shown(path.parent / 'uci_raw.json')}`. Earlier results on boston and "
              f"concrete with another protocol (seeded random 90/10 splits): [uci_random_splits.md]({earlier}).", ""]
    text = "\n".join(lines)
    path.write_text(text)
    return text


def portable_command(command: str) -> tuple[str, set[str]]:
    """``command`` with the absolute paths of the machine that ran it replaced by placeholders.

    ``--data-dir /abs`` becomes ``--data-dir DATA_DIR``; ``--runs-dir`` and ``--results`` keep the
    folder's own name (``RUNS_DIR/uci_floor``), which tells apart runs kept apart; any other absolute
    path becomes ``DIR/<its name>``. Relative paths and every other word stay as they were. Returns
    the command and the placeholders it uses.
    """
    words, used, option = shlex.split(command), set(), None
    for i, word in enumerate(words):
        name, eq, value = word.partition("=") if word.startswith("--") else (option, "", word)
        if value.startswith("/"):
            holder = PATH_PLACEHOLDERS.get(name, "DIR")
            shown = holder if holder == "DATA_DIR" else f"{holder}/{Path(value).name}"
            words[i] = f"{name}={shown}" if eq else shown
            used.add(holder)
        option = word if word.startswith("--") and not eq else None
    return shlex.join(words), used


def _shown(path: Path) -> str:
    """``path`` relative to the checkout when it lies inside it (as the README cites it), else absolute."""
    path, repo = path.resolve(), REPO.resolve()
    return path.relative_to(repo).as_posix() if path.is_relative_to(repo) else str(path)


# --------------------------------------------------------------------------- command line
def parse_command_line(parser, argv, script: str, raw_name: str, load=None):
    """Parse the command line of the benchmark ``script`` and read its raw results.

    Returns ``(args, records, raw path)``: ``args.command`` is the command as typed (for the
    records), the raw file is ``--results``/``raw_name``, read by ``load`` (default
    :func:`load_raw`); a file that is not a results file is one parser error (exit 2).
    """
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    args.command = f"python benchmarks/{script} " + " ".join(shlex.quote(a) for a in given)
    raw_path = args.results / raw_name
    try:
        records = (load or load_raw)(raw_path)
    except DataError as exc:
        parser.error(str(exc))
    return args, records, raw_path


def check_at_least_one(parser, values) -> None:
    """One parser error for the first ``(flag, value)`` of ``values`` below 1."""
    for name, value in values:
        if value < 1:
            parser.error(f"{name} must be >= 1, got {value}")


def parse_splits(text: str) -> list[int]:
    """``"0-4"``, ``"0,3,7"`` or ``"2"`` -> sorted split indices."""
    out: set[int] = set()
    try:
        for part in text.split(","):
            if "-" in part:
                lo, hi = (int(p) for p in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid split list {text!r}; use e.g. 0-4 or 0,2,5") from None
    if any(s < 0 for s in out):
        raise argparse.ArgumentTypeError(f"split indices must be >= 0, got {text!r}")
    return sorted(out)


def pool_fraction(text: str) -> float:
    """``--selection-pool``'s value: a number, in the bounds of the estimator's ``selection_pool``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}") from None
    try:
        BY_NAME["selection_pool"].constraint.check("--selection-pool", value)
    except ParameterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="uci.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS),
                   help="run in the order given (default: smallest first)")
    p.add_argument("--splits", type=parse_splits, default=parse_splits("0-4"), help="e.g. 0-4 (default) or 0,2,5")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="folder of the nine dataset folders (default: <repo>/../shared/datasets/uci)")
    p.add_argument("--results", type=Path, default=RESULTS,
                   help="folder of uci_raw.json and uci.md (default: benchmarks/results)")
    p.add_argument("--report", action="store_true", help="only regenerate uci.md from uci_raw.json")
    p.add_argument("--runs-dir", type=Path, default=Path("runs/uci"), help="autodeuq catalogs (default: runs/uci)")
    p.add_argument("--max-evals", type=int, default=100, help="autodeuq: AgEBO evaluations per split (default: 100)")
    p.add_argument("--ensemble-size", type=int, default=5, help="autodeuq: ensemble size (default: 5)")
    add_space_option(p)
    p.add_argument("--epochs", type=int, default=None, help="autodeuq: override the space's epochs")
    p.add_argument("--evaluator", choices=("ray", "serial"), default="ray", help="autodeuq evaluator (default: ray)")
    p.add_argument("--workers", type=int, default=None, help="autodeuq: concurrent evaluations on Ray")
    p.add_argument("--eval-budget", type=float, default=None,
                   help="autodeuq: seconds each training may take (the estimator's eval_budget; default: none)")
    p.add_argument("--random-interleave", type=float, default=BY_NAME["random_interleave"].default, metavar="P",
                   help="autodeuq: probability that a suggestion of the BO half is drawn at random "
                        "(default: the estimator's)")
    p.add_argument("--sha-min-epochs", type=lambda v: v if v == "auto" else int(v), default="auto", metavar="N",
                   help="autodeuq-sha: epoch of the first rung (default: auto, the estimator's sha_min_epochs)")
    p.add_argument("--sha-rungs", choices=RUNG_UNITS, default="auto",
                   help="autodeuq-sha: what the rungs count (default: auto, the estimator's sha_rungs)")
    p.add_argument("--de-lr", type=float, default=DE_LR,
                   help=f"deep-ensembles: Adam learning rate (default: {DE_LR}; the paper states {DE_PAPER_LR})")
    p.add_argument("--refit", choices=tuple(REFIT_CHOICES), default="auto",
                   help="autodeuq: refit the selected members on training + validation rows (default: auto, "
                        "the estimator's default: up to 1000 rows)")
    p.add_argument("--calibrate", choices=CALIBRATIONS, default="auto",
                   help="autodeuq: the estimator's recalibration of the predictive std (default: auto, the "
                        "estimator's default: above 1000 rows); keep records of other values apart with --results")
    p.add_argument("--selection-score", choices=SCORES, default=None,
                   help="autodeuq: what the ensemble selection minimizes on the validation rows "
                        "(default: the estimator's)")
    p.add_argument("--diversity", choices=DIVERSITY, default=None,
                   help="autodeuq: at most one member per architecture or per set of activations "
                        "(default: the estimator's)")
    p.add_argument("--selection-pool", type=pool_fraction, default=None, metavar="F",
                   help="autodeuq: select among the best fraction F of each catalog's models (default: the "
                        "estimator's)")
    p.add_argument("--rescore", action="store_true",
                   help="autodeuq: redo only the ensemble step of recorded splits on their complete catalogs, "
                        "with the current defaults and the ensemble options given (earlier scores kept in the "
                        "record)")
    p.add_argument("--threads", type=int, default=1, help="threads of TensorFlow, OpenMP and CatBoost (default: 1)")
    p.add_argument("--valid-fraction", type=float, default=VALID_FRACTION, help=argparse.SUPPRESS)
    p.add_argument("--machine", default=f"{os.cpu_count()}-core {platform.machine()} CPU",
                   help="machine description written into the results")
    return p


def _limit_threads(n: int) -> None:
    # Must happen before TensorFlow, OpenMP or BLAS start their pools.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
                "TF_NUM_INTEROP_THREADS"):
        os.environ[var] = str(n)


def main(argv=None) -> int:
    parser = build_parser()
    args, records, raw_path = parse_command_line(parser, argv, "uci.py", "uci_raw.json")
    md_path = args.results / "uci.md"
    if args.report:
        print(write_report(records, md_path))
        return 0
    check_at_least_one(parser, (("--max-evals", args.max_evals), ("--ensemble-size", args.ensemble_size),
                                ("--threads", args.threads)))
    if not args.de_lr > 0:
        parser.error(f"--de-lr must be > 0, got {args.de_lr}")
    data_dir = args.data_dir if args.data_dir is not None else default_data_dir(REPO)
    if not data_dir.is_dir():
        parser.error(f"data folder {data_dir} not found; pass --data-dir FOLDER (the folder holding "
                     f"{', '.join(DATASETS)})")
    try:
        for name in args.datasets:
            available = n_splits(data_dir, name)
            missing = [s for s in args.splits if s >= available]
            if missing:
                parser.error(f"{data_dir / name} has {available} splits (0-{available - 1}); "
                             f"split(s) {missing} do not exist")
    except DataError as exc:
        parser.error(str(exc))
    from autodeuq import AutoDEUQRegressor

    check_space(parser, args.space)
    defaults = AutoDEUQRegressor()
    others = [name for name in ENSEMBLE_OPTIONS
              if name != "selection_pool" and getattr(args, name) not in (None, getattr(defaults, name))]
    args.settings_base = ensemble_settings(args.refit, args.selection_pool,
                                           {name: getattr(args, name) for name in others})
    _limit_threads(args.threads)
    args.results.mkdir(parents=True, exist_ok=True)
    done = {(r["method"], r["dataset"], r["split"]): r for r in records}
    for name in args.datasets:
        for split in args.splits:
            if args.rescore:
                recorded = {m: done.get((m, name, split), {}) for m in args.methods if m in RESCORABLE}
                todo = [m for m, r in recorded.items() if due_for_rescore(r, args)]
            else:
                todo = [m for m in args.methods if (m, name, split) not in done]
            if not todo:
                continue
            try:
                data = load_split(data_dir, name, split, valid_fraction=args.valid_fraction)
            except DataError as exc:
                parser.error(str(exc))
            for method in todo:
                record = (rescore_one(done[(method, name, split)], data, args) if args.rescore
                          else run_one(method, data, args))
                records = update_raw(raw_path, record)
                write_report(records, md_path)
                scores = (f"nll {record['nll']:.3f} rmse {record['rmse']:.4g} cov90 {record['coverage_90']:.2f}"
                          if record["status"] == "done" else f"FAILED: {record['reason']}")
                print(f"{name} split {split} {method}: {scores} ({record['wall_s']:.0f} s)", flush=True)
    print(f"results: {raw_path}, {md_path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
