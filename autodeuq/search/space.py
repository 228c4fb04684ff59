"""The joint search space: network architecture plus training hyperparameters.

A configuration is a plain JSON-serializable dict::

    {"arch": [int, ...], "hp": {"learning_rate": float, "batch_size": int, ...}}

``arch`` holds one integer per architecture decision, cell by cell: the cell's dense
decision (0 = identity, else one (units, activation) pair) followed by one binary skip
decision per anchor (the outputs of the up-to-``skip_window`` previous cells, nearest
first; cell 0 is the input), then, in a space that asks for them, the cell's dropout rate
(an index into ``architecture.dropout``) and its batch normalization (0/1). ``hp`` holds the
training hyperparameters, described by a ConfigSpace ``ConfigurationSpace`` (priors, sampling and
the [0, 1] vector encoding).

Spaces are read from YAML or JSON files; ``search_spaces/`` ships ``toy`` and ``tabular`` (installed
as the package data of ``autodeuq.search_spaces``).
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autodeuq.core.errors import SpaceError
from autodeuq.nn.activations import ACTIVATIONS
from autodeuq.nn.optimizers import OPTIMIZERS

if TYPE_CHECKING:  # imported where used: scipy.stats alone takes a second to import
    import ConfigSpace as CS

# The repository's search_spaces/ folder, used when autodeuq runs from a checkout that was not
# installed (PYTHONPATH=.); installs carry the same files as the package autodeuq.search_spaces.
SOURCE_SPACES_DIR = Path(__file__).resolve().parents[2] / "search_spaces"  # autodeuq/search/space.py -> the repository

HP_NAMES = (
    "learning_rate", "batch_size", "optimizer", "patience_reduce_lr", "patience_early_stopping",
)
# Widest Dense cell a space may ask for. Far beyond what tabular regression needs, yet it keeps a
# typo (an extra zero or three) from allocating the list of every width before any training.
MAX_UNITS = 16384
# Largest value of each other size a space file sets. Far beyond any network or training this
# method searches, they keep a typo (num_cells: 100000) from making a space whose first network
# never finishes building, before a search starts.
MAX_SIZES = {"num_cells": 64, "skip_window": 64, "epochs": 100_000, "max_steps_per_epoch": 10**7,
             "batch_size": 2**20, "patience_reduce_lr": 100_000, "patience_early_stopping": 100_000}
# Most weights of the largest network a space allows (every cell at its widest, every skip on):
# 10**8 float32 weights are 400 MB, each optimizer slot as much again.
MAX_NETWORK_WEIGHTS = 10**8
# Longest list a space may give (of widths or dropout rates): more choices than that are a range.
MAX_CHOICES = 1024
# Largest space file read: the shipped ones are about 2 KB.
MAX_SPACE_FILE_BYTES = 1 << 20
# Smallest legal value of each integer hyperparameter: a batch holds at least one row; a patience
# of 0 epochs is meaningful (act at the first epoch without improvement).
HP_MINIMUM = {"batch_size": 1, "patience_reduce_lr": 0, "patience_early_stopping": 0}


# Top-level keys that only adapt ranges to the data (:meth:`SearchSpace.for_rows`). A space as
# searched holds their effect in its ranges; on the same rows, two spaces that differ only in these
# keys but have the same ranges search the same configurations.
ROW_RULE_KEYS = ("max_steps_per_epoch", "max_units_per_row")


@dataclass(frozen=True)
class CellChoice:
    """The decoded decisions of one cell but its skips: ``units is None`` means identity;
    ``batch_norm`` normalizes the Dense output, ``dropout`` (a rate) drops from the cell's output."""

    units: int | None
    activation: str | None
    dropout: float = 0.0
    batch_norm: bool = False


def encode_index(index, k) -> np.ndarray:
    """[0, 1] encoding of choice ``index`` (0-based) among ``k``: ``index / (k - 1)``, 0 if k = 1.

    The encoding of every architecture decision and categorical hyperparameter (``k`` may be an
    array broadcast against ``index``, one number of choices per column).
    """
    index = np.asarray(index, dtype=float)
    k = np.asarray(k, dtype=float)
    return np.where(k > 1, index / np.maximum(k - 1, 1), 0.0)


