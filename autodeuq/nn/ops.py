"""The ops of a network: each one a Keras layer together with its forward and backward on plain ops.

An op pairs, as a Keras layer pairs ``call`` and ``get_config`` (or a PyTorch
``autograd.Function`` its forward and backward):

* :meth:`Op.layer`: the Keras layer of the saved model (its name is the op's name);
* :meth:`Op.forward`: the same computation on plain TensorFlow ops, given the layer's weights,
  for the compiled trainer (:class:`autodeuq.nn.plan.NetworkProgram`);
* :meth:`Op.backward`: the gradients of a loss w.r.t. the op's inputs and weights from its
  gradient w.r.t. the output. Written out for the ops here (matmuls, bias-gradient sums and the
  activation gradient kernels of :mod:`autodeuq.nn.activations`); an op that does not write it
  inherits :meth:`Op.backward`, which takes the gradients from a ``tf.GradientTape`` recorded
  around its forward (:meth:`Op.taped_forward`). A new kind of layer is therefore one subclass.
* :meth:`Op.config`: what identifies the op, for the trainer's cache of compiled epochs;
  :attr:`Op.SHAPES_ONLY` names its entries that only fix shapes, so that the pieces a spliced
  epoch is made of (:mod:`autodeuq.nn.splice`, keyed by :meth:`Op.piece_key`) serve every value;
* :meth:`Op.output_width`, :meth:`Op.weight_shapes`, :meth:`Op.initial_weights` and
  :meth:`Op.initial_state`: its weights as its Keras layer would start them, so that a training
  needs no Keras model (:meth:`autodeuq.nn.plan.NetworkPlan.initial_values`).

Training and inference, and state. As Keras passes ``training`` to a layer's ``call`` only when
its signature names it, the program passes these keywords to a ``forward`` that names them:

* ``training`` (bool): whether this is a training step (:class:`Dropout` drops only then,
  :class:`BatchNormalization` normalizes by the batch's statistics only then);
* ``rng`` (``tf.random.Generator``): the training's seeded generator, for random ops;
* ``state`` (list of tensors): the current values of the op's non-trainable variables, those
  :meth:`Op.state_variables` names among its Keras layer's. After each training step the trainer
  stores :meth:`Op.new_state` (for batch normalization, the moving mean and variance), and the
  saved file carries them as the Keras layer's non-trainable variables (:mod:`autodeuq.nn.keras_file`).

Why plain ops at all: tracing Keras layer calls costs ~10x more Python time than tracing these
few ops, and ``tf.GradientTape`` adds broadcasting bookkeeping (shape, reduce and reshape ops) to
every training step (``benchmarks/results/training_speed.md``).
"""
from __future__ import annotations

import functools
import inspect
import json
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from autodeuq.nn import activations
from autodeuq.nn.layers import VARIANCE_FLOOR
from autodeuq.nn.layers import GaussianHead as GaussianHeadLayer

MODE_KEYWORDS = ("training", "rng", "state")  #: what a ``forward`` may name, besides weights and inputs


class Taped(NamedTuple):
    """What :meth:`Op.taped_forward` keeps for the default :meth:`Op.backward`."""

    tape: Any
    inputs: list
    weights: list
    output: Any
    saved: Any  #: what the op's forward itself saved (e.g. for :meth:`Op.new_state`)


