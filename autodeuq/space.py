"""The joint search space: network architecture plus training hyperparameters.

A configuration is a plain JSON-serializable dict::

    {"arch": [int, ...], "hp": {"learning_rate": float, "batch_size": int, ...}}

``arch`` holds one integer per architecture decision, cell by cell: the cell's dense
decision (0 = identity, else one (units, activation) pair) followed by one binary skip
decision per anchor (the outputs of the up-to-``skip_window`` previous cells, nearest
first; cell 0 is the input). ``hp`` holds the training hyperparameters, described by a
ConfigSpace ``ConfigurationSpace`` (priors, sampling and the [0, 1] vector encoding).

Spaces are read from YAML or JSON files; ``search_spaces/`` ships ``toy`` and ``tabular`` (installed
as the package data of ``autodeuq.search_spaces``).
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ConfigSpace as CS
import numpy as np

# The repository's search_spaces/ folder, used when autodeuq runs from a checkout that was not
# installed (PYTHONPATH=.); installs carry the same files as the package autodeuq.search_spaces.
SOURCE_SPACES_DIR = Path(__file__).resolve().parent.parent / "search_spaces"

ACTIVATIONS = (
    "elu", "gelu", "hard_sigmoid", "linear", "relu", "selu",
    "sigmoid", "softplus", "softsign", "swish", "tanh",
)
OPTIMIZERS = ("sgd", "rmsprop", "adagrad", "adam", "adadelta", "adamax", "nadam")
HP_NAMES = (
    "learning_rate", "batch_size", "optimizer", "patience_reduce_lr", "patience_early_stopping",
)
# Widest Dense cell a space may ask for. Far beyond what tabular regression needs, yet it keeps a
# typo (an extra zero or three) from allocating the list of every width before any training.
MAX_UNITS = 16384
# Smallest legal value of each integer hyperparameter: a batch holds at least one row; a patience
# of 0 epochs is meaningful (act at the first epoch without improvement).
HP_MINIMUM = {"batch_size": 1, "patience_reduce_lr": 0, "patience_early_stopping": 0}


class SpaceError(ValueError):
    """A search-space file or a configuration does not describe a valid space/point."""


@dataclass(frozen=True)
class CellChoice:
    """The decoded dense decision of one cell: ``units is None`` means identity."""

    units: int | None
    activation: str | None


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

    def _parse(self, spec):
        if not isinstance(spec, dict):
            self._fail("top level", "expected a mapping with 'architecture', 'training', 'epochs'")
        unknown = set(spec) - {"name", "description", "architecture", "training", "epochs"}
        if unknown:
            self._fail("top level", f"unknown key(s) {sorted(unknown)}")
        self.name = str(spec.get("name", Path(self.source).stem))
        arch = spec.get("architecture")
        if not isinstance(arch, dict):
            self._fail("architecture", "missing or not a mapping")
        self.num_cells = self._positive_int(arch, "num_cells", "architecture")
        self.skip_window = self._positive_int(arch, "skip_window", "architecture", default=3)
        self.units = self._units(arch.get("units"))
        acts = arch.get("activations", list(ACTIVATIONS))
        if not isinstance(acts, list) or not acts:
            self._fail("architecture.activations", "expected a non-empty list of activation names")
        bad = [a for a in acts if a not in ACTIVATIONS]
        if bad:
            self._fail("architecture.activations", f"unknown activation(s) {bad}; known: {list(ACTIVATIONS)}")
        self.activations = list(acts)
        self.merge_activation = arch.get("merge_activation", "relu")
        if self.merge_activation not in ACTIVATIONS:
            self._fail("architecture.merge_activation", f"unknown activation {self.merge_activation!r}")
        self.epochs = self._positive_int(spec, "epochs", "top level")
        self.configspace = self._training_space(spec.get("training"))
        self.batch_size_max = int(self.configspace["batch_size"].upper)

    def _positive_int(self, d, key, where, default=None):
        value = d.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self._fail(f"{where}.{key}", f"expected a positive integer, got {value!r}")
        return value

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
            return list(units)
        self._fail("architecture.units", f"expected {{min, max, step}} or a list of positive integers, got {units!r}")

    def _training_space(self, training) -> CS.ConfigurationSpace:
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
            entry = training[name]
            where = f"training.{name}"
            if name == "optimizer":
                if not isinstance(entry, list) or not entry:
                    self._fail(where, "expected a non-empty list of optimizer names")
                bad = [o for o in entry if o not in OPTIMIZERS]
                if bad:
                    self._fail(where, f"unknown optimizer(s) {bad}; known: {list(OPTIMIZERS)}")
                cs.add(CS.Categorical(name, list(entry)))
                continue
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
            kind = CS.Float if is_float else CS.Integer
            cs.add(kind(name, (low, high), log=log))
        return cs

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

    @property
    def arch_dims(self) -> list[int]:
        """Number of values of each architecture variable, in vector order."""
        dims = []
        for cell in range(1, self.num_cells + 1):
            dims.append(self.dense_choices)
            dims.extend([2] * len(self.anchors(cell)))
        return dims

    @property
    def arch_names(self) -> list[str]:
        names = []
        for cell in range(1, self.num_cells + 1):
            names.append(f"cell{cell}_dense")
            names.extend(f"cell{cell}_skip_from{a}" for a in self.anchors(cell))
        return names

    def decode_dense(self, value: int) -> CellChoice:
        """Decode a dense decision into (units, activation); 0 is identity."""
        if value == 0:
            return CellChoice(None, None)
        units_idx, act_idx = divmod(value - 1, len(self.activations))
        return CellChoice(self.units[units_idx], self.activations[act_idx])

    def cells(self, arch) -> list[tuple[CellChoice, list[int]]]:
        """Per cell: its dense choice and the list of anchor cells with an active skip."""
        out, pos = [], 0
        for cell in range(1, self.num_cells + 1):
            dense = self.decode_dense(int(arch[pos]))
            anchors = self.anchors(cell)
            flags = arch[pos + 1: pos + 1 + len(anchors)]
            out.append((dense, [a for a, f in zip(anchors, flags) if int(f) == 1]))
            pos += 1 + len(anchors)
        return out

    # --------------------------------------------------------------- sampling
    def sample_arch(self, rng: np.random.Generator) -> list[int]:
        return [int(rng.integers(d)) for d in self.arch_dims]

    def sample_hp_vectors(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` hyperparameter points drawn from the prior, in the [0, 1] encoding.

        ConfigSpace's vector encoding maps each prior (log-uniform included) to a uniform law
        on [0, 1], so uniform draws in that encoding are draws from the prior.
        """
        return rng.random((n, len(HP_NAMES)))

    def sample_hp(self, rng: np.random.Generator) -> dict[str, Any]:
        return self.decode_hp(self.sample_hp_vectors(rng, 1))[0]

    def sample(self, rng: np.random.Generator) -> dict[str, Any]:
        return {"arch": self.sample_arch(rng), "hp": self.sample_hp(rng)}

    # --------------------------------------------------------------- encoding
    def encode_arch(self, archs) -> np.ndarray:
        """Architecture vectors (n, n_arch) -> floats in [0, 1] (value / (dim - 1))."""
        a = np.asarray(archs, dtype=float).reshape(-1, len(self.arch_dims))
        return a / (np.asarray(self.arch_dims, dtype=float) - 1)

    def decode_arch(self, vectors) -> list[list[int]]:
        v = np.asarray(vectors, dtype=float).reshape(-1, len(self.arch_dims))
        dims = np.asarray(self.arch_dims)
        ints = np.clip(np.rint(v * (dims - 1)), 0, dims - 1).astype(int)
        return [row.tolist() for row in ints]

    def encode_hp(self, hps) -> np.ndarray:
        """Hyperparameter dicts -> (n, n_hp) floats in [0, 1] (ConfigSpace encoding)."""
        hps = [hps] if isinstance(hps, dict) else list(hps)
        out = np.empty((len(hps), len(HP_NAMES)))
        for j, name in enumerate(HP_NAMES):
            hp = self.configspace[name]
            values = np.array([h[name] for h in hps], dtype=object if name == "optimizer" else float)
            vec = np.asarray(hp.to_vector(values), dtype=float)
            if name == "optimizer":
                vec = vec / max(1, len(hp.choices) - 1)
            out[:, j] = vec
        return out

    def decode_hp(self, vectors) -> list[dict[str, Any]]:
        """Inverse of :meth:`encode_hp` (values snapped to legal ones)."""
        v = np.clip(np.asarray(vectors, dtype=float).reshape(-1, len(HP_NAMES)), 0.0, 1.0)
        columns = {}
        for j, name in enumerate(HP_NAMES):
            hp = self.configspace[name]
            col = v[:, j]
            if name == "optimizer":
                idx = np.minimum((col * len(hp.choices)).astype(int), len(hp.choices) - 1)
                columns[name] = [str(hp.choices[i]) for i in idx]
            elif name == "learning_rate":
                columns[name] = [float(x) for x in hp.to_value(col)]
            else:
                columns[name] = [int(x) for x in hp.to_value(col)]
        return [{name: columns[name][i] for name in HP_NAMES} for i in range(len(v))]

    def encode(self, configs) -> np.ndarray:
        """Configurations -> (n, n_arch + n_hp) floats in [0, 1]."""
        configs = [configs] if isinstance(configs, dict) else list(configs)
        return np.hstack([
            self.encode_arch([c["arch"] for c in configs]),
            self.encode_hp([c["hp"] for c in configs]),
        ])

    def decode(self, vectors) -> list[dict[str, Any]]:
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
        arch, hp = config["arch"], config["hp"]
        dims = self.arch_dims
        if len(arch) != len(dims):
            raise SpaceError(f"arch has {len(arch)} variables, the space has {len(dims)}")
        for name, value, dim in zip(self.arch_names, arch, dims):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < dim:
                raise SpaceError(f"arch variable {name} = {value!r} is not an integer in [0, {dim - 1}]")
        if not isinstance(hp, dict) or set(hp) != set(HP_NAMES):
            raise SpaceError(f"hp must have exactly the keys {list(HP_NAMES)}")
        for name in HP_NAMES:
            if not self.configspace[name].legal_value(hp[name]):
                raise SpaceError(f"hp {name} = {hp[name]!r} is outside {self.configspace[name]}")

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
    text = path.read_text()
    try:
        if path.suffix == ".json":
            spec = json.loads(text)
        else:
            import yaml

            spec = yaml.safe_load(text)
    except Exception as exc:  # noqa: BLE001 - any parse error becomes one clear message
        raise SpaceError(f"{path}: cannot parse: {exc}".splitlines()[0]) from None
    return SearchSpace(spec, source=str(path))
