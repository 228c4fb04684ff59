"""Ensembles: greedy selection over the catalog and the predictive ensemble with decomposed uncertainty."""
from autodeuq.ensemble.predictive import (
    Ensemble,
    EnsembleSizeWarning,
    ManifestError,
    UncertaintyPrediction,
    load_ensemble,
)
from autodeuq.ensemble.selection import select

__all__ = ["Ensemble", "EnsembleSizeWarning", "ManifestError", "UncertaintyPrediction", "load_ensemble", "select"]
