"""The bottom layer, imported by all the others and importing none of them: the errors
(:mod:`~autodeuq.core.errors`), the name tables loaded on first use
(:mod:`~autodeuq.core.registry`), the one atomic file write (:mod:`~autodeuq.core.fileio`), what an
evaluation sends back (:mod:`~autodeuq.core.result`), an option of a run and the constraints of
its values, which every part declares its options with (:mod:`~autodeuq.core.option`), and
TensorFlow's import-time log lines kept off the console (:mod:`~autodeuq.core.quiet`)."""
