"""The task a target asks for, and the classes of a classification target.

:func:`decide_task` reads a target column and the ``task`` option (``auto``, ``regression`` or
``classification``) and returns the task with the reason, said in the run's first line. The rule
of ``auto``: a target of text, booleans or a pandas category is a class label; a numeric target is
a quantity. A numeric target of few distinct integers is still regression, but the reason says so
and how to ask for classification: the count of distinct values alone cannot tell a rating
(regression) from a class code.

:class:`Labels` holds the classes of a classification target (sorted, any type that sorts: text,
integers, booleans), turns labels into class codes ``0..K-1`` and back, and is saved with the
model as JSON.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autodeuq.core.errors import AutoDEUQError, ParameterError

TASKS = ("auto", "regression", "classification")
CLASS_WEIGHTS = ("none", "balanced")
#: With at most this many distinct integer values, a numeric target's ``auto`` line suggests classification.
FEW_INTEGERS = 10
#: Rows a class needs in the training table: one to train on, one to validate with.
MIN_CLASS_ROWS = 2


class LabelError(AutoDEUQError, ValueError):
    """A classification target that cannot be learned (one class, a class too rare, an unknown label)."""


@dataclass(frozen=True)
class TaskChoice:
    """The task of a run and why (``reason`` completes "classification because ...")."""

    task: str
    reason: str

    def line(self) -> str:
        return f"task: {self.task} ({self.reason})"


def _is_label_column(series) -> bool:
    import pandas as pd

    return not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series)


def decide_task(frame, targets: Sequence[str], requested: str = "auto") -> TaskChoice:
    """The task for the target columns ``targets`` of ``frame`` (a DataFrame).

    Raises
    ------
    ParameterError
        ``requested`` is not one of :data:`TASKS`.
    LabelError
        Classification of several target columns (one class column per run), or ``auto`` on
        several targets of which some hold labels.

    Examples
    --------
    >>> import pandas as pd
    >>> decide_task(pd.DataFrame({"y": ["a", "b"]}), ["y"]).line()
    "task: classification (target 'y' holds text)"
    >>> decide_task(pd.DataFrame({"y": [1, 2, 3]}), ["y"]).line()  # doctest: +NORMALIZE_WHITESPACE
    "task: regression (target 'y' holds 3 distinct integers: a quantity; --task classification
    treats them as classes)"
    """
    if requested not in TASKS:
        raise ParameterError("task", f"must be one of {list(TASKS)}", requested)
    targets = list(targets)
    if requested == "classification" or (requested == "auto" and any(_is_label_column(frame[t]) for t in targets)):
        if len(targets) != 1:
            raise LabelError(f"classification takes one target column, got {len(targets)} ({targets}): "
                             f"run one classification per column")
        if requested == "classification":
            return TaskChoice("classification", "as asked")
        series = frame[targets[0]]
        import pandas as pd

        kind = ("booleans" if pd.api.types.is_bool_dtype(series)
                else "categories" if isinstance(series.dtype, pd.CategoricalDtype) else "text")
        return TaskChoice("classification", f"target {targets[0]!r} holds {kind}")
    if requested == "regression":
        return TaskChoice("regression", "as asked")
    if len(targets) == 1:
        values = frame[targets[0]].dropna().to_numpy(dtype=np.float64)
        distinct = np.unique(values)
        if 1 < distinct.size <= FEW_INTEGERS and np.all(distinct == np.round(distinct)):
            return TaskChoice("regression", f"target {targets[0]!r} holds {distinct.size} distinct integers: a "
                                            f"quantity; --task classification treats them as classes")
    return TaskChoice("regression", "numeric target" + ("s" if len(targets) > 1 else ""))


def _python_value(value):
    """A label as a plain Python value (JSON-safe): numpy scalars become int, float, bool or str."""
    if isinstance(value, (np.generic,)):
        value = value.item()
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _kind(value) -> str:
    """What a label is: text, a boolean or a number (an int and a float are one kind: 1 == 1.0)."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, float, np.integer, np.floating)):
        return "number"
    return "text"


