"""Tables to network inputs: categorical encoding and imputation of missing values.

The transform is fitted on the training rows only, with scikit-learn's transformers
(``SimpleImputer`` for missing values, ``OneHotEncoder`` or ``OrdinalEncoder`` for categorical
columns, in a ``ColumnTransformer``), and kept as plain JSON-safe parameters: per column its
kind, the value that replaces a missing entry, and its categories. :meth:`TablePreprocessor.transform`
applies those parameters with numpy alone, so a saved model carries its preprocessing without
pickle, and loading it runs no code.

Encodings (Pedregosa et al. 2011, scikit-learn):

* ``"onehot"``: a categorical column becomes one 0/1 input per training category, named
  ``column=category``; a category never seen in training encodes as all zeros
  (``handle_unknown="ignore"``).
* ``"ordinal"``: a categorical column becomes one input, the index of its category in the sorted
  training categories; an unseen category encodes as -1 (``unknown_value=-1``).
* ``"none"``: categorical columns are refused.

Imputation: ``"mean"`` or ``"median"`` of the training rows for a numeric column, the most
frequent training category for a categorical one; ``"none"`` refuses missing values. The fill
values are used at prediction too, for every column, whether or not training had missing values.
Infinite values are not missing: they stay an error.

Columns that are refused, before any fitting, because they are almost always a data error:

* a text column most of whose non-missing cells are numbers (numbers with thousands separators,
  such as ``1,234``, count as numbers here): the other cells are typos, missing-value markers or
  numbers the reader cannot take (beyond float32's range), and the column would otherwise
  silently become categories; the message names the cells and their data rows;
* a categorical column with more than :data:`MAX_CATEGORIES` distinct values in the training
  rows, if they are also more than :data:`MAX_CATEGORY_SHARE` of the training rows: an
  identifier or free text, not categories (make it the id column, or drop it); every such column
  is named in one message.

A column declared categorical (``TableOptions.categorical_columns``) is refused for neither: its
cells are categories whatever they hold, also a column of numbers (a ``Cylinders`` column of
``4``, ``6`` and one ``rotary``), whose numbers become categories by their value (``4`` and
``4.0`` are one category, ``"4"`` in a text column too).

At prediction, categories not seen in training are encoded as described above, and
:class:`UnseenCategoryWarning` says, per column, how many rows held them.
"""
from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from autodeuq.core.errors import AutoDEUQWarning, DataError, ParameterError

# The networks are trained in float32: a larger magnitude becomes inf there.
FLOAT32_MAX = float(np.finfo(np.float32).max)

CATEGORICAL = ("onehot", "ordinal", "none")
IMPUTE = ("mean", "median", "none")
UNKNOWN_ORDINAL = -1
#: A categorical column may have this many distinct values in the training rows whatever their
#: number; beyond it, at most :data:`MAX_CATEGORY_SHARE` of the training rows.
MAX_CATEGORIES = 20
MAX_CATEGORY_SHARE = 0.5
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?")


class UnseenCategoryWarning(AutoDEUQWarning):
    """Rows to predict hold categories that the training rows did not have (counted per column)."""


