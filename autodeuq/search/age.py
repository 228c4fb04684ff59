"""Aging evolution (regularized evolution, Real et al. 2019).

A FIFO population holds the last ``population_size`` successful results. Until it is full,
configurations are random. Then each child comes from a tournament: draw ``sample_size`` members
without replacement, take the one of lowest cost as parent, and change one of its variables to a
different value. Failed evaluations never enter the population.

The population is random until it is full, so its size must leave room for evolution within the
budget: :func:`population_for_budget` sizes it from the number of evaluations.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from autodeuq.search.base import Config, Searcher, copy_config

#: ``population_for_budget``'s rule: P = max_evals / BUDGET_PER_MEMBER within [MIN, MAX]
#: (the thesis' catalogs: P = 100 for 500 evaluations, evolution for 400 of them), S = P / 3
#: (NATS-Bench: P = 10, S = 3), at least 2.
BUDGET_PER_MEMBER, MIN_POPULATION, MAX_POPULATION, POPULATION_PER_TOURNAMENT = 5, 10, 100, 3


def population_for_budget(max_evals: int) -> tuple[int, int]:
    """Population size P and tournament size S of aging evolution for a search of ``max_evals``
    evaluations: P a fifth of them, within [10, 100], S a third of P.

    >>> population_for_budget(100), population_for_budget(500), population_for_budget(20)
    ((20, 7), (100, 33), (10, 3))
    """
    size = min(MAX_POPULATION, max(MIN_POPULATION, round(max_evals / BUDGET_PER_MEMBER)))
    return size, tournament_for(size)


def tournament_for(population_size: int) -> int:
    """Tournament size S for a population of ``population_size``: a third of it, from 2 (at most P).

    >>> tournament_for(20), tournament_for(100), tournament_for(2)
    (7, 33, 2)
    """
    return min(population_size, max(2, round(population_size / POPULATION_PER_TOURNAMENT)))


class AgingPopulation:
    """FIFO of the last ``size`` successful ``(config, objective)`` pairs, with tournaments.

    Parameters
    ----------
    size : int
        Population size P (oldest members leave first).
    sample_size : int
        Tournament size S (<= P).
    """

    def __init__(self, size: int = 100, sample_size: int = 10):
        if not 1 <= sample_size <= size:
            raise ValueError(f"need 1 <= sample_size <= population_size, got {sample_size} and {size}")
        self.size = size
        self.sample_size = sample_size
        self._members: deque[tuple[Config, float]] = deque(maxlen=size)

    def add(self, config, objective: float) -> None:
        self._members.append((copy_config(config), float(objective)))

    @property
    def full(self) -> bool:
        return len(self._members) == self.size

    @property
    def members(self) -> list[tuple[Config, float]]:
        """Members, oldest first, as ``(config, objective)`` copies."""
        return [(copy_config(c), y) for c, y in self._members]

    def __len__(self):
        return len(self._members)

    def select_parent(self, rng: np.random.Generator) -> Config:
        """The lowest-cost member among ``sample_size`` drawn without replacement."""
        drawn = rng.choice(len(self._members), size=self.sample_size, replace=False)
        best = min(drawn, key=lambda i: self._members[i][1])
        return copy_config(self._members[best][0])


class AgingEvolution(Searcher):
    """Aging evolution over all variables of the joint space (or over the architecture only).

    A mutation picks one variable uniformly among the architecture and training-hyperparameter
    variables and gives it a different value: an architecture variable through
    :meth:`SearchSpace.mutate_arch`, a hyperparameter by redrawing it from its prior until its value
    changes (:func:`mutate_hp`).

    Parameters
    ----------
    space : SearchSpace or str
    seed : int or None
    population_size : int
        P, the number of most recent successful results kept (100, as in the thesis; a search
        through :func:`autodeuq.app.pipeline.fill_catalog` sizes it for its budget,
        :func:`population_for_budget`).
    sample_size : int
        S, the tournament size (10).
    fixed_hp : dict, optional
        Evolve the architecture only and train every configuration with these hyperparameters
        (the thesis ablation "AgE over architecture with fixed training hyperparameters").

    Attributes
    ----------
    population : list of (config, objective)
        The current population, oldest first.
    """

    name = "age"
    evolves = True

    def __init__(self, space, seed=None, population_size: int = 100, sample_size: int = 10, fixed_hp=None):
        super().__init__(space, seed)
        self.fixed_hp = None
        if fixed_hp is not None:
            self.fixed_hp = dict(fixed_hp)
            self.space.validate(self.space.join(self.space.sample_arch(np.random.default_rng(0)), self.fixed_hp))
        self._population = AgingPopulation(population_size, sample_size)

    @property
    def population(self) -> list[tuple[Config, float]]:
        return self._population.members

    def _random(self, rng) -> Config:
        arch = self.space.sample_arch(rng)
        hp = dict(self.fixed_hp) if self.fixed_hp is not None else self.space.sample_hp(rng)
        return self.space.join(arch, hp)

    def _mutate(self, config, rng) -> Config:
        arch, hp = self.space.split(config)
        n_arch = len(arch)
        n_vars = n_arch + (0 if self.fixed_hp is not None else len(self.space.hp_names))
        j = int(rng.integers(n_vars))
        if j < n_arch:
            # mutate_arch draws the variable itself, uniformly, as j would have.
            return self.space.join(self.space.mutate_arch(arch, rng), hp)
        return self.space.join(arch, mutate_hp(self.space, hp, j - n_arch, rng))

    def _ask(self, n, rng):
        if not self._population.full:
            return [self._random(rng) for _ in range(n)]
        parents = [self._population.select_parent(rng) for _ in range(n)]
        return [self._child(self._mutate(parent, rng), parent) for parent in parents]

    def _tell(self, results):
        for config, objective in results:
            if objective is not None:
                self._population.add(config, objective)


def mutate_hp(space, hp: dict, index: int, rng: np.random.Generator, max_draws: int = 1000) -> dict:
    """Copy of ``hp`` with hyperparameter number ``index`` redrawn from its prior to a new value.

    The redraw is a draw of the space's prior (:meth:`SearchSpace.prior_hp_vectors`) in the
    [0, 1] encoding; only the mutated entry is decoded, so the other values are kept bit for bit.
    """
    name = space.hp_names[index]
    vector = space.encode_hp(hp)[0]
    uniform = np.zeros(len(space.hp_names))
    for _ in range(max_draws):
        uniform[index] = rng.random()
        vector[index] = space.prior_hp_vectors(uniform)[0, index]
        value = space.decode_hp(vector)[0][name]
        if value != hp[name]:
            child = dict(hp)
            child[name] = value
            return child
    raise RuntimeError(f"could not draw a new value of {name} (does it have a single value?)")
