"""Early discarding, owned by the search driver.

A :class:`Scheduler` holds the rule the trainings follow (a rule of :data:`autodeuq.discard.RULES`,
or none), resolved once before the search (from the options, the data and what a resumed catalog
recorded: :func:`autodeuq.app.pipeline.fill_catalog`). The driver (:mod:`autodeuq.engine.runner`) hands the
rule to its evaluator, whose trainings report their progress to it and receive continue or stop
through the evaluator's handle (the rule itself in-process, a Ray actor on Ray); it teaches the
rule a resumed catalog's histories; after each recorded result it lets the scheduler change the
rule (the cost policy of ``early_discarding="auto"``, :mod:`autodeuq.discard.cost`); and after
the search it trains again what the rule names (:meth:`~autodeuq.discard.base.DiscardRule.after_search`).
"""
from __future__ import annotations

# decide_after and training_cost: the other names of the former module autodeuq.scheduler, whose
# name now leads here (autodeuq._lazy.MOVED).
from autodeuq.discard.cost import DiscardByCost
from autodeuq.discard.cost import decide_after as decide_after
from autodeuq.discard.cost import training_cost as training_cost

__all__ = ["Scheduler"]


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

    def after_search(self, writer) -> list[tuple[int, dict]]:
        """``(entry id, config)`` to train again to the full budget after the search, from the
        catalog open in ``writer`` (the rule's :meth:`~autodeuq.discard.base.DiscardRule.after_search`)."""
        after = getattr(self.rule, "after_search", None)
        return [] if after is None else after(writer)

    def attach(self, evaluator, writer) -> None:
        """Hand the rule to ``evaluator`` for the trainings it starts, and teach it what the
        finished trainings of the catalog open in ``writer`` reported (a resumed search)."""
        if self.rule is None:
            return
        if evaluator.discarder is not self.rule:
            evaluator.set_discarder(self.rule)
        if writer.n_finished:
            _replay(evaluator, writer)

    def after_record(self, evaluator, writer, trainings, remaining: int) -> str | None:
        """Take or review the decision of ``auto`` once it can be taken: turn successive halving on
        for the trainings ``evaluator`` starts next when the search is projected over budget, and
        record each decision in the catalog; the line saying so, or None when nothing changed.
        ``trainings``: ``(epochs, batch_size, n_params)`` of each training finished so far
        (:meth:`DiscardByCost.decide`)."""
        cost = self.by_cost
        if cost is None:
            return None
        on = cost.decide(trainings, remaining=remaining, slots=evaluator.n_slots)
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
