"""Early discarding of hopeless trainings: one rule per module, chosen by name.

Every rule derives from :class:`~autodeuq.discard.base.DiscardRule` and is registered in
:data:`RULES` (``name -> "module:Class"``, imported on first use); the option
``early_discarding`` takes ``auto``, ``none`` or any registered name (:func:`policies`), and
:func:`create` builds the rule it names from the run's options, each rule reading its own
(:meth:`~autodeuq.discard.base.DiscardRule.from_options`).

- :mod:`autodeuq.discard.sha`: asynchronous successive halving (``sha``, "vertical").
- :mod:`autodeuq.discard.iepoch`: i-Epoch (``iepoch``, "horizontal", with a second phase).
- :mod:`autodeuq.discard.cost`: the cost policy of ``auto``, which turns successive halving on
  when the search is projected to cost more than its budget.
- :mod:`autodeuq.discard.scheduler`: the :class:`Scheduler` through which the search driver
  owns the rule.

A rule added from outside the package is one class and one line::

    from autodeuq.discard import RULES
    RULES["mine"] = MyRule          # or "my_package.rules:MyRule"

The names of the former module ``autodeuq.discard`` (``SuccessiveHalving``, ``IEpoch``,
``rung_schedule``, ...) are still importable from here.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autodeuq._lazy import lazy_attributes
from autodeuq.core.registry import Registry

__all__ = ["RULES", "create", "options", "policies", "DiscardRule", "SuccessiveHalving", "IEpoch", "Scheduler",
           "DiscardByCost"]

RULES = Registry({
    "sha": "autodeuq.discard.sha:SuccessiveHalving",
    "iepoch": "autodeuq.discard.iepoch:IEpoch",
})
"""Early-discarding rules by name: ``name -> DiscardRule subclass``."""

#: What ``early_discarding`` takes besides the rules: ``auto`` (the cost policy decides, successive
#: halving once on: :mod:`autodeuq.discard.cost`) and ``none`` (every training to its own early stop).
SPECIAL = ("auto", "none")


def policies() -> tuple[str, ...]:
    """The values of the option ``early_discarding``: ``auto``, ``none`` and the names of :data:`RULES`.

    >>> policies()
    ('auto', 'none', 'sha', 'iepoch')
    """
    return (*SPECIAL, *RULES)


def options() -> tuple:
    """The options of early discarding, in the order the table of a run lists them: the cost
    policy's (``discard_budget``), then each registered rule's
    (:attr:`~autodeuq.discard.base.DiscardRule.options`); this imports the rules.

    >>> [o.name for o in options()]  # doctest: +NORMALIZE_WHITESPACE
    ['discard_budget', 'sha_min_epochs', 'sha_reduction', 'sha_rungs', 'iepoch_epochs', 'iepoch_top_k']
    """
    from autodeuq.discard.cost import OPTIONS

    return (*OPTIONS, *(option for name in RULES for option in RULES[name].options))


def create(name: str, options: Mapping[str, Any], **context):
    """The rule ``name`` of :data:`RULES` built from the run's ``options`` (option name -> value)
    by its :meth:`~autodeuq.discard.base.DiscardRule.from_options` (``context``: its keyword
    arguments); None for ``"none"``.

    >>> create("iepoch", {"iepoch_epochs": 1, "iepoch_top_k": 20}).describe()
    {'policy': 'iepoch', 'epochs': 1, 'top_k': 20}
    """
    if name == "none":
        return None
    if name == "auto":
        raise ValueError('early_discarding="auto" depends on the data: resolve it first (discarding_policy)')
    return RULES[name].from_options(options, **context)


_NAMES = {
    "DiscardRule": "autodeuq.discard.base",
    "SuccessiveHalving": "autodeuq.discard.sha", "RaySuccessiveHalving": "autodeuq.discard.sha",
    "rung_epochs": "autodeuq.discard.sha", "rung_schedule": "autodeuq.discard.sha",
    "middle_batch": "autodeuq.discard.sha", "resolve_min_epochs": "autodeuq.discard.sha",
    "first_rung": "autodeuq.discard.sha", "rung_unit": "autodeuq.discard.sha",
    "RUNG_UNITS": "autodeuq.discard.sha", "AUTO_RUNG_UNIT": "autodeuq.discard.sha",
    "AUTO_FIRST_RUNG": "autodeuq.discard.sha",
    "IEpoch": "autodeuq.discard.iepoch",
    "DiscardByCost": "autodeuq.discard.cost", "training_cost": "autodeuq.discard.cost",
    "decide_after": "autodeuq.discard.cost",
    "Scheduler": "autodeuq.discard.scheduler",
}
_lazy_names = lazy_attributes(__name__, _NAMES, submodules=("base", "sha", "iepoch", "cost", "scheduler"))


def __getattr__(name):
    if name == "POLICIES":  # the former constant: now what the registry holds
        return policies()
    return _lazy_names(name)
