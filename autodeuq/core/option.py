"""One option of a run and the constraints of its values: what every extension point declares
its options with.

An :class:`Option` is a name, a group (the configuration it belongs to), a default, a
:class:`Constraint` (which values it takes, and how the command line's text is read) and a help
text; :data:`autodeuq.app.options.OPTIONS` assembles the table of a run from the options of each
part (the early-discarding rules declare theirs: :attr:`autodeuq.discard.base.DiscardRule.options`),
and everything the front ends show or check comes from it.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autodeuq.core.errors import ParameterError

__all__ = ["TEN_YEARS", "Boolean", "Constraint", "Fraction", "Integer", "Json", "Names", "OneOf", "Option", "Path",
           "Real", "Text"]

#: Seconds in ten years: the largest time limit that is a setting rather than a slip of the keyboard.
TEN_YEARS = 10 * 365 * 86400.0



# ----------------------------------------------------------------------------- constraints
class Constraint:
    """What values an option takes: :meth:`check` refuses others with a :class:`ParameterError`;
    :meth:`parse` reads the command line's text; :attr:`choices` (if any) are argparse's."""

    @property
    def choices(self) -> tuple | None:
        return None

    def check(self, name: str, value) -> None:
        raise NotImplementedError

    def parse(self, text: str):
        return text

    def describe(self) -> str:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Integer(Constraint):
    """An integer from ``minimum`` to ``maximum``; ``auto`` also accepts ``"auto"``, ``optional`` None."""

    minimum: int
    maximum: int
    auto: bool = False
    optional: bool = False

    def check(self, name, value):
        if (self.optional and value is None) or (self.auto and value == "auto"):
            return
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < self.minimum:
            prefix = '"auto" or ' if self.auto else ""
            raise ParameterError(name, f"must be {prefix}an integer >= {self.minimum}", value)
        if value > self.maximum:
            raise ParameterError(name, f"must be an integer <= {self.maximum}", value)

    def parse(self, text):
        if self.auto and text == "auto":
            return text
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {'auto or ' if self.auto else ''}an integer, got {text!r}") \
                from None

    def describe(self):
        return (('"auto" or ' if self.auto else "") + f"int in [{self.minimum}, {self.maximum}]"
                + (" or None" if self.optional else ""))


def _parse_number(text: str, what: str) -> float:
    """The command line's ``text`` as a float; an argparse error saying it must be ``what``."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


@dataclasses.dataclass(frozen=True)
class Real(Constraint):
    """A number in ``(minimum, maximum]`` (``[minimum, maximum]`` unless ``strict``), or None
    unless not ``optional``."""

    minimum: float
    maximum: float
    strict: bool = True
    optional: bool = True
    auto: bool = False

    def check(self, name, value):
        if (value is None and self.optional) or (self.auto and value == "auto"):
            return
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and (
            value > self.minimum if self.strict else value >= self.minimum)
        if not ok:
            prefix = '"auto" or a number ' if self.auto else ""
            raise ParameterError(name, f"must be {prefix}{'>' if self.strict else '>='} {self.minimum:g}", value)
        if not value <= self.maximum:  # also infinity and NaN
            raise ParameterError(name, f"must be a finite number <= {self.maximum:g}", value)

    def parse(self, text):
        if self.auto and text == "auto":
            return text
        return _parse_number(text, "auto or a number" if self.auto else "a number")

    def describe(self):
        return (('"auto" or ' if self.auto else "") + f"float {'>' if self.strict else '>='} {self.minimum:g}"
                + (" or None" if self.optional else ""))


