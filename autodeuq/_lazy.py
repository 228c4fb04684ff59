"""Imports on first use, and the former names of moved modules: the package's one mechanism for each.

Everything lazy in autodeuq goes through :func:`resolve` (``"module:attribute"`` -> object):
the package's names (``autodeuq.AutoDEUQRegressor``, ``autodeuq.ensemble.Ensemble``:
:func:`lazy_attributes`), the name tables of searchers, surrogates and evaluators
(:class:`autodeuq.core.registry.Registry`), and TensorFlow and Keras themselves (:class:`LazyModule`:
the registries of activations and optimizers hold TensorFlow code, yet the search space validates
names against them, and reading a space must not cost TensorFlow's import, seconds).

A module that moved keeps its former name (:data:`MOVED`): importing ``autodeuq.data`` gives the
module ``autodeuq.table.data`` itself (the same object, so patching either name patches both),
through a finder that :func:`install_aliases` puts first on :data:`sys.meta_path` when ``autodeuq``
is imported. An import by a former name from outside the package is told to use the new one (a
:class:`DeprecationWarning`); the package's own modules are not warned about.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

#: Former module names -> where the modules are now (a package's submodules follow it).
MOVED: dict[str, str] = {
    "autodeuq.errors": "autodeuq.core.errors",
    "autodeuq.registry": "autodeuq.core.registry",
    "autodeuq.fileio": "autodeuq.core.fileio",
    "autodeuq.quiet": "autodeuq.core.quiet",
    "autodeuq.result": "autodeuq.core.result",
    "autodeuq.data": "autodeuq.table.data",
    "autodeuq.preprocess": "autodeuq.table.preprocess",
    "autodeuq.labels": "autodeuq.table.labels",
    "autodeuq.activations": "autodeuq.nn.activations",
    "autodeuq.optimizers": "autodeuq.nn.optimizers",
    "autodeuq.layers": "autodeuq.nn.layers",
    "autodeuq.splice": "autodeuq.nn.splice",
    "autodeuq.ops": "autodeuq.nn.ops",
    "autodeuq.plan": "autodeuq.nn.plan",
    "autodeuq.model": "autodeuq.nn.model",
    "autodeuq.flat": "autodeuq.nn.flat",
    "autodeuq.keras_file": "autodeuq.nn.keras_file",
    "autodeuq.train": "autodeuq.nn.train",
    "autodeuq.space": "autodeuq.search.space",
    "autodeuq.runner": "autodeuq.engine.runner",
    "autodeuq.evaluator": "autodeuq.engine.evaluator",
    "autodeuq.scheduler": "autodeuq.discard.scheduler",
    "autodeuq.options": "autodeuq.app.options",
    "autodeuq.pipeline": "autodeuq.app.pipeline",
    "autodeuq.cli": "autodeuq.app.cli",
    "autodeuq.api": "autodeuq.app.api",
    "autodeuq.plots": "autodeuq.app.plots",
    "autodeuq.classification_plots": "autodeuq.app.classification_plots",
}


def moved_to(name: str) -> str | None:
    """Where the module of former name ``name`` is now, or None when it did not move.

    >>> moved_to("autodeuq.data"), moved_to("autodeuq.evaluator.base"), moved_to("autodeuq.search")
    ('autodeuq.table.data', 'autodeuq.engine.evaluator.base', None)
    """
    head, rest = name, ""
    while head:
        if head in MOVED:
            return MOVED[head] + rest
        head, _, tail = head.rpartition(".")
        rest = f".{tail}{rest}"
    return None


def _importer() -> Any:
    """The frame of the code that asked for the import (the first frame outside the import machinery)."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                 or frame.f_globals.get("__name__", "").startswith("importlib")
                                 or frame.f_globals.get("__name__") == __name__):
        frame = frame.f_back
    return frame


class _FormerNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a former module name (:data:`MOVED`) as the module of its new name."""

    def __init__(self):
        self._specs: dict[str, Any] = {}  # former name -> the module's own spec, while it is being aliased

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("autodeuq.") or moved_to(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = moved_to(spec.name)
        frame = _importer()
        importer = "" if frame is None else frame.f_globals.get("__name__") or ""
        if not (importer == "autodeuq" or importer.startswith("autodeuq.")):
            message = f"{spec.name} moved to {new}: import it from there (the former name will be removed)"
            if frame is None:
                warnings.warn(message, DeprecationWarning, stacklevel=2)
            else:
                warnings.warn_explicit(message, DeprecationWarning, frame.f_code.co_filename, frame.f_lineno,
                                       module=importer, registry=frame.f_globals.setdefault("__warningregistry__", {}))
        module = importlib.import_module(new)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # The module ran under its new name; the import system has just given it the former name's
        # spec: give it its own back.
        module.__spec__ = self._specs.pop(module.__spec__.name)


_FINDER = _FormerNames()


def install_aliases() -> None:
    """Put the finder of former module names first on :data:`sys.meta_path` (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


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
