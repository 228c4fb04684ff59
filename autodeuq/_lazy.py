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
