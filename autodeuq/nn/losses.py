"""The training losses of the compiled trainer (:mod:`autodeuq.nn.trainer`): the Gaussian NLL (Nix &
Weigend 1994; Lakshminarayanan et al. 2017) of a regression network and the categorical NLL
(cross-entropy) of a classifier, each with its gradients w.r.t. the network's outputs written out.
"""
from __future__ import annotations

import tensorflow as tf

from autodeuq.metrics import LOG_2PI
from autodeuq.nn.plan import NetworkPlan


def gaussian_nll(y, mean, var):
    """Mean Gaussian negative log-likelihood ``0.5 log(2 pi var) + (y - mean)^2 / (2 var)``.

    Averaged over rows and targets; plain TF ops, usable inside ``tf.function``.
    """
    return tf.reduce_mean(0.5 * (LOG_2PI + tf.math.log(var)) + tf.square(y - mean) / (2.0 * var))


@tf.autograph.experimental.do_not_convert
def gaussian_nll_and_gradients(y, mean, var):
    """:func:`gaussian_nll` and its gradients w.r.t. ``mean`` and ``var``, written out.

    With ``N`` the number of entries and ``d = mean - y``: ``dL/dmean = d / (N var)`` and
    ``dL/dvar = (1 - d^2 / var) / (2 N var)``.
    """
    diff = mean - y
    scaled = 1.0 / (tf.cast(tf.size(y), var.dtype) * var)
    return gaussian_nll(y, mean, var), diff * scaled, 0.5 * scaled * (1.0 - tf.square(diff) / var)


def categorical_nll(y, logits):
    """Mean weighted categorical NLL (cross-entropy) of class codes under softmax(``logits``).

    ``y`` is ``(n, 3)``: the class code, the row's weight (:func:`autodeuq.table.labels.class_row_weights`;
    ones without class weights) and its label smoothing ``e`` (zeros without), so that one tensor
    carries a classifier's targets as it carries a regression's: ``-sum_i w_i sum_k q_ik log
    softmax(z_i)_k / n`` with ``q_i = (1 - e_i) onehot(y_i) + e_i / K``.
    """
    return categorical_nll_and_gradients(y, logits)[0]


@tf.autograph.experimental.do_not_convert
def categorical_nll_and_gradients(y, logits):
    """:func:`categorical_nll` and its gradient w.r.t. ``logits``: ``w_i (softmax(z_i) - q_i) / n``."""
    log_p = tf.nn.log_softmax(logits)
    n_classes = tf.shape(logits)[1]
    onehot = tf.one_hot(tf.cast(y[:, 0], tf.int32), n_classes, dtype=logits.dtype)
    weights, smoothing = y[:, 1:2], y[:, 2:3]
    target = (1.0 - smoothing) * onehot + smoothing / tf.cast(n_classes, logits.dtype)
    n = tf.cast(tf.shape(logits)[0], logits.dtype)
    loss = -tf.reduce_sum(weights * target * log_p) / n
    return loss, weights * (tf.exp(log_p) - target) / n


class GaussianLoss:
    """The regression training loss: the network outputs ``(mean, var)``; the validation outputs
    kept per epoch are their concatenation."""

    @staticmethod
    def value(y, outputs):
        return gaussian_nll(y, *outputs)

    @staticmethod
    def value_and_gradients(y, outputs):
        loss, d_mean, d_var = gaussian_nll_and_gradients(y, *outputs)
        return loss, (d_mean, d_var)

    @staticmethod
    def kept(outputs):
        return tf.concat(outputs, axis=1)


class CategoricalLoss:
    """The classification training loss: the network outputs logits; the validation outputs kept
    per epoch are the log-probabilities."""

    @staticmethod
    def value(y, outputs):
        return categorical_nll(y, outputs[0])

    @staticmethod
    def value_and_gradients(y, outputs):
        loss, d_logits = categorical_nll_and_gradients(y, outputs[0])
        return loss, (d_logits,)

    @staticmethod
    def kept(outputs):
        return tf.nn.log_softmax(outputs[0])


def loss_of(plan: NetworkPlan):
    """The training loss of a network's plan (a classifier's or a Gaussian network's)."""
    return CategoricalLoss if plan.n_classes is not None else GaussianLoss
