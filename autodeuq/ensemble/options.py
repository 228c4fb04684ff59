"""The values the ensemble step's options take, importable without numpy (the command line's
choices come from here; :mod:`~autodeuq.ensemble.selection` and
:mod:`~autodeuq.ensemble.predictive` check their parameters against them)."""

#: Selection methods (``selector``).
METHODS = ("greedy", "greedy-noreplace", "topk")
#: The ``selector`` option's values: a method, or ``auto``, the task's (:data:`AUTO_SELECTOR`).
SELECTORS = ("auto", *METHODS)
#: What ``selector="auto"`` selects with, per task: with replacement for regression (Caruana et al.
#: 2004, the method's rule); each member once for classification (docs/decisions/selection.md).
AUTO_SELECTOR = {"regression": "greedy", "classification": "greedy-noreplace"}
#: What ``pool="auto"`` is, per task: the fraction of a catalog's models, best first by their own
#: validation score, that selection may take (docs/decisions/selection.md, "The selection pool"):
#: the best 40 % for regression; the whole catalog for classification, where the best 40 % made no
#: difference that the benchmark could tell apart.
AUTO_POOL = {"regression": 0.4, "classification": 1.0}
#: Scores of an ensemble (``score``); "objective" is reserved for the search's (a model's validation NLL).
SCORES = ("mixture", "gaussian")
#: When greedy selection stops (``stop``).
STOPS = ("size", "improvement")
#: How members may be kept apart (``diversity`` of :meth:`~autodeuq.ensemble.Ensemble.from_catalog`).
DIVERSITY = ("none", "architecture", "activations")
#: Post-hoc recalibration methods (``calibrate`` of :meth:`~autodeuq.ensemble.Ensemble.from_catalog`).
#: "scale" stretches a regression's mixtures, "temperature" softens a classifier's probabilities.
CALIBRATIONS = ("auto", "none", "scale", "temperature")