@dataclass(frozen=True)
class TableOptions:
    """How a table becomes network inputs.

    Parameters
    ----------
    categorical : {"onehot", "ordinal", "none"}
    impute : {"mean", "median", "none"}
    drop : sequence of str
        Columns that are not features (read, then ignored; also at prediction).
    id_column : str, optional
        A row identifier: not a feature, copied into ``autodeuq predict``'s output.
    drop_missing_target : bool
        Leave out the rows whose target is missing (NaN) instead of refusing the table (a
        training matter: not saved with the model).
    categorical_columns : sequence of str
        Feature columns that are categorical whatever they hold: numbers become categories, and
        neither many distinct values nor stray text refuses the column.
    """

    categorical: str = "onehot"
    impute: str = "mean"
    drop: tuple = ()
    id_column: str | None = None
    drop_missing_target: bool = False
    categorical_columns: tuple = ()

    def __post_init__(self):
        if self.categorical not in CATEGORICAL:
            raise ParameterError("categorical", f"must be one of {list(CATEGORICAL)}", self.categorical)
        if self.impute not in IMPUTE:
            raise ParameterError("impute", f"must be one of {list(IMPUTE)}", self.impute)
        self._check_column_names("drop")
        if self.id_column is not None and not isinstance(self.id_column, str):
            raise ParameterError("id_column", "must be None or a column name", self.id_column)
        if not isinstance(self.drop_missing_target, (bool, np.bool_)):
            raise ParameterError("drop_missing_target", "must be True or False", self.drop_missing_target)
        if self.id_column is not None and self.id_column in self.drop:
            raise DataError(f"column {self.id_column!r} is both the id column and dropped",
                            parameters=("id_column", "drop"))
        self._check_declared()

    def _check_column_names(self, name: str) -> None:
        """The option ``name`` (``drop``, ``categorical_columns``): None or distinct column names,
        kept as a tuple."""
        given = getattr(self, name)
        names = given if given is not None else ()
        if isinstance(names, str) or not all(isinstance(c, str) for c in names):
            raise ParameterError(name, "must be a list of column names", given)
        names = tuple(names)
        object.__setattr__(self, name, names)
        if len(set(names)) != len(names):
            raise ParameterError(name, "must name each column once", list(names))

    def _check_declared(self):
        self._check_column_names("categorical_columns")
        ignored = [c for c in self.categorical_columns if c in self.ignored]
        if ignored:
            raise DataError(f"column {ignored[0]!r} is declared categorical and is also "
                            f"{'the id column' if ignored[0] == self.id_column else 'dropped'}: it is a feature or "
                            f"not", parameters=("categorical_columns", "id_column" if ignored[0] == self.id_column
                                                else "drop"))

    @classmethod
    def of(cls, config) -> "TableOptions":
        """The options held by ``config``, an :class:`autodeuq.app.options.TableConfig` (or anything
        with attributes of these names): what the command line and the estimator both read."""
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls)})

    @property
    def ignored(self) -> list[str]:
        """Columns read and left out of the features: the dropped ones and the id column."""
        return list(self.drop) + ([self.id_column] if self.id_column is not None else [])


def is_categorical(series) -> bool:
    """True for columns that are not numbers: strings, objects, categories, booleans."""
    import pandas as pd

    return not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series)


def _as_labels(values, numbers: bool = False) -> np.ndarray:
    """A categorical column as an object array of str, missing entries as None; with ``numbers``
    (a column declared categorical), a number as the text of its value (:func:`_number_text`)."""
    import pandas as pd

    values = pd.Series(values).astype(object)
    missing = values.isna().to_numpy()
    text = _number_text if numbers else str
    return np.array([None if m else text(v) for v, m in zip(values.to_numpy(), missing)], dtype=object)


def _number_text(value) -> str:
    """A declared categorical cell as text: a number (not a boolean, not text) by its value, so that
    ``4`` read from an integer column and ``4.0`` from one with gaps are one category."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        value = float(value)
        if value.is_integer() and abs(value) < 2.0 ** 53:
            return str(int(value))
        return repr(value)
    return str(value)


def _labels(column: dict, values) -> np.ndarray:
    """The categories of a fitted categorical column's ``values`` (see :func:`_as_labels`)."""
    return _as_labels(values, numbers=bool(column.get("declared")))


def _training_rows(n_training: int, n_rows: int) -> str:
    """Which rows a count of training rows is of, in the words of a message."""
    if n_training == n_rows:
        return f"the {n_training} training rows (all of the table's data rows)"
    return (f"the {n_training} training rows (of the table's {n_rows} data rows: the validation rows and any "
            f"left out are not counted)")


