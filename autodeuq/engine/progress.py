"""The search's progress display: tqdm's bar on a terminal, plain lines elsewhere
(:class:`PlainProgress`), and what they show besides the count (failures, the best NLL, the
utilization), for the search driver (:mod:`autodeuq.engine.runner`).
"""
from __future__ import annotations

import math
import time


def _progress_bar(enabled, total, initial):
    """tqdm's bar on a terminal; elsewhere (a log file, a pipe) :class:`PlainProgress`'s lines."""
    if not enabled:
        return None
    import sys

    if not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return PlainProgress(total, initial)
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="search", unit="eval", dynamic_ncols=True)


class PlainProgress:
    """The search's progress as plain lines on stderr, one every :attr:`STEP` of ``total`` and one at
    the end: tqdm's bar, redrawn with carriage returns, filled a redirected log with ~10 KB of
    updates nobody could read."""

    STEP = 0.1  #: a line every tenth of the evaluations (every 10 when their number is not known)

    def __init__(self, total, initial=0):
        self.total, self.n = total, int(initial)
        self.every = max(1, math.ceil(total * self.STEP)) if total else 10
        self.postfix: dict = {}
        self._printed = None

    def update(self, n=1):
        before, self.n = self.n, self.n + n
        if n and (self.n // self.every > before // self.every or (self.total and before < self.total <= self.n)):
            self._line()

    def set_postfix(self, refresh=True, **values):
        self.postfix = values

    def close(self):
        if self._printed != self.n:
            self._line()

    def _line(self):
        import sys

        done = f"{self.n}/{self.total} evals ({100 * self.n / self.total:.0f}%)" if self.total else f"{self.n} evals"
        extra = "".join(f", {k} {v}" for k, v in self.postfix.items())
        print(f"search: {done}{extra}", file=sys.stderr, flush=True)
        self._printed = self.n


def _update_bar(bar, writer, n, busy, slots, started, postfix=True):
    """Count ``n`` more finished evaluations on ``bar``; with ``postfix``, first refresh what it
    shows besides the count (failures, the best NLL, the utilization: catalog queries)."""
    if postfix:
        _set_postfix(bar, writer, busy, slots, started)
    bar.update(n)


def _set_postfix(bar, writer, busy, slots, started):
    best = writer.best()
    wall = max(time.time() - started, 1e-9)
    # The NLL in the data's units, as metrics.json and results.csv's valid_nll give it; the
    # standardized training loss (the objective) would read as another, unexplained number.
    offset = writer.nll_offset
    if best is None:
        shown = {"best_nll": "-"}
    elif math.isfinite(offset):
        shown = {"best_nll": f"{best[1] + offset:.4f}"}
    else:  # a catalog without the targets' scale: say which scale the number is on
        shown = {"best_nll_standardized": f"{best[1]:.4f}"}
    bar.set_postfix(
        failed=writer.n_finished - writer.n_done - writer.n_discarded,
        **shown,
        util=f"{100 * busy / (slots * wall):.0f}%",
        refresh=False,
    )
