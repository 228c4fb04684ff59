"""Modules imported on first use.

The registries of activations (:mod:`autodeuq.activations`) and optimizers
(:mod:`autodeuq.optimizers`) hold TensorFlow code, yet the search space validates names against
them, and reading a space must not cost TensorFlow's import (seconds).
"""
from __future__ import annotations

import importlib


class LazyModule:
    """Stands for the module ``name``, imported at the first attribute access."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self):
        return f"LazyModule({self._name!r})"


tf = LazyModule("tensorflow")
keras = LazyModule("keras")


def lazy_attributes(package: str, table: dict[str, str]):
    """A module-level ``__getattr__`` (PEP 562) for ``package``: ``name`` in ``table`` is imported
    from the module ``table[name]`` on first access, so importing the package costs nothing more."""

    def __getattr__(name):
        if name in table:
            return getattr(importlib.import_module(table[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
