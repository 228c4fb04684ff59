"""Evaluators run objectives (one training each) and hand results back to the search driver.

``SerialEvaluator`` runs in-process, one at a time (debugging, tests); ``RayEvaluator`` runs on a
local Ray instance or an existing cluster, one task per evaluation with its own CPUs/GPUs.
"""
from autodeuq.errors import ParameterError
from autodeuq.evaluator.base import Evaluator, TrainingObjective
from autodeuq.evaluator.serial import SerialEvaluator


def create(name: str, objective, **options) -> Evaluator:
    """An evaluator by name: ``"ray"`` (default of the CLI) or ``"serial"``."""
    if name == "serial":
        return SerialEvaluator(objective, eval_timeout=options.get("eval_timeout"))
    if name == "ray":
        from autodeuq.evaluator.ray import RayEvaluator

        return RayEvaluator(objective, **options)
    raise ParameterError("evaluator", "must be 'ray' or 'serial'", name)


__all__ = ["Evaluator", "SerialEvaluator", "TrainingObjective", "create"]
