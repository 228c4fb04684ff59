"""Searchers: one ask/tell interface, one file each, created by name.

>>> from autodeuq.search import create
>>> searcher = create("agebo", "toy", seed=0)
>>> configs = searcher.ask(4)
>>> searcher.tell([(c, 1.0) for c in configs])

Names: ``random`` (random search), ``age`` (aging evolution over all variables), ``bo`` (Bayesian
optimization over all variables) and ``agebo`` (aging evolution for the architecture + BO for the
training hyperparameters, the default). The thesis ablations are options: ``create("age",
space, fixed_hp={...})`` and ``create("bo", space, fixed_arch=[...])``, also named
``age-fixed-hp`` and ``bo-fixed-arch`` (:data:`ABLATIONS`), whose fixed half defaults to
:data:`DEFAULT_FIXED_HP` and :func:`default_fixed_arch`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from autodeuq._lazy import lazy_attributes
from autodeuq.core.errors import ParameterError
from autodeuq.core.registry import Registry

if TYPE_CHECKING:
    from autodeuq.search.base import Searcher

# The tables name their entries as "module:attribute", imported on first use: reading the names
# (the command line's choices) costs neither scikit-learn nor the search space.
SEARCHERS = Registry({
    "random": "autodeuq.search.random:RandomSearch",
    "age": "autodeuq.search.age:AgingEvolution",
    "bo": "autodeuq.search.bo:BayesianOptimization",
    "agebo": "autodeuq.search.agebo:AgEBO",
})
"""The searchers by name: ``name -> Searcher subclass``."""
DEFAULT_SEARCHER = "agebo"

SURROGATES = Registry({
    "et": "autodeuq.search.surrogate:extra_trees",
    "rf": "autodeuq.search.surrogate:random_forest",
    "gp": "autodeuq.search.surrogate:gaussian_process",
    "deep-ensemble": "autodeuq.search.ensemble_surrogates:deep_ensemble",
    "ranking-ensemble": "autodeuq.search.ensemble_surrogates:ranking_ensemble",
})
"""Surrogates of Bayesian optimization by name: ``name -> factory(seed)`` returning an unfitted surrogate."""

ACQUISITIONS = Registry({
    "lcb": "autodeuq.search.acquisition:lcb",
    "ei": "autodeuq.search.acquisition:ei",
    "pi": "autodeuq.search.acquisition:pi",
})
"""Acquisition functions of Bayesian optimization by name."""

ABLATIONS: dict[str, tuple[str, str]] = {
    "age-fixed-hp": ("age", "fixed_hp"),
    "bo-fixed-arch": ("bo", "fixed_arch"),
}
"""The thesis' ablations on the joint space: ``name -> (searcher, option holding the fixed half)``."""

DEFAULT_FIXED_HP = {"learning_rate": 0.01, "batch_size": 16, "optimizer": "adam",
                    "patience_reduce_lr": 10, "patience_early_stopping": 20}
"""Hand-tuned training hyperparameters of ``age-fixed-hp`` (those of ``examples/toy_sine.py``)."""


def evolution_searchers() -> tuple[str, ...]:
    """The names of :data:`SEARCHERS` and :data:`ABLATIONS` whose searcher runs aging evolution
    (its class's ``evolves``): those that take ``population_size`` and ``sample_size``."""
    evolving = tuple(name for name in SEARCHERS if SEARCHERS[name].evolves)
    return evolving + tuple(name for name, (base, _) in ABLATIONS.items() if base in evolving)


def surrogate_searchers() -> tuple[str, ...]:
    """The names of :data:`SEARCHERS` and :data:`ABLATIONS` whose searcher takes a surrogate and
    an acquisition function (its class's ``takes_surrogate``); this imports the searcher classes."""
    bo = tuple(name for name in SEARCHERS if SEARCHERS[name].takes_surrogate)
    return bo + tuple(name for name, (base, _) in ABLATIONS.items() if base in bo)


def evolution_options(search, population_size="auto", tournament_size="auto", max_evals=100) -> dict:
    """The options of aging evolution (P, S) for ``search``: those given, ``"auto"`` sized for a
    budget of ``max_evals`` evaluations (:func:`autodeuq.search.age.population_for_budget`); {}
    for a searcher without aging evolution, which refuses any other value than ``"auto"``. The values
    are those of the options, already checked against the table (:func:`autodeuq.app.options.resolve`).

    >>> evolution_options("agebo"), evolution_options("agebo", 40, max_evals=500), evolution_options("bo")
    ({'population_size': 20, 'sample_size': 7}, {'population_size': 40, 'sample_size': 13}, {})
    """
    from autodeuq.search.age import population_for_budget, tournament_for

    for name, value in (("population_size", population_size), ("tournament_size", tournament_size)):
        if value != "auto":
            if search not in evolution_searchers():
                raise ParameterError(name, f'must be "auto" with search {search!r}: only aging evolution '
                                           f'({", ".join(evolution_searchers())}) has a population', value)
    size = population_for_budget(max_evals)[0] if population_size == "auto" else population_size
    tournament = tournament_for(size) if tournament_size == "auto" else tournament_size
    if tournament > size:
        raise ParameterError("tournament_size", f"must be at most the population size ({size})", tournament_size)
    if search not in evolution_searchers():
        return {}
    return {"population_size": size, "sample_size": tournament}


