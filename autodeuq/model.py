"""Keras 3 networks of the joint search space (Egele et al. 2022; Egele 2024, Figure 6.1).

A configuration's architecture vector becomes a functional model: a chain of cells, each a
dense decision (identity or ``Dense(units, activation)``) plus skip connections to the outputs
of up to three previous cells (cell 0 is the input), then a Gaussian head giving, per target,
a mean and a positive variance.

Two models are involved:

* the *core* network (:func:`build_network`) works in standardized units; it is what the
  trainer optimizes;
* the *scaled* network (:func:`with_scaling`) wraps the core between :class:`Standardize` and
  :class:`Unstandardize`, so it takes inputs and returns means and variances in the original
  units. This is the model that is saved and handed to users.

Every custom layer is a registered serializable layer with ``get_config`` (no ``Lambda``), so a
saved ``.keras`` file reloads with ``keras.models.load_model(path)`` in safe mode, once this
module has been imported (importing it registers the layers).

Merge rule (a choice the method leaves open): the merge activation (ReLU by default) is applied
only to a cell that has at least one active skip. A cell without skips outputs its dense output
unchanged, so an identity cell without skips is a true no-op and ``linear`` activations stay
linear.
"""
from __future__ import annotations

import os
import tempfile
import warnings

import keras
import numpy as np
import tensorflow as tf
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
        t = len(self.mean)
        mean = ops.convert_to_tensor(self.mean, dtype=out.dtype)
        std = ops.convert_to_tensor(self.std, dtype=out.dtype)
        mu, var = out[:, :t], out[:, t:]
        return ops.concatenate([mu * std + mean, var * ops.square(std)], axis=-1)

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


def _activation(name):
    return swish if name in ("swish", "silu") else name


def build_network(space, arch, n_features: int, n_targets: int, name: str = "autodeuq_core") -> keras.Model:
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
    inputs = keras.Input(shape=(int(n_features),), name="features")
    outputs = {0: inputs}  # cell index -> output tensor (cell 0 is the input)
    widths = {0: int(n_features)}
    for k, (dense, skips) in enumerate(space.cells(arch), start=1):
        prev = outputs[k - 1]
        if dense.units is None:
            x, width = prev, widths[k - 1]
        else:
            x = layers.Dense(dense.units, activation=_activation(dense.activation), name=f"cell{k}_dense")(prev)
            width = dense.units
        if skips:
            terms = [x]
            for a in skips:
                s = outputs[a]
                if widths[a] != width:
                    s = layers.Dense(width, activation=None, name=f"cell{k}_skip_from{a}_proj")(s)
                terms.append(s)
            x = layers.Add(name=f"cell{k}_add")(terms)
            x = layers.Activation(_activation(space.merge_activation), name=f"cell{k}_merge")(x)
        outputs[k], widths[k] = x, width
    raw = layers.Dense(2 * int(n_targets), name="gaussian_raw")(outputs[len(outputs) - 1])
    out = GaussianHead(n_targets, name="gaussian_head")(raw)
    return keras.Model(inputs, out, name=name)


# --------------------------------------------------------------------------- plain-ops network
_SQRT_2PI = float(np.sqrt(2.0 * np.pi))


def _gelu_grad(dy, z, a):
    # d/dz of Keras' exact gelu, 0.5 z (1 + erf(z / sqrt 2))
    return dy * (0.5 * (1.0 + tf.math.erf(z / 1.4142135623730951)) + z * tf.exp(-0.5 * tf.square(z)) / _SQRT_2PI)


def _swish_grad(dy, z, a):
    s = tf.sigmoid(z)
    return dy * s + tf.raw_ops.SigmoidGrad(y=s, dy=dy * z)