@dataclasses.dataclass(frozen=True)
class Fraction(Constraint):
    """A number strictly between 0 and 1."""

    def check(self, name, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < 1:
            raise ParameterError(name, "must be a number strictly between 0 and 1", value)

    def parse(self, text):
        return _parse_number(text, "a number")

    def describe(self):
        return "float in (0, 1)"


class OneOf(Constraint):
    """One of the names ``values`` (a sequence, or a callable giving it: read when first needed)."""

    def __init__(self, values: Sequence[str] | Callable[[], Sequence[str]]):
        self._values = values

    @property
    def choices(self) -> tuple:
        return tuple(self._values() if callable(self._values) else self._values)

    def check(self, name, value):
        if not isinstance(value, str) or value not in self.choices:
            raise ParameterError(name, f"must be one of {list(self.choices)}", value)

    def describe(self):
        return "{" + ", ".join(repr(v) for v in self.choices) + "}"


class Boolean(Constraint):
    """True or False; ``auto`` also accepts ``"auto"``."""

    def __init__(self, auto: bool = False):
        self.auto = auto

    def check(self, name, value):
        import numpy as np

        if isinstance(value, (bool, np.bool_)) or (self.auto and isinstance(value, str) and value == "auto"):
            return
        raise ParameterError(name, 'must be True, False or "auto"' if self.auto else "must be a bool", value)

    def describe(self):
        return '{"auto", True, False}' if self.auto else "bool"


class Text(Constraint):
    """A string, or None."""

    def check(self, name, value):
        if value is not None and not isinstance(value, str):
            raise ParameterError(name, "must be None or a string", value)

    def describe(self):
        return "str or None"


class Names(Constraint):
    """A sequence of strings, or None: on the command line given one at a time (the option
    repeated), or with a ``separator`` several at once (``A,B``; the option may still repeat)."""

    def __init__(self, separator: str | None = None):
        self.separator = separator

    def check(self, name, value):
        if value is None:
            return
        if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
            raise ParameterError(name, "must be None or a list of column names", value)

    def parse(self, text):
        if self.separator is None:
            return text
        names = text.split(self.separator)
        if not all(names):
            raise argparse.ArgumentTypeError(f"must be column names separated by {self.separator!r}, got {text!r}")
        return names

    def describe(self):
        return "list of str or None"


class Path(Constraint):
    """A file-system path (str or os.PathLike), or None."""

    def check(self, name, value):
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise ParameterError(name, "must be None or a path", value)

    def describe(self):
        return "path or None"


class Json(Constraint):
    """A JSON value (written as JSON text on the command line) of type ``kind``, or None."""

    def __init__(self, kind: type, what: str):
        self.kind, self.what = kind, what

    def check(self, name, value):
        if value is not None and not isinstance(value, self.kind):
            raise ParameterError(name, f"must be None or {self.what}", value)

    def parse(self, text):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"not valid JSON ({exc})") from None

    def describe(self):
        return f"{self.kind.__name__} or None"


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a run.

    ``group`` is the configuration it belongs to ("table", "search", "evaluation" (part of the
    search's configuration) or "ensemble"); ``default_text`` says what the default means when the
    value alone does not (the command line's help shows it); ``applies`` (given the other values)
    says whether the option is used, ``depends`` which option it reads, and ``unused`` what a
    non-default value gets when it is not: ``"refuse"`` (an error) or ``"ignore"`` (a
    :class:`~autodeuq.core.errors.ParameterWarning` that says so). Every value is checked against its
    constraint whether or not the option applies.
    """

    name: str
    group: str
    default: Any
    constraint: Constraint
    help: str
    flag: str | None = None
    metavar: str | None = None
    default_text: str | None = None
    applies: Callable[[Mapping], bool] | None = None
    unused: str = "ignore"
    requirement: str = ""  #: what ``applies`` asks for, in the words of an error (with {option} fields)
    depends: str = "search"  #: the option ``applies`` reads
    #: The name of the library parameter the option sets, when not its own (``ensemble_size`` sets
    #: ``Ensemble.from_catalog``'s ``size``): an error raised there names it, and a front end shows
    #: the option instead (:func:`option_of`).
    parameter: str | None = None

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def help_text(self, name_of: Callable[[str], str]) -> str:
        """The help with other options named by ``name_of`` (a flag, or a parameter name)."""
        return self.help.format_map(_Names(name_of))

    def shown_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        return "none" if self.default is None else self.default_literal(str)

    def default_literal(self, show=repr) -> str:
        """The default as written in the help and the documentation (a third as 1/3: the validation fraction)."""
        return "1/3" if self.default == 1.0 / 3.0 else show(self.default)


class _Names(dict):
    def __init__(self, name_of):
        super().__init__()
        self.name_of = name_of

    def __missing__(self, key):
        return self.name_of(key)
