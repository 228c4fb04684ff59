"""Imports on first use: the package's one mechanism for them.

Everything lazy in autodeuq goes through :func:`resolve` (``"module:attribute"`` -> object):
the package's names (``autodeuq.AutoDEUQRegressor``, ``autodeuq.ensemble.Ensemble``:
:func:`lazy_attributes`), the name tables of searchers, surrogates and evaluators
(:class:`autodeuq.registry.Registry`), and TensorFlow and Keras themselves (:class:`LazyModule`:
the registries of activations and optimizers hold TensorFlow code, yet the search space validates
names against them, and reading a space must not cost TensorFlow's import, seconds).
"""
from __future__ import annotations

import importlib
from typing import Any


def resolve(target: str) -> Any:
    """The object a ``"module:attribute"`` string names (the attribute may be dotted; none: the module).

    >>> resolve("math:sqrt")(4.0), resolve("os.path").__name__
    (2.0, 'posixpath')
    """
    module, _, attribute = target.partition(":")
    value = importlib.import_module(module)
    for part in filter(None, attribute.split(".")):
        value = getattr(value, part)
    return value


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


def lazy_attributes(package: str, table: dict[str, str], submodules=()):
    """A module-level ``__getattr__`` (PEP 562) for ``package``: ``name`` in ``table`` is imported
    from the module ``table[name]`` on first access, and ``name`` in ``submodules`` is the
    submodule ``package.name``, so importing the package costs nothing more."""

    def __getattr__(name):
        if name in table:
            return resolve(f"{table[name]}:{name}")
        if name in submodules:
            return resolve(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
