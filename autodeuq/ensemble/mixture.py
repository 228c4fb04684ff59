"""The value a prediction returns: the ensemble's Gaussian mixture at each row.

:class:`UncertaintyPrediction` holds the mixture's moments (the mean, the aleatoric and epistemic
variances, their sum and its square root) and, for a prediction of an ensemble, the mixture
itself (its components and weights): :meth:`~UncertaintyPrediction.moments`,
:meth:`~UncertaintyPrediction.interval` and :meth:`~UncertaintyPrediction.to_frame` (the
prediction table of ``autodeuq predict``) are computed here, once, for every caller.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from autodeuq.core.errors import AutoDEUQError, ParameterError
from autodeuq.metrics import central_interval, check_level, mixture_moments


class Moments(NamedTuple):
    """The moments of a Gaussian mixture, arrays of shape (n, n_targets), original units."""

    mean: np.ndarray
    aleatoric: np.ndarray  #: variance, ``sum_i w_i s2_i``
    epistemic: np.ndarray  #: variance, ``sum_i w_i (mu_i - mean)**2``


def interval_levels(levels) -> list[tuple[float, str]]:
    """(level, column suffix) of each central interval level, a repeated suffix kept once.

    The suffix is ``100 * level`` with ``_`` for the decimal point: 0.9 gives ``90``, 0.975
    ``97_5``; two levels of one suffix (0.9 and 0.90) name the same columns.

    Parameters
    ----------
    levels : iterable of float or None

    Returns
    -------
    list of (float, str)

    Raises
    ------
    ParameterError
        A level is not a probability in ``(0, 1 - 1e-9]`` (:func:`autodeuq.metrics.check_level`).
    """
    out = []
    for level in levels or []:
        level = check_level(level)
        suffix = f"{100 * level:.10g}".replace(".", "_")  # 0.9 -> 90, 0.975 -> 97_5
        if suffix not in [s for _, s in out]:
            out.append((level, suffix))
    return out


def _by_target(a) -> np.ndarray:
    """``a`` as (n, n_targets): a one-target prediction shaped (n,) gains its target axis."""
    a = np.asarray(a)
    return a[:, None] if a.ndim == 1 else a


@dataclass
class UncertaintyPrediction:
    """Decomposed predictive uncertainty, arrays of shape (n, n_targets) in original units.

    The fields ``aleatoric``, ``epistemic`` and ``total`` are **variances** (squared units):
    ``total = aleatoric + epistemic`` is exactly the variance of the weighted Gaussian mixture.
    ``std = sqrt(total)`` is a standard deviation. The properties name the scale outright:
    ``aleatoric_var``, ``epistemic_var``, ``total_var`` (the same variances) and
    ``aleatoric_std``, ``epistemic_std``, ``total_std`` (their square roots, in the target's
    units; standard deviations do not add up, variances do).

    A prediction of an ensemble (:meth:`Ensemble.predict <autodeuq.ensemble.Ensemble.predict>`,
    :meth:`from_mixture`) also holds the mixture itself, so that it gives its central intervals
    (:meth:`interval`) and the table the command line writes (:meth:`to_frame`); one built from
    its moments alone (the five fields) has ``means``, ``variances`` and ``weights`` None.

    Attributes
    ----------
    means, variances : ndarray of shape (n_members, n, n_targets) or None
        The mixture's components, recalibrated when the ensemble is.
    weights : ndarray of shape (n_members,) or None
        The components' weights, summing to 1.

    Examples
    --------
    Two equally weighted members, one row, one target:

    >>> value = UncertaintyPrediction.from_mixture([[[0.0]], [[2.0]]], [[[1.0]], [[1.0]]], [0.5, 0.5])
    >>> value.moments()
    Moments(mean=array([[1.]]), aleatoric=array([[1.]]), epistemic=array([[1.]]))
    >>> lower, upper = value.interval(0.9)
    >>> bool(lower[0, 0] < value.mean[0, 0] < upper[0, 0])
    True
    >>> value.to_frame(["y"], levels=[0.9, 0.5]).columns.tolist()
    ['y_mean', 'y_std', 'y_aleatoric_std', 'y_epistemic_std', 'y_lower_90', 'y_upper_90', 'y_lower_50', 'y_upper_50']
    """

    mean: np.ndarray
    aleatoric: np.ndarray
    epistemic: np.ndarray
    total: np.ndarray
    std: np.ndarray

    # The mixture, outside the fields: dataclasses.replace (which AutoDEUQRegressor uses to shape
    # the fields) keeps the fields only, and these do not have the fields' shapes.
    means = None
    variances = None
    weights = None
    #: The ensemble's held-out conformity scores (:func:`autodeuq.ensemble.conformal.fit_regression`),
    #: or None: :meth:`interval` is then the mixture's.
    conformal = None

    @classmethod
    def from_mixture(cls, means, variances, weights) -> "UncertaintyPrediction":
        """The decomposition of a Gaussian mixture given by its components, shape (M, n, T).

        ``mean = sum_i w_i mu_i``, ``aleatoric = sum_i w_i s2_i``,
        ``epistemic = sum_i w_i (mu_i - mean)**2`` (Egele et al. 2022), whose sum is the
        mixture's variance (law of total variance).
        """
        mean, aleatoric, epistemic = mixture_moments(means, variances, weights)
        total = aleatoric + epistemic
        value = cls(mean, aleatoric, epistemic, total, np.sqrt(total))
        value.means, value.variances = np.asarray(means, dtype=float), np.asarray(variances, dtype=float)
        value.weights = np.asarray(weights, dtype=float)
        return value

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

    def moments(self) -> Moments:
        """The mixture's mean and the two parts of its variance.

        Returns
        -------
        Moments
            ``(mean, aleatoric, epistemic)``, each of shape (n, n_targets): what
            :func:`autodeuq.metrics.mixture_moments` gives for the mixture.
        """
        return Moments(self.mean, self.aleatoric, self.epistemic)

    def interval(self, level: float = 0.9, method: str = "auto") -> tuple[np.ndarray, np.ndarray]:
        """The ``level`` prediction interval at each row, original units.

        ``method="conformal"`` (what ``"auto"`` is when the prediction holds the ensemble's
        held-out scores, :attr:`conformal`): ``mean +- q_L std``, ``q_L`` the conformal quantile of
        the held-out normalized scores (:func:`autodeuq.ensemble.conformal.interval`), whose
        coverage has a finite-sample guarantee on exchangeable rows; infinite, with a
        :class:`~autodeuq.ensemble.conformal.ConformalLevelWarning`, when the level needs more
        held-out rows than there were. ``"mixture"`` (what ``"auto"`` is otherwise): the central
        interval of the mixture, its ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles
        (:func:`autodeuq.metrics.central_interval`), not ``mean +- z std``: a mixture need not be
        Gaussian.

        Parameters
        ----------
        level : float
            A probability in ``(0, 1 - 1e-9]``.
        method : {"auto", "conformal", "mixture"}

        Returns
        -------
        lower, upper : ndarray of shape (n, n_targets)

        Raises
        ------
        ParameterError
            ``level`` is not such a probability (a ``ValueError``).
        AutoDEUQError
            The value holds no mixture (it was built from its moments alone).
        """
        from autodeuq.ensemble import conformal

        level = check_level(level)
        if conformal.resolve_method(method, self.conformal) == "conformal":
            return conformal.interval(self.conformal, _by_target(self.mean), _by_target(self.std), level)
        if self.means is None:
            raise AutoDEUQError("this prediction holds its moments only, not the mixture its intervals are "
                                "quantiles of; the predictions of Ensemble.predict hold it")
        return central_interval(self.means, self.variances, self.weights, level)

    def to_frame(self, target_names, levels=(), method: str = "auto"):
        """The prediction as the table ``autodeuq predict`` writes, one row per input row.

        Parameters
        ----------
        target_names : sequence of str
            One name per target, in order.
        levels : sequence of float, optional
            Central interval levels (:meth:`interval`); a level whose column suffix repeats an
            earlier one's is written once (:func:`interval_levels`).
        method : {"auto", "conformal", "mixture"}
            How the intervals are made (:meth:`interval`).

        Returns
        -------
        pandas.DataFrame
            Per target ``t``, in order: ``t_mean``, ``t_std`` (total), ``t_aleatoric_std``,
            ``t_epistemic_std`` (standard deviations, not variances), then for each level
            ``t_lower_S`` and ``t_upper_S`` with ``S`` its suffix (0.9: ``90``, 0.975: ``97_5``).

        Raises
        ------
        ParameterError
            ``target_names`` does not name every target, or a level is not a probability.
        AutoDEUQError
            Levels are asked of a value that holds no mixture.
        """
        import pandas as pd

        levels = interval_levels(levels)
        mean, std, aleatoric_std, epistemic_std = (_by_target(a) for a in (
            self.mean, self.std, self.aleatoric_std, self.epistemic_std))
        names = list(target_names)
        if len(names) != mean.shape[1]:
            raise ParameterError("target_names", f"must name the prediction's {mean.shape[1]} target(s)", names)
        intervals = [(suffix, self.interval(level, method)) for level, suffix in levels]
        columns = {}
        for j, t in enumerate(names):
            columns[f"{t}_mean"] = mean[:, j]
            columns[f"{t}_std"] = std[:, j]
            columns[f"{t}_aleatoric_std"] = aleatoric_std[:, j]
            columns[f"{t}_epistemic_std"] = epistemic_std[:, j]
            for suffix, (lower, upper) in intervals:
                columns[f"{t}_lower_{suffix}"] = lower[:, j]
                columns[f"{t}_upper_{suffix}"] = upper[:, j]
        return pd.DataFrame(columns)
