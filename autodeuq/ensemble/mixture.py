"""The value a prediction returns: the ensemble's Gaussian mixture at each row, as its moments
(the mean, the aleatoric and epistemic variances, their sum and its square root)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autodeuq.metrics import mixture_moments


@dataclass
class UncertaintyPrediction:
    """Decomposed predictive uncertainty, arrays of shape (n, n_targets) in original units.

    The fields ``aleatoric``, ``epistemic`` and ``total`` are **variances** (squared units):
    ``total = aleatoric + epistemic`` is exactly the variance of the weighted Gaussian mixture.
    ``std = sqrt(total)`` is a standard deviation. The properties name the scale outright:
    ``aleatoric_var``, ``epistemic_var``, ``total_var`` (the same variances) and
    ``aleatoric_std``, ``epistemic_std``, ``total_std`` (their square roots, in the target's
    units; standard deviations do not add up, variances do).
    """

    mean: np.ndarray
    aleatoric: np.ndarray
    epistemic: np.ndarray
    total: np.ndarray
    std: np.ndarray

    @classmethod
    def from_mixture(cls, means, variances, weights) -> "UncertaintyPrediction":
        """The decomposition of a Gaussian mixture given by its components, shape (M, n, T).

        ``mean = sum_i w_i mu_i``, ``aleatoric = sum_i w_i s2_i``,
        ``epistemic = sum_i w_i (mu_i - mean)**2`` (Egele et al. 2022), whose sum is the
        mixture's variance (law of total variance).
        """
        mean, aleatoric, epistemic = mixture_moments(means, variances, weights)
        total = aleatoric + epistemic
        return cls(mean, aleatoric, epistemic, total, np.sqrt(total))

    @property
    def aleatoric_var(self) -> np.ndarray:
        """Aleatoric variance (the field ``aleatoric``)."""
        return self.aleatoric

    @property
    def epistemic_var(self) -> np.ndarray:
        """Epistemic variance (the field ``epistemic``)."""
        return self.epistemic

    @property
    def total_var(self) -> np.ndarray:
        """Total predictive variance (the field ``total``)."""
        return self.total

    @property
    def aleatoric_std(self) -> np.ndarray:
        """Aleatoric standard deviation, ``sqrt(aleatoric)``."""
        return np.sqrt(self.aleatoric)

    @property
    def epistemic_std(self) -> np.ndarray:
        """Epistemic standard deviation, ``sqrt(epistemic)``."""
        return np.sqrt(self.epistemic)

    @property
    def total_std(self) -> np.ndarray:
        """Total predictive standard deviation (the field ``std``)."""
        return self.std
