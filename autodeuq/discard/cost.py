"""The cost policy: early discarding turned on when the search is projected to cost too much.

With ``early_discarding="auto"``, a search starts without discarding. Once its first trainings
have finished, the driver projects the time of the whole search on the workers at hand (the
modelled seconds of the trainings so far, plus their median for each evaluation left, divided
among the workers), and projects it again after every later result while the search runs without
discarding. A training's seconds are modelled from what it did, never timed
(:func:`training_cost`: its epochs, steps, batch size and parameters, at rates measured once on a
reference machine), so the same command and seed decide the same on an idle and on a loaded
machine, on a fast one and on a slow one; the decision records the measure it used. When a
projection exceeds the budget (``discard_budget``, modelled seconds), asynchronous successive
halving (:class:`autodeuq.discard.sha.SuccessiveHalving`) rules the trainings submitted from then on;
its rungs first learn what the finished trainings reported at them. The first decision and a
later switch are recorded in the catalog. A resumed search keeps successive halving once it is
on; one that ran without decides again from its own trainings (resumed to a larger budget, it
may cost more than the search that decided).

A table is not judged by its row count: a search of a large table on many workers can be cheap,
one of a few thousand rows with wide networks on two cores is not.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from autodeuq.core.option import TEN_YEARS, Option, Real

__all__ = ["DiscardByCost", "OPTIONS", "decide_after", "training_cost"]

#: The reference machine's seconds per training step, per example x parameter of a step and per
#: epoch (a 2-core AMD EPYC, one thread per training; fitted on the 72 trainings of three searches,
#: docs/decisions/early-discarding.md). A rate of the machine, not of its load: the projection is
#: in these seconds whatever the machine is doing.
STEP_SECONDS = 1.24e-4
SAMPLE_PARAM_SECONDS = 1.19e-10
EPOCH_SECONDS = 4.7e-3
#: The cost policy's option (in the table of a run, :data:`autodeuq.app.options.OPTIONS`).
OPTIONS = (
    Option("discard_budget", "search", 600.0, Real(0, TEN_YEARS),
           "seconds of search above which {early_discarding} auto turns successive halving on: the trainings' "
           "seconds so far plus their median for each evaluation left, divided among the workers, projected once "
           "two rounds of trainings (at least 4) have finished and again after each later one. The seconds are "
           "modelled from each training's epochs, steps, batch size and parameters on a reference machine, never "
           "timed, so the decision does not depend on the machine's load", metavar="S",
           applies=lambda v: v["early_discarding"] == "auto", depends="early_discarding",
           requirement="applies to {early_discarding} auto, not to {early_discarding} {value}"),
)

#: What the decision records as its measure.
MEASURE = "modelled seconds (epochs, steps, batch size and parameters; not timed)"


def training_cost(epochs: int, rows: int, batch_size: int, n_params: int) -> float:
    """The modelled seconds of a training of ``epochs`` epochs over ``rows`` training rows in
    batches of ``batch_size``, of a network of ``n_params`` parameters, on the reference machine.

    >>> round(training_cost(10, 1000, 32, 10_000), 3)   # 320 steps of 32 x 10,000 products
    0.099
    >>> training_cost(0, 1000, 32, 10_000)  # a training that failed before its first epoch
    0.0
    """
    if epochs <= 0:
        return 0.0
    steps = epochs * -(-int(rows) // max(int(batch_size), 1))
    return (epochs * EPOCH_SECONDS
            + steps * (STEP_SECONDS + min(int(batch_size), int(rows)) * n_params * SAMPLE_PARAM_SECONDS))


def _median(ordered: list) -> float:
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def decide_after(slots: int) -> int:
    """How many finished trainings the projection waits for: two rounds of the workers, at least 4.

    >>> decide_after(1), decide_after(2), decide_after(16)
    (4, 4, 32)
    """
    return max(4, 2 * int(slots))


@dataclass
class DiscardByCost:
    """The decision of ``early_discarding="auto"``: ``rule`` (the successive halving to turn on)
    when the search is projected to take more than ``budget_s`` modelled seconds
    (:func:`training_cost`, over ``rows`` training rows), first decided after ``after`` finished
    trainings, then reviewed after each later one while the rule is off.

    ``decision`` is None until then, then what :meth:`decide` found last (recorded in the catalog).
    """

    rule: Any
    budget_s: float
    after: int
    rows: int
    decision: dict | None = field(default=None)
    _costs: list = field(default_factory=list, repr=False)  # the modelled seconds seen, in order
    _sorted: list = field(default_factory=list, repr=False)  # the same, sorted: the median in O(n)

    def decide(self, trainings, remaining: int, slots: int) -> bool | None:
        """Whether the rule is to be on: True when a projection first exceeds the budget, False at
        the first decision when it does not; None while fewer than ``after`` trainings have
        finished, when nothing changed, and once the rule is on. ``trainings``: ``(epochs,
        batch_size, n_params)`` of each finished training, in the order they finished;
        ``remaining``: evaluations left to run; ``slots``: workers.

        >>> cost = DiscardByCost(rule=None, budget_s=600.0, after=2, rows=1000)
        >>> cost.decide([(100, 32, 100_000)], remaining=98, slots=2) is None
        True
        >>> cost.decide([(100, 32, 100_000)] * 2, remaining=98, slots=2)  # 2.09 s each: (2 + 98) * 2.09 / 2
        False
        >>> cost.decision["projected_s"], cost.decision["measure"].split(" (")[0]
        (104.3, 'modelled seconds')
        >>> cost.decide([(100, 32, 100_000)] * 2 + [(200, 1, 100_000)] * 3, remaining=95, slots=2)
        True
        >>> cost.line()[:67]
        'successive halving turned on: the search was projected to take 1380'
        """
        if self.decision is not None and self.decision["policy"] == "sha":
            return None
        projected = self.projection(trainings, remaining, slots)
        if projected is None:
            return None
        on = projected > self.budget_s
        if self.decision is not None and not on:
            return None  # still within the budget
        first = self.decision is None
        self.decision = {"policy": "sha" if on else "none", "projected_s": round(projected, 1),
                         "budget_s": float(self.budget_s), "after_trainings": len(self._sorted), "measure": MEASURE}
        return True if on else (False if first else None)

    def projection(self, trainings, remaining: int, slots: int) -> float | None:
        """The whole search's projected seconds (arguments as :meth:`decide`'s): the modelled
        seconds of the finished trainings, plus their median for each evaluation left, divided
        among the ``slots``; None while fewer than ``after`` trainings have finished.
        ``trainings`` only grows between calls: the ones not seen before are added."""
        for epochs, batch_size, n_params in trainings[len(self._costs):]:
            cost = training_cost(epochs, self.rows, batch_size, n_params)
            self._costs.append(cost)
            bisect.insort(self._sorted, cost)
        if len(self._sorted) < self.after:
            return None
        slots = max(int(slots), 1)
        return (sum(self._costs) + _median(self._sorted) * max(int(remaining), 0)) / slots

    def line(self) -> str:
        """What was decided, for the user."""
        d = self.decision or {}
        if d.get("policy") == "sha":
            return (f"successive halving turned on: the search was projected to take {d['projected_s']:.0f} s, more "
                    f"than the budget of {d['budget_s']:.0f} s (after {d['after_trainings']} trainings)")
        return (f"no early discarding: the search is projected to take {d.get('projected_s', 0):.0f} s, within the "
                f"budget of {d.get('budget_s', 0):.0f} s (projected again after each training)")