class Op:
    """One step of a network.

    Parameters
    ----------
    name : str
        The name of its Keras layer and of its output value.
    inputs : sequence of str
        The names of the values it reads (an earlier op's name, or the network's input).
    """

    #: the entries of :meth:`config` that only fix the shapes of its weights and output (a
    #: ``Dense``'s units), named as in its Keras layer's configuration: the forward and backward
    #: traced for one value serve every value (:mod:`autodeuq.nn.splice`), as does the layer's
    #: serialized configuration in a written file (:mod:`autodeuq.nn.keras_file`)
    SHAPES_ONLY: tuple[str, ...] = ()

    def __init__(self, name: str, inputs: Sequence[str]):
        self.name = name
        self.inputs = tuple(inputs)

    def config(self) -> dict[str, Any]:
        """The op's parameters (JSON-serializable); with its class, name and inputs, they fix
        its computation."""
        return {}

    def piece_key(self) -> str:
        """What fixes its forward's and backward's ops, given their inputs' dtypes and ranks:
        its class and :meth:`config` without :attr:`SHAPES_ONLY`."""
        config = {k: v for k, v in self.config().items() if k not in self.SHAPES_ONLY}
        return json.dumps([type(self).__name__, config], sort_keys=True)

    def layer(self) -> layers.Layer:
        """A new Keras layer computing this op, named :attr:`name`."""
        raise NotImplementedError

    def call_layer(self, layer: layers.Layer, tensors: list):
        """Apply ``layer`` (from :meth:`layer`) to the symbolic tensors of :attr:`inputs`."""
        return layer(*tensors)

    def output_width(self, widths: list[int]) -> int:
        """The width of the op's output, from its inputs' widths."""
        return widths[0]

    def weight_shapes(self, widths: list[int]) -> list[tuple[int, ...]]:
        """The shapes of its layer's trainable weights (in the order of ``trainable_variables``),
        from its inputs' widths."""
        return []

    def state_shapes(self, widths: list[int]) -> list[tuple[int, ...]]:
        """The shapes of its state (:meth:`state_variables`), from its inputs' widths."""
        return []

    def initial_weights(self, widths: list[int]) -> list[np.ndarray]:
        """Its layer's trainable weights as a new Keras layer starts them, drawn as that layer
        draws them. Called op by op in the plan's order after ``keras.utils.set_random_seed(s)``,
        they are the weights of the Keras model the plan builds after the same call."""
        return [np.zeros(s, np.float32) for s in self.weight_shapes(widths)]

    def initial_state(self, widths: list[int]) -> list[np.ndarray]:
        """Its state as a new Keras layer starts it."""
        return []

    def forward(self, weights: list, inputs: list):
        """``(output, saved)``: the output from the layer's weights (in the order of its
        ``trainable_variables``) and inputs, and what :meth:`backward` needs. A subclass may add
        the keywords of :data:`MODE_KEYWORDS` (see the module's docstring)."""
        raise NotImplementedError

    def backward(self, weights: list, inputs: list, saved, d_output, need_inputs: list[bool]):
        """``(d_inputs, d_weights)``: gradients of a loss w.r.t. each input (``None`` where
        ``need_inputs`` is false, or any value) and each weight, from ``d_output``.

        This default takes them from the tape :meth:`taped_forward` recorded (``saved`` is its
        :class:`Taped`); ops override it with the gradient written out.
        """
        output = saved.output
        many = isinstance(output, (tuple, list))
        grads = saved.tape.gradient(list(output) if many else output, saved.inputs + saved.weights,
                                    output_gradients=list(d_output) if many else d_output,
                                    unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return grads[:len(saved.inputs)], grads[len(saved.inputs):]

    @classmethod
    def writes_backward(cls) -> bool:
        """Whether the class writes its backward out (else :meth:`taped_forward` runs its forward)."""
        return cls.backward is not Op.backward

    @classmethod
    def mode_keywords(cls) -> tuple[str, ...]:
        """The keywords of :data:`MODE_KEYWORDS` that this class's ``forward`` takes."""
        parameters = inspect.signature(cls.forward).parameters
        return tuple(k for k in MODE_KEYWORDS if k in parameters)

    def taped_forward(self, weights: list, inputs: list, **mode):
        """:meth:`forward` under a ``tf.GradientTape``: ``(output, Taped)``. The forward runs
        once, so a random op's gradient sees the mask its output used."""
        tape = tf.GradientTape()
        with tape:
            weights = list(weights)
            tape.watch(weights)
            # one stand-in per position: an op may read the same value twice (an Add of x and x)
            stand_ins = [tf.identity(x) for x in inputs]
            tape.watch(stand_ins)
            output, saved = self.forward(weights, stand_ins, **mode)
        return output, Taped(tape, stand_ins, weights, output, saved)

    def state_variables(self, layer: layers.Layer) -> list:
        """The non-trainable variables of ``layer`` (from :meth:`layer`) that are this op's
        state, in the order ``forward`` receives them as ``state``; none by default."""
        return []

    def new_state(self, state: list, saved) -> list:
        """The state after a training step, from the state before and ``forward``'s ``saved``."""
        return list(state)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({self.name!r} <- {list(self.inputs)}{', ' if args else ''}{args})"


@functools.cache
def gpu_visible() -> bool:
    """Whether TensorFlow sees a GPU in this process."""
    return bool(tf.config.list_physical_devices("GPU"))


@functools.cache
def _onednn_matmuls() -> bool:
    """Whether TensorFlow runs a CPU-only process's matrix products through oneDNN (its
    ``TF_ENABLE_ONEDNN_OPTS``, which it turns on by default on CPUs with AVX-512 VNNI, BF16 or AMX)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled()) and not gpu_visible()


def matmul(a, b, transpose_a: bool = False, transpose_b: bool = False):
    """``tf.matmul(a, b, transpose_a, transpose_b)`` of two matrices, as TensorFlow would run it
    in a ``tf.function`` of this process.

    Where TensorFlow uses oneDNN (:func:`_onednn_matmuls`), its graph rewrite turns each
    ``MatMul`` of a graph it runs into oneDNN's ``_MklMatMul``, but not inside the functions of a
    functional ``While`` run by the single-threaded executor, which the trainer's epoch loops
    are: their steps ran Eigen's product instead, slower at small batches and rounded otherwise
    than a Keras ``fit`` or a ``tf.function`` of the same network
    (``benchmarks/results/training_speed.md``). So in a graph the op is made as that rewrite
    makes it (for float32, what oneDNN's kernel takes here); eagerly, ``tf.matmul`` runs. A
    ``tf.GradientTape`` does not record it in a graph: the ops' backward is written out.
    """
    if tf.executing_eagerly() or a.dtype != tf.float32 or not _onednn_matmuls():
        return tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    graph = tf.compat.v1.get_default_graph()
    attrs = {"transpose_a": tf.compat.v1.AttrValue(b=transpose_a),
             "transpose_b": tf.compat.v1.AttrValue(b=transpose_b),
             "_kernel": tf.compat.v1.AttrValue(s=b"MklNameChangeOp")}  # the kernel's label, as the rewrite sets it
    return graph.create_op("_MklMatMul", [a, b], [a.dtype], name="MatMul", attrs=attrs).outputs[0]


def glorot_uniform(shape: tuple[int, int]) -> np.ndarray:
    """A float32 matrix drawn as Keras' ``GlorotUniform()`` draws it, the same numbers, in two
    TensorFlow ops where Keras runs about ten eagerly (their dispatch was most of a small
    network's initial weights' time: ``benchmarks/results/training_speed.md``).

    Keras (3) makes the initializer's seed ``s`` from Python's generator, and draws
    ``minval + u * (maxval - minval)`` in float32, ``u`` TensorFlow's stateless uniform draw for
    the seed ``[s, 0]`` and ``maxval = -minval = sqrt(3 / max(1, (fan_in + fan_out) / 2))``; the
    product and the sum are computed here by NumPy in float32, rounded as TensorFlow rounds them.
    The tests compare the result with a Keras layer's kernel, bit for bit.
    """
    seed = keras.initializers.GlorotUniform().seed  # drawn from Python's generator, as Keras draws it
    fan_in, fan_out = shape
    maxval = np.float32(math.sqrt(3.0 / max(1.0, (fan_in + fan_out) / 2.0)))
    minval = -maxval
    key, counter, alg = tf.raw_ops.StatelessRandomGetKeyCounterAlg(seed=tf.constant([seed, 0], tf.int32))
    unit = tf.raw_ops.StatelessRandomUniformV2(shape=tf.constant(shape, tf.int32), key=key, counter=counter,
                                               alg=alg, dtype=tf.float32).numpy()
    return unit * (maxval - minval) + minval


class Dense(Op):
    """``activation(x @ kernel + bias)``: Keras' ``Dense(units, activation)``."""

    SHAPES_ONLY = ("units",)

    def __init__(self, name: str, input_name: str, units: int, activation: str):
        super().__init__(name, [input_name])
        self.units = int(units)
        self.activation = activations.get(activation)

    def config(self):
        return {"units": self.units, "activation": self.activation.name}

    def layer(self):
        return layers.Dense(self.units, activation=self.activation.keras(), name=self.name)

    def output_width(self, widths):
        return self.units

    def weight_shapes(self, widths):
        return [(widths[0], self.units), (self.units,)]

    def initial_weights(self, widths):
        # Keras' Dense: a Glorot-uniform kernel whose seed is drawn when the layer is made (from
        # Python's generator, which keras.utils.set_random_seed and a training seed), and a zero bias
        kernel_shape, bias_shape = self.weight_shapes(widths)
        return [glorot_uniform(kernel_shape), np.zeros(bias_shape, np.float32)]

    def forward(self, weights, inputs):
        kernel, bias = weights
        z = tf.nn.bias_add(matmul(inputs[0], kernel), bias)
        a = self.activation.forward(z)
        return a, (z, a)

    def backward(self, weights, inputs, saved, d_output, need_inputs):
        z, a = saved
        dz = self.activation.gradient(d_output, z, a)
        d_kernel = matmul(inputs[0], dz, transpose_a=True)
        d_bias = tf.raw_ops.BiasAddGrad(out_backprop=dz)
        d_input = matmul(dz, weights[0], transpose_b=True) if need_inputs[0] else None
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
    :class:`autodeuq.nn.layers.GaussianHead`. Its output is the pair, each ``(n, T)``."""

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


class Dropout(Op):
    """Keras' ``Dropout(rate)`` (Srivastava et al. 2014): in training, each entry is zeroed with
    probability ``rate`` and the others are divided by ``1 - rate``; in inference, the identity."""

    def __init__(self, name: str, input_name: str, rate: float):
        super().__init__(name, [input_name])
        self.rate = float(rate)
        if not 0.0 <= self.rate < 1.0:
            raise ValueError(f"a dropout rate is in [0, 1), got {rate}")

    def config(self):
        return {"rate": self.rate}

    def layer(self):
        return layers.Dropout(self.rate, name=self.name)

    def initial_weights(self, widths):
        if self.rate > 0:
            # Keras' Dropout makes a seed generator when it is made, drawing its seed as a Dense
            # layer does: the same draw keeps the later layers' weights those of the Keras model
            keras.random.SeedGenerator()
        return []

    def forward(self, weights, inputs, training=False, rng=None):
        x = inputs[0]
        if not training or self.rate == 0.0:
            return x, None
        # In the input's float type (float64 in the tests that compare implementations)
        uniform = (rng.uniform(tf.shape(x), dtype=x.dtype) if rng is not None
                   else tf.random.uniform(tf.shape(x), dtype=x.dtype))
        scale = tf.where(uniform >= self.rate, tf.constant(1.0 / (1.0 - self.rate), x.dtype), tf.constant(0.0, x.dtype))
        return x * scale, scale

    def backward(self, weights, inputs, saved, d_output, need_inputs):
        return [d_output if saved is None else d_output * saved], []


class BatchNormalization(Op):
    """Keras' ``BatchNormalization(momentum, epsilon)`` over the rows (Ioffe & Szegedy 2015):
    ``gamma (x - m) / sqrt(v + epsilon) + beta``, with ``(m, v)`` the batch's mean and (biased)
    variance in training and the moving ones in inference. Its state is the moving mean and
    variance; each training step moves them towards the batch's: ``s <- momentum s + (1 - momentum) batch``.
    Its backward is not written out: the tape gives it."""

    def __init__(self, name: str, input_name: str, momentum: float = 0.99, epsilon: float = 1e-3):
        super().__init__(name, [input_name])
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)

    def config(self):
        return {"momentum": self.momentum, "epsilon": self.epsilon}

    def layer(self):
        return layers.BatchNormalization(momentum=self.momentum, epsilon=self.epsilon, name=self.name)

    def state_variables(self, layer):
        return [layer.moving_mean, layer.moving_variance]

    def weight_shapes(self, widths):
        return [(widths[0],), (widths[0],)]  # gamma, beta

    def state_shapes(self, widths):
        return [(widths[0],), (widths[0],)]  # moving mean, moving variance

    def initial_weights(self, widths):
        return [np.ones(widths[0], np.float32), np.zeros(widths[0], np.float32)]

    def initial_state(self, widths):
        return [np.zeros(widths[0], np.float32), np.ones(widths[0], np.float32)]

    def forward(self, weights, inputs, training=False, state=()):
        gamma, beta = weights
        x = inputs[0]
        mean, var = tf.nn.moments(x, axes=[0]) if training else tuple(state)
        return tf.nn.batch_normalization(x, mean, var, beta, gamma, self.epsilon), (mean, var)

    def new_state(self, state, saved):
        return [m * self.momentum + b * (1.0 - self.momentum) for m, b in zip(state, saved)]
