"""Where an ensemble's members come from, and the ensemble's errors: the part of the ensemble stage
that building, saving and loading share with the predictive ensemble (:mod:`autodeuq.ensemble.predictive`)
without importing it.

A *member source* is a catalog (:class:`CatalogMembers`: the run directory a search filled,
possibly with some members replaced by their refits) or a self-contained folder written by
``Ensemble.save(folder, self_contained=True)`` (:class:`ExportedMembers`); :func:`ensemble_class`
is the class of a run's ensemble, its task's.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from autodeuq.catalog import Catalog, CatalogError, load_network
from autodeuq.core.errors import AutoDEUQError
from autodeuq.ensemble.inputs import checked_preprocessor
from autodeuq.table.data import DataError
from autodeuq.tasks import get_task

MEMBERS_DIR = "members"  #: the folder of a self-contained export that holds its members' model files


class EnsembleError(AutoDEUQError, ValueError):
    """An ensemble cannot be built or saved as asked: the message says which file or folder and why."""


class ManifestError(EnsembleError):
    """An ensemble manifest cannot be used: the message names the file and the entry at fault."""


class CatalogMembers:
    """Ensemble members read from a catalog: its model files and its data description.

    Parameters
    ----------
    run_dir : path
        The run directory; kept as an absolute path, so a pickled ensemble (or estimator)
        reopens it from any working directory.
    refitted : dict of int to bytes, optional
        Members whose network is a refit (:mod:`autodeuq.ensemble.refit`): the ``.keras``
        archive used instead of the catalog's model of that entry.

    Attributes
    ----------
    run_dir : Path
    catalog : Catalog
    refitted : dict of int to bytes
    feature_names, target_names : list of str
    standardization : dict or None
        The training split's ``x_mean``, ``x_std`` (and ``y_mean``, ``y_std``).
    preprocessor : TablePreprocessor or None
        How a table's columns become ``feature_names`` (None: the features are the columns).
    labels : Labels or None
        A classification run's classes.
    """

    refitted: Mapping[int, bytes] = MappingProxyType({})  # also the value of sources pickled before refits
    labels = None  # also the value of sources pickled before classification

    def __init__(self, run_dir, refitted: Mapping[int, bytes] | None = None):
        # An open Catalog is used as it is: the ensemble stage opens its catalog once.
        opened = run_dir if isinstance(run_dir, Catalog) else None
        self.run_dir = Path(os.path.abspath(run_dir.run_dir if opened is not None else run_dir))
        self.catalog = opened if opened is not None else Catalog(self.run_dir)
        if refitted:
            self.refitted = {int(i): bytes(b) for i, b in refitted.items()}
        data = self.catalog.meta.get("data", {})
        self.feature_names = list(data.get("features", []))
        self.target_names = list(data.get("targets", []))
        self.standardization = data.get("standardization")
        self.labels = self.catalog.labels
        try:
            self.preprocessor = checked_preprocessor(data.get("preprocessing"), self.feature_names)
        except DataError as exc:
            raise CatalogError(f"{self.run_dir}: damaged catalog: {exc}") from None

    def __getstate__(self):
        # The catalog pickles as the absolute run directory it is reopened from: the one given may
        # have been opened by a relative path (the ensemble stage's, autodeuq.app.pipeline).
        return {**self.__dict__, "catalog": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.__dict__.get("catalog") is None:
            self.catalog = Catalog(self.run_dir)

    @property
    def location(self) -> Path:
        return self.run_dir

    def model_bytes(self, entry_id: int) -> bytes:
        """The bytes of a member's ``.keras`` archive: its refit's, else the catalog's checked file."""
        if entry_id in self.refitted:
            return self.refitted[entry_id]
        return self.catalog.model_bytes(entry_id)

    def load_network(self, entry_id: int, dtype: str = "float32"):
        """The member's network (:func:`autodeuq.catalog.load_network`): its refit, else the
        catalog's model, whose file is checked as :meth:`Catalog.load_model` checks it."""
        if entry_id in self.refitted:
            return load_network(self.refitted[entry_id], f"{self.run_dir}: refitted member {entry_id}", dtype)
        where = f"{self.run_dir}: entry {entry_id}: model file {self.catalog.model_path(entry_id)}"
        return load_network(self.catalog.model_bytes(entry_id), where, dtype)


class ExportedMembers:
    """Ensemble members of a self-contained folder: their checked model bytes, held in memory.

    Built by :func:`load_ensemble` once every member file has matched its SHA-256 and passed
    :func:`autodeuq.catalog.checked_keras_config`; models are built from these bytes (never
    from the files again), and an ensemble pickled with them needs no folder.

    Parameters
    ----------
    folder : Path
        Where the members were read from (named in messages).
    models : dict of int to bytes
        Each member's ``.keras`` archive.
    feature_names, target_names : list of str
    standardization : dict or None
    preprocessor : TablePreprocessor or None
    labels : Labels or None
    """

    run_dir = None
    catalog = None
    labels = None  # also the value of exports loaded before classification

    def __init__(self, folder, models: dict, feature_names, target_names, standardization, preprocessor=None,
                 labels=None):
        self.folder = Path(folder)
        self.models = dict(models)
        self.feature_names = list(feature_names)
        self.target_names = list(target_names)
        self.standardization = standardization
        self.preprocessor = preprocessor
        self.labels = labels

    @property
    def location(self) -> Path:
        return self.folder

    def model_bytes(self, entry_id: int) -> bytes:
        return self.models[entry_id]

    def load_network(self, entry_id: int, dtype: str = "float32"):
        """The member's network, through :func:`autodeuq.catalog.load_network`."""
        try:
            where = f"{self.folder}: member {entry_id} ({MEMBERS_DIR}/{entry_id}.keras)"
            return load_network(self.models[entry_id], where, dtype)
        except CatalogError as exc:
            raise ManifestError(str(exc)) from None


def ensemble_class(task, base=None) -> type:
    """The ensemble class of a run's task (a name or a :class:`~autodeuq.tasks.base.Task`): the
    task's (:attr:`Task.ensemble <autodeuq.tasks.base.Task.ensemble>`: :class:`~autodeuq.ensemble.Ensemble` for
    regression, :class:`~autodeuq.ensemble.classifier.ClassifierEnsemble` for classification), or
    ``base`` when it is a subclass of the task's."""
    kind = get_task(task).part("ensemble")
    return base if base is not None and issubclass(base, kind) else kind
