"""The root of autodeuq's errors, dependency-free so that any layer may import it.

Every error autodeuq raises on purpose (bad data, a bad space, an unusable run directory, a
failed search, an unreachable Ray cluster, a bad parameter) is an :class:`AutoDEUQError`; each
also subclasses the built-in exception callers caught before it existed (``ValueError`` for bad
input, ``RuntimeError`` for a run that cannot go on). An exception that is not an
``AutoDEUQError`` is a bug.
"""
from __future__ import annotations

__all__ = ["AutoDEUQError", "AutoDEUQWarning", "CatalogWarning", "DataError", "ParameterError", "ParameterWarning",
           "SpaceError"]


class AutoDEUQError(Exception):
    """An error autodeuq raises on purpose: its message says what is wrong and what to do.

    Parameters
    ----------
    message : str
    parameters : tuple of str, optional
        Names of the parameters (of :class:`~autodeuq.AutoDEUQRegressor` and the functions it
        calls) that the user can change to fix the problem; a front end names them its own way
        (the command line by its options). Messages themselves name no command-line option.
    """

    def __init__(self, *args, parameters: tuple[str, ...] = ()):
        super().__init__(*args)
        self.parameters = tuple(parameters)


class ParameterError(AutoDEUQError, ValueError, TypeError):
    """A parameter's value is refused before any work starts.

    ``str(exc)`` is ``"<parameter> <requirement>, got <value>"``; the parts are kept apart
    (``parameter``, ``requirement``, ``value``) so that a front end can name the parameter its
    own way.

    A requirement that names other parameters (``refers``) writes each in braces
    (``"applies to {search} agebo"``): ``str(exc)`` shows the plain names, and :meth:`describe`
    lets a front end show its own (the command line, its options).
    """

    def __init__(self, parameter: str, requirement: str, value, refers: tuple[str, ...] = ()):
        self.parameter, self.value, self.refers, self.template = parameter, value, tuple(refers), requirement
        self.requirement = self.describe(str)
        super().__init__(f"{parameter} {self.requirement}, got {value!r}", parameters=(parameter, *refers))

    def describe(self, name_of) -> str:
        """The requirement, with the parameters it refers to named by ``name_of``."""
        return self.template.format_map({r: name_of(r) for r in self.refers}) if self.refers else self.template

    def __reduce__(self):
        return type(self), (self.parameter, self.template, self.value, self.refers)


class AutoDEUQWarning(UserWarning):
    """A warning autodeuq gives on purpose: the message says what happened and what it means.

    The command line prints each as one line (``autodeuq: warning: ...``), without the source
    line Python's default display adds.
    """


class CatalogWarning(AutoDEUQWarning, RuntimeWarning):
    """Something in the catalog could not be used or written as expected (entries skipped, arrays
    too large to keep, the CSV export not rewritten); the message says which and what follows."""


class ParameterWarning(AutoDEUQWarning):
    """A parameter was given a value that the other parameters make unused: it is ignored.

    ``str(warning)`` is ``"<parameter> <requirement>: <value> is ignored"``; like
    :class:`ParameterError`, the requirement names the parameters it ``refers`` to in braces, and
    :meth:`line` lets a front end name them its own way.
    """

    def __init__(self, parameter: str, requirement: str, value, refers: tuple[str, ...] = ()):
        self.parameter, self.value, self.refers, self.template = parameter, value, tuple(refers), requirement
        super().__init__(self.line(str))

    def line(self, name_of) -> str:
        """The warning with the parameters named by ``name_of``."""
        requirement = self.template.format_map({r: name_of(r) for r in self.refers}) if self.refers else self.template
        value = f"{self.value:g}" if isinstance(self.value, float) else repr(self.value)
        return f"{name_of(self.parameter)} {requirement}: {value} is ignored"

    def __reduce__(self):
        return type(self), (self.parameter, self.template, self.value, self.refers)


class DataError(AutoDEUQError, ValueError):
    """Bad input data: the message says which file, which column and what is wrong.

    Raised by :mod:`autodeuq.table.data` and :mod:`autodeuq.table.preprocess` (and importable from both)."""


class SpaceError(AutoDEUQError, ValueError):
    """A search-space file or a configuration does not describe a valid space/point.

    Raised by :mod:`autodeuq.search.space` (and importable from there); here so that the trainer, below the
    search space, can catch it."""
