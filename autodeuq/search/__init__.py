"""Searchers: one ask/tell interface, one file each, created by name.

>>> from autodeuq.search import create
>>> searcher = create("agebo", "toy", seed=0)
>>> configs = searcher.ask(4)
>>> searcher.tell([(c, 1.0) for c in configs])

Names: ``random`` (random search), ``age`` (aging evolution over all variables), ``bo`` (Bayesian
optimization over all variables) and ``agebo`` (aging evolution for the architecture + BO for the
training hyperparameters, the default). The thesis ablations are options: ``create("age",
space, fixed_hp={...})`` and ``create("bo", space, fixed_arch=[...])``.
"""
from __future__ import annotations

from autodeuq.search.age import AgingEvolution
from autodeuq.search.agebo import AgEBO
from autodeuq.search.base import Searcher
from autodeuq.search.bo import BayesianOptimization, VectorBO
from autodeuq.search.random import RandomSearch
from autodeuq.search import ensemble_surrogates  # noqa: F401  (registers "deep-ensemble", "ranking-ensemble")

SEARCHERS: dict[str, type[Searcher]] = {
    "random": RandomSearch,
    "age": AgingEvolution,
    "bo": BayesianOptimization,
    "agebo": AgEBO,
}
DEFAULT_SEARCHER = "agebo"


def create(name: str, space, seed: int | None = None, **options) -> Searcher:
    """A searcher by name.

    Parameters
    ----------
    name : {"random", "age", "bo", "agebo"}
    space : SearchSpace or str
        The search space, or the name/path of one.
    seed : int or None
    **options
        Constructor options of the searcher class (see each class).
    """
    cls = SEARCHERS.get(str(name).lower())
    if cls is None:
        raise ValueError(f"unknown searcher {name!r}; known: {sorted(SEARCHERS)}")
    return cls(space, seed=seed, **options)


__all__ = [
    "SEARCHERS", "DEFAULT_SEARCHER", "create", "Searcher", "RandomSearch", "AgingEvolution",
    "BayesianOptimization", "VectorBO", "AgEBO",
]
