"""Random search over the joint space: every configuration drawn from the prior."""
from __future__ import annotations

from autodeuq.search.base import Searcher


class RandomSearch(Searcher):
    """Independent draws from the prior of the joint space; results are ignored.

    Parameters
    ----------
    space : SearchSpace or str
    seed : int or None
    """

    name = "random"

    def _ask(self, n, rng):
        archs = [self.space.sample_arch(rng) for _ in range(n)]
        hps = self.space.decode_hp(self.space.sample_hp_vectors(rng, n))
        return [self.space.join(a, h) for a, h in zip(archs, hps)]

    def _tell(self, results):
        pass