# ``grad(dy, z, a) -> dL/dz`` for each activation of the space, from the upstream gradient
# ``dy``, the pre-activation ``z`` and the activation ``a``: the kernels TensorFlow's own
# gradients of Keras' activation functions use, so the numbers agree with automatic
# differentiation (checked in the tests).
ACTIVATION_GRADIENTS = {
    "linear": lambda dy, z, a: dy,
    "relu": lambda dy, z, a: tf.raw_ops.ReluGrad(gradients=dy, features=a),
    "elu": lambda dy, z, a: tf.raw_ops.EluGrad(gradients=dy, outputs=a),
    "selu": lambda dy, z, a: tf.raw_ops.SeluGrad(gradients=dy, outputs=a),
    "sigmoid": lambda dy, z, a: tf.raw_ops.SigmoidGrad(y=a, dy=dy),
    "tanh": lambda dy, z, a: tf.raw_ops.TanhGrad(y=a, dy=dy),
    "softplus": lambda dy, z, a: dy * tf.sigmoid(z),
    "softsign": lambda dy, z, a: tf.raw_ops.SoftsignGrad(gradients=dy, features=z),
    "hard_sigmoid": lambda dy, z, a: tf.raw_ops.Relu6Grad(gradients=dy / 6.0, features=a * 6.0),  # relu6(z+3)/6
    "gelu": _gelu_grad,
    "swish": _swish_grad,
    "silu": _swish_grad,
}


class NetworkProgram:
    """The computation of ``build_network(space, arch, ...)`` as plain ops on a list of weights.

    ``program(weights, x)`` gives the network's ``(n, 2T)`` output, where ``weights`` lists
    tensors in the order of ``model.trainable_variables``. It applies the same ops in the same
    order as the Keras layers (matmul, bias add, the layer's own activation function, sums of
    skip terms), so it gives the same numbers.

    :meth:`forward` and :meth:`backward` are the training pair: the forward pass keeps the
    tensors the backward pass needs, and the backward pass is written out (matmuls,
    bias-gradient sums, and the activation gradient kernels of :data:`ACTIVATION_GRADIENTS`).
    Both exist for speed, in a compiled training loop: tracing Keras layer calls costs ~10x more
    Python time than tracing these few ops, and ``tf.GradientTape`` adds broadcasting
    bookkeeping (shape, reduce and reshape ops) to every step. The tests check the outputs
    against the Keras model and the gradients against ``tf.GradientTape``.

    Parameters
    ----------
    space : SearchSpace
    arch : sequence of int
    model : keras.Model
        The core network built by :func:`build_network` from the same ``space`` and ``arch``.
    """

    def __init__(self, space, arch, model: keras.Model):
        index = {id(v): i for i, v in enumerate(model.trainable_variables)}

        def dense(name, activation):
            layer = model.get_layer(name)
            return index[id(layer.kernel)], index[id(layer.bias)], activation

        widths = {0: int(model.input_shape[-1])}
        self.plan = []  # per cell: (dense params or None, [(anchor, projection params or None), ...])
        for k, (choice, skips) in enumerate(space.cells(arch), start=1):
            layer = dense(f"cell{k}_dense", choice.activation) if choice.units is not None else None
            widths[k] = choice.units if choice.units is not None else widths[k - 1]
            projections = [(a, dense(f"cell{k}_skip_from{a}_proj", "linear") if widths[a] != widths[k] else None)
                           for a in skips]
            self.plan.append((layer, projections))
        self.head = dense("gaussian_raw", "linear")
        self.merge = space.merge_activation
        head = model.get_layer("gaussian_head")
        self.n_targets, self.floor = int(head.n_targets), float(head.floor)
        self.n_weights = len(model.trainable_variables)

    # ------------------------------------------------------------------ forward
    @staticmethod
    def _activate(name, z):
        return z if name == "linear" else keras.activations.get(_activation(name))(z)

    def _affine(self, params, h, weights, saved):
        kernel, bias, activation = params
        z = tf.nn.bias_add(tf.matmul(h, weights[kernel]), weights[bias])
        a = self._activate(activation, z)
        if saved is not None:
            saved[params] = (h, z, a)
        return a

    @tf.autograph.experimental.do_not_convert  # static Python loops: nothing for AutoGraph to do
    def _raw(self, weights, x, saved=None):
        outs = [x]
        for k, (layer, skips) in enumerate(self.plan, start=1):
            h = outs[-1] if layer is None else self._affine(layer, outs[-1], weights, saved)
            if skips:
                terms = [h] + [outs[a] if proj is None else self._affine(proj, outs[a], weights, saved)
                               for a, proj in skips]
                total = tf.add_n(terms)
                h = self._activate(self.merge, total)
                if saved is not None:
                    saved[("merge", k)] = (total, h)
            outs.append(h)
        return self._affine(self.head, outs[-1], weights, saved)

    def __call__(self, weights, x):
        mean, var, _ = self.forward(weights, x)
        return tf.concat([mean, var], axis=1)

    def forward(self, weights, x):
        """``(mean, var, saved)``: the outputs, each ``(n, T)``, and what :meth:`backward` needs."""
        saved = {"weights": weights}
        mean, raw_var = tf.split(self._raw(weights, x, saved), 2, axis=1)
        saved["raw_var"] = raw_var
        return mean, tf.nn.softplus(raw_var) + self.floor, saved

    # ------------------------------------------------------------------ backward
    @tf.autograph.experimental.do_not_convert
    def backward(self, saved, d_mean, d_var):
        """Gradients of a loss w.r.t. every weight, from its gradients w.r.t. the outputs.

        Parameters
        ----------
        saved : dict
            From :meth:`forward`.
        d_mean, d_var : tf.Tensor of shape (n, T)
            Gradients of the loss w.r.t. the means and variances :meth:`forward` returned.

        Returns
        -------
        list of tf.Tensor
            One gradient per weight, in ``model.trainable_variables`` order.
        """
        weights, grads = saved["weights"], [None] * self.n_weights

        def affine_back(params, dy, need_input):
            kernel, bias, activation = params
            h, z, a = saved[params]
            dz = ACTIVATION_GRADIENTS[activation](dy, z, a)
            grads[kernel] = tf.matmul(h, dz, transpose_a=True)
            grads[bias] = tf.raw_ops.BiasAddGrad(out_backprop=dz)
            return tf.matmul(dz, weights[kernel], transpose_b=True) if need_input else None

        d_raw = tf.concat([d_mean, d_var * tf.sigmoid(saved["raw_var"])], axis=1)  # softplus' = sigmoid
        n = len(self.plan)
        upstream = {k: [] for k in range(n + 1)}  # gradients reaching each cell's output
        upstream[n].append(affine_back(self.head, d_raw, need_input=True))
        for k in range(n, 0, -1):
            layer, skips = self.plan[k - 1]
            dy = upstream[k][0] if len(upstream[k]) == 1 else tf.add_n(upstream[k])
            if skips:
                total, out = saved[("merge", k)]
                dy = ACTIVATION_GRADIENTS[self.merge](dy, total, out)
                for a, proj in skips:
                    if a > 0:
                        upstream[a].append(dy if proj is None else affine_back(proj, dy, need_input=True))
                    elif proj is not None:
                        affine_back(proj, dy, need_input=False)
            if layer is not None:
                d_in = affine_back(layer, dy, need_input=k > 1)
                if k > 1:
                    upstream[k - 1].append(d_in)
            elif k > 1:
                upstream[k - 1].append(dy)
        return grads


