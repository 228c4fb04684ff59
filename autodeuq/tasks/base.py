"""What a task is: the one object the rest of the package asks about regression, classification or
a task added from outside (:data:`autodeuq.tasks.TASKS`).

A :class:`Task` gathers what differs between tasks, which was once a branch on the task's name in
a dozen modules: what the network outputs (its head, which the trainer takes as an argument), how
its targets are read, what the catalog stores of each entry's validation predictions, how members
are selected and recalibrated, which conformal scores it keeps, its ensemble's class and what the
report scores and draws.

The task layer sits above the table and network layers and below the search, the catalog, the
ensemble and the application (docs/architecture.md). Its parts that live in the layers above (the
ensemble's class, the selection candidates, the report's scores and figures) are therefore named,
not imported: a ``"module:attribute"`` string, resolved on first use (:meth:`Task.part`), the way a
:class:`~autodeuq.core.registry.Registry` names its entries. A task written outside the package
may give the objects themselves.

Examples
--------
>>> from autodeuq.tasks import get_task
>>> task = get_task("classification")
>>> task.head, task.prediction_arrays, task.calibration
('logits', ('proba',), 'temperature')
"""
from __future__ import annotations

from typing import Any, ClassVar

from autodeuq._lazy import resolve


class Task:
    """A task: class attributes say what it is, the parts above its layer are named.

    A new task subclasses this class (or one of the two built in) and is registered under its
    :attr:`name` in :data:`autodeuq.tasks.TASKS` (docs/guide/extending.md, "A task").
    """

    #: The name a run records in its catalog (``meta["data"]["task"]``) and ``--task`` takes.
    name: ClassVar[str] = ""
    #: What the network outputs, as the trainer builds it: ``"gaussian"`` (a mean and a variance
    #: per target) or ``"logits"`` (one per class). The network layer takes it as an argument.
    head: ClassVar[str] = "gaussian"
    #: How the table layer reads the targets: ``"numbers"`` (one float column per target) or
    #: ``"labels"`` (one column of classes, encoded as codes).
    targets: ClassVar[str] = "numbers"
    #: The validation predictions a catalog entry stores, in this order (each an array of shape
    #: (n_valid, :meth:`prediction_width`)).
    prediction_arrays: ClassVar[tuple[str, ...]] = ("mean", "var")
    #: The recalibration ``calibrate="auto"`` stands for (:mod:`autodeuq.ensemble.calibration`).
    calibration: ClassVar[str] = "scale"
    #: The conformal scores an ensemble keeps (:mod:`autodeuq.ensemble.conformal`'s methods).
    conformal: ClassVar[str] = "normalized"
    #: What ``selector="auto"`` and ``pool="auto"`` select with (docs/decisions/selection.md).
    auto_selector: ClassVar[str] = "greedy"
    auto_pool: ClassVar[float] = 0.4
    #: ``crossfit="auto"`` cross-fits the task's runs of at most this many training and validation
    #: rows; 0: never (docs/decisions/crossfit.md).
    auto_crossfit_rows: ClassVar[int] = 0
    #: What the search's objective is, in words (the progress line, the search trace's axis).
    objective: ClassVar[str] = "NLL"
    #: What the conformal scores give, in words: ``"intervals"`` or ``"sets"``.
    conformal_gives: ClassVar[str] = "intervals"
    #: The parts in the layers above, each a ``"module:attribute"`` string or the object itself:
    #: the ensemble's class (an :class:`~autodeuq.ensemble.Ensemble`), the selection candidates
    #: (:class:`~autodeuq.ensemble.building.GaussianCandidates`'s interface) and the report's
    #: scores and figures (:class:`~autodeuq.report.RegressionScores`'s interface).
    ensemble: ClassVar[Any] = "autodeuq.ensemble.predictive:Ensemble"
    candidates: ClassVar[Any] = "autodeuq.ensemble.building:GaussianCandidates"
    report: ClassVar[Any] = "autodeuq.report:RegressionScores"

    def part(self, name: str) -> Any:
        """The part ``name`` (``"ensemble"``, ``"candidates"``, ``"report"``), imported when named
        by a ``"module:attribute"`` string."""
        value = getattr(self, name)
        return resolve(value) if isinstance(value, str) else value

    def prediction_width(self, n_targets: int, labels=None) -> int:
        """The columns of each stored validation prediction array: one per target, or per class."""
        return int(n_targets)

    def network_nll(self, model, x, y) -> float:
        """The mean NLL of one network (in original units) on rows ``(x, y)``: the Gaussian's, for
        regression (what a refit is checked by, :mod:`autodeuq.ensemble.refit`)."""
        import numpy as np

        from autodeuq.metrics import gaussian_nll
        from autodeuq.nn.train import predict

        mean, var = predict(model, x)
        return float(np.mean(gaussian_nll(y, mean, var)))

    def constant_nll(self, y, labels=None) -> float:
        """The mean NLL on ``y`` of the constant prediction: the Gaussian with the columns' means and variances."""
        import numpy as np

        from autodeuq.metrics import gaussian_nll

        y = np.asarray(y, dtype=np.float64)
        return float(np.mean(gaussian_nll(y, np.broadcast_to(y.mean(axis=0), y.shape),
                                          np.broadcast_to(np.maximum(y.var(axis=0), 1e-12), y.shape))))

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r})"
