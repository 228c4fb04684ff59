"""The catalog: the durable, resumable store of every network trained by a search.

One run directory per search::

    run_dir/
        catalog.sqlite       index of evaluations + run metadata (the source of truth)
        catalog.lock         held (flock) by the one process writing the run
        models/<id>.keras    trained network (weights at the best validation loss)
        predictions/<id>.npz validation predictions: ``mean``, ``var`` (float64, original units)
        meta.json            search space, search options, data description, seed, versions
        valid_targets.npy    validation targets (original units)
        results.csv          one row per evaluation, the columns of :meth:`Catalog.to_dataframe`

Only the search driver writes, through the :class:`CatalogWriter` returned by
:meth:`Catalog.create_or_resume`. Anyone may read with :class:`Catalog`, which opens the index
read-only and runs no code from the directory: SQLite, JSON and NumPy (``allow_pickle=False``)
only, and Keras models load with ``safe_mode=True`` after a check that refuses Lambda layers.

Crash safety (SIGKILL or power loss at any instant):

- ``catalog.sqlite`` is the single commit point. An entry is *done* only once its row says so,
  and that row is committed only after its model and predictions files are complete on disk
  (written to a temporary file in the same folder, fsynced, renamed over the final name, folder
  fsynced). So a done row always has both files; a crash before the commit leaves the row
  *running* and it is re-trained on resume, keeping its id (:meth:`CatalogWriter.pending`).
- The run metadata is committed in the same transaction that creates the tables, so a catalog
  is either fully created or not at all.
- ``meta.json``, ``valid_targets.npy`` and ``results.csv`` are exports of the index, replaced
  atomically and rewritten whenever a writer opens the run, so they cannot be half-written and
  catch up after a crash.
- Leftover temporary files (dot-names ending in ``.tmp``) are never read and are removed when a
  writer reopens the run.
- The index keeps each file's SHA-256, so a file damaged or replaced later is reported as
  corrupt, naming its entry, instead of being used.

A run directory is untrusted input (it may be shared, copied from elsewhere or tampered with):

- Every file is written through :func:`autodeuq.core.fileio.atomic_write`: a temporary name created
  exclusively (``O_EXCL | O_NOFOLLOW``), renamed over the final name, so a symbolic link planted
  at either name is replaced, never written through; the lock file is opened with
  ``O_NOFOLLOW`` and a writer refuses linked ``models/``, ``predictions/`` or database files.
- Model and predictions files must be regular files inside the run directory and match the
  checksum in the index (an entry without one is refused); archives are checked against size
  caps before anything is decompressed.
- The index must have the expected tables and columns (no view stands in for a table, a writer
  refuses triggers), and every query is aborted after :data:`QUERY_TIME_LIMIT` seconds.
- The test set and, for one-feature problems, the training points are stored in the index at
  creation, so reports never re-read the user's data files.

The cross-fitted ensemble stage adds fold entries (:mod:`autodeuq.catalog.folds`): networks of a
search entry's configuration trained on all but one fold of the training and validation rows, in
the index's ``folds`` table, their files beside the search's under ids from 2^40.

The package has these modules, one job each, and re-exports their public names:

- :mod:`autodeuq.catalog.artifacts`: safe reading and encoding of the files (``.keras`` checks
  and loading, checksum-verified reads, ``.npy`` / JSON encoding, size caps).
- :mod:`autodeuq.catalog.schema`: the SQLite index (tables, format version and migrations, the
  time-bounded connection) and the writer's lock.
- :mod:`autodeuq.catalog.layout`: the run directory's file names and the columns of its table.
- :mod:`autodeuq.catalog.store`: :class:`Catalog` and :class:`CatalogWriter`, the reader and the
  writer of a run directory, each assembled from the modules of its jobs:
  :mod:`autodeuq.catalog.predictions` (the entries' model files and validation predictions),
  :mod:`autodeuq.catalog.views` (early discarding's views) and :mod:`autodeuq.catalog.writer`
  (submitting and recording).
- :mod:`autodeuq.catalog.folds`: the fold entries' table and their writer.
"""
from autodeuq.catalog.artifacts import (
    MAX_ARRAY_BYTES,
    MAX_MODEL_BYTES,
    MAX_MODEL_JSON_BYTES,
    CatalogError,
    checked_keras_config,
    load_keras_model,
    load_network,
    read_verified,
)
from autodeuq.catalog.schema import DB_FILES, DB_NAME, FORMAT, FORMAT_VERSION, LOCK_NAME, QUERY_TIME_LIMIT
from autodeuq.catalog.store import (
    CSV_NAME,
    DISCARDING_DECISION,
    LEADING_COLUMNS,
    META_NAME,
    MODELS_DIR,
    MUTATED_FROM,
    PLACEMENT_COLUMNS,
    PREDICTIONS_DIR,
    PROMOTED_FROM,
    STATUSES,
    TARGETS_NAME,
    TRAILING_COLUMNS,
    Catalog,
    CatalogWriter,
    ValidationPredictions,
)

__all__ = [
    "CSV_NAME", "DB_FILES", "DB_NAME", "DISCARDING_DECISION", "FORMAT", "FORMAT_VERSION", "LEADING_COLUMNS",
    "LOCK_NAME", "MAX_ARRAY_BYTES", "MAX_MODEL_BYTES", "MAX_MODEL_JSON_BYTES", "META_NAME", "MODELS_DIR",
    "MUTATED_FROM", "PLACEMENT_COLUMNS", "PREDICTIONS_DIR", "PROMOTED_FROM", "QUERY_TIME_LIMIT", "STATUSES",
    "TARGETS_NAME", "TRAILING_COLUMNS", "Catalog", "CatalogError", "CatalogWriter", "ValidationPredictions",
    "checked_keras_config", "load_keras_model", "load_network", "read_verified",
]
