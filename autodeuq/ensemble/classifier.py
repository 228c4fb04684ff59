"""The ensemble of a classification run: a weighted mixture of its members' class probabilities.

:class:`ClassifierEnsemble` is an :class:`~autodeuq.ensemble.Ensemble` whose members output
logits: its prediction is a :class:`~autodeuq.ensemble.categorical.CategoricalPrediction`, the
weighted mean of the members' softmax probabilities with the entropy decomposition of Depeweg et
al. (2018): total = entropy of the mean probabilities, aleatoric = weighted mean of the members'
entropies, epistemic = their difference (the mutual information between the label and the
member). A calibrated ensemble divides every member's logits by one temperature (Guo et al.
2017), fitted on out-of-fold selections (:func:`~autodeuq.ensemble.categorical.cross_fitted_temperature`).
Building, saving, loading, refitting and the run-directory checks are the regression ensemble's.
"""
from __future__ import annotations

import numpy as np

from autodeuq.ensemble.categorical import CategoricalPrediction, apply_temperature
from autodeuq.ensemble.members import EnsembleError
from autodeuq.ensemble.predictive import Ensemble


class ClassifierEnsemble(Ensemble):
    """A weighted ensemble of a classification catalog's entries (see :class:`Ensemble` for the
    parameters; ``calibration`` is ``{"method": "temperature", "temperature": T, ...}``).

    Attributes
    ----------
    labels : Labels
        The classes, in the order of the probabilities' columns.
    classes : ndarray
        The class labels (scikit-learn's ``classes_``).
    temperature : float
        1 unless calibrated.
    conformal : dict or None
        Held-out LAC scores (:func:`autodeuq.ensemble.conformal.fit_classification`): the
        predictions' :meth:`~autodeuq.ensemble.categorical.CategoricalPrediction.prediction_set`
        is then conformal unless asked for the mixture's.

    Examples
    --------
    >>> ens = Ensemble.from_catalog("runs/moons", size=5)          # doctest: +SKIP
    >>> value = ens.predict(X)                                      # doctest: +SKIP
    >>> value.proba, value.label, value.epistemic_mi                # doctest: +SKIP
    >>> value.to_frame("moon", set_level=0.9)                       # doctest: +SKIP
    """

    task = "classification"

    def __init__(self, source, member_ids, weights, selection: dict | None = None,
                 calibration: dict | None = None, conformal: dict | None = None):
        if calibration and calibration.get("method") != "temperature":
            raise ValueError(f"a classifier's calibration is a temperature, got {calibration!r}")
        super().__init__(source, member_ids, weights, selection=selection, conformal=conformal)
        self.calibration = dict(calibration) if calibration else None
        self.labels = self.source.labels
        if self.labels is None:
            raise ValueError("a classifier ensemble needs its classes")
        self.temperature = 1.0
        if self.calibration is not None:
            value = self.calibration.get("temperature")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value <= 0:
                raise ValueError(f"calibration temperature must be a positive number, got {value!r}")
            self.temperature = float(value)

    @property
    def classes(self) -> np.ndarray:
        return self.labels.array()

    def member_logits(self, x, *, source: str = "X", encoded: bool = False) -> np.ndarray:
        """Every member's logits, untempered, shape (n_members, n, K).

        ``x``, ``source`` and ``encoded`` as in :meth:`Ensemble.member_predictions`.
        """
        return self._member_outputs(x, source=source, encoded=encoded)

    def member_predictions(self, x, *, source: str = "X", encoded: bool = False) -> np.ndarray:
        """Every member's class probabilities (calibrated when the ensemble is), (n_members, n, K)."""
        return apply_temperature(self.member_logits(x, source=source, encoded=encoded), self.temperature)

    def mixture(self, log_proba) -> CategoricalPrediction:
        """The ensemble's prediction from its members' untempered logits or log-probabilities
        (:meth:`member_logits`, or the catalog's cached validation probabilities through
        :func:`~autodeuq.ensemble.categorical.log_probabilities`), tempered when the ensemble is
        calibrated: what :meth:`predict` returns for those rows."""
        value = CategoricalPrediction.from_log_proba(log_proba, self.weights, self.classes, self.temperature)
        value.conformal = self.conformal
        return value

    def predict(self, x, *, source: str = "X", encoded: bool = False) -> CategoricalPrediction:
        """The weighted mixture of the members' class probabilities at each row of ``x``, with the
        label, the prediction sets and the entropy decomposition."""
        return self.mixture(self.member_logits(x, source=source, encoded=encoded))

    def predict_proba(self, x, *, source: str = "X") -> np.ndarray:
        """(n, K): the ensemble's class probabilities, columns in :attr:`classes` order."""
        return self.predict(x, source=source).proba

    def components(self, x, *, source: str = "X", encoded: bool = False):
        raise EnsembleError("a classifier's components are its members' class probabilities: member_predictions")

    def interval(self, x, level: float = 0.9, *, source: str = "X"):
        raise EnsembleError("a classifier has no intervals; its prediction sets are predict(x).prediction_set(level)")

    def distribution(self, x):
        import tensorflow_probability as tfp

        tfd = tfp.distributions
        probas = np.moveaxis(self.member_predictions(x), 0, 1)  # (n, M, K)
        return tfd.MixtureSameFamily(
            mixture_distribution=tfd.Categorical(probs=np.broadcast_to(self.weights, probas.shape[:2])),
            components_distribution=tfd.Categorical(probs=probas),
        )

    def __repr__(self):
        return "Classifier" + super().__repr__()
