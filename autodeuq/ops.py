"""The ops of a network: each one a Keras layer together with its forward and backward on plain ops.

An op pairs, as a Keras layer pairs ``call`` and ``get_config`` (or a PyTorch
``autograd.Function`` its forward and backward):

* :meth:`Op.layer`: the Keras layer of the saved model (its name is the op's name);
* :meth:`Op.forward`: the same computation on plain TensorFlow ops, given the layer's weights,
  for the compiled trainer (:class:`autodeuq.plan.NetworkProgram`);
* :meth:`Op.backward`: the gradients of a loss w.r.t. the op's inputs and weights from its
  gradient w.r.t. the output. Written out for the ops here (matmuls, bias-gradient sums and the
  activation gradient kernels of :mod:`autodeuq.activations`); an op that does not write it
  inherits :meth:`Op.backward`, which differentiates :meth:`Op.forward` with
  ``tf.GradientTape``. A new kind of layer is therefore one subclass.
* :meth:`Op.config`: what identifies the op, for the trainer's cache of compiled epochs.

Why plain ops at all: tracing Keras layer calls costs ~10x more Python time than tracing these
few ops, and ``tf.GradientTape`` adds broadcasting bookkeeping (shape, reduce and reshape ops) to
every training step (``benchmarks/results/training_speed.md``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf
from keras import layers

from . import activations
from .layers import VARIANCE_FLOOR
from .layers import GaussianHead as GaussianHeadLayer


class Op:
    """One step of a network.

    Parameters
    ----------
    name : str
        The name of its Keras layer and of its output value.
    inputs : sequence of str
        The names of the values it reads (an earlier op's name, or the network's input).
    """

    def __init__(self, name: str, inputs: Sequence[str]):
        self.name = name
        self.inputs = tuple(inputs)

    def config(self) -> dict[str, Any]:
        """The op's parameters (JSON-serializable); with its class, name and inputs, they fix
        its computation."""
        return {}

    def layer(self) -> layers.Layer:
        """A new Keras layer computing this op, named :attr:`name`."""
        raise NotImplementedError

    def call_layer(self, layer: layers.Layer, tensors: list):
        """Apply ``layer`` (from :meth:`layer`) to the symbolic tensors of :attr:`inputs`."""
        return layer(*tensors)

    def forward(self, weights: list, inputs: list):
        """``(output, saved)``: the output from the layer's weights (in the order of its
        ``trainable_variables``) and inputs, and what :meth:`backward` needs."""
        raise NotImplementedError

    def backward(self, weights: list, inputs: list, saved, d_output, need_inputs: list[bool]):
        """``(d_inputs, d_weights)``: gradients of a loss w.r.t. each input (``None`` where
        ``need_inputs`` is false, or any value) and each weight, from ``d_output``.

        This default differentiates :meth:`forward` again under ``tf.GradientTape``; ops
        override it with the gradient written out.
        """
        with tf.GradientTape() as tape:
            tape.watch(weights)
            # one stand-in per position: an op may read the same value twice (an Add of x and x)
            inputs = [tf.identity(x) for x in inputs]
            tape.watch(inputs)
            output, _ = self.forward(weights, inputs)
        many = isinstance(output, (tuple, list))
        grads = tape.gradient(list(output) if many else output, list(inputs) + list(weights),
                              output_gradients=list(d_output) if many else d_output,
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return grads[:len(inputs)], grads[len(inputs):]

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({self.name!r} <- {list(self.inputs)}{', ' if args else ''}{args})"


class Dense(Op):
    """``activation(x @ kernel + bias)``: Keras' ``Dense(units, activation)``."""

    def __init__(self, name: str, input_name: str, units: int, activation: str):
        super().__init__(name, [input_name])
        self.units = int(units)
        self.activation = activations.get(activation)

    def config(self):
        return {"units": self.units, "activation": self.activation.name}

    def layer(self):
        return layers.Dense(self.units, activation=self.activation.keras(), name=self.name)

    def forward(self, weights, inputs):
        kernel, bias = weights
        z = tf.nn.bias_add(tf.matmul(inputs[0], kernel), bias)
        a = self.activation.forward(z)
        return a, (z, a)

    def backward(self, weights, inputs, saved, d_output, need_inputs):
        z, a = saved
        dz = self.activation.gradient(d_output, z, a)
        d_kernel = tf.matmul(inputs[0], dz, transpose_a=True)
        d_bias = tf.raw_ops.BiasAddGrad(out_backprop=dz)
        d_input = tf.matmul(dz, weights[0], transpose_b=True) if need_inputs[0] else None
        return [d_input], [d_kernel, d_bias]


class Add(Op):
    """The sum of the inputs: Keras' ``Add``."""

    def layer(self):
        return layers.Add(name=self.name)

    def call_layer(self, layer, tensors):
        return layer(list(tensors))

    def forward(self, weights, inputs):
        return tf.add_n(list(inputs)), None

    def backward(self, weights, inputs, saved, d_output, need_inputs):
        return [d_output] * len(inputs), []


class Activation(Op):
    """An activation function alone: Keras' ``Activation``."""

    def __init__(self, name: str, input_name: str, activation: str):
        super().__init__(name, [input_name])
        self.activation = activations.get(activation)

    def config(self):
        return {"activation": self.activation.name}

    def layer(self):
        return layers.Activation(self.activation.keras(), name=self.name)

    def forward(self, weights, inputs):
        a = self.activation.forward(inputs[0])
        return a, a

    def backward(self, weights, inputs, saved, d_output, need_inputs):
        return [self.activation.gradient(d_output, inputs[0], saved)], []


class GaussianHead(Op):
    """Raw ``(n, 2T)`` -> ``(mean, var)`` with ``var = softplus(raw_var) + floor``:
    :class:`autodeuq.layers.GaussianHead`. Its output is the pair, each ``(n, T)``."""

    def __init__(self, name: str, input_name: str, n_targets: int, floor: float = VARIANCE_FLOOR):
        super().__init__(name, [input_name])
        self.n_targets = int(n_targets)
        self.floor = float(floor)

    def config(self):
        return {"n_targets": self.n_targets, "floor": self.floor}

    def layer(self):
        return GaussianHeadLayer(self.n_targets, self.floor, name=self.name)

    def forward(self, weights, inputs):
        mean, raw_var = tf.split(inputs[0], 2, axis=1)
        return (mean, tf.nn.softplus(raw_var) + self.floor), raw_var

    def backward(self, weights, inputs, saved, d_output, need_inputs):
        d_mean, d_var = d_output
        return [tf.concat([d_mean, d_var * tf.sigmoid(saved)], axis=1)], []  # softplus' = sigmoid
