"""AgEBO: aging evolution for the architecture, Bayesian optimization for the training
hyperparameters (Egele et al. 2022), the default searcher of autodeuq.

Each ``ask(n)`` pairs ``n`` children architectures from aging evolution (random while the
population is not full) with ``n`` hyperparameter suggestions of a BO over the training
hyperparameters alone. Each told result goes to both halves: its architecture and cost into the
population (successes only), its hyperparameters and cost into the BO (a failure counts there as
the worst observed cost).
"""
from __future__ import annotations

from autodeuq.search.age import AgingPopulation
from autodeuq.search.base import Searcher
from autodeuq.search.bo import VectorBO


class AgEBO(Searcher):
    """Aging evolution (architecture) + asynchronous BO (training hyperparameters).

    Parameters
    ----------
    space : SearchSpace or str
    seed : int or None
    population_size : int
        P of aging evolution (100, as in the thesis; a search through
        :func:`autodeuq.app.pipeline.fill_catalog` sizes it for its budget,
        :func:`autodeuq.search.age.population_for_budget`).
    sample_size : int
        S, the tournament size (10).
    **options
        Options of the hyperparameter BO, see :class:`~autodeuq.search.bo.VectorBO`
        (``surrogate``, ``acq``, ``kappa``, ``multi_point``, ``n_initial``...).

    Attributes
    ----------
    population : list of (config, objective)
        The architecture population, oldest first (its members keep the hyperparameters they
        were trained with).
    bo : VectorBO
        The hyperparameter BO, in the [0, 1] encoding of the space.

    Examples
    --------
    >>> searcher = AgEBO("toy", seed=0)
    >>> configs = searcher.ask(8)
    """

    name = "agebo"
    takes_surrogate = True
    evolves = True

    def __init__(self, space, seed=None, population_size: int = 100, sample_size: int = 10, **options):
        super().__init__(space, seed)
        self._population = AgingPopulation(population_size, sample_size)
        self.bo = VectorBO(self.space.sample_hp_vectors, **options)

    @property
    def population(self):
        return self._population.members

    def _ask(self, n, rng):
        if self._population.full:
            parents = [self._population.select_parent(rng) for _ in range(n)]
            archs = [self.space.mutate_arch(parent["arch"], rng) for parent in parents]
        else:
            parents = [None] * n
            archs = [self.space.sample_arch(rng) for _ in range(n)]
        pending = self.pending
        busy = self.space.encode_hp([c["hp"] for c in pending]) if pending else None
        hps = self.space.decode_hp(self.bo.suggest(n, rng, busy))
        children = [self.space.join(a, h) for a, h in zip(archs, hps)]
        # A child's architecture is its parent's, mutated; its hyperparameters come from the BO.
        return [child if parent is None else self._child(child, parent) for child, parent in zip(children, parents)]

    def _tell(self, results):
        for config, objective in results:
            if objective is not None:
                self._population.add(config, objective)
        self.bo.observe(self.space.encode_hp([c["hp"] for c, _ in results]), [y for _, y in results])
