"""Renamed keyword arguments keep working for one release, with a ``DeprecationWarning``."""
from __future__ import annotations

import functools
import warnings

__all__ = ["renamed_keywords"]


def renamed_keywords(**renames: str):
    """Decorator: accept each old keyword (``old="new"``) as the new one, warning that it is deprecated.

    Giving both the old and the new name is a ``TypeError``, as for any keyword given twice.
    """
    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{function.__qualname__}() got both {old}= and its new name {new}=")
                    warnings.warn(f"{function.__qualname__}(): {old}= is deprecated and will be removed in the next "
                                  f"release; use {new}=", DeprecationWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return wrapper

    return decorate
