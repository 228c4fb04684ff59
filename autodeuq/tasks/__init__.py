"""Tasks: one module per task, each a :class:`~autodeuq.tasks.base.Task`, named in :data:`TASKS`.

The rest of the package asks the task of a run (:func:`get_task` of the name its catalog records)
instead of branching on the name: see :mod:`autodeuq.tasks.base` for what a task supplies, and
docs/guide/extending.md ("A task") for adding one from outside the package, one class and one
registry line.
"""
from __future__ import annotations

from autodeuq._lazy import lazy_attributes
from autodeuq.core.errors import ParameterError
from autodeuq.core.registry import Registry

# The task classes load on first access (PEP 562), as the registry's entries do.
__getattr__ = lazy_attributes(__name__, {"Task": "autodeuq.tasks.base", "RegressionTask": "autodeuq.tasks.regression",
                                         "ClassificationTask": "autodeuq.tasks.classification"})

#: Task name -> :class:`~autodeuq.tasks.base.Task` subclass (lazy: imported when looked up).
TASKS = Registry({
    "regression": "autodeuq.tasks.regression:RegressionTask",
    "classification": "autodeuq.tasks.classification:ClassificationTask",
})


def get_task(name):
    """The task named ``name`` (a :class:`~autodeuq.tasks.base.Task`; one given is returned as it is).

    Raises
    ------
    ParameterError
        No task of that name is registered in :data:`TASKS`.
    """
    if not isinstance(name, str):
        return name
    if name not in TASKS:
        raise ParameterError("task", f"must be one of the registered tasks {list(TASKS)} "
                                     f"(autodeuq.tasks.TASKS)", name)
    return TASKS[name]()


__all__ = ["TASKS", "ClassificationTask", "RegressionTask", "Task", "get_task"]
