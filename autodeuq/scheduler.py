"""Early discarding, owned by the search driver.

A :class:`Scheduler` holds the rule the trainings follow (successive halving, i-Epoch, or none),
resolved once before the search (from the options, the data and what a resumed catalog recorded:
:func:`autodeuq.pipeline.fill_catalog`). The driver (:mod:`autodeuq.runner`) hands the rule to its
evaluator, whose trainings report their progress to it and receive continue or stop through the
evaluator's handle (the rule itself in-process, a Ray actor on Ray); it teaches the rule a resumed
catalog's histories; and after each recorded result it lets the scheduler change the rule.

With ``early_discarding="auto"``, a search starts without discarding. Once its first trainings
have finished, the driver projects the time of the whole search on the workers at hand (the time
spent so far, plus the median training time for each evaluation left, divided among the
workers), and projects it again after every later result while the search runs without
discarding. When a projection exceeds the budget (``discard_budget``, seconds), asynchronous
successive halving (:class:`autodeuq.discard.SuccessiveHalving`) rules the trainings submitted
from then on; its rungs first learn what the finished trainings reported at them. The first
decision and a later switch are recorded in the catalog. A resumed search keeps successive
halving once it is on; one that ran without decides again from its own trainings (resumed to a
larger budget, it may cost more than the search that decided).

A table is not judged by its row count: a search of a large table on many workers can be cheap,
one of a few thousand rows with wide networks on two cores is not.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DiscardByCost", "Scheduler", "decide_after"]


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
    when the search is projected to take more than ``budget_s`` seconds, first decided after
    ``after`` finished trainings, then reviewed after each later one while the rule is off.

    ``decision`` is None until then, then what :meth:`decide` found last (recorded in the catalog).
    """

    rule: Any
    budget_s: float
    after: int
    decision: dict | None = field(default=None)
    _sorted: list = field(default_factory=list, repr=False)  # the durations seen, sorted: the median in O(n)

    def decide(self, durations, remaining: int, slots: int, elapsed: float) -> bool | None:
        """Whether the rule is to be on: True when a projection first exceeds the budget, False at
        the first decision when it does not; None while fewer than ``after`` trainings have
        finished (``durations``: their wall seconds, in the order they finished), when nothing
        changed, and once the rule is on. ``remaining``: evaluations left to run, ``slots``:
        workers, ``elapsed``: seconds the search has run.

        >>> cost = DiscardByCost(rule=None, budget_s=600.0, after=2)
        >>> cost.decide([10.0], remaining=98, slots=2, elapsed=12.0) is None
        True
        >>> cost.decide([10.0, 30.0], remaining=98, slots=2, elapsed=32.0)  # 32 + 20 * 98 / 2 = 1012 s
        True
        >>> cost.decision["projected_s"], cost.decide([1.0] * 3, 1, 2, 1.0)
        (1012.0, None)
        >>> cost = DiscardByCost(rule=None, budget_s=600.0, after=2)
        >>> cost.decide([1.0, 1.0], remaining=98, slots=2, elapsed=2.0)  # 2 + 1 * 98 / 2 = 51 s
        False
        >>> cost.decide([1.0, 1.0, 30.0], remaining=97, slots=2, elapsed=40.0) is None  # median 1 s: 88.5 s
        True
        >>> cost.decide([1.0, 1.0, 30.0, 30.0, 30.0], remaining=95, slots=2, elapsed=100.0)  # 100 + 30 * 95 / 2
        True
        >>> cost.decision
        {'policy': 'sha', 'projected_s': 1525.0, 'budget_s': 600.0, 'after_trainings': 5}
        """
        if self.decision is not None and self.decision["policy"] == "sha":
            return None
        projected = self.projection(durations, remaining, slots, elapsed)
        if projected is None:
            return None
        on = projected > self.budget_s
        if self.decision is not None and not on:
            return None  # still within the budget
        first = self.decision is None
        self.decision = {"policy": "sha" if on else "none", "projected_s": round(projected, 1),
                         "budget_s": float(self.budget_s), "after_trainings": len(self._sorted)}
        return True if on else (False if first else None)

    def projection(self, durations, remaining: int, slots: int, elapsed: float) -> float | None:
        """The whole search's projected seconds (arguments as :meth:`decide`'s): ``elapsed`` plus
        the median of ``durations`` for each evaluation left, divided among the ``slots``; None
        while fewer than ``after`` trainings have finished. ``durations`` only grows between
        calls: the ones not seen before are added to a sorted copy."""
        for d in durations[len(self._sorted):]:
            bisect.insort(self._sorted, float(d))
        if len(self._sorted) < self.after:
            return None
        return float(elapsed) + _median(self._sorted) * max(int(remaining), 0) / max(int(slots), 1)

    def line(self) -> str:
        """What was decided, for the user."""
        d = self.decision or {}
        if d.get("policy") == "sha":
            return (f"successive halving turned on: the search was projected to take {d['projected_s']:.0f} s, more "
                    f"than the budget of {d['budget_s']:.0f} s (after {d['after_trainings']} trainings)")
        return (f"no early discarding: the search is projected to take {d.get('projected_s', 0):.0f} s, within the "
                f"budget of {d.get('budget_s', 0):.0f} s (projected again after each training)")


class Scheduler:
    """The early discarding of one search: ``rule`` (None: every training to its own end) and,
    for ``early_discarding="auto"`` until it turns successive halving on, ``by_cost``
    (:class:`DiscardByCost`).

    The driver calls :meth:`attach` once its catalog is open, then :meth:`after_record` after each
    result it records.
    """

    def __init__(self, rule=None, by_cost: DiscardByCost | None = None):
        self.rule, self.by_cost = rule, by_cost

    def describe(self) -> dict | None:
        """The rule as the catalog records it (None: none yet)."""
        return None if self.rule is None else self.rule.describe()

    @property
    def search_share(self) -> float:
        """The share of a time limit the search phase may use (i-Epoch keeps the rest for its full
        trainings)."""
        return float(getattr(self.rule, "search_share", 1.0))

    def attach(self, evaluator, writer) -> None:
        """Hand the rule to ``evaluator`` for the trainings it starts, and teach it what the
        finished trainings of the catalog open in ``writer`` reported (a resumed search)."""
        if self.rule is None:
            return
        if evaluator.discarder is not self.rule:
            evaluator.set_discarder(self.rule)
        if writer.n_finished:
            _replay(evaluator, writer)

    def after_record(self, evaluator, writer, durations, remaining: int, elapsed: float) -> str | None:
        """Take or review the decision of ``auto`` once it can be taken: turn successive halving on
        for the trainings ``evaluator`` starts next when the search is projected over budget, and
        record each decision in the catalog; the line saying so, or None when nothing changed."""
        cost = self.by_cost
        if cost is None:
            return None
        on = cost.decide(durations, remaining=remaining, slots=evaluator.n_slots, elapsed=elapsed)
        if on is None:
            return None
        if on:
            self.rule = cost.rule
            evaluator.set_discarder(self.rule)
            _replay(evaluator, writer)
            self.by_cost = None
        writer.record_discarding(self.describe(), cost.decision)
        return cost.line()


def _replay(evaluator, writer) -> None:
    # The rungs learn what the finished trainings reported there, through the evaluator's handle:
    # on Ray, the actor's records are the ones the workers consult.
    histories = writer.validation_loss_histories(batch_sizes=True)
    evaluator.discarder.replay([h for h, _ in histories], [b for _, b in histories])
