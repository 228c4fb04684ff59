"""The network kernel: the plan of a network and its ops (:mod:`~autodeuq.nn.plan`,
:mod:`~autodeuq.nn.ops`), the Keras layers, activations and optimizers, the spliced epoch
(:mod:`~autodeuq.nn.splice`, :mod:`~autodeuq.nn.flat`), the ``.keras`` files
(:mod:`~autodeuq.nn.keras_file`, :mod:`~autodeuq.nn.model`) and the trainer
(:mod:`~autodeuq.nn.train`). Imports :mod:`autodeuq.core` and :mod:`autodeuq.table`."""