def _refuse_mixed(values, source: str, target: str):
    kinds = sorted({type(v).__name__ for v in values})
    raise LabelError(f"{source}: target {target!r} mixes labels of types {kinds}; "
                     f"write every label the same way (as text, say)")


def check_label_types(values, source: str, target: str = "y") -> None:
    """Refuse labels (missing ones left out) of more than one kind: text with numbers or booleans,
    booleans with numbers (True would be the class 1). Labels keep their type, so a column of
    mixed kinds has no one type to keep.

    Raises
    ------
    LabelError
        Naming the types found.
    """
    values = [_python_value(v) for v in values]
    if len({_kind(v) for v in values}) > 1:
        _refuse_mixed(values, source, target)


class Labels:
    """The classes of a classification target, sorted, and the codes ``0..K-1`` they map to.

    Examples
    --------
    >>> labels = Labels.fit(["no", "yes", "no", "yes"], "train.csv", "fault")
    >>> labels.classes, labels.encode(["yes", "no"], "test.csv").tolist()
    (['no', 'yes'], [1, 0])
    >>> labels.decode([1, 1]).tolist()
    ['yes', 'yes']
    """

    def __init__(self, classes: Sequence, target: str = "y"):
        self.classes = [_python_value(c) for c in classes]
        self.target = str(target)
        self._index = {c: k for k, c in enumerate(self.classes)}

    @classmethod
    def fit(cls, values, source: str, target: str = "y") -> Labels:
        """The classes of training labels ``values``, each with at least :data:`MIN_CLASS_ROWS` rows.

        Raises
        ------
        LabelError
            Fewer than two classes, a class with fewer than two rows, or labels of mixed types
            that do not sort (numbers and text in one column).
        """
        values = [_python_value(v) for v in values]
        check_label_types(values, source, target)
        try:
            classes, counts = np.unique(np.asarray(values, dtype=object), return_counts=True)
        except TypeError:
            _refuse_mixed(values, source, target)
        if len(classes) < 2:
            raise LabelError(f"{source}: target {target!r} has a single class ({classes[0]!r} if any); "
                             f"classification needs at least two")
        rare = [(c, int(n)) for c, n in zip(classes, counts) if n < MIN_CLASS_ROWS]
        if rare:
            shown = ", ".join(f"{c!r} ({n} row)" for c, n in rare[:5])
            raise LabelError(f"{source}: target {target!r}: class {shown} has fewer than {MIN_CLASS_ROWS} rows; "
                             f"each class needs rows to train on and to validate with (merge or drop it)")
        return cls(list(classes), target)

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    def encode(self, values, source: str) -> np.ndarray:
        """The codes of ``values`` (int64).

        Raises
        ------
        LabelError
            A label that is not a training class, naming the first such data row (1-based).
        """
        codes = np.empty(len(values), dtype=np.int64)
        for row, value in enumerate(values):
            code = self._index.get(_python_value(value))
            if code is None:
                raise LabelError(f"{source}: data row {row + 1}: target {self.target!r} is {value!r}, a class absent "
                                 f"from the training rows (classes: {self.classes})")
            codes[row] = code
        return codes

    def decode(self, codes) -> np.ndarray:
        """The labels of class codes, as an array of the classes' type (object for text)."""
        return self.array()[np.asarray(codes, dtype=np.int64)]

    def array(self) -> np.ndarray:
        """The classes as a 1-D numpy array (scikit-learn's ``classes_``)."""
        kinds = {type(c) for c in self.classes}
        if kinds == {bool}:
            return np.asarray(self.classes, dtype=bool)
        if kinds <= {int}:
            return np.asarray(self.classes, dtype=np.int64)
        if kinds <= {int, float}:
            return np.asarray(self.classes, dtype=np.float64)
        return np.asarray(self.classes, dtype=object)

    def to_dict(self) -> dict:
        return {"classes": list(self.classes), "target": self.target}

    @classmethod
    def from_dict(cls, d: dict) -> Labels:
        return cls(d["classes"], d.get("target", "y"))

    def __eq__(self, other):
        return isinstance(other, Labels) and self.classes == other.classes and self.target == other.target

    def __repr__(self):
        return f"Labels({self.classes!r}, target={self.target!r})"