def _check_feature(frame, training, c: str, kind: str, options: TableOptions, source: str) -> int | None:
    """Refuse the feature column ``c`` of ``frame`` (``training``: its training rows) as
    :meth:`TablePreprocessor.fit` says, naming ``source``, the column and the data row; the
    number of distinct values of a column that looks like an identifier (refused by the caller,
    with the others), else None."""
    declared = c in options.categorical_columns
    missing = frame[c].isna().to_numpy()
    if training[c].isna().all():
        rows = _training_rows(len(training), len(frame))
        raise DataError(f"{source}: feature column {c!r} has no value in {rows}: drop it", parameters=("drop",))
    if kind == "categorical" and not declared:
        _check_not_mixed(frame[c], c, source)
    elif kind == "numeric":
        check_values(frame[[c]].to_numpy(dtype=np.float64, na_value=np.nan), [c], source, "feature",
                      allow_nan=True)
    if kind == "categorical" and options.categorical == "none":
        raise DataError(
            f"{source}: feature column {c!r} is categorical ({'declared' if declared else frame[c].dtype}, e.g. "
            f"{_first_value(frame[c])!r}) but categorical encoding is 'none': encode it one-hot or "
            f"ordinal, drop it or make it numbers", parameters=("categorical", "drop"))
    if missing.any() and options.impute == "none":
        raise DataError(
            f"{source}: feature column {c!r} has {int(missing.sum())} missing value(s) (first at data row "
            f"{int(np.argmax(missing)) + 1}) and imputation is 'none': impute the mean or median, or drop "
            f"it", parameters=("impute", "drop"))
    if kind == "categorical" and not declared:
        distinct = {v for v in _as_labels(training[c]) if v is not None}
        if len(distinct) > MAX_CATEGORIES and len(distinct) > MAX_CATEGORY_SHARE * len(training):
            return len(distinct)
    return None


def _checked_kinds(frame, training, features: list[str], options: TableOptions, source: str) -> dict[str, str]:
    """Each feature column's kind (numeric or categorical), once every column passed
    :func:`_check_feature`; the columns that look like identifiers are refused together."""
    unknown = [c for c in options.categorical_columns if c not in features]
    if unknown:
        raise DataError(f"{source}: column {unknown[0]!r} is declared categorical but is not a feature column; "
                        f"the features are {features}", parameters=("categorical_columns",))
    declared = set(options.categorical_columns)
    kinds = {c: "categorical" if c in declared or is_categorical(frame[c]) else "numeric" for c in features}
    identifiers = {}
    for c in features:
        distinct = _check_feature(frame, training, c, kinds[c], options, source)
        if distinct is not None:
            identifiers[c] = distinct
    if identifiers:
        raise _identifiers_error(identifiers, len(training), len(frame), source)
    return kinds


def _identifiers_error(identifiers: dict[str, int], n_training: int, n_rows: int, source: str) -> DataError:
    """One error naming every column that looks like an identifier (``{column: distinct values}``)."""
    rule = (f"more than a categorical column may have ({MAX_CATEGORIES} distinct values, or more if they are at "
            f"most {MAX_CATEGORY_SHARE:.0%} of the training rows)")
    rows = _training_rows(n_training, n_rows)
    parameters = ("categorical_columns", "id_column", "drop")
    if len(identifiers) == 1:
        (c, n), = identifiers.items()
        return DataError(
            f"{source}: feature column {c!r} looks like an identifier or free text, not categories: {n} distinct "
            f"values in {rows}, {rule}: declare it categorical if it is one, else make it the id column or drop "
            f"it", parameters=parameters)
    shown = ", ".join(f"{c!r} ({n} distinct values)" for c, n in identifiers.items())
    return DataError(
        f"{source}: {len(identifiers)} feature columns look like identifiers or free text, not categories: {shown} "
        f"in {rows}, {rule}: declare those that are categories categorical, make one the id column, drop the "
        f"others", parameters=parameters)


