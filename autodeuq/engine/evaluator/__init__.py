"""Evaluators run objectives (one training each) and hand results back to the search driver.

``SerialEvaluator`` runs in-process, one at a time (debugging, tests); ``RayEvaluator`` runs on a
local Ray instance or an existing cluster, one task per evaluation with its own CPUs/GPUs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from autodeuq._lazy import lazy_attributes
from autodeuq.core.errors import ParameterError

if TYPE_CHECKING:
    from autodeuq.engine.evaluator.base import Evaluator

# Each evaluator's module loads when it is asked for (Ray's alone takes seconds), so the names
# (the command line's choices) cost nothing.


def _ray(objective, **options):
    from autodeuq.engine.evaluator.ray import RayEvaluator

    return RayEvaluator(objective, **options)


def _serial(objective, **options):
    from autodeuq.engine.evaluator.serial import SerialEvaluator

    return SerialEvaluator(objective, eval_timeout=options.get("eval_timeout"))


EVALUATORS = {"ray": _ray, "serial": _serial}
"""The evaluators by name: ``name -> factory(objective, **options)``."""


def create(name: str, objective, **options) -> Evaluator:
    """An evaluator by name (:data:`EVALUATORS`): ``"ray"`` (default of the CLI) or ``"serial"``."""
    try:
        factory = EVALUATORS[name]
    except KeyError:
        raise ParameterError("evaluator", "must be " + " or ".join(map(repr, EVALUATORS)), name) from None
    return factory(objective, **options)


_CLASSES = {"Evaluator": "autodeuq.engine.evaluator.base", "TrainingObjective": "autodeuq.engine.evaluator.base",
            "SerialEvaluator": "autodeuq.engine.evaluator.serial"}


__getattr__ = lazy_attributes(__name__, _CLASSES)


__all__ = ["EVALUATORS", "Evaluator", "SerialEvaluator", "TrainingObjective", "create"]
