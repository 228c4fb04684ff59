"""Ensembles: greedy selection over the catalog and the predictive ensemble with decomposed uncertainty."""
from autodeuq.ensemble.predictive import Ensemble, EnsembleSizeWarning, UncertaintyPrediction, load_ensemble
from autodeuq.ensemble.selection import select

__all__ = ["Ensemble", "EnsembleSizeWarning", "UncertaintyPrediction", "load_ensemble", "select"]
