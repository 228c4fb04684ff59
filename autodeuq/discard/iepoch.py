"""i-Epoch: "horizontal" early discarding (Egele 2024, ch. 3.3.4 and 5).

The search trains every configuration for ``i`` epochs only, then the ``k`` configurations of
lowest validation loss are trained again, from scratch, to the full epoch budget: the rule's
second phase (:meth:`IEpoch.after_search`), which the search driver runs in the same call
(:func:`autodeuq.engine.runner.run_search`).
"""
from __future__ import annotations

import json
import math

from autodeuq.core.errors import ParameterError
from autodeuq.core.option import Integer, Option
from autodeuq.discard.base import DiscardRule

__all__ = ["IEpoch"]


def _applies(values):
    return values["early_discarding"] == "iepoch"


_IEPOCH_ONLY = "applies to {early_discarding} iepoch, not to {early_discarding} {value}"


class IEpoch(DiscardRule):
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

    name = "iepoch"
    options = (
        Option("iepoch_epochs", "search", 1, Integer(1, 10**5),
               "epochs of each search evaluation under i-Epoch, below the epoch budget", metavar="I",
               applies=_applies, requirement=_IEPOCH_ONLY, depends="early_discarding"),
        Option("iepoch_top_k", "search", 10, Integer(1, 10**6),
               "configurations trained to the full budget after the search under i-Epoch", metavar="K",
               applies=_applies, requirement=_IEPOCH_ONLY, depends="early_discarding"),
    )
    #: Share of a search's time limit that the search phase may use; the full trainings get the rest.
    search_share = 0.5

    def __init__(self, epochs: int = 1, top_k: int = 10):
        if isinstance(epochs, bool) or int(epochs) != epochs or epochs < 1:
            raise ParameterError("iepoch_epochs", "must be an integer >= 1", epochs)
        if isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1:
            raise ParameterError("iepoch_top_k", "must be an integer >= 1", top_k)
        self.epochs, self.top_k = int(epochs), int(top_k)

    @classmethod
    def from_options(cls, options, *, epochs=None, dataset=None, space=None, recorded=None, log=None) -> "IEpoch":
        """i-Epoch with ``iepoch_epochs`` and ``iepoch_top_k``; the cap must be below the epoch
        budget ``epochs`` (when known: the options' ``epochs``, else the space's)."""
        epochs = options.get("epochs") or epochs or (None if space is None else space.epochs)
        if epochs is not None and options["iepoch_epochs"] >= epochs:
            raise ParameterError("iepoch_epochs", f"must be below the epoch budget ({epochs})",
                                 options["iepoch_epochs"])
        return cls(epochs=options["iepoch_epochs"], top_k=options["iepoch_top_k"])

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

    def after_search(self, catalog) -> list[tuple[int, dict]]:
        """The second phase: the search-phase entries of ``catalog`` holding a model that
        :meth:`promotions` picks, less those trained to the full budget already (a resumed run)."""
        full = catalog.full_trainings()
        candidates = []
        for entry_id in catalog.model_ids():
            if entry_id not in full:
                entry = catalog.entry(entry_id)
                candidates.append((entry_id, entry["config"], entry["objective"]))
        done = set(full.values())
        return [(i, catalog.config(i)) for i in self.promotions(candidates) if i not in done]

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
