"""The activation functions of the search space: name -> :class:`Activation`.

:data:`ACTIVATIONS` is the one table of them: the search space accepts exactly its names, the
networks give Keras the activation it names, and the compiled trainer's plain-ops program runs
its forward and backward (:mod:`autodeuq.nn.ops`). Adding an activation is one entry here.

Each gradient is the kernel TensorFlow's own gradient of the Keras function uses, so the
numbers agree with automatic differentiation (checked in ``tests/test_model.py``).
TensorFlow is imported on first use (see :mod:`autodeuq._lazy`).
"""
from __future__ import annotations

import importlib
import math
from collections.abc import Callable

from autodeuq._lazy import keras, tf

_SQRT_2PI = math.sqrt(2.0 * math.pi)


class Activation:
    """One activation function: what Keras layers are given, its forward and its gradient.

    Parameters
    ----------
    name : str
        The name used in search spaces, and the Keras activation of that name.
    gradient : callable
        ``gradient(dy, z, a) -> dL/dz`` from the upstream gradient ``dy``, the pre-activation
        ``z`` and the activation ``a``.
    keras_object : str, optional
        ``"module:attribute"`` of a registered serializable function that Keras layers get
        instead of the built-in of the same name.
    """

    def __init__(self, name: str, gradient: Callable, keras_object: str | None = None):
        self.name = name
        self.gradient = gradient
        self.keras_object = keras_object

    def keras(self):
        """The ``activation=`` argument of a Keras layer (a built-in's name or a function)."""
        if self.keras_object is None:
            return self.name
        module, attribute = self.keras_object.split(":")
        return getattr(importlib.import_module(module), attribute)

    def forward(self, z):
        """The activation of ``z``, by the same function as the Keras layer."""
        if self.name == "linear":
            return z
        return keras.activations.get(self.keras())(z)

    def __repr__(self):
        return f"Activation({self.name!r})"


def _gelu_grad(dy, z, a):
    # d/dz of Keras' exact gelu, 0.5 z (1 + erf(z / sqrt 2))
    return dy * (0.5 * (1.0 + tf.math.erf(z / 1.4142135623730951)) + z * tf.exp(-0.5 * tf.square(z)) / _SQRT_2PI)


def _swish_grad(dy, z, a):
    s = tf.sigmoid(z)
    return dy * s + tf.raw_ops.SigmoidGrad(y=s, dy=dy * z)


ACTIVATIONS: dict[str, Activation] = {a.name: a for a in (
    Activation("elu", lambda dy, z, a: tf.raw_ops.EluGrad(gradients=dy, outputs=a)),
    Activation("gelu", _gelu_grad),
    # relu6(z + 3) / 6
    Activation("hard_sigmoid", lambda dy, z, a: tf.raw_ops.Relu6Grad(gradients=dy / 6.0, features=a * 6.0)),
    Activation("linear", lambda dy, z, a: dy),
    Activation("relu", lambda dy, z, a: tf.raw_ops.ReluGrad(gradients=dy, features=a)),
    Activation("selu", lambda dy, z, a: tf.raw_ops.SeluGrad(gradients=dy, outputs=a)),
    Activation("sigmoid", lambda dy, z, a: tf.raw_ops.SigmoidGrad(y=a, dy=dy)),
    Activation("softplus", lambda dy, z, a: dy * tf.sigmoid(z)),
    Activation("softsign", lambda dy, z, a: tf.raw_ops.SoftsignGrad(gradients=dy, features=z)),
    # Keras' swish is tf.nn.silu, a tf.custom_gradient that pins every traced graph (autodeuq.nn.layers.swish)
    Activation("swish", _swish_grad, keras_object="autodeuq.nn.layers:swish"),
    Activation("tanh", lambda dy, z, a: tf.raw_ops.TanhGrad(y=a, dy=dy)),
)}
"""Every activation a search space may name (one entry per function)."""


def get(name: str) -> Activation:
    """The activation called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; known: {sorted(ACTIVATIONS)}") from None
