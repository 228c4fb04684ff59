"""Tables: reading and checking them once (:mod:`~autodeuq.table.data`), the encoding of their
columns (:mod:`~autodeuq.table.preprocess`) and the task and classes of a target
(:mod:`~autodeuq.table.labels`). Imports :mod:`autodeuq.core` only."""
