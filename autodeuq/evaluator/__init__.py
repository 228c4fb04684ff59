"""Evaluators run objectives (one training each) and hand results back to the search driver.

``SerialEvaluator`` runs in-process, one at a time (debugging, tests); ``RayEvaluator`` runs on a
local Ray instance or an existing cluster, one task per evaluation with its own CPUs/GPUs.
"""
from autodeuq.errors import ParameterError
from autodeuq.evaluator.base import Evaluator, TrainingObjective
from autodeuq.evaluator.serial import SerialEvaluator


def _ray(objective, **options) -> Evaluator:
    from autodeuq.evaluator.ray import RayEvaluator  # Ray loads only when asked for

    return RayEvaluator(objective, **options)


def _serial(objective, **options) -> Evaluator:
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


__all__ = ["EVALUATORS", "Evaluator", "SerialEvaluator", "TrainingObjective", "create"]
