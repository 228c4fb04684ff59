"""The serializable Keras layers of autodeuq's networks (and the activation they need).

Every custom layer is registered with ``get_config`` (no ``Lambda``), so a saved ``.keras`` file
reloads with ``keras.models.load_model(path)`` in safe mode once this module has been imported
(importing :mod:`autodeuq.nn.model` does). The registered names (``autodeuq>GaussianHead``...)
are what saved files refer to: keep them.
"""
from __future__ import annotations

import keras
import numpy as np
from keras import layers, ops

VARIANCE_FLOOR = 1e-6


def _as_list(values) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float64).reshape(-1)]


@keras.saving.register_keras_serializable(package="autodeuq")
class Standardize(layers.Layer):
    """``x -> (x - mean) / std`` with per-column constants stored in the config.

    Parameters
    ----------
    mean, std : sequence of float
        Per-feature training mean and standard deviation (``std > 0``).
    """

    def __init__(self, mean, std, **kwargs):
        super().__init__(**kwargs)
        self.mean = _as_list(mean)
        self.std = _as_list(std)

    def call(self, x):
        mean = ops.convert_to_tensor(self.mean, dtype=x.dtype)
        std = ops.convert_to_tensor(self.std, dtype=x.dtype)
        return (x - mean) / std

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "mean": self.mean, "std": self.std}


def gaussian_head(raw, n_targets: int, floor: float = VARIANCE_FLOOR):
    """``[mu, softplus(raw_var) + floor]`` from a raw ``(n, 2T)`` output."""
    mu, raw_var = raw[:, :n_targets], raw[:, n_targets:]
    return ops.concatenate([mu, ops.softplus(raw_var) + floor], axis=-1)


@keras.saving.register_keras_serializable(package="autodeuq")
class GaussianHead(layers.Layer):
    """Raw ``(n, 2T)`` output -> ``[mu, softplus(raw_var) + floor]`` (positive variances).

    Parameters
    ----------
    n_targets : int
        ``T``; the first ``T`` columns are the means, the last ``T`` the raw variances.
    floor : float
        Added to the softplus so the variance never reaches 0 (keeps the NLL finite).
    """

    def __init__(self, n_targets: int, floor: float = VARIANCE_FLOOR, **kwargs):
        super().__init__(**kwargs)
        self.n_targets = int(n_targets)
        self.floor = float(floor)

    def call(self, raw):
        return gaussian_head(raw, self.n_targets, self.floor)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "n_targets": self.n_targets, "floor": self.floor}


def unstandardize(out, mean, std):
    """``[mu * std + mean, var * std**2]`` from a standardized ``(n, 2T)`` ``[mu, var]``; ``mean``
    and ``std`` are tensors of length ``T``."""
    t = int(mean.shape[0])
    mu, var = out[:, :t], out[:, t:]
    return ops.concatenate([mu * std + mean, var * ops.square(std)], axis=-1)


@keras.saving.register_keras_serializable(package="autodeuq")
class Unstandardize(layers.Layer):
    """Standardized ``[mu, var]`` -> original units ``[mu * y_std + y_mean, var * y_std**2]``.

    Parameters
    ----------
    mean, std : sequence of float
        Per-target training mean and standard deviation.
    """

    def __init__(self, mean, std, **kwargs):
        super().__init__(**kwargs)
        self.mean = _as_list(mean)
        self.std = _as_list(std)

    def call(self, out):
        return unstandardize(out, ops.convert_to_tensor(self.mean, dtype=out.dtype),
                             ops.convert_to_tensor(self.std, dtype=out.dtype))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "mean": self.mean, "std": self.std}


@keras.saving.register_keras_serializable(package="autodeuq", name="swish")
def swish(x):
    """``x * sigmoid(x)``, by plain ops.

    Keras' ``swish`` calls ``tf.nn.silu``, a ``tf.custom_gradient``: every trace of its gradient
    registers an entry in TensorFlow's process-global gradient registry that keeps the whole
    traced graph alive, so a long-lived worker would grow with every network using it.
    """
    return x * ops.sigmoid(x)


# The module a saved .keras file records for these objects (its config.json names it beside their
# registered names, by which Keras finds them): part of the file format, so it stays the module they
# were defined in when the format was set, importable by that name (autodeuq._lazy.MOVED), and a
# file written now is byte for byte the one written before the layers moved to autodeuq.nn.
SAVED_MODULE = "autodeuq.layers"
for _saved in (Standardize, GaussianHead, Unstandardize, swish):
    _saved.__module__ = SAVED_MODULE
del _saved
