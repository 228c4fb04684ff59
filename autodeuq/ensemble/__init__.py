"""Ensembles: greedy selection over the catalog and the predictive ensemble with decomposed uncertainty.

The names below load on first access (PEP 562), so :mod:`autodeuq.ensemble.options` (the
command line's choices) is read without numpy.
"""
from importlib import import_module

_NAMES = {
    "Ensemble": "autodeuq.ensemble.predictive", "EnsembleSizeWarning": "autodeuq.ensemble.predictive",
    "ManifestError": "autodeuq.ensemble.predictive", "UncertaintyPrediction": "autodeuq.ensemble.predictive",
    "load_ensemble": "autodeuq.ensemble.predictive", "select": "autodeuq.ensemble.selection",
}


def __getattr__(name):
    if name in _NAMES:
        return getattr(import_module(_NAMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_NAMES))


__all__ = ["Ensemble", "EnsembleSizeWarning", "ManifestError", "UncertaintyPrediction", "load_ensemble", "select"]
