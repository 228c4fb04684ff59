"""Ensembles of catalog models: selection (and, in other modules, prediction)."""

from autodeuq.ensemble.selection import select

__all__ = ["select"]
