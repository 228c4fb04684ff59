"""The optimizers of the search space as fused updates of one flat parameter vector.

The compiled training loop (:mod:`autodeuq.nn.train`) keeps every trainable parameter of a network
in one float32 vector. Updating a vector of ~10^5 entries is memory-bound, and a Keras optimizer
spells each update as a chain of elementwise ops, each one pass over the vector. Here each
optimizer is TensorFlow's fused kernel for the same rule where one exists (one pass), or the
Keras expression itself otherwise:

============  ===============================================  =====================================
name          Keras defaults reproduced                        update
============  ===============================================  =====================================
sgd           momentum 0                                       ``ResourceApplyGradientDescent``
rmsprop       rho 0.9, momentum 0, epsilon 1e-7, not centered  ``ResourceApplyRMSProp``
adagrad       initial accumulator 0.1, epsilon 1e-7            Keras' expression (epsilon inside the
                                                               square root, unlike TF's kernel)
adam          beta 0.9 / 0.999, epsilon 1e-7, no amsgrad       ``ResourceApplyAdam``
adadelta      rho 0.95, epsilon 1e-7                           ``ResourceApplyAdadelta``
adamax        beta 0.9 / 0.999, epsilon 1e-7                   ``ResourceApplyAdaMax``
nadam         beta 0.9 / 0.999, epsilon 1e-7, decay 0.96       Keras' expression
============  ===============================================  =====================================

The rules are Keras 3's (``keras.optimizers.*`` with default settings); the fused kernels group
the same arithmetic differently, so results agree to float32 rounding (checked against Keras in
``tests/test_optimizers.py``). :data:`OPTIMIZERS` is the one table of them (name ->
:class:`OptimizerRule`): the search space accepts exactly its names, :func:`make_optimizer` gives
the Keras optimizer of a name and :class:`FlatOptimizer` its fused update. Adding an optimizer is
one entry. TensorFlow is imported on first use (see :mod:`autodeuq._lazy`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from autodeuq._lazy import keras, tf

EPSILON = 1e-7
BETA_1, BETA_2 = 0.9, 0.999
RMSPROP_RHO, ADADELTA_RHO, NADAM_DECAY = 0.9, 0.95, 0.96


@dataclass(frozen=True)
class OptimizerRule:
    """One optimizer: its Keras class and its update of a flat parameter vector.

    Attributes
    ----------
    keras_class : str
        Name of the class in ``keras.optimizers`` whose default settings the update reproduces.
    update : callable
        ``update(opt, grad, params, lr)``: one step on ``params`` (a flat float32 variable), with
        ``opt`` the :class:`FlatOptimizer` (its ``slots``, ``scalars`` and :meth:`~FlatOptimizer.step`).
    slots : dict
        Per-parameter state vectors and their initial values.
    scalars : dict
        Scalar state and initial values.
    """

    keras_class: str
    update: Callable
    slots: dict = field(default_factory=dict)
    scalars: dict = field(default_factory=dict)


def _sgd(opt, grad, params, lr):
    tf.raw_ops.ResourceApplyGradientDescent(var=params.handle, alpha=lr, delta=grad)


def _rmsprop(opt, grad, params, lr):
    s = opt.slots
    tf.raw_ops.ResourceApplyRMSProp(var=params.handle, ms=s["ms"].handle, mom=s["mom"].handle, lr=lr,
                                    rho=RMSPROP_RHO, momentum=0.0, epsilon=EPSILON, grad=grad)


def _adagrad(opt, grad, params, lr):
    # Keras' expression: epsilon inside the square root, unlike TensorFlow's kernel
    accumulator = opt.slots["accumulator"].assign_add(tf.square(grad))
    params.assign_sub(lr * grad / tf.sqrt(accumulator + EPSILON))


def _adam(opt, grad, params, lr):
    s, step = opt.slots, opt.step()
    tf.raw_ops.ResourceApplyAdam(var=params.handle, m=s["m"].handle, v=s["v"].handle,
                                 beta1_power=tf.pow(BETA_1, step), beta2_power=tf.pow(BETA_2, step),
                                 lr=lr, beta1=BETA_1, beta2=BETA_2, epsilon=EPSILON, grad=grad)


def _adadelta(opt, grad, params, lr):
    s = opt.slots
    tf.raw_ops.ResourceApplyAdadelta(var=params.handle, accum=s["accum"].handle,
                                     accum_update=s["accum_update"].handle, lr=lr, rho=ADADELTA_RHO,
                                     epsilon=EPSILON, grad=grad)


def _adamax(opt, grad, params, lr):
    s, step = opt.slots, opt.step()
    tf.raw_ops.ResourceApplyAdaMax(var=params.handle, m=s["m"].handle, v=s["u"].handle,
                                   beta1_power=tf.pow(BETA_1, step), lr=lr, beta1=BETA_1, beta2=BETA_2,
                                   epsilon=EPSILON, grad=grad)


def _nadam(opt, grad, params, lr):
    # Keras' schedule: momentum BETA_1 * (1 - 0.5 * 0.96^t)
    s, step = opt.slots, opt.step()
    u_t = BETA_1 * (1.0 - 0.5 * tf.pow(NADAM_DECAY, step))
    u_next = BETA_1 * (1.0 - 0.5 * tf.pow(NADAM_DECAY, step + 1.0))
    u_product = opt.scalars["u_product"].assign(opt.scalars["u_product"] * u_t)
    m = s["m"].assign_add((grad - s["m"]) * (1.0 - BETA_1))
    v = s["v"].assign_add((tf.square(grad) - s["v"]) * (1.0 - BETA_2))
    m_hat = u_next * m / (1.0 - u_product * u_next) + (1.0 - u_t) * grad / (1.0 - u_product)
    v_hat = v / (1.0 - tf.pow(BETA_2, step))
    params.assign_sub(m_hat * lr / (tf.sqrt(v_hat) + EPSILON))


OPTIMIZERS: dict[str, OptimizerRule] = {
    "sgd": OptimizerRule("SGD", _sgd),
    "rmsprop": OptimizerRule("RMSprop", _rmsprop, {"ms": 0.0, "mom": 0.0}),
    "adagrad": OptimizerRule("Adagrad", _adagrad, {"accumulator": 0.1}),
    "adam": OptimizerRule("Adam", _adam, {"m": 0.0, "v": 0.0}),
    "adadelta": OptimizerRule("Adadelta", _adadelta, {"accum": 0.0, "accum_update": 0.0}),
    "adamax": OptimizerRule("Adamax", _adamax, {"m": 0.0, "u": 0.0}),
    "nadam": OptimizerRule("Nadam", _nadam, {"m": 0.0, "v": 0.0}, {"u_product": 1.0}),
}
"""Every optimizer a search space may name."""


def get(name: str) -> OptimizerRule:
    """The optimizer called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        return OPTIMIZERS[name]
    except KeyError:
        raise ValueError(f"unknown optimizer {name!r}; known: {sorted(OPTIMIZERS)}") from None


