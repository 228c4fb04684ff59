"""Asynchronous successive halving: "vertical" early discarding of hopeless trainings.

Successive halving (Jamieson & Talwalkar 2016) in its asynchronous form (Li et al. 2020, ASHA)
needs no portfolio of configurations known in advance: each training, as it runs, reports its
validation loss at the *rung* epochs ``min_epochs * reduction**k`` (1, 3, 9, 27, 81 for the
defaults) and continues past a rung only if that loss is among the best ``1 / reduction`` of the
losses recorded at the same rung by all trainings so far, its own included (Egele 2024, ch. 3.3.4
and 5, calls this "vertical" early discarding). Until a rung holds ``reduction`` records, nobody
is discarded there: the top third of fewer than three trainings is not defined.

The loss reported at a rung is the best validation loss reached by that epoch: the objective of
a training is its minimum validation loss, and a rung compares what each training would report
if stopped there.

Rungs count epochs by default. With ``reference_batch`` set they count optimizer steps instead:
rung ``m`` is the number of steps of ``m`` epochs with batches of ``reference_batch`` rows, which a
training with batches of ``b`` rows reaches at epoch ``ceil(m * b / reference_batch)``. Trainings of
different batch sizes are then compared after the same number of updates, not after the same
number of passes over the data, where small batches have an edge. ``sha_rungs="steps"`` takes
the geometric middle of the batch sizes searched (:func:`middle_batch`): smaller batches are
judged after fewer epochs (down to one), larger ones after more. The records stay keyed by ``m``.

The records are state shared by every concurrent training of a search. :class:`SuccessiveHalving`
holds them in-process (serial evaluation, tests); :meth:`SuccessiveHalving.shared_on_ray` moves
them into a Ray actor that every worker consults at its rungs (a few calls per training). A
resumed search replays the recorded validation-loss histories of its catalog
(:meth:`SuccessiveHalving.replay`), so its decisions continue from the same records.

The rule answers the trainings as every rule does (:class:`autodeuq.discard.base.DiscardRule`):
:meth:`SuccessiveHalving.rungs` gives the epochs at which a training asks,
:meth:`SuccessiveHalving.should_continue` the answer.
"""
from __future__ import annotations

import math
import threading
from collections import defaultdict
from typing import Iterable, Sequence

from autodeuq.core.errors import ParameterError
from autodeuq.core.option import Integer, OneOf, Option
from autodeuq.discard.base import DiscardRule
from autodeuq.table import data

__all__ = ["SuccessiveHalving", "rung_epochs", "rung_schedule", "middle_batch", "RUNG_UNITS", "resolve_min_epochs",
           "first_rung", "rung_unit"]

# ``sha_min_epochs="auto"``: the first rung at epoch 3 on small tables, at epoch 1 above. The
# measurements: docs/decisions/sha-first-rung.md.
AUTO_FIRST_RUNG = {True: 3, False: 1}  # by data.is_small

#: Units of successive halving's rungs (``sha_rungs``): ``epochs``, or ``steps`` (optimizer steps of as many
#: epochs with the middle batch size searched, :func:`middle_batch`); ``auto`` is :data:`AUTO_RUNG_UNIT`.
RUNG_UNITS = ("auto", "epochs", "steps")
# ``auto`` counts epochs; the measurements: docs/decisions/sha-rungs.md.
AUTO_RUNG_UNIT = "epochs"


def resolve_min_epochs(min_epochs, n_rows: int) -> int:
    """The first rung that ``min_epochs`` stands for on ``n_rows`` training and validation rows.

    >>> resolve_min_epochs("auto", 500), resolve_min_epochs("auto", 5000), resolve_min_epochs(9, 500)
    (3, 1, 9)
    """
    return AUTO_FIRST_RUNG[data.is_small(n_rows)] if min_epochs == "auto" else min_epochs


