"""The run directory's names: its files and folders, the keys of an entry's record, the columns of
the catalog's table (:meth:`~autodeuq.catalog.Catalog.to_dataframe`, ``results.csv``), shared by
the reader and the writer."""
from __future__ import annotations

import math
import re

from autodeuq.catalog.artifacts import CatalogError
from autodeuq.core.result import Status

STATUSES = tuple(Status)

META_NAME = "meta.json"
TARGETS_NAME = "valid_targets.npy"
CSV_NAME = "results.csv"
MODELS_DIR = "models"
PREDICTIONS_DIR = "predictions"

#: Key of an entry's ``extra`` naming the search-phase entry whose configuration it trains to the full budget.
PROMOTED_FROM = "promoted_from"

#: Key of an entry's ``extra`` naming the entry whose configuration aging evolution mutated into it.
MUTATED_FROM = "mutated_from"

#: Key of the run's search options holding the decision of ``early_discarding="auto"``
#: (:mod:`autodeuq.discard.scheduler`).
DISCARDING_DECISION = "discarding_decision"

_SHA256 = re.compile(r"[0-9a-f]{64}")

_MAX_ID = 2**63 - 1  # SQLite's largest integer

# Columns of to_dataframe() / results.csv; the training hyperparameters follow "architecture".
# "objective" is the training loss (standardized targets), "valid_nll" the same NLL in the data's units.
LEADING_COLUMNS = ("id", "status", "objective", "valid_nll", "reason", "arch", "architecture", "parent")

# Computed by to_dataframe(), not stored in the index ("parent": the entry aging evolution mutated into this
# one, from its extra; empty for a configuration drawn otherwise).
_DERIVED_COLUMNS = ("valid_nll", "architecture", "parent")

TRAILING_COLUMNS = (
    "epochs", "best_epoch", "wall_time", "n_params", "worker", "submit_time", "start_time", "end_time",
)

# Derived from an entry's extra, after the stored columns: where a Ray evaluation ran (its node's id
# and the GPU ids Ray gave it, comma-separated; empty for an evaluation without that record).
PLACEMENT_COLUMNS = ("node", "gpus")

def _number(value, kind):
    """``kind(value)``, or None for a missing or non-finite value (a failure may lack them)."""
    try:
        value = kind(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None

def _checked_objective(value, where: str):
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    raise CatalogError(f"{where}: damaged catalog: objective {value!r} is not a number")
