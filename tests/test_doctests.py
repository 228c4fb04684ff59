"""The examples in the docstrings of the modules that need no TensorFlow run and print what they show."""
import doctest
import importlib

import pytest

MODULES = (
    "autodeuq.metrics",
    "autodeuq.ensemble.selection",
    "autodeuq.ensemble.calibration",
    "autodeuq.ensemble.refit",
    "autodeuq.ensemble.mixture",
    "autodeuq.catalog.store",
    "autodeuq.data",
    "autodeuq.fileio",
    "autodeuq.result",
    "autodeuq.space",
    "autodeuq.discard",
    "autodeuq.pipeline",
    "autodeuq.discard.sha",
    "autodeuq.discard.iepoch",
    "autodeuq.discard.cost",
    "autodeuq.evaluator.base",
    "autodeuq.search",
    "autodeuq.search.agebo",
    "autodeuq.search.bo",
    "autodeuq.search.surrogate",
    "autodeuq.registry",
    "autodeuq._lazy",
    "autodeuq.labels",
    "autodeuq.flat",
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=True)
    assert attempted > 0, f"{name} has no docstring example"
    assert failed == 0, f"{failed} of {attempted} docstring examples of {name} failed (see the output above)"
