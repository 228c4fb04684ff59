"""Deprecated: moved to :mod:`autodeuq.discard.scheduler` (the :class:`Scheduler`) and
:mod:`autodeuq.discard.cost` (the cost policy); this module re-exports their names."""
from __future__ import annotations

import warnings

from autodeuq.discard.cost import *  # noqa: F403
from autodeuq.discard.cost import EPOCH_SECONDS, MEASURE, SAMPLE_PARAM_SECONDS, STEP_SECONDS  # noqa: F401
from autodeuq.discard.scheduler import Scheduler  # noqa: F401

warnings.warn("autodeuq.scheduler is deprecated: import from autodeuq.discard.scheduler (Scheduler) or "
              "autodeuq.discard.cost (DiscardByCost, decide_after, training_cost)", DeprecationWarning, stacklevel=2)