def default_fixed_arch(space) -> list[int]:
    """Architecture of ``bo-fixed-arch`` by default: a plain MLP, every cell Dense with the units
    nearest 64 (the smaller on a tie) and tanh (else the space's first activation), no skip."""
    from autodeuq.search.space import load_space

    space = load_space(space)
    units = min(range(len(space.units)), key=lambda i: (abs(space.units[i] - 64), space.units[i]))
    act = space.activations.index("tanh") if "tanh" in space.activations else 0
    dense = 1 + units * len(space.activations) + act
    return [dense if name.endswith("_dense") else 0 for name in space.arch_names]


def ablation_fixed_hp(space, overrides=None) -> dict:
    """The fixed training hyperparameters of ``age-fixed-hp``: :data:`DEFAULT_FIXED_HP` with the
    entries of ``overrides`` (a dict) replaced, checked against ``space``.

    Raises
    ------
    SpaceError
        ``overrides`` is not a dict, names an unknown hyperparameter, or a value is outside the space.
    """
    import numpy as np

    from autodeuq.search.space import SpaceError, load_space

    space = load_space(space)
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, dict):
        raise SpaceError(f"fixed training hyperparameters must be a mapping of name to value, got {overrides!r}")
    unknown = sorted(set(overrides) - set(space.hp_names))
    if unknown:
        raise SpaceError(f"unknown hyperparameter(s) {unknown}; known: {space.hp_names}")
    hp = {**DEFAULT_FIXED_HP, **overrides}
    for name, value in hp.items():
        integer = name not in ("learning_rate", "optimizer")
        if integer and (isinstance(value, bool) or not isinstance(value, int)):
            raise SpaceError(f"hp {name} = {value!r} is not an integer")
    space.validate(space.join(space.sample_arch(np.random.default_rng(0)), hp))
    return hp


def ablation_fixed_arch(space, arch=None) -> list[int]:
    """The fixed architecture of ``bo-fixed-arch``: ``arch`` (a list of integers, one per
    architecture variable) or :func:`default_fixed_arch`, checked against ``space``.

    Raises
    ------
    SpaceError
        ``arch`` is not a list of integers of the space's length and ranges.
    """
    import numpy as np

    from autodeuq.search.space import SpaceError, load_space

    space = load_space(space)
    if arch is None:
        arch = default_fixed_arch(space)
    if not isinstance(arch, (list, tuple)) or any(
        isinstance(a, bool) or not isinstance(a, (int, np.integer)) for a in arch
    ):
        raise SpaceError(f"a fixed architecture is a list of {len(space.arch_dims)} integers, got {arch!r}")
    space.validate(space.join(arch, space.sample_hp(np.random.default_rng(0))))
    return [int(a) for a in arch]


def create(name: str, space, seed: int | None = None, **options) -> Searcher:
    """A searcher by name.

    Parameters
    ----------
    name : {"random", "age", "bo", "agebo", "age-fixed-hp", "bo-fixed-arch"}
        The two last are the ablations of :data:`ABLATIONS`; their ``fixed_hp`` (merged over
        :data:`DEFAULT_FIXED_HP`) or ``fixed_arch`` (default :func:`default_fixed_arch`) option
        may be left out.
    space : SearchSpace or str
        The search space, or the name/path of one.
    seed : int or None
    **options
        Constructor options of the searcher class (see each class).
    """
    from autodeuq.search.space import load_space

    key = str(name).lower()
    if key in ABLATIONS:
        key, option = ABLATIONS[key]
        space = load_space(space)
        resolve = ablation_fixed_hp if option == "fixed_hp" else ablation_fixed_arch
        options[option] = resolve(space, options.get(option))
    if key not in SEARCHERS:
        raise ParameterError("search", f"must be one of {sorted(SEARCHERS) + sorted(ABLATIONS)}", name)
    return SEARCHERS[key](space, seed=seed, **options)


# The classes load on first access (PEP 562), like the table's entries.
_CLASSES = {
    "Searcher": "autodeuq.search.base", "RandomSearch": "autodeuq.search.random",
    "AgingEvolution": "autodeuq.search.age", "BayesianOptimization": "autodeuq.search.bo",
    "VectorBO": "autodeuq.search.bo", "AgEBO": "autodeuq.search.agebo",
}


__getattr__ = lazy_attributes(__name__, _CLASSES)


__all__ = [
    "SEARCHERS", "SURROGATES", "ACQUISITIONS", "DEFAULT_SEARCHER", "ABLATIONS", "surrogate_searchers",
    "DEFAULT_FIXED_HP", "default_fixed_arch", "ablation_fixed_hp", "ablation_fixed_arch", "create", "Searcher",
    "RandomSearch", "AgingEvolution", "BayesianOptimization", "VectorBO", "AgEBO", "evolution_searchers",
    "evolution_options",
]