def _checked_column(k: int, c) -> dict:
    """The ``k``-th column of a saved preprocessing, checked (it may come from an untrusted file).

    Raises
    ------
    DataError
        The field at fault, in the message.
    """
    where = f"'preprocessing.columns[{k}]'"
    if not isinstance(c, dict) or not isinstance(c.get("name"), str) or c.get("kind") not in ("numeric",
                                                                                              "categorical"):
        raise DataError(f"{where} must have a 'name' and a 'kind' (numeric or categorical)")
    fill = c.get("fill")
    if c["kind"] == "numeric":
        if not (fill is None or (isinstance(fill, (int, float)) and not isinstance(fill, bool) and np.isfinite(fill))):
            raise DataError(f"{where}: 'fill' must be a finite number or null")
        return {"name": c["name"], "kind": "numeric", "fill": None if fill is None else float(fill)}
    categories = c.get("categories")
    if (not isinstance(categories, list) or not categories or not all(isinstance(v, str) for v in categories)
            or len(set(categories)) != len(categories)):
        raise DataError(f"{where}: 'categories' must be a non-empty list of distinct strings")
    if not (fill is None or fill in categories):
        raise DataError(f"{where}: 'fill' must be one of its categories or null")
    declared = c.get("declared", False)
    if not isinstance(declared, bool):
        raise DataError(f"{where}: 'declared' must be true or false")
    return {"name": c["name"], "kind": "categorical", "fill": fill, "categories": list(categories),
            **({"declared": True} if declared else {})}


