"""Name tables whose entries are imported on first use.

A :class:`Registry` maps names to implementations, like a dict, but an implementation may be given
as a ``"module:attribute"`` string and is imported only when it is looked up. The names alone (the
command line's choices, the parameter checks) then cost no import of what they name: the
searchers' module pulls in scikit-learn, the evaluators' Ray.

>>> table = Registry({"sqrt": "math:sqrt"})
>>> list(table)
['sqrt']
>>> table["sqrt"](4.0)
2.0
>>> table["cube"] = lambda x: x**3
>>> sorted(table)
['cube', 'sqrt']
"""
from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from autodeuq._lazy import resolve


class Registry(MutableMapping):
    """``name -> implementation``, an implementation given as ``"module:attribute"`` imported when
    first looked up (and kept), any other value stored as it is; iteration order is insertion
    order, and iterating, ``len`` and ``in`` import nothing."""

    def __init__(self, entries=()):
        self._entries: dict[str, Any] = dict(entries)

    def __getitem__(self, name):
        value = self._entries[name]
        if isinstance(value, str):
            value = self._entries[name] = resolve(value)
        return value

    def __setitem__(self, name, value):
        self._entries[name] = value

    def __delitem__(self, name):
        del self._entries[name]

    def __iter__(self):
        return iter(self._entries)

    def __len__(self):
        return len(self._entries)

    def __contains__(self, name):
        return name in self._entries

    def __repr__(self):
        return f"Registry({list(self._entries)!r})"
