"""Reading tables: CSV, Parquet and ``.npz`` files into pandas DataFrames, and the checks of a
table's columns and values as the data layer (:mod:`autodeuq.table.data`) reads them: each problem
one :class:`~autodeuq.core.errors.DataError` naming the file, the column and the row."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from autodeuq.core.errors import DataError
from autodeuq.table.preprocess import check_values


def read_table(path: str | Path, targets: bool = True):
    """Read a CSV, Parquet or ``.npz`` file into a pandas DataFrame.

    ``targets``: whether an ``.npz`` file must hold the array ``y`` beside ``X`` (a table to
    predict from needs only ``X``)."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if path.is_dir():
        raise DataError(f"{path}: is a directory, expected a .csv, .parquet or .npz file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npz":
            return _npz_frame(path, targets)
        if suffix in (".parquet", ".pq"):
            frame = pd.read_parquet(path)
            header = [str(c) for c in frame.columns]
        else:
            # pandas 2's default float parser may be an ulp off the decimal written; its
            # "round_trip" parser is exact, as pandas 3's default is (where the option is deprecated).
            exact = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
            frame = pd.read_csv(path, **exact)
            # read_csv renames a repeated name 'a' to 'a.1'; the raw header shows the repeat.
            # (Empty names are left to read_csv, which makes them distinct: 'Unnamed: 3'.)
            header = [c for c in pd.read_csv(path, header=None, nrows=1, dtype=str,
                                             keep_default_na=False).iloc[0].tolist() if c != ""]
    except DataError:
        raise
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: file is empty") from None
    except Exception as exc:  # any reader failure becomes one clear message
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"{path}: cannot read file: {first_line}") from None
    if frame.shape[0] == 0:
        raise DataError(f"{path}: file has no data rows")
    _check_unique_names(header, str(path))
    return frame


def read_labelled_table(path: str | Path, targets: Sequence[str] | None):
    """:func:`read_table`, with each text target column of a CSV as written: only an empty cell is
    a missing label, so ``None``, ``NaN`` or ``NA`` can name a class.

    The CSV reader takes such words for missing values in every column. A target column is text
    when the reader left some of its cells text (not numbers, not booleans); a numeric or boolean
    target keeps the reader's values, its ``NaN`` and ``NA`` cells missing.
    """
    import pandas as pd

    frame = read_table(path)
    path = Path(path)
    if path.suffix.lower() in (".npz", ".parquet", ".pq"):  # they store missing values, not words
        return frame
    for target in [str(t) for t in targets or ["y"]]:
        if target not in frame.columns:
            continue  # refused by the caller, naming the columns
        read = frame[target]
        present = read.dropna()
        if not len(present) or not all(isinstance(v, str) for v in present):  # numbers, booleans, no value
            continue
        try:
            raw = pd.read_csv(path, usecols=[target], dtype=str, keep_default_na=False)[target]
        except Exception:  # the table was read once already; keep that reading
            continue
        if len(raw) == len(read):
            frame[target] = raw.where(raw != "", None).to_numpy(dtype=object)
    return frame


def _check_unique_names(columns, source: str) -> None:
    columns = [str(c) for c in columns]
    seen = {}
    for i, c in enumerate(columns):
        seen.setdefault(c, []).append(i + 1)
    repeated = {c: where for c, where in seen.items() if len(where) > 1}
    if repeated:
        shown = "; ".join(f"{c!r} is columns {', '.join(map(str, where))}" for c, where in repeated.items())
        raise DataError(f"{source}: duplicate column name(s): {shown}; every column needs its own name")


def _npz_frame(path: Path, targets: bool = True):
    import pandas as pd

    try:
        with np.load(path, allow_pickle=False) as npz:
            wanted = ("X", "y") if targets else ("X",)
            missing = [k for k in wanted if k not in npz.files]
            if missing:
                raise DataError(f"{path}: .npz must hold arrays {' and '.join(map(repr, wanted))}; missing {missing} "
                                f"(has {npz.files})")
            x = npz["X"]
            y = npz["y"] if "y" in npz.files else np.empty((len(x), 0))
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"{path}: cannot read .npz file: {exc}") from None
    if x.ndim == 1:
        x = x[:, None]
    if y.ndim == 1:
        y = y[:, None]
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y):
        raise DataError(f"{path}: X must be (n, d) and y (n,) or (n, t) with the same n; got {x.shape} and {y.shape}")
    if len(x) == 0:
        raise DataError(f"{path}: file has no data rows")
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(x.shape[1])])
    for j in range(y.shape[1]):
        frame[f"y{j}" if y.shape[1] > 1 else "y"] = y[:, j]
    return frame


def _frame_arrays(frame, targets: Sequence[str] | None, source: str, features: Sequence[str] | None = None):
    """Split a DataFrame into validated float arrays (X, y) and column names.

    With ``features`` (a validation or test table), the feature columns are taken by name, in
    that order, whatever the table's column order.
    """
    _check_unique_names(frame.columns, source)
    columns = [str(c) for c in frame.columns]
    frame.columns = columns
    targets = _resolve_targets(columns, targets, source)
    feature_cols = [c for c in columns if c not in targets]
    if features is not None:
        if sorted(feature_cols) != sorted(features):
            raise DataError(
                f"{source}: feature columns {feature_cols} do not match the training data's {list(features)}: "
                f"missing {[f for f in features if f not in feature_cols]}, "
                f"unexpected {[c for c in feature_cols if c not in features]}"
            )
        feature_cols = list(features)
    if not feature_cols:
        raise DataError(f"{source}: no feature columns besides the target(s) {list(targets)}")
    x = _numeric_block(frame, feature_cols, source, "feature")
    y = _numeric_block(frame, list(targets), source, "target")
    return x, y, feature_cols, list(targets)


