"""The search engine: the evaluators (:mod:`~autodeuq.engine.evaluator`: serial, Ray) and the
asynchronous search driver (:mod:`~autodeuq.engine.runner`), the catalog's only writer."""
