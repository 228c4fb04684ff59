"""The application: every option of a run (:mod:`~autodeuq.app.options`), the job's two stages
(:mod:`~autodeuq.app.pipeline`), the command line (:mod:`~autodeuq.app.cli`), the scikit-learn
estimators (:mod:`~autodeuq.app.api`) and the figures (:mod:`~autodeuq.app.plots`)."""
