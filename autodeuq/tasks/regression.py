"""Regression: every network predicts a Gaussian per target, the ensemble their weighted mixture
(Lakshminarayanan et al. 2017; Egele et al. 2022), split into aleatoric and epistemic variance."""
from __future__ import annotations

from autodeuq.tasks.base import Task


class RegressionTask(Task):
    """Numeric targets; a mean and a variance per target; selection on the mixture's NLL (Caruana
    et al. 2004, with replacement); recalibration by a std scale; normalized conformal intervals."""

    name = "regression"