def decode_index(u, k) -> np.ndarray:
    """Inverse of :func:`encode_index`: the nearest choice, ``rint(u (k - 1))`` in [0, k - 1]."""
    k = np.asarray(k)
    return np.clip(np.rint(np.asarray(u, dtype=float) * (k - 1)), 0, k - 1).astype(int)


class SearchSpace:
    """Joint architecture x training-hyperparameter space of the AutoDEUQ method.

    Parameters
    ----------
    spec : dict
        The parsed space description (see ``search_spaces/README.md``).
    source : str
        Where the description came from, used in error messages.

    Examples
    --------
    >>> space = load_space("toy")
    >>> config = space.sample(np.random.default_rng(0))
    >>> space.validate(config)
    """

    def __init__(self, spec: dict[str, Any], source: str = "<dict>"):
        self.source = source
        self.spec = copy.deepcopy(spec)
        self._parse(self.spec)

    # ----------------------------------------------------------------- parsing
    def _fail(self, where: str, what: str):
        raise SpaceError(f"{self.source}: {where}: {what}")

    def _check_keys(self, spec):
        if not isinstance(spec, dict):
            self._fail("top level", "expected a mapping with 'architecture', 'training', 'epochs'")
        unknown = set(spec) - {"name", "description", "architecture", "training", "epochs", *ROW_RULE_KEYS}
        if unknown:
            self._fail("top level", f"unknown key(s) {sorted(unknown)}")
        if isinstance(spec.get("architecture"), dict):
            unknown = set(spec["architecture"]) - {"num_cells", "skip_window", "units", "activations",
                                                   "merge_activation", "dropout", "batch_norm"}
            if unknown:
                self._fail("architecture", f"unknown key(s) {sorted(unknown)}")

    def _activations(self, acts) -> list[str]:
        if not isinstance(acts, list) or not acts:
            self._fail("architecture.activations", "expected a non-empty list of activation names")
        bad = [a for a in acts if not isinstance(a, str) or a not in ACTIVATIONS]
        if bad:
            self._fail("architecture.activations", f"unknown activation(s) {bad}; known: {list(ACTIVATIONS)}")
        self._check_distinct("architecture.activations", acts)
        return list(acts)

    def _parse(self, spec):
        self._check_keys(spec)
        self.name = str(spec.get("name", Path(self.source).stem))
        arch = spec.get("architecture")
        if not isinstance(arch, dict):
            self._fail("architecture", "missing or not a mapping")
        self.num_cells = self._positive_int(arch, "num_cells", "architecture")
        self.skip_window = self._positive_int(arch, "skip_window", "architecture", default=3)
        self.units = self._units(arch.get("units"))
        self._check_network_size()
        self.activations = self._activations(arch.get("activations", list(ACTIVATIONS)))
        self.dropout = self._dropout(arch.get("dropout", [0.0]))
        self.batch_norm = arch.get("batch_norm", False)
        if not isinstance(self.batch_norm, bool):
            self._fail("architecture.batch_norm", f"expected true or false, got {self.batch_norm!r}")
        self.merge_activation = arch.get("merge_activation", "relu")
        if not isinstance(self.merge_activation, str) or self.merge_activation not in ACTIVATIONS:
            self._fail("architecture.merge_activation", f"unknown activation {self.merge_activation!r}")
        self.epochs = self._positive_int(spec, "epochs", "top level")
        self.max_steps_per_epoch = (None if spec.get("max_steps_per_epoch") is None
                                    else self._positive_int(spec, "max_steps_per_epoch", "top level"))
        self.max_units_per_row = spec.get("max_units_per_row")
        if self.max_units_per_row is not None and (
                isinstance(self.max_units_per_row, bool) or not isinstance(self.max_units_per_row, (int, float))
                or not 0 < self.max_units_per_row < float("inf")):
            self._fail("top level.max_units_per_row", f"expected a positive number, got {self.max_units_per_row!r}")
        self.configspace = self._training_space(spec.get("training"))
        self.batch_size_min = int(self.configspace["batch_size"].lower)
        self.batch_size_max = int(self.configspace["batch_size"].upper)

    def _positive_int(self, d, key, where, default=None):
        value = d.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self._fail(f"{where}.{key}", f"expected a positive integer, got {value!r}")
        if value > MAX_SIZES[key]:
            self._fail(f"{where}.{key}", f"{value} is above the largest supported, {MAX_SIZES[key]}")
        return value

    def _check_distinct(self, where, values):
        repeated = sorted({str(v) for v in values if values.count(v) > 1})
        if repeated:
            self._fail(where, f"{', '.join(repeated)} listed more than once")

    def _check_network_size(self):
        """Refuse a space whose largest network (every cell at its widest, every skip on) has more
        than :data:`MAX_NETWORK_WEIGHTS` weights."""
        widest = max(self.units)
        fan_in = 1 + min(self.skip_window, self.num_cells)  # the Dense layer and each skip's projection
        weights = self.num_cells * fan_in * widest * (widest + 1)
        if weights > MAX_NETWORK_WEIGHTS:
            self._fail("architecture", f"its largest network ({self.num_cells} cells of {widest} units, "
                                       f"skip_window {self.skip_window}) has about {weights:.3g} weights, above the "
                                       f"{MAX_NETWORK_WEIGHTS:.0e} supported; lower num_cells, skip_window or the "
                                       f"widest units")

    def _units(self, units):
        if isinstance(units, dict):
            try:
                lo, hi, step = int(units["min"]), int(units["max"]), int(units.get("step", 1))
            except (KeyError, TypeError, ValueError):
                self._fail("architecture.units", "expected {min, max, step} integers or a list")
            if not 1 <= lo <= hi or step < 1:
                self._fail("architecture.units", f"need 1 <= min <= max and step >= 1, got {units}")
            if hi > MAX_UNITS:
                self._fail("architecture.units", f"max {hi} is above the largest supported width {MAX_UNITS}")
            return list(range(lo, hi + 1, step))
        if isinstance(units, list) and units and all(
            isinstance(u, int) and not isinstance(u, bool) and u > 0 for u in units
        ):
            if max(units) > MAX_UNITS:
                self._fail("architecture.units",
                           f"width {max(units)} is above the largest supported width {MAX_UNITS}")
            if len(units) > MAX_CHOICES:
                self._fail("architecture.units", f"{len(units)} widths listed, more than {MAX_CHOICES}; give a "
                                                 f"{{min, max, step}} range")
            self._check_distinct("architecture.units", units)
            return list(units)
        self._fail("architecture.units", f"expected {{min, max, step}} or a list of positive integers, got {units!r}")

    def _dropout(self, rates) -> list[float]:
        if not isinstance(rates, list) or not rates or any(
            isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r < 1 for r in rates
        ):
            self._fail("architecture.dropout", f"expected a non-empty list of rates in [0, 1), got {rates!r}")
        if len(set(rates)) != len(rates):
            self._fail("architecture.dropout", f"a rate is listed twice in {rates!r}")
        if len(rates) > MAX_CHOICES:
            self._fail("architecture.dropout", f"{len(rates)} rates listed, more than {MAX_CHOICES}")
        return [float(r) for r in rates]

    def _training_space(self, training) -> CS.ConfigurationSpace:
        import ConfigSpace as CS  # here, not at the top: scipy.stats alone takes a second to import

        if not isinstance(training, dict):
            self._fail("training", "missing or not a mapping")
        missing = [n for n in HP_NAMES if n not in training]
        if missing:
            self._fail("training", f"missing hyperparameter(s) {missing}")
        unknown = sorted(set(training) - set(HP_NAMES))
        if unknown:
            self._fail("training", f"unknown hyperparameter(s) {unknown}; known: {list(HP_NAMES)}")
        cs = CS.ConfigurationSpace()
        for name in HP_NAMES:
            cs.add(self._optimizer_hp(training[name]) if name == "optimizer" else self._range_hp(name, training[name]))
        return cs

    def _optimizer_hp(self, entry):
        import ConfigSpace as CS

        where = "training.optimizer"
        if not isinstance(entry, list) or not entry:
            self._fail(where, "expected a non-empty list of optimizer names")
        bad = [o for o in entry if not isinstance(o, str) or o not in OPTIMIZERS]
        if bad:
            self._fail(where, f"unknown optimizer(s) {bad}; known: {list(OPTIMIZERS)}")
        self._check_distinct(where, entry)
        return CS.Categorical("optimizer", list(entry))

    def _range_hp(self, name: str, entry):
        import ConfigSpace as CS

        where = f"training.{name}"
        if not isinstance(entry, dict) or "low" not in entry or "high" not in entry:
            self._fail(where, "expected a mapping with 'low' and 'high' (and optional 'log')")
        low, high, log = entry["low"], entry["high"], bool(entry.get("log", False))
        is_float = name == "learning_rate"
        try:
            low, high = (float(low), float(high)) if is_float else (int(low), int(high))
        except (TypeError, ValueError):
            self._fail(where, f"low/high must be numbers, got {entry}")
        if not (0 < low < high if (log or is_float) else HP_MINIMUM[name] <= low < high):
            bound = "0 <" if (log or is_float) else f"{HP_MINIMUM[name]} <="
            self._fail(where, f"need {bound} low < high, got low={low}, high={high}")
        if not is_float and high > MAX_SIZES[name]:  # a learning rate that diverges fails its training
            self._fail(where, f"high={high} is above the largest supported, {MAX_SIZES[name]}")
        kind = CS.Float if is_float else CS.Integer
        return kind(name, (low, high), log=log)

    def for_rows(self, n_rows: int) -> "SearchSpace":
        """The space as searched on ``n_rows`` training rows.

        With ``max_steps_per_epoch`` set, the batch-size range starts at
        ``ceil(n_rows / max_steps_per_epoch)``, so no epoch has more steps than that (when that
        exceeds the range's top, the range becomes ``[low, 2 * low]``). With ``max_units_per_row``
        set, the widths stop at the first one of at least ``n_rows * max_units_per_row`` (all of
        them when none is that wide). Without either, or when the data leave both ranges as they
        are, the space itself.
        """
        spec, adapted = copy.deepcopy(self.spec), []
        if self.max_steps_per_epoch is not None:
            entry = spec["training"]["batch_size"]
            low, high = int(entry["low"]), int(entry["high"])
            needed = -(-int(n_rows) // self.max_steps_per_epoch)
            if needed > low:
                spec["training"]["batch_size"] = {**entry, "low": needed, "high": max(high, 2 * needed)}
                adapted.append("batch sizes")
        if self.max_units_per_row is not None:
            widest = min((u for u in self.units if u >= int(n_rows) * self.max_units_per_row), default=None)
            if widest is not None and widest < max(self.units):
                units = spec["architecture"]["units"]
                spec["architecture"]["units"] = ({**units, "max": widest} if isinstance(units, dict)
                                                 else [u for u in units if u <= widest])
                adapted.append("widths")
        if not adapted:
            return self
        return SearchSpace(spec, source=f"{self.source} ({' and '.join(adapted)} for {n_rows} rows)")

    def describe_sizes(self) -> str:
        """The widths and batch sizes searched, e.g. ``widths 16-112, batch sizes 1-256``: the
        ranges :meth:`for_rows` adapts."""
        batch = self.configspace["batch_size"]
        return f"widths {min(self.units)}-{max(self.units)}, batch sizes {batch.lower}-{batch.upper}"

    # ------------------------------------------------------------- structure
    @property
    def hp_names(self) -> list[str]:
        return list(HP_NAMES)

    @property
    def dense_choices(self) -> int:
        """Number of values of a dense decision: identity + units x activations."""
        return 1 + len(self.units) * len(self.activations)

    def anchors(self, cell: int) -> list[int]:
        """Cells (0 = input) whose outputs cell ``cell`` (1-based) may skip-connect to."""
        return list(range(cell - 1, max(-1, cell - 1 - self.skip_window), -1))

    def _cell_extras(self) -> list[tuple[str, int]]:
        # the per-cell decisions after the skips: (name suffix, number of values); a single
        # dropout rate is not a decision (every cell has it)
        return [("dropout", len(self.dropout))] * (len(self.dropout) > 1) + [("batch_norm", 2)] * self.batch_norm

    @property
    def arch_dims(self) -> list[int]:
        """Number of values of each architecture variable, in vector order."""
        dims = []
        for cell in range(1, self.num_cells + 1):
            dims.append(self.dense_choices)
            dims.extend([2] * len(self.anchors(cell)))
            dims.extend(k for _, k in self._cell_extras())
        return dims

    @property
    def arch_names(self) -> list[str]:
        names = []
        for cell in range(1, self.num_cells + 1):
            names.append(f"cell{cell}_dense")
            names.extend(f"cell{cell}_skip_from{a}" for a in self.anchors(cell))
            names.extend(f"cell{cell}_{extra}" for extra, _ in self._cell_extras())
        return names

    def decode_dense(self, value: int) -> CellChoice:
        """Decode a dense decision into (units, activation); 0 is identity."""
        if value == 0:
            return CellChoice(None, None)
        units_idx, act_idx = divmod(value - 1, len(self.activations))
        return CellChoice(self.units[units_idx], self.activations[act_idx])

    def cells(self, arch) -> list[tuple[CellChoice, list[int]]]:
        """Per cell: its choices (dense, dropout, batch normalization) and the list of anchor
        cells with an active skip."""
        out, pos = [], 0
        for cell in range(1, self.num_cells + 1):
            dense = self.decode_dense(int(arch[pos]))
            anchors = self.anchors(cell)
            flags = arch[pos + 1: pos + 1 + len(anchors)]
            pos += 1 + len(anchors)
            extras = {"dropout": self.dropout[0], "batch_norm": False}
            for extra, _ in self._cell_extras():
                value = int(arch[pos])
                extras[extra] = self.dropout[value] if extra == "dropout" else bool(value)
                pos += 1
            if dense.units is None:
                extras["batch_norm"] = False  # it normalizes a Dense output
            out.append((CellChoice(dense.units, dense.activation, **extras),
                        [a for a, f in zip(anchors, flags) if int(f) == 1]))
        return out

    def describe_arch(self, arch) -> str:
        """An architecture vector in words, cell by cell.

        Each cell reads ``k: <units> <activation>`` (a Dense layer) or ``k: identity``, followed
        by ``+skip(...)`` naming the earlier cells (``input`` for cell 0) whose outputs are added
        to it; such a sum goes through the space's merge activation. ``bn`` follows a batch-normalized
        Dense layer, ``dropout <rate>`` a cell whose output is dropped out.

        Examples
        --------
        >>> load_space("toy").describe_arch([1, 0, 0, 0, 1, 12, 1, 0, 1])
        '1: 16 elu | 2: identity +skip(input) | 3: 32 elu +skip(2,input)'
        """
        parts = []
        for k, (dense, skips) in enumerate(self.cells(arch), start=1):
            text = f"{k}: identity" if dense.units is None else f"{k}: {dense.units} {dense.activation}"
            if dense.batch_norm:
                text += " bn"
            if skips:
                text += f" +skip({','.join('input' if a == 0 else str(a) for a in skips)})"
            if dense.dropout > 0:
                text += f" dropout {dense.dropout:g}"
            parts.append(text)
        return " | ".join(parts)

    # --------------------------------------------------------------- sampling
    def sample_arch(self, rng: np.random.Generator) -> list[int]:
        return [int(rng.integers(d)) for d in self.arch_dims]

    def sample_arch_vectors(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` architectures drawn uniformly, in the [0, 1] encoding of :meth:`encode_arch`."""
        dims = np.asarray(self.arch_dims, dtype=float)
        arch = np.floor(rng.random((n, len(dims))) * dims)  # uniform integers, cheaper than integers()
        return self.encode_arch(arch)

    def sample_hp_vectors(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` hyperparameter points drawn from the prior, in the encoding of :meth:`encode_hp`.

        Every row is exactly the encoding of the hyperparameters it decodes to (see
        :meth:`prior_hp_vectors`).
        """
        return self.prior_hp_vectors(rng.random((n, len(HP_NAMES))))

    def prior_hp_vectors(self, uniform) -> np.ndarray:
        """Uniform draws on [0, 1), shape (n, n_hp), turned into prior draws, encoded.

        Each column goes through the inverse distribution function of its hyperparameter's
        prior (ConfigSpace's priors: uniform integers and choices, a log-scaled integer a
        log-uniform draw on [low, high + 1) floored, the learning rate (log-)uniform), so the
        integers are legal values, every one as likely as its prior says, and then encoded.
        """
        u = np.clip(np.asarray(uniform, dtype=float).reshape(-1, len(HP_NAMES)), 0.0, 1.0)
        columns = {}
        for j, name in enumerate(HP_NAMES):
            hp, col = self.configspace[name], u[:, j]
            if name == "optimizer":
                columns[name] = np.minimum((col * len(hp.choices)).astype(int), len(hp.choices) - 1)
            elif name == "learning_rate":
                columns[name] = hp.to_value(col)
            elif hp.log:
                low, high = int(hp.lower), int(hp.upper)
                columns[name] = np.clip(np.floor(low * ((high + 1) / low) ** col), low, high)
            else:
                low, k = int(hp.lower), int(hp.upper) - int(hp.lower) + 1
                columns[name] = low + np.minimum((col * k).astype(int), k - 1)
        return self._encode_hp_columns(columns)

    def sample_vectors(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` configurations drawn from the prior, in the encoding of :meth:`encode`."""
        hp = self.sample_hp_vectors(rng, n)
        return np.hstack([self.sample_arch_vectors(rng, n), hp])

    def sample_hp(self, rng: np.random.Generator) -> dict[str, Any]:
        return self.decode_hp(self.sample_hp_vectors(rng, 1))[0]

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        return {"arch": self.sample_arch(rng), "hp": self.sample_hp(rng)}

    # --------------------------------------------------------------- encoding
    # One encoding, used by every searcher: an architecture decision or a categorical
    # hyperparameter with k values is index / (k - 1) (encode_index); a numeric hyperparameter
    # is ConfigSpace's vector encoding (for a linear integer that is index / (k - 1) too).
    # Decoding takes the nearest legal value, and ``snap`` = encode(decode(.)) maps any point
    # of [0, 1]^d to the encoding of the configuration it stands for.
    def encode_arch(self, archs) -> np.ndarray:
        """Architecture vectors (n, n_arch) -> floats in [0, 1] (value / (dim - 1))."""
        a = np.asarray(archs, dtype=float).reshape(-1, len(self.arch_dims))
        return encode_index(a, np.asarray(self.arch_dims))

    def decode_arch(self, vectors) -> list[list[int]]:
        """Inverse of :meth:`encode_arch`: each variable's nearest value."""
        v = np.asarray(vectors, dtype=float).reshape(-1, len(self.arch_dims))
        return [row.tolist() for row in decode_index(v, np.asarray(self.arch_dims))]

    def _encode_hp_columns(self, columns) -> np.ndarray:
        """Values by name (the optimizer as its index in the choices) -> (n, n_hp) encoding."""
        n = len(columns[HP_NAMES[0]])
        out = np.empty((n, len(HP_NAMES)))
        for j, name in enumerate(HP_NAMES):
            hp = self.configspace[name]
            if name == "optimizer":
                out[:, j] = encode_index(columns[name], len(hp.choices))
            else:
                out[:, j] = hp.to_vector(np.asarray(columns[name], dtype=float))
        return out

    def _decode_hp_columns(self, vectors) -> dict[str, np.ndarray]:
        """Inverse of :meth:`_encode_hp_columns`: the nearest legal values."""
        v = np.clip(np.asarray(vectors, dtype=float).reshape(-1, len(HP_NAMES)), 0.0, 1.0)
        columns = {}
        for j, name in enumerate(HP_NAMES):
            hp = self.configspace[name]
            if name == "optimizer":
                columns[name] = decode_index(v[:, j], len(hp.choices))
            else:
                columns[name] = np.asarray(hp.to_value(v[:, j]))
        return columns

    def encode_hp(self, hps) -> np.ndarray:
        """Hyperparameter dicts -> (n, n_hp) floats in [0, 1]."""
        hps = [hps] if isinstance(hps, dict) else list(hps)
        columns: dict[str, Any] = {name: [h[name] for h in hps] for name in HP_NAMES}
        choices = self.configspace["optimizer"]
        columns["optimizer"] = np.asarray(
            choices.to_vector(np.array(columns["optimizer"], dtype=object)), dtype=float
        ).astype(int)
        return self._encode_hp_columns(columns)

    def decode_hp(self, vectors) -> list[dict[str, Any]]:
        """Inverse of :meth:`encode_hp` (values snapped to the nearest legal ones)."""
        columns = self._decode_hp_columns(vectors)
        choices = self.configspace["optimizer"].choices
        plain: dict[str, list] = {
            "optimizer": [str(choices[i]) for i in columns["optimizer"]],
            "learning_rate": [float(x) for x in columns["learning_rate"]],
        }
        for name in HP_NAMES:
            plain.setdefault(name, [int(x) for x in columns[name]])
        return [{name: plain[name][i] for name in HP_NAMES} for i in range(len(plain["optimizer"]))]

    def snap_hp(self, vectors) -> np.ndarray:
        """The encoding of the hyperparameters that ``vectors`` (n, n_hp) decode to."""
        return self._encode_hp_columns(self._decode_hp_columns(vectors))

    def snap(self, vectors) -> np.ndarray:
        """The encoding of the configurations that ``vectors`` (n, dimension) decode to."""
        v = np.asarray(vectors, dtype=float).reshape(-1, self.dimension)
        n_arch, dims = len(self.arch_dims), np.asarray(self.arch_dims)
        arch = encode_index(decode_index(v[:, :n_arch], dims), dims)
        return np.hstack([arch, self.snap_hp(v[:, n_arch:])])

    def encode(self, configs) -> np.ndarray:
        """Configurations -> (n, n_arch + n_hp) floats in [0, 1]."""
        configs = [configs] if isinstance(configs, dict) else list(configs)
        return np.hstack([
            self.encode_arch([c["arch"] for c in configs]),
            self.encode_hp([c["hp"] for c in configs]),
        ])

    def decode(self, vectors) -> list[dict[str, Any]]:
        """Inverse of :meth:`encode` (values snapped to the nearest legal ones)."""
        v = np.asarray(vectors, dtype=float).reshape(-1, self.dimension)
        n_arch = len(self.arch_dims)
        return [
            {"arch": a, "hp": h}
            for a, h in zip(self.decode_arch(v[:, :n_arch]), self.decode_hp(v[:, n_arch:]))
        ]

    @property
    def dimension(self) -> int:
        return len(self.arch_dims) + len(HP_NAMES)

    # ------------------------------------------------------------- operations
    def mutate_arch(self, arch, rng: np.random.Generator) -> list[int]:
        """Copy of ``arch`` with one variable, chosen at random, set to a different value."""
        arch = [int(a) for a in arch]
        i = int(rng.integers(len(arch)))
        other = int(rng.integers(self.arch_dims[i] - 1))
        arch[i] = other if other < arch[i] else other + 1
        return arch

    @staticmethod
    def split(config) -> tuple[list[int], dict[str, Any]]:
        """A configuration's (architecture vector, training hyperparameters)."""
        return list(config["arch"]), dict(config["hp"])

    @staticmethod
    def join(arch, hp) -> dict[str, Any]:
        return {"arch": [int(a) for a in arch], "hp": dict(hp)}

    def validate(self, config) -> None:
        """Raise :class:`SpaceError` unless ``config`` is a point of this space."""
        if not isinstance(config, dict) or set(config) != {"arch", "hp"}:
            raise SpaceError("a configuration is a dict with exactly the keys 'arch' and 'hp'")
        self.validate_arch(config["arch"])
        self.validate_hp(config["hp"])

    def validate_arch(self, arch) -> None:
        """Raise :class:`SpaceError` unless ``arch`` is an architecture vector of this space."""
        dims = self.arch_dims
        if not isinstance(arch, (list, tuple, np.ndarray)) or len(arch) != len(dims):
            size = f"{len(arch)} variables" if isinstance(arch, (list, tuple, np.ndarray)) else type(arch).__name__
            raise SpaceError(f"arch has {size}, the space has {len(dims)} variables")
        for name, value, dim in zip(self.arch_names, arch, dims):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < dim:
                raise SpaceError(f"arch variable {name} = {value!r} is not an integer in [0, {dim - 1}]")

    def validate_hp(self, hp, partial: bool = False) -> None:
        """Raise :class:`SpaceError` unless ``hp`` holds training hyperparameters of this space:
        each of them, or (``partial``) some of them."""
        if not isinstance(hp, dict) or (set(hp) - set(HP_NAMES) if partial else set(hp) != set(HP_NAMES)):
            raise SpaceError(f"hp must have {'only' if partial else 'exactly'} the keys {list(HP_NAMES)}")
        for name in HP_NAMES:
            if name in hp and not self._legal(name, hp[name]):
                raise SpaceError(f"hp {name} = {hp[name]!r} is outside {self.configspace[name]}")

    def _legal(self, name: str, value) -> bool:
        if isinstance(value, bool):
            return False
        if name != "optimizer" and not isinstance(value, (int, float, np.integer, np.floating)):
            return False  # ConfigSpace compares a number range with text by raising, not by refusing
        try:
            return bool(self.configspace[name].legal_value(value))
        except (TypeError, ValueError, OverflowError):
            return False

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.spec)

    def __eq__(self, other):
        return isinstance(other, SearchSpace) and self.spec == other.spec

    def __repr__(self):
        return (f"SearchSpace({self.name!r}, cells={self.num_cells}, "
                f"arch_vars={len(self.arch_dims)}, epochs={self.epochs})")


def shipped_spaces() -> dict:
    """The spaces shipped with autodeuq: name -> file (a path-like ``Traversable``).

    They are package data of ``autodeuq.search_spaces`` (so a plain, non-editable install has
    them), or, in a source checkout that was not installed, the repository's ``search_spaces/``.
    """
    from importlib.resources import files

    try:
        folder = files("autodeuq.search_spaces")
    except ModuleNotFoundError:
        folder = SOURCE_SPACES_DIR
    if not folder.is_dir():
        return {}
    return {Path(f.name).stem: f for f in folder.iterdir() if f.name.endswith(".yaml")}


def load_space(name_or_path: str | Path | dict | SearchSpace) -> SearchSpace:
    """Load a shipped space by name (``toy``, ``tabular``) or a YAML/JSON space file."""
    if isinstance(name_or_path, SearchSpace):
        return name_or_path
    if isinstance(name_or_path, dict):
        return SearchSpace(name_or_path)
    path = Path(name_or_path)
    if not path.suffix and not path.is_file():
        shipped = shipped_spaces()
        if str(name_or_path) not in shipped:
            raise SpaceError(f"unknown search space {name_or_path!r}; shipped: {sorted(shipped)}, "
                             f"or give a .yaml/.json file")
        path = shipped[str(name_or_path)]
    elif not path.exists():
        raise SpaceError(f"{path}: search-space file not found")
    return SearchSpace(_read_spec(path), source=str(path))


def _read_spec(path: Path):
    """The parsed content of the space file ``path`` (JSON, else YAML), refused in one line when
    too large, unreadable, not UTF-8 or not parseable."""
    try:
        if path.stat().st_size > MAX_SPACE_FILE_BYTES:
            raise SpaceError(f"{path}: {path.stat().st_size} bytes, larger than a search-space file can be "
                             f"({MAX_SPACE_FILE_BYTES} bytes)")
        data = path.read_bytes()
    except OSError as exc:
        raise SpaceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise SpaceError(f"{path}: not UTF-8 text (byte {exc.start + 1}, line {line}); save the space file as "
                         f"UTF-8") from None
    try:
        if path.suffix == ".json":
            spec = json.loads(text)
        else:
            import yaml  # type: ignore[import-untyped]

            spec = yaml.safe_load(text)
    except Exception as exc:  # any parse error becomes one clear message
        raise SpaceError(f"{path}: cannot parse: {exc}".splitlines()[0]) from None
    return spec