def make_optimizer(name: str, learning_rate: float):
    """The Keras optimizer called ``name``, with Keras' default settings."""
    return getattr(keras.optimizers, get(name).keras_class)(learning_rate=float(learning_rate))


class FlatOptimizer:
    """One of Keras' optimizers (default settings) applied to a flat float32 variable.

    Parameters
    ----------
    name : str
        A name of :data:`OPTIMIZERS`.
    size : int
        Length of the parameter vector.

    Call :meth:`apply` inside a ``tf.function`` (or eagerly); :meth:`reset` and
    :meth:`set_learning_rate` change state without retracing.

    Examples
    --------
    >>> params = tf.Variable(tf.ones([3]))
    >>> opt = FlatOptimizer("sgd", 3)
    >>> opt.reset(0.5)
    >>> opt.apply(tf.constant([1.0, 2.0, 0.0]), params)
    >>> params.numpy().tolist()
    [0.5, 0.0, 1.0]
    """

    def __init__(self, name: str, size: int):
        self.rule = get(name)
        self.name = name
        self.size = int(size)
        self.learning_rate = tf.Variable(1e-3, dtype=tf.float32, trainable=False, name="learning_rate")
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        # of any length: a trainer may hold networks of several sizes in turn (:meth:`reset`)
        self.slots = {slot: tf.Variable(tf.fill([self.size], np.float32(init)), trainable=False, name=slot,
                                        shape=tf.TensorShape([None]))
                      for slot, init in self.rule.slots.items()}
        self.scalars = {scalar: tf.Variable(float(init), dtype=tf.float32, trainable=False, name=scalar)
                        for scalar, init in self.rule.scalars.items()}
        # the rules are straight-line Python: nothing for AutoGraph to convert
        self.apply = tf.autograph.experimental.do_not_convert(self._apply)

    @property
    def variables(self) -> list:
        """Its variables (the learning rate, the step count, the slots and scalars), in a fixed order."""
        return [self.learning_rate, self.iterations, *self.slots.values(), *self.scalars.values()]

    def reset(self, learning_rate: float, size: int | None = None):
        """Start afresh: initial slots, step 0, this learning rate; ``size``: a new length of the
        parameter vector."""
        if size is not None:
            self.size = int(size)
        for slot, init in self.rule.slots.items():
            self.slots[slot].assign(np.full(self.size, init, np.float32))
        for scalar, init in self.rule.scalars.items():
            self.scalars[scalar].assign(float(init))
        self.iterations.assign(0)
        self.set_learning_rate(learning_rate)

    def set_learning_rate(self, learning_rate: float):
        self.learning_rate.assign(float(learning_rate))

    def step(self):
        """The 1-based number of the update being made, as float32 (for bias corrections)."""
        return tf.cast(self.iterations.read_value() + 1, tf.float32)

    def _apply(self, grad, params):
        """One update of ``params`` (a flat float32 variable) with gradient ``grad``."""
        self.rule.update(self, grad, params, self.learning_rate.read_value())
        self.iterations.assign_add(1)