def _numeric_block(frame, cols: list[str], source: str, role: str, allow_nan: bool = False) -> np.ndarray:
    """Columns ``cols`` of ``frame`` as float64, refusing non-numeric, NaN/inf and out-of-float32 values
    (NaN allowed with ``allow_nan``)."""
    import pandas as pd

    bad = [c for c in cols if not pd.api.types.is_numeric_dtype(frame[c]) or pd.api.types.is_bool_dtype(frame[c])]
    if bad:
        kinds = ", ".join(f"{c!r} ({frame[c].dtype})" for c in bad)
        raise DataError(f"{source}: non-numeric {role} column(s) {kinds}; encode them as numbers first")
    arr = frame[cols].to_numpy(dtype=np.float64, na_value=np.nan)
    check_values(arr, cols, source, role, allow_nan=allow_nan)
    return arr


def _target_rows(frame, targets: list[str], source: str, drop_missing: bool | None):
    """(target values of every row, the rows kept): a row whose target is missing is refused, or
    left out with ``drop_missing`` (None: a table that option does not apply to, such as a test
    file scored later); infinite and out-of-float32 targets are refused."""
    y = _numeric_block(frame, targets, source, "target", allow_nan=True)
    return y, _kept_rows(np.isnan(y), targets, source, drop_missing, "value")


def _kept_rows(missing, targets: list[str], source: str, drop_missing: bool | None, what: str) -> np.ndarray:
    """The rows whose targets are all present (``missing``: (n, targets) booleans); a missing target
    refused unless ``drop_missing`` (``what`` names its kind: value, label)."""
    if missing.any() and not drop_missing:
        col = int(np.argmax(missing.any(axis=0)))
        row = int(np.argmax(missing[:, col]))
        raise DataError(f"{source}: target column {targets[col]!r} has {int(missing[:, col].sum())} missing {what}(s) "
                        f"(first at data row {row + 1}): fill them"
                        + ("" if drop_missing is None else ", or leave out the rows whose target is missing"),
                        parameters=() if drop_missing is None else ("drop_missing_target",))
    keep = np.flatnonzero(~missing.any(axis=1))
    if not len(keep):
        raise DataError(f"{source}: every row's target is missing")
    return keep


def feature_frame(columns, source: str = "X"):
    """A mapping of column name -> 1-D values as a DataFrame, refusing columns of other shapes or lengths."""
    import pandas as pd

    checked = {}
    for name, values in dict(columns).items():
        values = np.asarray(values)
        if values.ndim != 1:
            raise DataError(f"{source}: column {name!r} must be 1-D, got shape {values.shape}")
        checked[name] = values
    lengths = {str(name): len(v) for name, v in checked.items()}
    if len(set(lengths.values())) > 1:
        (a, na), *others = lengths.items()
        b, nb = next((k, n) for k, n in others if n != na)
        raise DataError(f"{source}: column {a!r} has {na} rows, column {b!r} {nb}")
    return pd.DataFrame(checked)


def feature_matrix(table, features: Sequence[str], source: str = "X", ignore: Sequence[str] = ()) -> np.ndarray:
    """The feature columns of a table, taken by name, as a validated float64 array.

    Parameters
    ----------
    table : pandas.DataFrame or mapping of column name -> 1-D values
        Its column order does not matter.
    features : sequence of str
        The model's feature names, in the model's order (the order of the returned columns).
    source : str
        Names the table in error messages (a file path, ``"X"``).
    ignore : sequence of str
        Columns allowed in the table and left out (the model's targets); any other column that
        is not a feature is refused, so a misnamed column cannot pass unnoticed.

    Returns
    -------
    ndarray of shape (n, len(features)), float64

    Raises
    ------
    DataError
        Duplicate, missing or unexpected columns, columns of different lengths, non-numeric
        columns, NaN/inf values or magnitudes beyond float32 (naming the first data row).
    """
    if not hasattr(table, "columns"):
        table = feature_frame(table, source)
    _check_unique_names(table.columns, source)
    names = [str(c) for c in table.columns]
    missing = [f for f in features if f not in names]
    if missing:
        raise DataError(f"{source}: columns do not match the model's features {list(features)}: "
                        f"missing feature column(s) {missing}")
    unexpected = [c for c in names if c not in features and c not in ignore]
    if unexpected:
        raise DataError(f"{source}: columns do not match the model's features {list(features)}: "
                        f"unexpected column(s) {unexpected}")
    frame = table.set_axis(names, axis=1)
    return _numeric_block(frame, list(features), source, "feature")


def _resolve_targets(columns: list[str], targets, source: str) -> list[str]:
    """The target columns, checked to be in ``columns`` (default ``y`` when there is one)."""
    if not targets:
        if "y" in columns:
            return ["y"]
        raise DataError(f"{source}: no target column given, and none is named 'y'; columns are {columns}",
                        parameters=("target",))
    missing = [t for t in targets if t not in columns]
    if missing:
        import difflib

        def hint(t):
            close = difflib.get_close_matches(t, columns, 1, cutoff=0.5)
            return f"{t!r} (did you mean {close[0]!r}?)" if close else repr(t)

        named = ", ".join(hint(t) for t in missing)
        raise DataError(f"{source}: target column {named} not found; columns are {columns}")
    return list(targets)
