"""Keras 3 networks of the joint search space (Egele et al. 2022; Egele 2024, Figure 6.1).

A configuration's architecture vector becomes a functional model through its plan
(:class:`autodeuq.nn.plan.NetworkPlan`: the cells, their skips and the Gaussian head). Two models
are involved:

* the *core* network (:func:`build_network`) works in standardized units; it is what the
  trainer optimizes;
* the *scaled* network (:func:`with_scaling`) wraps the core between :class:`Standardize` and
  :class:`Unstandardize`, so it takes inputs and returns means and variances in the original
  units. This is the model that is saved and handed to users. A training writes its file
  without building either (:func:`autodeuq.nn.keras_file.network_bytes`); the file reloads to this
  model.

The custom layers are registered serializable layers (:mod:`autodeuq.nn.layers`, imported here), so
a saved ``.keras`` file reloads with ``keras.models.load_model(path)`` in safe mode once this
module has been imported.
"""
from __future__ import annotations

import functools
import os
import tempfile
import warnings

import keras
import numpy as np

from autodeuq.nn.layers import (  # importing autodeuq.nn.layers registers every custom layer
    Standardize,
    Unstandardize,
)
from autodeuq.nn.plan import CORE_NAME, INPUT_NAME, NetworkPlan

SCALED_NAME = "autodeuq_network"  #: the saved model's name
STANDARDIZE_NAME = "standardize"
UNSTANDARDIZE_NAME = "unstandardize"


def build_network(space, arch, n_features: int, n_targets: int, name: str = CORE_NAME,
                  n_classes: int | None = None) -> keras.Model:
    """The core network of an architecture vector, in standardized units.

    Parameters
    ----------
    space : SearchSpace
        Decodes ``arch`` (cells, skips, merge activation).
    arch : sequence of int
        The architecture vector of a configuration.
    n_features, n_targets : int
        Input width and number of targets ``T``.

    Returns
    -------
    keras.Model
        Input ``(n, n_features)`` -> output ``(n, 2T)``: ``[:, :T]`` means, ``[:, T:]`` variances.

    Examples
    --------
    >>> space = load_space("toy")
    >>> model = build_network(space, space.sample_arch(np.random.default_rng(0)), 1, 1)
    >>> model.output_shape
    (None, 2)
    """
    return NetworkPlan.from_arch(space, arch, n_features, n_targets, n_classes).build_model(name)


def with_scaling(core: keras.Model, scaler, name: str = SCALED_NAME, classifier: bool = False) -> keras.Model:
    """Wrap a core network so it takes and returns original units.

    Parameters
    ----------
    core : keras.Model
        From :func:`build_network` (shares its weights with the returned model).
    scaler : Standardizer
        ``x_mean``, ``x_std``, ``y_mean``, ``y_std`` of the training split.

    classifier : bool
        The core outputs logits: they are returned as they are.

    Returns
    -------
    keras.Model
        Original-unit input ``(n, d)`` -> original-unit ``(n, 2T)`` (means, variances), or a
        classifier's logits.
    """
    n_features = core.input_shape[-1]
    inputs = keras.Input(shape=(n_features,), name=INPUT_NAME)
    z = Standardize(scaler.x_mean, scaler.x_std, name=STANDARDIZE_NAME)(inputs)
    out = core(z)
    if not classifier:
        out = Unstandardize(scaler.y_mean, scaler.y_std, name=UNSTANDARDIZE_NAME)(out)
    return keras.Model(inputs, out, name=name)


def split_output(out) -> tuple[np.ndarray, np.ndarray]:
    """``(n, 2T)`` network output -> ``(mean, var)``, each ``(n, T)``."""
    out = np.asarray(out)
    t = out.shape[-1] // 2
    return out[:, :t], out[:, t:]


def count_params(model: keras.Model) -> int:
    """Number of trainable parameters."""
    return int(sum(int(np.prod(v.shape)) for v in model.trainable_weights))


def _remember_keras_skipsets() -> None:
    """Make Keras' saver compute each kind of object's attribute skip-set once per process.

    For every layer it saves, Keras 3's saver (``keras.src.saving.saving_lib``) asks
    ``get_attr_skipset`` for the attributes a bare ``Layer`` has, which builds a throwaway
    ``Layer`` each time: the function stores its result under one global key and reads it under
    another, so it never finds it. That is about a third of the time of saving one of the search's
    networks (``benchmarks/results/training_speed.md``). The set depends only on the kind of
    object, and the saver only reads it, so it is memoized, once, when this module is imported.
    Nothing changes if Keras renames the function (the saver then runs as it is).
    """
    try:
        from keras.src.saving import saving_lib
    except ImportError:  # pragma: no cover - another Keras layout
        return
    original = getattr(saving_lib, "get_attr_skipset", None)
    if original is None or getattr(original, "autodeuq_memo", False):
        return
    remembered = functools.lru_cache(maxsize=None)(original)
    remembered.autodeuq_memo = True
    saving_lib.get_attr_skipset = remembered


_remember_keras_skipsets()


def model_to_bytes(model: keras.Model) -> bytes:
    """The model's ``.keras`` file content."""
    fd, path = tempfile.mkstemp(suffix=".keras")
    os.close(fd)
    try:
        with warnings.catch_warnings():
            # Keras' saver calls np.array(tf.Variable), which numpy 2 flags; harmless.
            warnings.filterwarnings("ignore", message="__array__ implementation doesn't accept a copy",
                                    category=DeprecationWarning)
            model.save(path)
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)


def model_from_bytes(data: bytes) -> keras.Model:
    """Inverse of :func:`model_to_bytes` (loaded in Keras' safe mode)."""
    fd, path = tempfile.mkstemp(suffix=".keras")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return keras.models.load_model(path, safe_mode=True)
    finally:
        os.unlink(path)