def rung_epochs(max_epochs: int, min_epochs: int = 1, reduction: int = 3) -> list[int]:
    """The rung epochs below ``max_epochs``: ``min_epochs * reduction**k``.

    Examples
    --------
    >>> rung_epochs(100)
    [1, 3, 9, 27, 81]
    >>> rung_epochs(100, min_epochs=2, reduction=2)
    [2, 4, 8, 16, 32, 64]
    """
    return list(rung_schedule(max_epochs, min_epochs, reduction))


def middle_batch(low: int, high: int) -> int:
    """The geometric middle of the batch sizes ``low``-``high``, rounded: the reference batch size
    of rungs counted in steps.

    >>> middle_batch(12, 256), middle_batch(66, 256), middle_batch(4, 4)
    (55, 130, 4)
    """
    return max(1, round(math.sqrt(int(low) * int(high))))


def rung_schedule(max_epochs: int, min_epochs: int = 1, reduction: int = 3, batch_size: int | None = None,
                  reference_batch: int | None = None) -> dict[int, list[int]]:
    """``{epoch: [rungs]}``: the epochs below ``max_epochs`` at which a training with batches of
    ``batch_size`` rows reaches rungs ``min_epochs * reduction**k``, counted in epochs or, with a
    ``reference_batch``, in the optimizer steps of as many epochs with that batch size.

    Examples
    --------
    >>> rung_schedule(100)
    {1: [1], 3: [3], 9: [9], 27: [27], 81: [81]}
    >>> rung_schedule(100, batch_size=64, reference_batch=16)
    {4: [1], 12: [3], 36: [9]}
    >>> rung_schedule(10, batch_size=4, reference_batch=16)
    {1: [1, 3], 3: [9], 7: [27]}
    """
    counted = reference_batch is not None
    if counted and (batch_size is None or batch_size < 1):
        raise ValueError(f"rungs counted in steps need the training's batch size, got {batch_size!r}")
    schedule: dict[int, list[int]] = {}
    rung = int(min_epochs)
    while True:
        epoch = -(-rung * int(batch_size) // int(reference_batch)) if counted else rung
        if epoch >= max_epochs:
            return schedule
        schedule.setdefault(epoch, []).append(rung)
        rung *= int(reduction)


def _applies(values):  # auto may turn successive halving on
    return values["early_discarding"] in ("auto", "sha")


_SHA_ONLY = "applies to {early_discarding} auto or sha, not to {early_discarding} {value}"


class SuccessiveHalving(DiscardRule):
    """Asynchronous successive halving: the rung schedule and the shared rung records.

    Parameters
    ----------
    min_epochs : int, default=1
        First rung.
    reduction : int, default=3
        Reduction factor ``r``: rungs are ``r`` times apart and the best ``1/r`` continue.
    reference_batch : int, optional
        Count the rungs in optimizer steps: rung ``m`` is reached after the steps of ``m`` epochs
        with batches of this many rows (see the module docstring). Default: in epochs.

    Examples
    --------
    >>> sha = SuccessiveHalving(reduction=2)
    >>> [sha.should_continue(1, loss) for loss in (0.5, 0.4, 0.9, 0.3)]
    [True, True, False, True]
    """

    name = "sha"
    options = (
        Option("sha_min_epochs", "search", "auto", Integer(1, 10**5, auto=True),
               f"first rung of successive halving; auto: 3 up to {data.SMALL_DATA_ROWS} training + validation rows, "
               "else 1 (a resumed run keeps its catalog's)", metavar="E", applies=_applies, requirement=_SHA_ONLY,
               depends="early_discarding", parameter="min_epochs"),
        Option("sha_reduction", "search", 3, Integer(2, 1000), "reduction factor of successive halving", metavar="R",
               applies=_applies, requirement=_SHA_ONLY, depends="early_discarding", parameter="reduction"),
        Option("sha_rungs", "search", "auto", OneOf(RUNG_UNITS),
               "what the rungs of successive halving count: epochs, or steps (the optimizer steps of as many epochs "
               "with the space's middle batch size (geometric mean), so larger batches are judged after more epochs, "
               "smaller ones after fewer); auto: epochs (a resumed run keeps its catalog's)", applies=_applies,
               requirement=_SHA_ONLY, depends="early_discarding"),
    )

    def __init__(self, min_epochs: int = 1, reduction: int = 3, reference_batch: int | None = None):
        if int(min_epochs) != min_epochs or min_epochs < 1:
            raise ParameterError("min_epochs", "must be an integer >= 1", min_epochs)
        if int(reduction) != reduction or reduction < 2:
            raise ParameterError("reduction", "must be an integer >= 2", reduction)
        if reference_batch is not None and (isinstance(reference_batch, bool) or int(reference_batch) != reference_batch
                                            or reference_batch < 1):
            raise ParameterError("reference_batch", "must be an integer >= 1", reference_batch)
        self.min_epochs, self.reduction = int(min_epochs), int(reduction)
        self.reference_batch = None if reference_batch is None else int(reference_batch)
        self._records: dict[int, list[float]] = defaultdict(list)
        self._lock = threading.Lock()

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_lock"]
        state["_records"] = dict(self._records)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._records = defaultdict(list, self._records)
        self._lock = threading.Lock()

    @classmethod
    def from_options(cls, options, *, epochs=None, dataset=None, space=None, recorded=None,
                     log=None) -> "SuccessiveHalving":
        """Successive halving with ``sha_min_epochs`` (``"auto"``: from the rows of ``dataset``,
        :func:`first_rung`; 1 while only the options are checked), ``sha_reduction`` and
        ``sha_rungs`` (the rungs' unit, :func:`rung_unit`: from the batch sizes of ``space``;
        epochs while only the options are checked); ``"auto"`` settings keep those of the
        ``recorded`` rule of a catalog being resumed."""
        min_epochs, reference_batch = options["sha_min_epochs"], None
        if dataset is None:
            min_epochs = 1 if min_epochs == "auto" else min_epochs
        else:
            min_epochs, why = first_rung(min_epochs, dataset, recorded)
            if why and log is not None:
                log(why)
        if space is not None:
            reference_batch = rung_unit(options["sha_rungs"], space, recorded)
        return cls(min_epochs=min_epochs, reduction=options["sha_reduction"], reference_batch=reference_batch)

    def describe(self) -> dict:
        return _describe(self)

    def rungs(self, max_epochs: int, batch_size: int | None = None) -> list[int]:
        """Epochs at which a training with ``max_epochs`` epochs (and batches of ``batch_size`` rows,
        needed when the rungs count steps) reaches a rung."""
        return list(self.schedule(max_epochs, batch_size))

    def schedule(self, max_epochs: int, batch_size: int | None = None) -> dict[int, list[int]]:
        """``{epoch: [rungs reached at that epoch]}`` of such a training (:func:`rung_schedule`)."""
        return rung_schedule(max_epochs, self.min_epochs, self.reduction, batch_size, self.reference_batch)

    def should_continue(self, rung: int, loss: float) -> bool:
        """Record ``loss`` at ``rung`` and say whether the training goes on past it."""
        loss = float(loss) if math.isfinite(loss) else math.inf
        with self._lock:
            records = self._records[int(rung)]
            records.append(loss)
            keep = len(records) // self.reduction
            if keep == 0:
                return True
            return loss <= sorted(records)[keep - 1]

    def replay(self, histories: Iterable[Sequence[float]], batch_sizes: Sequence[int | None] | None = None) -> None:
        """Record the rung losses of finished trainings (validation-loss histories, per epoch, and
        their batch sizes when the rungs count steps)."""
        histories = list(histories)
        if batch_sizes is None:
            batch_sizes = [None] * len(histories)
        with self._lock:
            for history, batch_size in zip(histories, batch_sizes, strict=True):
                if self.reference_batch is not None and batch_size is None:
                    continue  # a failure before its first epoch: nothing it reported
                best = math.inf
                schedule = self.schedule(len(history) + 1, batch_size)
                for epoch, loss in enumerate(history, start=1):
                    if math.isfinite(loss):
                        best = min(best, float(loss))
                    for rung in schedule.get(epoch, ()):
                        self._records[rung].append(best)

    def load_records(self, records: dict[int, Sequence[float]]) -> None:
        """Add losses to the records, rung by rung (as returned by :meth:`records`)."""
        with self._lock:
            for epoch, losses in records.items():
                self._records[int(epoch)].extend(float(v) for v in losses)

    def records(self) -> dict[int, list[float]]:
        """A copy of the losses recorded at each rung, in arrival order."""
        with self._lock:
            return {epoch: list(losses) for epoch, losses in sorted(self._records.items())}

    def promotions(self, candidates) -> list[int]:
        """Nothing: a training that passes every rung already runs to its own end."""
        return []

    def shared_on_ray(self) -> "RaySuccessiveHalving":
        """The same rule with its records in a Ray actor, for trainings running in several processes."""
        return RaySuccessiveHalving(self)


class RaySuccessiveHalving:
    """A :class:`SuccessiveHalving` whose records live in a Ray actor; picklable to Ray tasks."""

    def __init__(self, local: SuccessiveHalving):
        import ray

        self.min_epochs, self.reduction, self.reference_batch = local.min_epochs, local.reduction, local.reference_batch
        actor = ray.remote(num_cpus=0)(SuccessiveHalving)
        self._actor = actor.remote(local.min_epochs, local.reduction, local.reference_batch)
        ray.get(self._actor.load_records.remote(local.records()))

    def describe(self) -> dict:
        return _describe(self)

    rungs = SuccessiveHalving.rungs
    schedule = SuccessiveHalving.schedule

    def should_continue(self, rung: int, loss: float) -> bool:
        import ray

        return ray.get(self._actor.should_continue.remote(rung, loss))

    def replay(self, histories, batch_sizes=None) -> None:
        import ray

        ray.get(self._actor.replay.remote([list(h) for h in histories], batch_sizes))

    def records(self) -> dict[int, list[float]]:
        import ray

        return ray.get(self._actor.records.remote())

    def promotions(self, candidates) -> list[int]:
        return []


def _describe(rule) -> dict:
    """What a successive-halving rule records in its catalog (a resume must match it)."""
    described = {"policy": "sha", "min_epochs": rule.min_epochs, "reduction": rule.reduction}
    if rule.reference_batch is not None:
        described["reference_batch"] = rule.reference_batch
    return described


def first_rung(sha_min_epochs, dataset, recorded=None) -> tuple[int, str | None]:
    """The first rung of successive halving that ``sha_min_epochs`` stands for on ``dataset``
    (see :func:`resolve_min_epochs`; ``"auto"`` keeps the first rung of the ``recorded`` rule of a
    catalog being resumed, :func:`autodeuq.engine.runner.recorded_rule`), and a line for the user when
    ``"auto"`` chose a rung other than 1."""
    if sha_min_epochs == "auto" and (recorded or {}).get("policy") == "sha":
        return int(recorded["min_epochs"]), None
    rows = len(dataset.x_train) + len(dataset.x_valid)
    epochs = resolve_min_epochs(sha_min_epochs, rows)
    if sha_min_epochs != "auto" or epochs == 1:
        return epochs, None
    return epochs, (f"successive halving: first rung at epoch {epochs}, {rows} training and validation rows "
                    f"(auto: epoch {epochs} up to {data.SMALL_DATA_ROWS})")


def rung_unit(sha_rungs, space, recorded=None) -> int | None:
    """The reference batch size of successive halving's rungs that ``sha_rungs`` stands for: with
    ``"steps"``, the geometric middle of the batch sizes of ``space`` (already sized for the data;
    :func:`middle_batch`), None (rungs in epochs) with ``"epochs"``; ``"auto"`` keeps the unit of
    the ``recorded`` rule of a catalog being resumed, else :data:`AUTO_RUNG_UNIT`."""
    if sha_rungs == "auto" and (recorded or {}).get("policy") == "sha":
        return recorded.get("reference_batch")
    unit = AUTO_RUNG_UNIT if sha_rungs == "auto" else sha_rungs
    return middle_batch(space.batch_size_min, space.batch_size_max) if unit == "steps" else None
