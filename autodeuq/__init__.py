"""autodeuq: automated deep ensembles with uncertainty quantification.

Heavy modules (TensorFlow, Ray) load on first use, so ``import autodeuq`` stays fast.
"""
import os
from importlib import import_module

# Modules that moved keep their former names (autodeuq.data is autodeuq.table.data): autodeuq._lazy.MOVED.
import_module("autodeuq._lazy").install_aliases()
# TensorFlow's C++ INFO/WARNING/ERROR logs (oneDNN notices, grappler messages about nested Keras
# models) bury autodeuq's own output; users can still set their own level.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# ... and so do the lines its native libraries print while it is imported (see autodeuq.core.quiet).
_quiet = import_module("autodeuq.core.quiet")
_quiet.install()
# On GPUs, TensorFlow allocates memory as it needs it instead of reserving nearly all of every GPU
# it sees when it first runs: evaluations that share a GPU, and this process predicting beside
# them, would otherwise starve each other (read when TensorFlow creates its GPU devices).
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")

__version__ = "0.3.0"

_LAZY = {
    "AutoDEUQError": "autodeuq.core.errors",
    "AutoDEUQWarning": "autodeuq.core.errors",
    "ParameterError": "autodeuq.core.errors",
    "SearchError": "autodeuq.engine.runner",
    "SpaceError": "autodeuq.core.errors",
    "Catalog": "autodeuq.catalog",
    "CatalogError": "autodeuq.catalog",
    "WriteError": "autodeuq.core.fileio",
    "Ensemble": "autodeuq.ensemble",
    "load_ensemble": "autodeuq.ensemble",
    "UncertaintyPrediction": "autodeuq.ensemble",
    "AutoDEUQRegressor": "autodeuq.app.api",
    "AutoDEUQClassifier": "autodeuq.app.api",
    "ClassifierEnsemble": "autodeuq.ensemble",
    "CategoricalPrediction": "autodeuq.ensemble",
    "SearchSpace": "autodeuq.search.space",
    "load_space": "autodeuq.search.space",
    "DataError": "autodeuq.core.errors",
    "UnseenCategoryWarning": "autodeuq.table.preprocess",
    "OutOfRangeWarning": "autodeuq.ensemble.inputs",
}


_SUBMODULES = ("errors", "metrics", "ensemble", "search", "evaluator", "data", "space", "catalog", "plots", "discard")


__getattr__ = import_module("autodeuq._lazy").lazy_attributes(__name__, _LAZY, _SUBMODULES)


def __dir__():
    # The API is imported lazily, so without this completion (dir, IPython) would not show it.
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))


__all__ = sorted(_LAZY) + ["__version__"]