@dataclass
class TablePreprocessor:
    """Fitted encoding of a table's feature columns into the networks' float inputs.

    Attributes
    ----------
    columns : list of dict
        One per feature column, in the table's order: ``{"name", "kind": "numeric"|"categorical",
        "fill": value or None, "categories": [...] (categorical only)}``.
    options : TableOptions
    """

    columns: list[dict]
    options: TableOptions = field(default_factory=TableOptions)

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, frame, features: Sequence[str], options: TableOptions, source: str,
            rows=None) -> TablePreprocessor:
        """Fit on the training rows ``frame[features].iloc[rows]`` with scikit-learn's transformers.

        ``rows`` (default: all) are the training rows; what the options refuse is looked for
        in the whole table, so a message names the table's data row (1-based).

        Raises
        ------
        DataError
            A text column that is numeric except for some cells, a categorical column with
            ``categorical="none"``, one that looks like an identifier (more than
            :data:`MAX_CATEGORIES` distinct values in the training rows, and more than
            :data:`MAX_CATEGORY_SHARE` of them), an infinite value or one beyond float32 in a
            numeric column, a missing value with ``impute="none"``, a column with no value at all
            in the training rows, or encoded names that collide.
        """
        from sklearn.compose import ColumnTransformer
        from sklearn.impute import SimpleImputer
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder

        features = [str(c) for c in features]
        declared = set(options.categorical_columns)
        training = frame if rows is None else frame.iloc[rows]
        kinds = _checked_kinds(frame, training, features, options, source)
        numeric = [c for c in features if kinds[c] == "numeric"]
        categorical = [c for c in features if kinds[c] == "categorical"]
        parts = []
        if numeric:
            steps = [SimpleImputer(strategy=options.impute)] if options.impute != "none" else ["passthrough"]
            parts.append(("numeric", make_pipeline(*steps), numeric))
        if categorical:
            encoder = (OneHotEncoder(handle_unknown="ignore", sparse_output=False) if options.categorical == "onehot"
                       else OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=UNKNOWN_ORDINAL))
            parts.append(("categorical", make_pipeline(SimpleImputer(strategy="most_frequent"),
                                                       encoder), categorical))
        table = training[features].copy()
        for c in categorical:
            labels = _as_labels(table[c], numbers=c in declared)
            labels[_is_none(labels)] = np.nan  # the imputer's marker of a missing entry
            table[c] = labels
        transformer = ColumnTransformer(parts).fit(table)
        fitted = {}
        if numeric:
            pipeline = transformer.named_transformers_["numeric"]
            fills = pipeline[0].statistics_ if options.impute != "none" else [None] * len(numeric)
            for c, fill in zip(numeric, fills):
                fitted[c] = {"name": c, "kind": "numeric", "fill": None if fill is None else float(fill)}
        if categorical:
            imputer, encoder = transformer.named_transformers_["categorical"]
            for c, fill, categories in zip(categorical, imputer.statistics_, encoder.categories_):
                fitted[c] = {"name": c, "kind": "categorical", "fill": None if options.impute == "none" else str(fill),
                             "categories": [str(v) for v in categories]}
                if c in declared:
                    fitted[c]["declared"] = True
        prep = cls([fitted[c] for c in features], options)
        names = prep.output_names
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise DataError(f"{source}: the encoded feature name {repeated[0]!r} is made twice (a column "
                            f"of that name and a one-hot column); rename the column")
        return prep

    # ------------------------------------------------------------------ describing
    @property
    def feature_columns(self) -> list[str]:
        """The table's feature columns, in order."""
        return [c["name"] for c in self.columns]

    @property
    def output_names(self) -> list[str]:
        """Names of the encoded inputs the networks see, in order."""
        names = []
        for c in self.columns:
            if c["kind"] == "categorical" and self.options.categorical == "onehot":
                names.extend(f"{c['name']}={v}" for v in c["categories"])
            else:
                names.append(c["name"])
        return names

    def to_dict(self) -> dict:
        o = self.options
        declared = {"categorical_columns": list(o.categorical_columns)} if o.categorical_columns else {}
        return {"categorical": o.categorical, "impute": o.impute, "drop": list(o.drop), "id_column": o.id_column,
                **declared, "columns": [dict(c) for c in self.columns]}

    @classmethod
    def from_dict(cls, d) -> TablePreprocessor:
        """Rebuild from :meth:`to_dict`'s output, checking every field (it may come from an untrusted file).

        Raises
        ------
        DataError
            The field at fault, in the message.
        """
        if not isinstance(d, dict):
            raise DataError(f"'preprocessing' must be an object, got {type(d).__name__}")
        drop, id_column = d.get("drop"), d.get("id_column")
        if not isinstance(drop, list) or not all(isinstance(c, str) for c in drop):
            raise DataError("'preprocessing.drop' must be a list of column names")
        if id_column is not None and not isinstance(id_column, str):
            raise DataError("'preprocessing.id_column' must be a column name or null")
        declared = d.get("categorical_columns", [])
        if not isinstance(declared, list) or not all(isinstance(c, str) for c in declared):
            raise DataError("'preprocessing.categorical_columns' must be a list of column names")
        try:
            options = TableOptions(categorical=d.get("categorical"), impute=d.get("impute"), drop=tuple(drop),
                                   id_column=id_column, categorical_columns=tuple(declared))
        except ParameterError as exc:
            raise DataError(f"'preprocessing.{exc.parameter}' {exc.requirement}, got {exc.value!r}") from None
        columns = d.get("columns")
        if not isinstance(columns, list) or not columns:
            raise DataError("'preprocessing.columns' must be a non-empty list")
        checked = [_checked_column(k, c) for k, c in enumerate(columns)]
        if (options.impute == "none") != all(c["fill"] is None for c in checked):
            raise DataError("'preprocessing': every column needs a 'fill' value unless imputation is 'none'")
        names = [c["name"] for c in checked] + options.ignored
        if len(set(names)) != len(names):
            raise DataError("'preprocessing': column names must be distinct (features, dropped, id)")
        return cls(checked, options)

    # ------------------------------------------------------------------ applying
    def unseen_categories(self, frame) -> dict[str, np.ndarray]:
        """Per categorical column, which rows of ``frame`` hold a category not seen in training.

        Returns ``{column: boolean array (n,)}`` for the columns with at least one such row (a
        missing value is not one: it takes the training fill).
        """
        names = [str(c) for c in frame.columns]
        frame = frame.set_axis(names, axis=1)
        out = {}
        for c in self.columns:
            if c["kind"] != "categorical" or c["name"] not in names:
                continue
            known = set(c["categories"])
            unseen = np.array([v is not None and v not in known for v in _labels(c, frame[c["name"]])], dtype=bool)
            if unseen.any():
                out[c["name"]] = unseen
        return out

    def warn_unseen(self, frame, source: str = "X") -> dict[str, np.ndarray]:
        """Warn (:class:`UnseenCategoryWarning`) how many rows of ``frame`` hold unseen categories,
        per column; returns :meth:`unseen_categories`."""
        unseen = self.unseen_categories(frame)
        if unseen:
            names = [str(c) for c in frame.columns]
            parts = []
            for name, rows in unseen.items():
                first = int(np.argmax(rows))
                column = next(c for c in self.columns if c["name"] == name)
                value = _labels(column, frame[frame.columns[names.index(name)]].iloc[[first]])[0]
                parts.append(f"column {name!r} in {int(rows.sum())} row(s) (first {_shown(value)} at data row "
                             f"{first + 1})")
            encoding = "as all zeros" if self.options.categorical == "onehot" else f"as {UNKNOWN_ORDINAL}"
            any_row = np.any(list(unseen.values()), axis=0)
            warnings.warn(UnseenCategoryWarning(
                f"{source}: {int(any_row.sum())} of {len(any_row)} row(s) hold categories not seen in training: "
                f"{'; '.join(parts)}; they are encoded {encoding}"), stacklevel=_caller_level())
        return unseen

    def transform(self, frame, source: str = "X") -> np.ndarray:
        """The encoded float64 inputs of a table's feature columns (taken by name).

        Missing values are replaced by the training fill values; categories are encoded as
        fitted (unseen ones as described in the module documentation). Values are not checked
        for range here: the data layer does that on the result.

        Raises
        ------
        DataError
            A feature column missing from ``frame``, non-numeric text in a numeric column, or a
            missing value when imputation is ``"none"``.
        """
        names = [str(c) for c in frame.columns]
        absent = [c for c in self.feature_columns if c not in names]
        if absent:
            raise DataError(f"{source}: columns do not match the model's features {self.feature_columns}: "
                            f"missing feature column(s) {absent}")
        frame = frame.set_axis(names, axis=1)
        blocks = []
        for c in self.columns:
            values = frame[c["name"]]
            missing = values.isna().to_numpy()
            if missing.any() and c["fill"] is None:
                raise DataError(
                    f"{source}: feature column {c['name']!r} has {int(missing.sum())} missing value(s) (first at data "
                    f"row {int(np.argmax(missing)) + 1}) and the model imputes none")
            if c["kind"] == "numeric":
                blocks.append(_numeric_values(values, c, missing, source)[:, None])
                continue
            labels = _labels(c, values)
            labels[missing] = c["fill"]
            index = {v: i for i, v in enumerate(c["categories"])}
            codes = np.array([index.get(v, -1) for v in labels], dtype=np.int64)
            if self.options.categorical == "onehot":
                onehot = np.zeros((len(codes), len(index)))
                known = codes >= 0
                onehot[np.flatnonzero(known), codes[known]] = 1.0
                blocks.append(onehot)
            else:
                blocks.append(np.where(codes >= 0, codes, UNKNOWN_ORDINAL).astype(np.float64)[:, None])
        return np.concatenate(blocks, axis=1)


