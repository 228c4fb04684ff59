"""The nine UCI regression datasets with the fixed train/test splits of PBP, MC dropout and Deep Ensembles.

The files are not part of the package; they are read from a folder laid out as in the public
repository of the MC-dropout experiments (Gal & Ghahramani 2016), one sub-folder per dataset:
``data.txt`` (whitespace-separated numbers, no header), ``index_features.txt``,
``index_target.txt`` (0-based column indices) and ``index_train_{i}.txt`` / ``index_test_{i}.txt``
(0-based row indices of split ``i``).

Every method of ``benchmarks/uci.py`` sees the same three parts of a split: the *fitting* rows
(the training rows minus a seeded validation part), the *validation* rows (early stopping, search,
ensemble selection) and the *test* rows (scored once).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from autodeuq.table.data import DataError

#: Smallest first, so a long run finishes whole datasets early.
DATASETS = ("yacht", "boston", "energy", "concrete", "wine", "kin8nm", "power", "naval", "protein")
VALID_FRACTION = 0.2


def default_data_dir(repo_root: str | Path) -> Path:
    """``<repo>/../shared/datasets/uci``: where the shared copy sits next to a checkout."""
    return Path(repo_root).resolve().parent / "shared" / "datasets" / "uci"


@dataclass
class UCISplit:
    """One split of one dataset: fitting, validation and test arrays, all of shape (n, d) / (n, 1)."""

    name: str
    split: int
    seed: int
    x_fit: np.ndarray
    y_fit: np.ndarray
    x_valid: np.ndarray
    y_valid: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def sizes(self) -> dict:
        return {"n_fit": len(self.x_fit), "n_valid": len(self.x_valid), "n_test": len(self.x_test)}


def _read_indices(path: Path, n_max: int | None = None) -> np.ndarray:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        values = np.atleast_1d(np.loadtxt(path, dtype=float))
    except ValueError as exc:
        raise DataError(f"{path}: not a list of integer indices ({exc})") from None
    if values.size == 0:
        raise DataError(f"{path}: no indices")
    if not np.all(np.isfinite(values)) or np.any(values != np.round(values)) or np.any(values < 0):
        raise DataError(f"{path}: indices must be non-negative integers")
    idx = values.astype(np.int64)
    if n_max is not None and idx.max() >= n_max:
        raise DataError(f"{path}: index {int(idx.max())} is out of range (the data have {n_max} rows)")
    return idx


@lru_cache(maxsize=2)
def _read_data(path: Path) -> np.ndarray:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        data = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except ValueError as exc:
        raise DataError(f"{path}: cannot read numbers ({exc})") from None
    if not np.all(np.isfinite(data)):
        row = int(np.argmax(~np.isfinite(data).all(axis=1)))
        raise DataError(f"{path}: NaN or infinite value in data row {row + 1}")
    return data


def dataset_dir(data_dir: str | Path, name: str) -> Path:
    folder = Path(data_dir) / name
    if not folder.is_dir():
        raise DataError(f"{folder}: dataset folder not found (is --data-dir the folder holding {', '.join(DATASETS)}?)")
    return folder


def n_splits(data_dir: str | Path, name: str) -> int:
    """How many ``index_train_{i}.txt`` files the dataset has."""
    folder = dataset_dir(data_dir, name)
    return len(list(folder.glob("index_train_*.txt")))


def load_split(data_dir: str | Path, name: str, split: int, valid_fraction: float = VALID_FRACTION,
               seed: int | None = None) -> UCISplit:
    """Read split ``split`` of dataset ``name`` and carve the seeded validation part out of its training rows.

    Parameters
    ----------
    data_dir : path
        Folder holding one sub-folder per dataset.
    name : str
        Dataset folder name, e.g. ``"boston"``.
    split : int
        Split index ``i`` of ``index_train_{i}.txt`` / ``index_test_{i}.txt``.
    valid_fraction : float, default=0.2
        Fraction of the training rows held out for validation (rounded to the nearest row).
    seed : int, optional
        Seed of the validation permutation; default: ``split``.

    Returns
    -------
    UCISplit

    Raises
    ------
    DataError
        A file is missing or malformed, an index is out of range, or train and test rows overlap.
    """
    folder = dataset_dir(data_dir, name)
    data = _read_data(folder / "data.txt")
    n_rows, n_cols = data.shape
    features = _read_indices(folder / "index_features.txt", n_cols)
    target = _read_indices(folder / "index_target.txt", n_cols)
    if target.size != 1:
        raise DataError(f"{folder / 'index_target.txt'}: expected one target column, got {target.size}")
    if target[0] in features:
        raise DataError(f"{folder / 'index_target.txt'}: target column {int(target[0])} is also a feature")
    train = _read_indices(folder / f"index_train_{split}.txt", n_rows)
    test = _read_indices(folder / f"index_test_{split}.txt", n_rows)
    overlap = np.intersect1d(train, test)
    if overlap.size:
        raise DataError(f"{folder}: split {split} has {overlap.size} row(s) in both its train and test indices")
    if not 0 < valid_fraction < 1:
        raise DataError(f"validation fraction must be in (0, 1), got {valid_fraction}")
    seed = split if seed is None else seed
    n_valid = int(round(len(train) * valid_fraction))
    if n_valid < 1 or len(train) - n_valid < 2:
        raise DataError(f"{folder}: split {split} has too few training rows ({len(train)}) for a validation part")
    perm = np.random.default_rng(seed).permutation(len(train))
    valid_rows, fit_rows = np.sort(train[perm[:n_valid]]), np.sort(train[perm[n_valid:]])
    x, y = data[:, features], data[:, target]
    return UCISplit(name, split, seed, x[fit_rows], y[fit_rows], x[valid_rows], y[valid_rows], x[test], y[test])
