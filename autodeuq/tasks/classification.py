"""Classification: every network outputs logits, the ensemble mixes their class probabilities, with
the entropy decomposition of Depeweg et al. (2018)."""
from __future__ import annotations

from autodeuq.tasks.base import Task


class ClassificationTask(Task):
    """One column of labels; a logit per class; selection on the mixture's log loss, each member
    once; recalibration by a temperature (Guo et al. 2017); LAC conformal sets (Sadinle et al. 2019)."""

    name = "classification"
    head = "logits"
    targets = "labels"
    prediction_arrays = ("proba",)
    calibration = "temperature"
    conformal = "lac"
    auto_selector = "greedy-noreplace"
    auto_pool = 1.0
    auto_crossfit_rows = 2000
    objective = "log loss"
    conformal_gives = "sets"
    ensemble = "autodeuq.ensemble.classifier:ClassifierEnsemble"
    candidates = "autodeuq.ensemble.building:ClassifierCandidates"
    report = "autodeuq.report:ClassificationScores"

    def prediction_width(self, n_targets: int, labels=None) -> int:
        return int(labels.n_classes)

    def network_nll(self, model, x, y) -> float:
        """The network's log loss on rows ``(x, y)`` (``y``: class codes, shape (n, 1))."""
        import numpy as np

        from autodeuq.nn.train import predict_log_proba

        log_proba = predict_log_proba(model, x)
        return float(-np.mean(log_proba[np.arange(len(y)), _codes(y)]))

    def constant_nll(self, y, labels=None) -> float:
        """The log loss on ``y`` of the classes' frequencies."""
        import numpy as np

        codes = _codes(y)
        frequencies = np.bincount(codes, minlength=labels.n_classes) / len(codes)
        return float(-np.mean(np.log(frequencies[codes])))


def _codes(y):
    import numpy as np

    return np.asarray(y, dtype=np.float64)[:, 0].astype(np.int64)
