"""Ensembles: greedy selection over the catalog and the predictive ensemble with decomposed uncertainty.

One job per module: :mod:`~autodeuq.ensemble.building` (catalog -> selection -> calibration, with
:mod:`~autodeuq.ensemble.selection` and :mod:`~autodeuq.ensemble.calibration`),
:mod:`~autodeuq.ensemble.predictive` (the ensemble and its prediction),
:mod:`~autodeuq.ensemble.mixture` (the value a prediction returns),
:mod:`~autodeuq.ensemble.classifier` and :mod:`~autodeuq.ensemble.categorical` (a classification
run's ensemble and its prediction),
:mod:`~autodeuq.ensemble.manifest` (saving and loading), :mod:`~autodeuq.ensemble.inputs` (input
encoding) and :mod:`~autodeuq.ensemble.refit`.

The names below load on first access (PEP 562), so :mod:`autodeuq.ensemble.options` (the
command line's choices) is read without numpy.
"""
from autodeuq._lazy import lazy_attributes

_NAMES = {
    "Ensemble": "autodeuq.ensemble.predictive", "EnsembleSizeWarning": "autodeuq.ensemble.building",
    "ManifestError": "autodeuq.ensemble.members", "UncertaintyPrediction": "autodeuq.ensemble.mixture",
    "load_ensemble": "autodeuq.ensemble.manifest", "select": "autodeuq.ensemble.selection",
    "ClassifierEnsemble": "autodeuq.ensemble.classifier", "CategoricalPrediction": "autodeuq.ensemble.categorical",
}


__getattr__ = lazy_attributes(__name__, _NAMES)


def __dir__():
    return sorted(set(globals()) | set(_NAMES))


__all__ = ["CategoricalPrediction", "ClassifierEnsemble", "Ensemble", "EnsembleSizeWarning", "ManifestError",
           "UncertaintyPrediction", "load_ensemble", "select"]
