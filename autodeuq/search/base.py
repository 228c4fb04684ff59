"""The ask/tell interface shared by every searcher.

A searcher proposes configurations (``ask``) and learns from their outcomes (``tell``). It never
touches files: the search driver owns the catalog and, to resume a search, rebuilds a searcher by
telling a fresh one the whole history. So a searcher's state is a function of its seed and of the
sequence of results told, and ``tell`` accepts any batch of past results before any ``ask``.

Random numbers: each ``ask`` draws from a generator derived from ``(seed, number of results told,
number of asks since the last tell)``. A searcher rebuilt from the history therefore proposes
exactly what the original would have proposed after its last tell.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Iterable

import numpy as np

from autodeuq.search.space import SearchSpace, load_space

Config = dict[str, Any]


def clean_objective(objective) -> float | None:
    """A told objective as a finite float, or ``None`` for a failed evaluation.

    ``None``, NaN and infinities (the evaluator reports ``inf`` on failure) all mean failure.
    """
    if objective is None:
        return None
    if isinstance(objective, (bool, np.bool_)) or not isinstance(objective, (int, float, np.number)):
        raise TypeError(f"an objective is a number or None, got {objective!r}")
    value = float(objective)
    return value if math.isfinite(value) else None


def copy_config(config) -> Config:
    """A plain-Python copy of a configuration (ints in ``arch``, a fresh ``hp`` dict)."""
    return {"arch": [int(a) for a in config["arch"]], "hp": dict(config["hp"])}


def config_key(config) -> tuple:
    """Hashable identity of a configuration, used to match told results with pending asks."""
    def plain(value):  # numpy scalars compare by their Python value
        return value.item() if isinstance(value, np.generic) else value

    return (
        tuple(int(a) for a in config["arch"]),
        tuple(sorted((k, repr(plain(v))) for k, v in config["hp"].items())),
    )


class Searcher(ABC):
    """Base class of the searchers: seeded, deterministic, asynchronous ask/tell.

    Parameters
    ----------
    space : SearchSpace or str
        The joint search space (or the name/path of one, see :func:`autodeuq.search.space.load_space`).
    seed : int or None
        Seed of all the searcher's random draws; ``None`` draws fresh entropy.

    Notes
    -----
    Subclasses implement ``_ask(n, rng)`` and ``_tell(results)``, where ``results`` holds
    ``(config, objective)`` pairs with the objective already cleaned (a float, or ``None`` for a
    failure). Configurations asked and not yet told are kept in :attr:`pending`.
    """

    name = ""
    takes_surrogate = False  #: whether it takes the ``surrogate`` and ``acq`` options of Bayesian optimization
    evolves = False  #: whether it runs aging evolution (takes ``population_size`` and ``sample_size``)

    def __init__(self, space: SearchSpace | str, seed: int | None = None):
        self.space = load_space(space)
        self.seed = seed
        self._entropy = np.random.SeedSequence(seed).entropy
        self._n_told = 0
        self._asks_since_tell = 0
        self._pending: dict[tuple, list[Config]] = {}
        self._parents: dict[tuple, Config] = {}  # a mutated child's key -> its parent's configuration

    # ---------------------------------------------------------------- public
    def ask(self, n: int = 1) -> list[Config]:
        """Propose ``n`` configurations to evaluate.

        Returns
        -------
        list of dict
            ``n`` configurations ``{"arch": [...], "hp": {...}}`` of :attr:`space`.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"ask(n) needs a positive integer n, got {n!r}")
        rng = np.random.default_rng(
            np.random.SeedSequence(self._entropy, spawn_key=(self._n_told, self._asks_since_tell))
        )
        self._asks_since_tell += 1
        configs = [copy_config(c) for c in self._ask(int(n), rng)]
        for config in configs:
            self._pending.setdefault(config_key(config), []).append(copy_config(config))
        return configs

    def tell(self, results: Iterable[tuple[Config, Any]]) -> None:
        """Record evaluated configurations.

        Parameters
        ----------
        results : iterable of (config, objective)
            ``objective`` is the cost (lower is better); ``None``, NaN or an infinity mark a
            failed evaluation. Configurations need not come from this searcher's ``ask`` (this
            is how a search is resumed: tell a new searcher the whole history).
        """
        cleaned = []
        for item in results:
            try:
                config, objective = item
            except (TypeError, ValueError):
                raise TypeError(f"tell() takes (config, objective) pairs, got {item!r}") from None
            cleaned.append((copy_config(config), clean_objective(objective)))
        if not cleaned:
            return
        for config, _ in cleaned:
            key = config_key(config)
            if self._pending.get(key):
                self._pending[key].pop()
                if not self._pending[key]:
                    del self._pending[key]
        self._tell(cleaned)
        self._n_told += len(cleaned)
        self._asks_since_tell = 0

    def parent_of(self, config) -> Config | None:
        """The configuration that ``config`` was mutated from, when this searcher asked for it as a
        mutated child (aging evolution); None for any other configuration."""
        parent = self._parents.get(config_key(config))
        return None if parent is None else copy_config(parent)

    def _child(self, child: Config, parent: Config) -> Config:
        """Note ``child`` as a mutation of ``parent`` (see :meth:`parent_of`); returns ``child``."""
        self._parents[config_key(child)] = copy_config(parent)
        return child

    @property
    def pending(self) -> list[Config]:
        """Configurations asked and not yet told, oldest first."""
        return [copy_config(c) for group in self._pending.values() for c in group]

    @property
    def n_told(self) -> int:
        """Number of results told so far (failures included)."""
        return self._n_told

    def __repr__(self):
        return f"{type(self).__name__}(space={self.space.name!r}, seed={self.seed!r}, told={self._n_told})"

    # ------------------------------------------------------------ subclasses
    @abstractmethod
    def _ask(self, n: int, rng: np.random.Generator) -> list[Config]:
        """Return ``n`` configurations, drawing randomness only from ``rng``."""

    @abstractmethod
    def _tell(self, results: list[tuple[Config, float | None]]) -> None:
        """Learn from ``(config, objective or None)`` pairs."""
