"""The optimizers of the search space as fused updates of one flat parameter vector.

The compiled training loop (:mod:`autodeuq.train`) keeps every trainable parameter of a network
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
``tests/test_train.py``). This module has one job: :class:`FlatOptimizer`.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

_SLOTS = {  # slot variables and their initial values
    "sgd": {},
    "rmsprop": {"ms": 0.0, "mom": 0.0},
    "adagrad": {"accumulator": 0.1},
    "adam": {"m": 0.0, "v": 0.0},
    "adadelta": {"accum": 0.0, "accum_update": 0.0},
    "adamax": {"m": 0.0, "u": 0.0},
    "nadam": {"m": 0.0, "v": 0.0},
}
EPSILON = 1e-7
BETA_1, BETA_2 = 0.9, 0.999
RMSPROP_RHO, ADADELTA_RHO, NADAM_DECAY = 0.9, 0.95, 0.96


class FlatOptimizer:
    """One of Keras' optimizers (default settings) applied to a flat float32 variable.

    Parameters
    ----------
    name : str
        ``sgd``, ``rmsprop``, ``adagrad``, ``adam``, ``adadelta``, ``adamax`` or ``nadam``.
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
        if name not in _SLOTS:
            raise ValueError(f"unknown optimizer {name!r}; known: {sorted(_SLOTS)}")
        self.name = name
        self.size = int(size)
        self.learning_rate = tf.Variable(1e-3, dtype=tf.float32, trainable=False, name="learning_rate")
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        self.slots = {slot: tf.Variable(tf.fill([self.size], np.float32(init)), trainable=False, name=slot)
                      for slot, init in _SLOTS[name].items()}
        self.u_product = tf.Variable(1.0, dtype=tf.float32, trainable=False, name="u_product")  # nadam

    def reset(self, learning_rate: float):
        """Start afresh: initial slots, step 0, this learning rate."""
        for slot, init in _SLOTS[self.name].items():
            self.slots[slot].assign(tf.fill([self.size], np.float32(init)))
        self.iterations.assign(0)
        self.u_product.assign(1.0)
        self.set_learning_rate(learning_rate)

    def set_learning_rate(self, learning_rate: float):
        self.learning_rate.assign(float(learning_rate))

    @tf.autograph.experimental.do_not_convert  # static Python branches
    def apply(self, grad, params: tf.Variable):
        """One update of ``params`` (a flat float32 variable) with gradient ``grad``."""
        lr = self.learning_rate.read_value()
        if self.name in ("adam", "adamax", "nadam"):  # the rules with bias corrections
            step = tf.cast(self.iterations.read_value() + 1, tf.float32)
        s = self.slots
        if self.name == "sgd":
            tf.raw_ops.ResourceApplyGradientDescent(var=params.handle, alpha=lr, delta=grad)
        elif self.name == "rmsprop":
            tf.raw_ops.ResourceApplyRMSProp(var=params.handle, ms=s["ms"].handle, mom=s["mom"].handle, lr=lr,
                                            rho=RMSPROP_RHO, momentum=0.0, epsilon=EPSILON, grad=grad)
        elif self.name == "adagrad":
            accumulator = s["accumulator"].assign_add(tf.square(grad))
            params.assign_sub(lr * grad / tf.sqrt(accumulator + EPSILON))
        elif self.name == "adam":
            tf.raw_ops.ResourceApplyAdam(var=params.handle, m=s["m"].handle, v=s["v"].handle,
                                         beta1_power=tf.pow(BETA_1, step), beta2_power=tf.pow(BETA_2, step),
                                         lr=lr, beta1=BETA_1, beta2=BETA_2, epsilon=EPSILON, grad=grad)
        elif self.name == "adadelta":
            tf.raw_ops.ResourceApplyAdadelta(var=params.handle, accum=s["accum"].handle,
                                             accum_update=s["accum_update"].handle, lr=lr, rho=ADADELTA_RHO,
                                             epsilon=EPSILON, grad=grad)
        elif self.name == "adamax":
            tf.raw_ops.ResourceApplyAdaMax(var=params.handle, m=s["m"].handle, v=s["u"].handle,
                                           beta1_power=tf.pow(BETA_1, step), lr=lr, beta1=BETA_1, beta2=BETA_2,
                                           epsilon=EPSILON, grad=grad)
        else:  # nadam, Keras' schedule: momentum BETA_1 * (1 - 0.5 * 0.96^t)
            u_t = BETA_1 * (1.0 - 0.5 * tf.pow(NADAM_DECAY, step))
            u_next = BETA_1 * (1.0 - 0.5 * tf.pow(NADAM_DECAY, step + 1.0))
            u_product = self.u_product.assign(self.u_product * u_t)
            m = s["m"].assign_add((grad - s["m"]) * (1.0 - BETA_1))
            v = s["v"].assign_add((tf.square(grad) - s["v"]) * (1.0 - BETA_2))
            m_hat = u_next * m / (1.0 - u_product * u_next) + (1.0 - u_t) * grad / (1.0 - u_product)
            v_hat = v / (1.0 - tf.pow(BETA_2, step))
            params.assign_sub(m_hat * lr / (tf.sqrt(v_hat) + EPSILON))
        self.iterations.assign_add(1)
