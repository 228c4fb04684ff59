"""The catalog seen by early discarding: the validation losses of every training, in the order
they were recorded, and the full trainings of promoted configurations (:mod:`autodeuq.discard`).
:class:`DiscardingViews` is a part of :class:`~autodeuq.catalog.Catalog`."""
from __future__ import annotations

import math

from autodeuq.catalog.artifacts import (
    decode_json,
)
from autodeuq.catalog.layout import (
    PROMOTED_FROM,
    _checked_objective,
)
from autodeuq.core.result import MODEL_STATUSES, Status


class DiscardingViews:
    """The early-discarding rules' views of the catalog (a part of :class:`~autodeuq.catalog.Catalog`)."""

    def history(self, with_ids: bool = False) -> list[tuple]:
        """(config, objective) of finished entries in the order their results were recorded.

        That is the order a searcher was told them, so replaying it rebuilds the searcher's state
        (the aging-evolution FIFO included). Failures have objective ``None``; a discarded entry
        has the loss it had reached, which is what the searcher was told. With ``with_ids``,
        ``(entry id, config, objective)`` triples.
        """
        rows = self._query(
            "SELECT id, config_json, status, objective FROM evaluations WHERE status IN (?, ?, ?) "
            "ORDER BY finish_order, id", (Status.DONE, Status.DISCARDED, Status.FAILED),
        )
        out = [(r["id"], self._decoded_config(r),
                float(_checked_objective(r["objective"], self._where(r))) if r["status"] in MODEL_STATUSES
                else None)
               for r in rows]
        return out if with_ids else [(config, objective) for _, config, objective in out]

    def validation_loss_histories(self, batch_sizes: bool = False) -> list:
        """Per-epoch validation losses of the finished entries, in the order they were recorded
        (what an early-discarding rule replays to continue a run; see :mod:`autodeuq.discard`).

        With ``batch_sizes``, ``(losses, batch size)`` pairs: the batch size the training used
        (``extra["batch_size"]``, which the row count may have capped), else None.
        """
        rows = self._query(
            "SELECT id, history_json, extra_json FROM evaluations WHERE status IN (?, ?, ?) "
            "ORDER BY finish_order, id", (Status.DONE, Status.DISCARDED, Status.FAILED),
        )
        out = []
        for r in rows:
            history = decode_json(r["history_json"] or "{}", self._where(r), "history_json")
            losses = history.get("val_loss", []) if isinstance(history, dict) else []
            losses = [float(v) if isinstance(v, (int, float)) else math.nan for v in losses]
            if batch_sizes:
                extra = decode_json(r["extra_json"] or "{}", self._where(r), "extra_json")
                batch = extra.get("batch_size") if isinstance(extra, dict) else None
                losses = (losses, int(batch) if isinstance(batch, int) and not isinstance(batch, bool) else None)
            out.append(losses)
        return out

    def full_trainings(self) -> dict[int, int]:
        """``{id: id of the entry it trains again}`` for the entries submitted as full trainings of a
        search-phase entry (i-Epoch, :class:`autodeuq.discard.IEpoch`), whatever their status."""
        out = {}
        for r in self._query("SELECT id, extra_json FROM evaluations WHERE extra_json LIKE ? ORDER BY id",
                             (f'%"{PROMOTED_FROM}"%',)):
            extra = decode_json(r["extra_json"], self._where(r), "extra_json")
            source = extra.get(PROMOTED_FROM) if isinstance(extra, dict) else None
            if isinstance(source, int) and not isinstance(source, bool):
                out[int(r["id"])] = source
        return out