def _numeric_values(values, column: dict, missing: np.ndarray, source: str) -> np.ndarray:
    import pandas as pd

    if is_categorical(values) and not missing.all():
        converted = pd.to_numeric(values.astype(object), errors="coerce")
        bad = converted.isna().to_numpy() & ~missing
        if bad.any() or pd.api.types.is_bool_dtype(values):
            row = int(np.argmax(bad)) if bad.any() else 0
            raise DataError(f"{source}: feature column {column['name']!r} is numeric in the model but holds "
                            f"{values.iloc[row]!r} at data row {row + 1}: fix the cell, or fit the model with the "
                            f"column declared categorical", parameters=("categorical_columns",))
        values = converted
    out = np.array(pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan))
    if column["fill"] is not None:
        out[missing] = column["fill"]
    return out


def _caller_level() -> int:
    """The ``stacklevel`` of a warning raised by the caller, pointing at the first frame outside autodeuq."""
    import os
    import sys

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # autodeuq/, this module in autodeuq/table/
    frame, level = sys._getframe(2), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _shown(value: str, limit: int = 24) -> str:
    """A cell's text for a message, shortened when long."""
    return repr(value) if len(value) <= limit else f"'{value[:12]}...' ({len(value)} characters)"


def _number_kind(text: str) -> str:
    """``"number"`` (within float32), ``"big"`` (a number beyond it), ``"thousands"`` (``1,234``) or ``"text"``."""
    if _THOUSANDS.fullmatch(text):
        return "thousands"
    if "_" in text:  # float() reads 1_000; a table reader does not
        return "text"
    try:
        value = float(text)
    except ValueError:
        return "text"
    return "number" if np.isfinite(value) and abs(value) <= FLOAT32_MAX else "big"


