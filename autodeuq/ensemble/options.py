"""The values the ensemble step's options take, importable without numpy (the command line's
choices come from here; :mod:`~autodeuq.ensemble.selection` and
:mod:`~autodeuq.ensemble.predictive` check their parameters against them)."""

#: Selection methods (``selector``).
METHODS = ("greedy", "greedy-noreplace", "topk")
#: The ``selector`` option's values: a method, or ``auto``, the task's
#: (:attr:`Task.auto_selector <autodeuq.tasks.base.Task.auto_selector>`: with replacement for
#: regression, Caruana et al. 2004, the method's rule; each member once for classification,
#: docs/decisions/selection.md). ``pool="auto"`` is the task's too (:attr:`Task.auto_pool
#: <autodeuq.tasks.base.Task.auto_pool>`: the best 40 % of a regression catalog's models, the
#: whole catalog for classification, where the best 40 % made no difference that the benchmark
#: could tell apart; docs/decisions/selection.md, "The selection pool").
SELECTORS = ("auto", *METHODS)
#: Scores of an ensemble (``score``); "objective" is reserved for the search's (a model's validation NLL).
SCORES = ("mixture", "gaussian")
#: When greedy selection stops (``stop``).
STOPS = ("size", "improvement")
#: How members may be kept apart (``diversity`` of :meth:`~autodeuq.ensemble.Ensemble.from_catalog`).
DIVERSITY = ("none", "architecture", "activations")
#: Post-hoc recalibration methods (``calibrate`` of :meth:`~autodeuq.ensemble.Ensemble.from_catalog`).
#: "scale" stretches a regression's mixtures, "temperature" softens a classifier's probabilities.
CALIBRATIONS = ("auto", "none", "scale", "temperature")
