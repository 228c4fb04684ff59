"""What every early-discarding rule implements, and how the search builds one from the options.

A rule answers the trainings of a search: :meth:`DiscardRule.schedule` says at which epochs a
training reports its validation loss, :meth:`DiscardRule.should_continue` whether it goes on
past that epoch. :meth:`DiscardRule.replay` teaches it what the finished trainings of a resumed
catalog reported, :meth:`DiscardRule.describe` is what the catalog records (a resume must ask
for the same), and :meth:`DiscardRule.after_search` names the entries to train again to the
full budget once the search is over (i-Epoch's second phase; nothing for the others).

A rule is registered by name in :data:`autodeuq.discard.RULES` (``name -> "module:Class"``);
the option ``early_discarding`` takes any registered name, and :meth:`DiscardRule.from_options`
reads the rule's own options (the table's ``sha_*``, ``iepoch_*``) into an instance.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterable, Sequence

__all__ = ["DiscardRule"]


class DiscardRule:
    """The base class of early-discarding rules (see the module docstring).

    A subclass sets :attr:`name` (its registry name, recorded as ``policy``), :attr:`options` (the
    options of the run it reads) and implements :meth:`schedule` and :meth:`should_continue`;
    the rest has defaults for a rule without state shared between trainings. Instances go to the
    evaluation processes by pickle.
    """

    #: The rule's name in :data:`autodeuq.discard.RULES`, recorded in the catalog as ``policy``.
    name: str = ""
    #: The options of the run (:data:`autodeuq.app.options.OPTIONS`) that :meth:`from_options` reads.
    options: tuple[str, ...] = ()
    #: Share of a search's time limit the search phase may use (the rest: :meth:`after_search`'s trainings).
    search_share: float = 1.0

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, epochs: int | None = None, dataset=None, space=None,
                     recorded: dict | None = None, log=None) -> "DiscardRule":
        """The rule that the run's ``options`` (option name -> value, checked against the table)
        ask for. ``epochs``: the search's epoch budget when known; ``dataset``, ``space`` (sized
        for the data) and ``recorded`` (:func:`autodeuq.engine.runner.recorded_rule` of a catalog being
        resumed) are given when the search starts (None while the options alone are checked);
        ``log`` receives a line when an ``"auto"`` setting chose something worth saying.

        Raises
        ------
        ParameterError
            A setting the rule refuses, naming the option.
        """
        return cls()

    def describe(self) -> dict:
        """What the catalog records of the rule: ``{"policy": name, ...settings}``."""
        return {"policy": self.name}

    def rungs(self, max_epochs: int, batch_size: int | None = None) -> list[int]:
        """Epochs at which a training of ``max_epochs`` epochs (batches of ``batch_size`` rows) reports."""
        return list(self.schedule(max_epochs, batch_size))

    def schedule(self, max_epochs: int, batch_size: int | None = None) -> dict[int, list[int]]:
        """``{epoch: [rungs reached at that epoch]}`` of such a training."""
        raise NotImplementedError

    def should_continue(self, rung: int, loss: float) -> bool:
        """Whether a training that reported ``loss`` at ``rung`` goes on."""
        raise NotImplementedError

    def replay(self, histories: Iterable[Sequence[float]], batch_sizes: Sequence[int | None] | None = None) -> None:
        """Learn the validation-loss histories of finished trainings (a resumed search); nothing by default."""

    def promotions(self, candidates) -> list[int]:
        """Ids of the ``(id, config, loss)`` candidates to train again to the full budget; none by default."""
        return []

    def after_search(self, catalog) -> list[tuple[int, dict]]:
        """``(entry id, config)`` of the entries of ``catalog`` (the search's open writer) to train
        again, from scratch and to the full budget, once the search is over (a second phase, run
        by the search driver as entries of their own); none by default."""
        return []
