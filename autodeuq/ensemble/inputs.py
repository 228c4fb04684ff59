"""Input encoding: what an ensemble's networks read, from a table, a mapping of columns or an array.

:func:`encode_inputs` matches columns by name (or takes an array by position), encodes a table's
categorical columns and fills its gaps with the preprocessing recorded at fit time
(:func:`checked_preprocessor` reads that record back), and refuses what the networks cannot
take, naming the data row.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np

from autodeuq.core.errors import AutoDEUQWarning
from autodeuq.table.data import FLOAT32_MAX, DataError, encode_table, feature_frame, feature_matrix


def encode_inputs(x, feature_names, *, target_names=(), preprocessor=None, standardization=None,
                  source: str = "X", encoded: bool = False) -> np.ndarray:
    """Validated float64 inputs in the order of ``feature_names``.

    A DataFrame or a mapping of columns is matched by column name (target columns are
    ignored, any other unknown column is refused); an array is taken by position. With a
    ``preprocessor``, the table's columns (``preprocessor.feature_columns``) are encoded
    first, unless ``encoded`` (``x`` already holds the networks' inputs, e.g. a catalog's
    stored test set).

    Parameters
    ----------
    x : array-like of shape (n, n_columns), DataFrame or mapping of columns
    feature_names : list of str
        The networks' inputs, in order.
    target_names : sequence of str
        Columns that may be present and are ignored.
    preprocessor : TablePreprocessor or None
        The encoding of a table's columns into ``feature_names``.
    standardization : dict or None
        The training split's ``x_mean`` and ``x_std``: a value whose standardized form is
        beyond float32's range is refused.
    source : str
        Names the inputs in error messages.
    encoded : bool
        Skip the ``preprocessor``.

    Returns
    -------
    ndarray of shape (n, n_features)

    Raises
    ------
    DataError
        Missing, unknown or non-numeric columns, NaN/inf values, values beyond float32 (also
        once standardized); the message names the first offending data row (1-based).
    """
    if preprocessor is not None and not encoded:
        frame = as_frame(x, preprocessor.feature_columns, source)
        x = encode_table(preprocessor, frame, source, ignore=target_names)
        # Rows whose categories training never saw: counted per column, in an UnseenCategoryWarning.
        preprocessor.warn_unseen(frame, source)
    elif hasattr(x, "columns") or isinstance(x, Mapping):
        x = feature_matrix(x, feature_names, source, ignore=target_names)
    else:
        try:
            x = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            raise DataError(f"{source}: inputs must be numeric") from None
        if x.ndim == 1 and len(feature_names) == 1:
            x = x[:, None]
        if x.ndim != 2 or x.shape[1] != len(feature_names):
            raise DataError(f"{source}: the ensemble expects {len(feature_names)} feature column(s) "
                            f"{feature_names}, got an array of shape {x.shape}")
        x = feature_matrix(dict(zip(feature_names, x.T)), feature_names, source)
    if standardization and len(x):
        warn_out_of_range(x, feature_names, standardization, source)
        # The networks were trained in float32 on standardized inputs of order 1; a value whose
        # standardized form is beyond float32's range was infinite in their arithmetic.
        z = np.abs((x - np.asarray(standardization["x_mean"])) / np.asarray(standardization["x_std"]))
        big = z > FLOAT32_MAX
        if big.any():
            row, col = np.argwhere(big)[0]
            raise DataError(
                f"{source}: feature column {feature_names[col]!r} at data row {row + 1} is {x[row, col]:g}, "
                f"whose standardized value ({z[row, col]:.3g} training standard deviations from the "
                f"training mean) is beyond the float32 range the networks are trained in"
            )
    return x


#: How far beyond the training rows' range (a share of its width) an input counts as outside it.
RANGE_MARGIN = 0.1


class OutOfRangeWarning(AutoDEUQWarning):
    """Rows to predict hold numeric inputs outside the training rows' range (counted per column):
    far from its data an ensemble can be confidently wrong, its epistemic part too small."""


def warn_out_of_range(x: np.ndarray, feature_names, standardization: dict, source: str = "X") -> dict[str, int]:
    """Warn (:class:`OutOfRangeWarning`) how many rows of ``x`` lie outside the training range of
    each input, widened by :data:`RANGE_MARGIN` of its width on either side (a constant input: any
    other value); returns those counts by input name. Nothing without a recorded range
    (``x_min``/``x_max`` in ``standardization``: catalogs made before it was recorded).

    >>> import warnings
    >>> scaling = {"x_min": [0.0, -1.0], "x_max": [10.0, 1.0]}
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_out_of_range(np.array([[10.5, 0.0], [11.5, 0.0], [-2.0, 1.3]]), ["a", "b"], scaling, "new.csv")
    {'a': 2, 'b': 1}
    >>> print(caught[0].message)  # doctest: +NORMALIZE_WHITESPACE
    new.csv: 2 of 3 row(s) lie outside the training rows' range (widened by 10 % of its width) of numeric
    input(s): 'a' in 2 row(s) (training range [0, 10], first 11.5 at data row 2); 'b' in 1 row(s) (training
    range [-1, 1], first 1.3 at data row 3); far from its training data the ensemble's uncertainty, its epistemic
    part above all, may be too small
    """
    if "x_min" not in standardization or "x_max" not in standardization or not len(x):
        return {}
    low, high = np.asarray(standardization["x_min"], float), np.asarray(standardization["x_max"], float)
    margin = RANGE_MARGIN * (high - low)
    outside = (x < low - margin) | (x > high + margin)
    counts = outside.sum(axis=0)
    if not counts.any():
        return {}
    parts = []
    for j in np.flatnonzero(counts):
        first = int(np.argmax(outside[:, j]))
        parts.append(f"{feature_names[j]!r} in {int(counts[j])} row(s) (training range [{low[j]:.6g}, {high[j]:.6g}], "
                     f"first {x[first, j]:.6g} at data row {first + 1})")
    warnings.warn(OutOfRangeWarning(
        f"{source}: {int(outside.any(axis=1).sum())} of {len(x)} row(s) lie outside the training rows' range (widened "
        f"by {RANGE_MARGIN * 100:g} % of its width) of numeric input(s): {'; '.join(parts)}; far from its training "
        f"data the ensemble's uncertainty, its epistemic part above all, may be too small"),
        stacklevel=2)
    return {feature_names[j]: int(counts[j]) for j in np.flatnonzero(counts)}


def checked_preprocessor(spec, features):
    """The :class:`~autodeuq.preprocess.TablePreprocessor` a catalog or manifest records, or None.

    Raises
    ------
    DataError
        A malformed record, or one whose encoded names are not ``features``.
    """
    from autodeuq.table.preprocess import TablePreprocessor

    if spec is None:
        return None
    prep = TablePreprocessor.from_dict(spec)
    if prep.output_names != list(features):
        raise DataError(f"'preprocessing' encodes the columns {prep.feature_columns} as {prep.output_names}, "
                        f"not as the features {list(features)}")
    return prep


def as_frame(x, columns: list[str], source: str):
    """A DataFrame of a table's columns: a DataFrame as it is, a mapping by name, an array by position."""
    import pandas as pd

    if hasattr(x, "columns"):
        return x
    if isinstance(x, Mapping):
        return feature_frame(x, source)
    x = np.asarray(x)
    if x.ndim == 1 and len(columns) == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[1] != len(columns):
        raise DataError(f"{source}: the ensemble expects {len(columns)} column(s) {columns}, "
                        f"got an array of shape {x.shape}")
    return pd.DataFrame({c: x[:, j] for j, c in enumerate(columns)})