def _check_not_mixed(series, name: str, source: str) -> None:
    """Refuse a text column most of whose non-missing cells are numbers (see the module documentation)."""
    import pandas as pd

    if pd.api.types.is_bool_dtype(series) or isinstance(series.dtype, pd.CategoricalDtype):
        return
    present = np.flatnonzero(series.notna().to_numpy())
    cells = [str(v).strip() for v in series.to_numpy()[present]]
    kinds = [_number_kind(v) for v in cells]
    bad = [k for k, kind in enumerate(kinds) if kind != "number"]
    if not bad or 2 * (len(cells) - kinds.count("text")) <= len(cells):
        return
    why = {"text": "", "thousands": " (a thousands separator)", "big": " (beyond the float32 range the networks "
                                                                       "are trained in)"}
    shown = ", ".join(f"{_shown(cells[k])} at data row {present[k] + 1}{why[kinds[k]]}" for k in bad[:3])
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    raise DataError(
        f"{source}: feature column {name!r} holds numbers, but {len(bad)} of its {len(cells)} non-missing cells "
        f"{'is not a plain number' if len(bad) == 1 else 'are not plain numbers'}: "
        f"{shown}{more}; write plain numbers (no thousands separators), leave a cell empty to mark it missing, "
        f"drop the column, or declare it categorical (its cells are then categories)",
        parameters=("drop", "categorical_columns"))


def _is_none(values) -> np.ndarray:
    return np.array([v is None for v in values], dtype=bool)


def _first_value(series):
    present = series.dropna()
    return present.iloc[0] if len(present) else None


def check_values(arr: np.ndarray, cols, source: str, role: str, allow_nan: bool = False) -> None:
    """Refuse NaN/inf and magnitudes beyond float32, naming the column and the first (1-based) data row.

    With ``allow_nan`` (columns whose missing values are imputed later), only infinite values
    and magnitudes beyond float32 are refused.
    """
    if allow_nan:
        bad = np.isinf(arr)
        if bad.any():
            col = int(np.argmax(bad.any(axis=0)))
            row = int(np.argmax(bad[:, col]))
            raise DataError(f"{source}: {role} column {cols[col]!r} has {int(bad[:, col].sum())} infinite value(s) "
                            f"(first at data row {row + 1})")
        arr = np.where(np.isnan(arr), 0.0, arr)
    bad = ~np.isfinite(arr)
    if bad.any():
        col = int(np.argmax(bad.any(axis=0)))
        row = int(np.argmax(bad[:, col]))
        what = "NaN" if np.isnan(arr[row, col]) else "infinite value"
        raise DataError(
            f"{source}: {role} column {cols[col]!r} has {int(bad[:, col].sum())} NaN/inf value(s) "
            f"(first: {what} at data row {row + 1})"
        )
    big = np.abs(arr) > FLOAT32_MAX
    if big.any():
        col = int(np.argmax(big.any(axis=0)))
        row = int(np.argmax(big[:, col]))
        raise DataError(
            f"{source}: {role} column {cols[col]!r} has {int(big[:, col].sum())} value(s) beyond the float32 "
            f"range the networks are trained in (first: {arr[row, col]:g} at data row {row + 1})"
        )
