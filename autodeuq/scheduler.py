"""Early discarding decided by what the search costs, by the driver.

With ``early_discarding="auto"``, a search starts without discarding. Once its first trainings
have finished, the driver projects the time of the whole search on the workers at hand (the time
spent so far, plus the median training time for each evaluation left, divided among the
workers). When the projection exceeds the budget (``discard_budget``, seconds), asynchronous
successive halving (:class:`autodeuq.discard.SuccessiveHalving`) rules the trainings submitted
from then on; its rungs first learn what the finished trainings reported at them. Either way the
decision is taken once and recorded in the catalog, so that a resumed search keeps it.

A table is not judged by its row count: a search of a large table on many workers can be cheap,
one of a few thousand rows with wide networks on two cores is not.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DiscardByCost", "decide_after"]


def decide_after(slots: int) -> int:
    """How many finished trainings the projection waits for: two rounds of the workers, at least 4.

    >>> decide_after(1), decide_after(2), decide_after(16)
    (4, 4, 32)
    """
    return max(4, 2 * int(slots))


@dataclass
class DiscardByCost:
    """The decision of ``early_discarding="auto"``: ``rule`` (the successive halving to turn on)
    when the search is projected to take more than ``budget_s`` seconds, decided after ``after``
    finished trainings.

    ``decision`` is None until then, then what :meth:`decide` found (recorded in the catalog).
    """

    rule: Any
    budget_s: float
    after: int
    decision: dict | None = field(default=None)

    def decide(self, durations, remaining: int, slots: int, elapsed: float) -> bool | None:
        """Whether to turn the rule on: None while fewer than ``after`` trainings have finished
        (``durations``: their wall seconds) or once decided; ``remaining``: evaluations left to
        run, ``slots``: workers, ``elapsed``: seconds the search has run.

        >>> cost = DiscardByCost(rule=None, budget_s=600.0, after=2)
        >>> cost.decide([10.0], remaining=98, slots=2, elapsed=12.0) is None
        True
        >>> cost.decide([10.0, 30.0], remaining=98, slots=2, elapsed=32.0)  # 32 + 20 * 98 / 2 = 1012 s
        True
        >>> cost.decision["projected_s"], cost.decide([1.0] * 3, 1, 2, 1.0)
        (1012.0, None)
        """
        if self.decision is not None or len(durations) < self.after:
            return None
        projected = float(elapsed) + statistics.median(durations) * max(int(remaining), 0) / max(int(slots), 1)
        on = projected > self.budget_s
        self.decision = {"policy": "sha" if on else "none", "projected_s": round(projected, 1),
                         "budget_s": float(self.budget_s), "after_trainings": len(durations)}
        return on

    def line(self) -> str:
        """What was decided, for the user."""
        d = self.decision or {}
        if d.get("policy") == "sha":
            return (f"successive halving turned on: the search was projected to take {d['projected_s']:.0f} s, more "
                    f"than the budget of {d['budget_s']:.0f} s (from its first {d['after_trainings']} trainings)")
        return (f"no early discarding: the search is projected to take {d.get('projected_s', 0):.0f} s, within the "
                f"budget of {d.get('budget_s', 0):.0f} s")
