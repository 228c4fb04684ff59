"""Ensembles: greedy selection over the catalog and the predictive ensemble with decomposed uncertainty.

The names below load on first access (PEP 562), so :mod:`autodeuq.ensemble.options` (the
command line's choices) is read without numpy.
"""
from autodeuq._lazy import lazy_attributes

_NAMES = {
    "Ensemble": "autodeuq.ensemble.predictive", "EnsembleSizeWarning": "autodeuq.ensemble.predictive",
    "ManifestError": "autodeuq.ensemble.predictive", "UncertaintyPrediction": "autodeuq.ensemble.predictive",
    "load_ensemble": "autodeuq.ensemble.predictive", "select": "autodeuq.ensemble.selection",
}


__getattr__ = lazy_attributes(__name__, _NAMES)


def __dir__():
    return sorted(set(globals()) | set(_NAMES))


__all__ = ["Ensemble", "EnsembleSizeWarning", "ManifestError", "UncertaintyPrediction", "load_ensemble", "select"]
