"""Refit an ensemble's members on the training and validation rows together.

The search holds out validation rows for early stopping and for selecting the ensemble; on
small data that is a large share of the rows that no member ever learns from. Once the members
are chosen, each one's configuration is trained again on all the rows, for the number of epochs
at which it reached its best validation loss and with the learning rates it used then (its
recorded schedule, plateau reductions included), keeping the last epoch's weights: the usual
final step after a hold-out model selection (Hastie, Tibshirani & Friedman 2009, sec. 7.10; Goodfellow,
Bengio & Courville 2016, sec. 7.8, "retrain on all the data for the same number of steps").
Each member starts from the same initial weights as its original training (same seed).

A refit cannot be checked on held-out rows (there are none left), and the last epoch of a noisy
training (small batches, plain SGD) can land far from where the best one was. So a refitted
network is kept only if it fits the rows it was refitted on at least as well (Gaussian NLL) as the
original member, which saw fewer of them; otherwise the original member stays in the ensemble
(``selection["refit"]["kept_original"]`` lists them).

The weights of the mixture and a recalibration factor, when there is one, are the selection's:
they were fitted on the validation rows, which the refitted members have now seen, so they are
kept rather than fitted again.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from autodeuq.data import from_arrays
from autodeuq.ensemble.predictive import Ensemble, ExportedMembers
from autodeuq.errors import AutoDEUQError, ParameterError
from autodeuq.metrics import gaussian_nll


class RefitError(AutoDEUQError, RuntimeError):
    """A member could not be refitted (the message names it and gives the training's reason)."""


def member_schedule(entry: dict[str, Any]) -> list[float]:
    """Learning rates of a catalog entry's training up to its best epoch (inclusive).

    From the recorded per-epoch rates when there are enough of them, else the configuration's
    initial rate for each of those epochs.
    """
    best = int(entry.get("best_epoch") or 0)
    if best < 1:
        raise RefitError(f"entry {entry['id']} has no best epoch recorded; it cannot be refitted")
    rates = (entry.get("history") or {}).get("lr") or []
    if len(rates) >= best and all(isinstance(r, (int, float)) and r > 0 for r in rates[:best]):
        return [float(r) for r in rates[:best]]
    return [float(entry["config"]["hp"]["learning_rate"])] * best


def _nll(model, x, y) -> float:
    """Mean Gaussian NLL of an original-unit network on rows ``(x, y)``."""
    from autodeuq.train import predict

    mean, var = predict(model, x)
    return float(np.mean(gaussian_nll(y, mean, var)))


def refit(ensemble: Ensemble, x, y, *, threads: int | None = None) -> Ensemble:
    """The ensemble with every member retrained on ``(x, y)`` (see the module documentation).

    Parameters
    ----------
    ensemble : Ensemble
        An ensemble selected from a catalog (it gives each member's configuration, seed, best
        epoch and learning-rate schedule).
    x : array-like of shape (n, n_features)
        All the rows to fit: the search's training and validation rows together.
    y : array-like of shape (n, n_targets)
    threads : int, optional
        TensorFlow threads (only effective before TensorFlow runs its first operation).

    Returns
    -------
    Ensemble
        Same member ids, weights and calibration; its members are held in memory (no catalog),
        so it is saved with ``save(folder, self_contained=True)``. ``selection["refit"]`` records
        the rows, each refitted member's epochs, and the members kept as they were.

    Raises
    ------
    ParameterError
        The ensemble has no catalog, or ``x``/``y`` do not match its features and targets.
    RefitError
        A member's training failed (non-finite loss, ...).
    """
    from autodeuq.catalog import load_keras_model
    from autodeuq.evaluator.base import evaluation_seed
    from autodeuq.train import train

    catalog = ensemble.catalog
    if catalog is None:
        raise ParameterError("ensemble", "must come from a catalog (it gives the members' configurations and "
                             "training histories), not from a self-contained folder", str(ensemble.source.location))
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    y = y.reshape(len(y), -1)
    if x.ndim != 2 or x.shape[1] != len(ensemble.feature_names) or len(x) != len(y):
        raise ParameterError("x", f"must have {len(ensemble.feature_names)} columns and as many rows as y", np.shape(x))
    if y.shape[1] != len(ensemble.target_names):
        raise ParameterError("y", f"must have {len(ensemble.target_names)} column(s)", np.shape(y))
    # Every row trains; the same rows stand in for the validation data, whose loss is only reported.
    dataset = from_arrays(x, y, x, y, feature_names=ensemble.feature_names, target_names=ensemble.target_names,
                          name="refit")
    space, seed = catalog.space, int(catalog.meta.get("seed") or 0)
    models, epochs, kept = {}, {}, []
    for entry_id in ensemble.member_ids:
        entry = catalog.entry(entry_id)
        schedule = member_schedule(entry)
        result = train(entry["config"], space, dataset, seed=evaluation_seed(seed, entry_id), threads=threads,
                       schedule=schedule)
        if not result.ok:
            raise RefitError(f"refit of member {entry_id} failed: {result.reason}")
        original = catalog.model_bytes(entry_id)
        where = f"{catalog.run_dir}: member {entry_id}"
        if _nll(load_keras_model(result.model_bytes, where), x, y) <= _nll(load_keras_model(original, where), x, y):
            models[entry_id], epochs[entry_id] = result.model_bytes, len(schedule)
        else:
            models[entry_id] = original
            kept.append(entry_id)
    source = ExportedMembers(Path(f"{catalog.run_dir} (refitted)"), models, ensemble.feature_names,
                             ensemble.target_names, dataset.scaler.to_dict(),
                             preprocessor=ensemble.preprocessor)
    selection = {**ensemble.selection, "refit": {"rows": int(len(x)), "epochs": {str(i): e for i, e in epochs.items()},
                                                 "kept_original": kept}}
    return Ensemble(source, ensemble.member_ids, ensemble.weights, selection=selection,
                    calibration=ensemble.calibration)
