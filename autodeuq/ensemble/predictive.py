"""The predictive ensemble: catalog members with weights, predicting a Gaussian mixture."""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autodeuq.catalog import Catalog
from autodeuq.data import DataError
from autodeuq.ensemble.selection import select
from autodeuq.metrics import mixture_moments

MANIFEST_FORMAT = "autodeuq-ensemble/1"


class EnsembleSizeWarning(UserWarning):
    """The ensemble has fewer members than asked: the catalog has fewer successful entries."""


@dataclass
class UncertaintyPrediction:
    """Decomposed predictive uncertainty, arrays of shape (n, n_targets) in original units.

    ``aleatoric``, ``epistemic`` and ``total`` are variances; ``total = aleatoric + epistemic``
    is exactly the variance of the weighted Gaussian mixture; ``std = sqrt(total)``.
    """

    mean: np.ndarray
    aleatoric: np.ndarray
    epistemic: np.ndarray
    total: np.ndarray
    std: np.ndarray


class Ensemble:
    """A weighted ensemble of catalog entries.

    Parameters
    ----------
    run_dir : path
        The catalog the members come from.
    member_ids : list of int
        Catalog ids of the members (distinct).
    weights : array-like
        Member weights, summing to 1.
    selection : dict, optional
        How the members were chosen (recorded in the manifest).

    Examples
    --------
    >>> ens = Ensemble.from_catalog("runs/demo", size=5)          # doctest: +SKIP
    >>> result = ens.predict(X)                                   # doctest: +SKIP
    >>> result.mean, result.aleatoric, result.epistemic           # doctest: +SKIP
    """

    def __init__(self, run_dir, member_ids, weights, selection: dict | None = None):
        self.run_dir = Path(run_dir)
        self.member_ids = [int(i) for i in member_ids]
        self.weights = np.asarray(weights, dtype=float)
        if len(self.member_ids) != len(self.weights) or not self.member_ids:
            raise ValueError("an ensemble needs at least one member and one weight per member")
        if len(set(self.member_ids)) != len(self.member_ids):
            raise ValueError("ensemble members must be distinct catalog ids")
        if np.any(self.weights < 0) or not np.isclose(self.weights.sum(), 1.0):
            raise ValueError(f"weights must be non-negative and sum to 1, got {self.weights.tolist()}")
        self.selection = dict(selection or {})
        self.catalog = Catalog(self.run_dir)
        data = self.catalog.meta.get("data", {})
        self.feature_names = list(data.get("features", []))
        self.target_names = list(data.get("targets", []))
        self._models = None
        self._predict_fn = None

    # ------------------------------------------------------------------ building
    @classmethod
    def from_catalog(cls, run_dir, size: int = 5, method: str = "greedy", objective: str = "mixture") -> "Ensemble":
        """Select members greedily (or top-k) on the cached validation predictions of a catalog.

        Parameters
        ----------
        run_dir : path
        size : int
            Maximum number of distinct members. When the catalog has fewer successful entries,
            the ensemble is selected among all of them and an :class:`EnsembleSizeWarning` says so.
        method : {"greedy", "greedy-noreplace", "topk"}
        objective : {"mixture", "gaussian"}

        Warns
        -----
        EnsembleSizeWarning
            ``size`` exceeds the number of successful catalog entries.
        """
        catalog = Catalog(run_dir)
        ids = catalog.ids(status="done")
        if not ids:
            raise ValueError(f"{run_dir}: the catalog has no successful evaluation to build an ensemble from")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"ensemble size must be an integer >= 1, got {size!r}")
        selection = {"size": min(int(size), len(ids)), "method": method, "objective": objective}
        if size > len(ids):
            selection["size_requested"] = int(size)
            warnings.warn(f"{run_dir}: ensemble size {size} asked, but the catalog has only {len(ids)} successful "
                          f"entries: selecting among those, at most {len(ids)} members", EnsembleSizeWarning,
                          stacklevel=2)
        ids, means, variances = catalog.validation_predictions(ids)
        members, weights = select(means, variances, catalog.validation_targets(), size=selection["size"],
                                  method=method, objective=objective)
        chosen = [int(ids[i]) for i in members]
        return cls(run_dir, chosen, weights, selection={**selection, "catalog_entries": len(ids)})

    def save(self, path) -> Path:
        """Write the JSON manifest (catalog entries and weights; no pickle)."""
        path = Path(path)
        manifest = {
            "format": MANIFEST_FORMAT,
            "run_dir": os.path.relpath(self.run_dir.resolve(), path.resolve().parent),
            "members": [{"id": i, "weight": float(w), "model": f"models/{i}.keras"}
                        for i, w in zip(self.member_ids, self.weights)],
            "selection": self.selection,
            "features": self.feature_names,
            "targets": self.target_names,
        }
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=2))
        os.replace(tmp, path)
        return path

    # ------------------------------------------------------------------ predicting
    def _load(self):
        if self._models is None:
            self._models = [self.catalog.load_model(i) for i in self.member_ids]
        return self._models

    def _check_x(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == 1 and len(self.feature_names) == 1:
            x = x[:, None]
        if x.ndim != 2 or (self.feature_names and x.shape[1] != len(self.feature_names)):
            raise DataError(f"the ensemble expects {len(self.feature_names)} feature column(s) "
                            f"{self.feature_names}, got an array of shape {x.shape}")
        if not np.isfinite(x).all():
            raise DataError("inputs contain NaN or infinite values")
        return x

    def member_predictions(self, x) -> tuple[np.ndarray, np.ndarray]:
        """Every member's (means, variances), shape (n_members, n, n_targets), original units."""
        import tensorflow as tf

        x = self._check_x(x)
        models = self._load()
        if self._predict_fn is None:
            # One graph runs all members on the same batch, so TensorFlow executes them together.
            self._predict_fn = tf.function(lambda batch: tf.stack([m(batch, training=False) for m in models]),
                                           reduce_retracing=True)
        outputs = [self._predict_fn(tf.constant(x[i:i + 8192], dtype=tf.float32)).numpy()
                   for i in range(0, len(x), 8192)]
        out = np.concatenate(outputs, axis=1).astype(np.float64)
        t = out.shape[-1] // 2
        return out[..., :t], out[..., t:]

    def predict(self, x) -> UncertaintyPrediction:
        """Mixture mean and the aleatoric / epistemic / total variances (SPEC section 5)."""
        means, variances = self.member_predictions(x)
        mean, aleatoric, epistemic = mixture_moments(means, variances, self.weights)
        total = aleatoric + epistemic
        return UncertaintyPrediction(mean, aleatoric, epistemic, total, np.sqrt(total))

    def distribution(self, x):
        """The weighted Gaussian mixture as a TFP ``MixtureSameFamily``, batch shape (n, n_targets)."""
        import tensorflow_probability as tfp

        tfd = tfp.distributions
        means, variances = self.member_predictions(x)
        loc = np.moveaxis(means, 0, -1)
        scale = np.sqrt(np.moveaxis(variances, 0, -1))
        probs = np.broadcast_to(self.weights, loc.shape)
        return tfd.MixtureSameFamily(
            mixture_distribution=tfd.Categorical(probs=probs),
            components_distribution=tfd.Normal(loc=loc, scale=scale),
        )

    def __repr__(self):
        members = ", ".join(f"{i}:{w:.2f}" for i, w in zip(self.member_ids, self.weights))
        return f"Ensemble({str(self.run_dir)!r}, members=[{members}])"


def load_ensemble(path) -> Ensemble:
    """Load an ensemble from its JSON manifest (written by :meth:`Ensemble.save`)."""
    path = Path(path)
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: ensemble manifest not found") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a JSON ensemble manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{path}: not an autodeuq ensemble manifest (format {MANIFEST_FORMAT!r} expected)")
    run_dir = (path.resolve().parent / manifest["run_dir"]).resolve()
    members = manifest["members"]
    return Ensemble(run_dir, [m["id"] for m in members], [m["weight"] for m in members],
                    selection=manifest.get("selection"))