def with_scaling(core: keras.Model, scaler, name: str = "autodeuq_network") -> keras.Model:
    """Wrap a core network so it takes and returns original units.

    Parameters
    ----------
    core : keras.Model
        From :func:`build_network` (shares its weights with the returned model).
    scaler : Standardizer
        ``x_mean``, ``x_std``, ``y_mean``, ``y_std`` of the training split.

    Returns
    -------
    keras.Model
        Original-unit input ``(n, d)`` -> original-unit ``(n, 2T)`` (means, variances).
    """
    n_features = core.input_shape[-1]
    inputs = keras.Input(shape=(n_features,), name="features")
    z = Standardize(scaler.x_mean, scaler.x_std, name="standardize")(inputs)
    out = core(z)
    out = Unstandardize(scaler.y_mean, scaler.y_std, name="unstandardize")(out)
    return keras.Model(inputs, out, name=name)


def split_output(out) -> tuple[np.ndarray, np.ndarray]:
    """``(n, 2T)`` network output -> ``(mean, var)``, each ``(n, T)``."""
    out = np.asarray(out)
    t = out.shape[-1] // 2
    return out[:, :t], out[:, t:]


def count_params(model: keras.Model) -> int:
    """Number of trainable parameters."""
    return int(sum(int(np.prod(v.shape)) for v in model.trainable_weights))


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
