"""Early discarding of hopeless trainings: asynchronous successive halving, and i-Epoch.

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

:class:`IEpoch` is the "horizontal" alternative (Egele 2024, ch. 3.3.4 and 5, "i-Epoch"): the
search trains every configuration for ``i`` epochs only, then the ``k`` configurations of lowest
validation loss are trained again, from scratch, to the full epoch budget. The search driver runs
that second phase (:func:`autodeuq.runner.run_search`); the policy says which entries it trains.

Both policies answer the trainings the same way: :meth:`rungs` gives the epochs at which a
training asks, :meth:`should_continue` the answer. :meth:`promotions` names what the driver trains
to the full budget after the search (nothing for successive halving).
"""
from __future__ import annotations

import json
import math
import threading
from collections import defaultdict
from typing import Iterable, Sequence

from autodeuq import data
from autodeuq.errors import ParameterError

__all__ = ["SuccessiveHalving", "IEpoch", "rung_epochs", "rung_schedule", "middle_batch", "POLICIES", "RUNG_UNITS",
           "resolve_min_epochs"]

#: Early-discarding policies by name (``none`` trains every configuration to its own early stop;
#: ``auto`` is decided by the search's projected cost, :mod:`autodeuq.scheduler`).
POLICIES = ("auto", "none", "sha", "iepoch")

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


class SuccessiveHalving:
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


class IEpoch:
    """i-Epoch: every configuration of the search trained ``epochs`` epochs, the best ``top_k`` then
    trained to the full budget (Egele 2024, ch. 3.3.4 and 5).

    During the search a training stops after ``epochs`` epochs (status ``discarded``, the model of
    its best epoch so far, its validation loss told to the searcher). The search driver then trains
    the ``top_k`` distinct configurations of lowest validation loss once more, from scratch and
    without this cap, as entries of their own (:meth:`promotions`). The rule holds no state shared
    between trainings, so it needs no Ray actor, and a resumed search recomputes the same choice
    from its catalog.

    Parameters
    ----------
    epochs : int, default=1
        Epochs of each search-phase training (``i``).
    top_k : int, default=10
        Configurations trained to the full budget after the search (twice the default ensemble
        size: with one epoch, the rank of a configuration is a noisy guess of its final rank).

    Examples
    --------
    >>> rule = IEpoch(epochs=2, top_k=2)
    >>> rule.rungs(100), rule.should_continue(2, 0.5), rule.rungs(2)
    ([2], False, [])
    >>> rule.promotions([(1, {"a": 1}, 0.7), (2, {"a": 2}, 0.3), (3, {"a": 2}, 0.2), (4, {"a": 3}, 0.5)])
    [3, 4]
    """

    #: Share of a search's time limit that the search phase may use; the full trainings get the rest.
    search_share = 0.5

    def __init__(self, epochs: int = 1, top_k: int = 10):
        if isinstance(epochs, bool) or int(epochs) != epochs or epochs < 1:
            raise ParameterError("iepoch_epochs", "must be an integer >= 1", epochs)
        if isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1:
            raise ParameterError("iepoch_top_k", "must be an integer >= 1", top_k)
        self.epochs, self.top_k = int(epochs), int(top_k)

    def describe(self) -> dict:
        return {"policy": "iepoch", "epochs": self.epochs, "top_k": self.top_k}

    def rungs(self, max_epochs: int, batch_size: int | None = None) -> list[int]:
        """The one epoch at which a search-phase training stops (none when it is the whole budget)."""
        return list(self.schedule(max_epochs, batch_size))

    def schedule(self, max_epochs: int, batch_size: int | None = None) -> dict[int, list[int]]:
        """``{epochs: [epochs]}``, or nothing when the cap is the whole budget."""
        return {self.epochs: [self.epochs]} if self.epochs < max_epochs else {}

    def should_continue(self, rung: int, loss: float) -> bool:
        """Never: a search-phase training ends at its epoch cap."""
        return False

    def replay(self, histories, batch_sizes=None) -> None:
        """Nothing to rebuild: the decisions depend on no earlier training."""

    def promotions(self, candidates) -> list[int]:
        """Ids of the ``top_k`` distinct configurations of lowest loss, best first.

        Parameters
        ----------
        candidates : iterable of (id, config, loss)
            The search-phase entries holding a model. Of two entries with the same configuration,
            the lower loss (then the lower id) stands for it; equal losses are ordered by id.
        """
        chosen, seen = [], set()
        for entry_id, config, loss in sorted(candidates, key=lambda c: (_finite_or_inf(c[2]), c[0])):
            key = json.dumps(config, sort_keys=True, default=str)
            if key in seen:
                continue
            seen.add(key)
            chosen.append(int(entry_id))
            if len(chosen) == self.top_k:
                break
        return chosen


def _finite_or_inf(loss) -> float:
    loss = float(loss)
    return loss if math.isfinite(loss) else math.inf