def check_class_weight(name: str, value) -> None:
    """Refuse a ``class_weight`` that is not one of :data:`CLASS_WEIGHTS` nor a mapping of labels to
    positive finite weights."""
    if isinstance(value, str) and value in CLASS_WEIGHTS:
        return
    if isinstance(value, dict) and value and all(
            isinstance(w, (int, float, np.integer, np.floating)) and not isinstance(w, bool) and np.isfinite(w)
            and w > 0 for w in value.values()):
        return
    raise ParameterError(name, f"must be one of {list(CLASS_WEIGHTS)} or a mapping of classes to positive weights",
                         value)


def resolve_class_weight(class_weight, labels: Labels):
    """``class_weight`` as a run records it: ``"none"``, ``"balanced"``, or one weight per class in
    the order of ``labels.classes`` (from a mapping keyed by the labels, or by their text as JSON
    keys are; a class it leaves out weighs 1).

    Raises
    ------
    ParameterError
        A key that names no class.
    """
    check_class_weight("class_weight", class_weight)
    if not isinstance(class_weight, dict):
        return class_weight
    by_text = {str(c): k for k, c in enumerate(labels.classes)}
    weights = [1.0] * labels.n_classes
    for key, weight in class_weight.items():
        k = labels._index.get(_python_value(key), by_text.get(str(key)))
        if k is None:
            raise ParameterError("class_weight", f"names classes of the target; {key!r} is not one of "
                                                 f"{labels.classes}", class_weight)
        weights[k] = float(weight)
    return weights


def class_row_weights(codes, n_classes: int, class_weight) -> np.ndarray:
    """Per-row weights of the training loss: ones (``"none"``), ``"balanced"`` (King & Zeng 2001's
    weighting, as scikit-learn's ``class_weight="balanced"``: ``n / (K * n_k)`` for a row of class
    ``k``, so each class weighs the same in total), or one weight per class (a list, as
    :func:`resolve_class_weight` gives it).
    """
    codes = np.asarray(codes, dtype=np.int64).reshape(-1)
    if isinstance(class_weight, (list, tuple)):
        return np.asarray(class_weight, dtype=np.float64)[codes]
    if class_weight == "none":
        return np.ones(len(codes))
    if class_weight != "balanced":
        raise ParameterError("class_weight", f"must be one of {list(CLASS_WEIGHTS)}", class_weight)
    counts = np.bincount(codes, minlength=n_classes).astype(np.float64)
    per_class = np.where(counts > 0, len(codes) / (n_classes * np.maximum(counts, 1)), 0.0)
    return per_class[codes]


def stratified_split(codes, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training indices, validation indices): ``fraction`` of each class's rows validate (at least
    one, and at least one of each class stays for training), seeded."""
    codes = np.asarray(codes, dtype=np.int64).reshape(-1)
    rng = np.random.default_rng(seed)
    train, valid = [], []
    for k in np.unique(codes):
        rows = rng.permutation(np.flatnonzero(codes == k))
        n_valid = min(max(1, int(round(len(rows) * fraction))), len(rows) - 1)
        valid.append(rows[:n_valid])
        train.append(rows[n_valid:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(valid))


def check_codes(y_codes, n_rows: int, n_classes: int) -> np.ndarray:
    """``y_codes`` as an int64 array of ``n_rows`` class codes in ``[0, n_classes)``.

    Raises
    ------
    ValueError
        Naming what is wrong.

    Examples
    --------
    >>> check_codes([0, 2, 1], 3, 3)
    array([0, 2, 1])
    """
    codes = np.asarray(y_codes)
    if codes.shape != (n_rows,):
        raise ValueError(f"y_codes must have shape ({n_rows},), got {codes.shape}")
    if codes.size and not np.issubdtype(codes.dtype, np.integer):
        if not np.all(np.isfinite(codes)) or not np.all(codes == np.round(codes)):
            raise ValueError("y_codes must be integer class codes")
    codes = codes.astype(np.int64)
    if codes.size and (codes.min() < 0 or codes.max() >= n_classes):
        raise ValueError(f"y_codes must be class codes in [0, {n_classes}), got values from {codes.min()} to "
                         f"{codes.max()}")
    return codes
