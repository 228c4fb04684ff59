"""Train one configuration with the Gaussian NLL (Nix & Weigend 1994; Lakshminarayanan et al. 2017),
or a classifier with the categorical NLL (cross-entropy), on a compiled epoch loop.

Why not ``model.fit``: for the small tabular networks of the search, Keras' per-step and
per-epoch Python machinery (data adapters, callbacks, the validation pass) costs far more than
the arithmetic. Here one ``tf.function`` runs a *whole epoch* (seeded shuffle, every mini-batch
step, then the validation loss) on data held as tensors, and Python only does the per-epoch
bookkeeping of :class:`EpochBookkeeper`, which reproduces Keras' ``ReduceLROnPlateau`` and
``EarlyStopping(restore_best_weights=True)`` on the validation loss.

Choices that keep tracing cheap and rare:

* All trainable parameters live in one flat vector (laid out by :mod:`autodeuq.nn.flat`), and the
  epoch runs the network as plain ops on slices of it, with its backward pass written out
  (:class:`~autodeuq.nn.plan.NetworkProgram` over the network's plan, checked against the Keras
  model and ``tf.GradientTape`` in the tests). Every optimizer of the space is elementwise, so
  one fused update of the vector
  (:class:`~autodeuq.nn.optimizers.FlatOptimizer`) is the same arithmetic as Keras' per-variable
  updates, with far fewer ops to trace and run, and the best-weights snapshot is a single copy.
* The compiled epoch, built for a (network plan, optimizer) key (:attr:`~autodeuq.nn.plan.NetworkPlan.key`), is
  kept in a small LRU cache (:data:`TRAINER_CACHE_SIZE`). A later training with the same key
  (e.g. a search over training hyperparameters with a fixed architecture) reuses it after
  resetting the weights, the optimizer state and the shuffle generator: no retrace.
* The epoch is an explicit ``While`` loop traced without AutoGraph, its biases are slices
  of the vector used as they are (no reshape), and it is called as a concrete function that
  returns both losses in one tensor: fewer ops to trace, instantiate and run at every step, and
  one transfer to the host per epoch. None of this changes a number (the tests compare runs).
* On a machine without a visible GPU, the epoch is traced and run under TensorFlow's
  single-threaded executor (:func:`_single_threaded_wanted`): its ops run one after the other anyway.

No Keras model is built during a training: the initial weights come from the plan, drawn as the
Keras layers draw them (:meth:`~autodeuq.nn.plan.NetworkPlan.initial_values`), and the ``.keras``
file is written from the plan and the kept weights (:func:`autodeuq.nn.keras_file.network_bytes`):
building the model and saving it through Keras was a large part of a small network's fixed cost
(``benchmarks/results/training_speed.md``).

Long-lived workers: Keras' session state and TensorFlow's cache of eager kernels are reset, and
garbage is collected fully, every :data:`FULL_GC_EVERY` trainings (:func:`_clear_state`); the
objects alive after the first training's imports are moved out of the garbage collector's sight
(``gc.freeze``), so that collecting the cyclic garbage of old trainings does not rescan
TensorFlow's own objects each time (a full collection is several times cheaper frozen). Keras'
``swish`` (``tf.nn.silu``, a ``tf.custom_gradient`` that pins every traced graph forever in TF
2.21) is replaced by :func:`autodeuq.nn.layers.swish`. The collection times and the memory held over
200 trainings are in ``benchmarks/results/training_speed.md``.

One training runs at a time per process (the global generators it seeds, Keras' session state,
and the Grappler switch of :func:`_graph_optimizer_off`, are per process).
"""
from __future__ import annotations

import contextlib
import gc
import json
import math
import random
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

from autodeuq.core.errors import SpaceError
from autodeuq.core.result import Status, TrainResult, worker_name
from autodeuq.metrics import LOG_2PI
from autodeuq.nn import flat as flat_layout
from autodeuq.nn.keras_file import network_bytes
from autodeuq.nn.model import split_output
from autodeuq.nn.ops import gpu_visible
from autodeuq.nn.optimizers import FlatOptimizer
from autodeuq.nn.plan import NetworkPlan, NetworkProgram
from autodeuq.nn.splice import DIRECT, NotSpliceable, SplicedFunction, Splicer

TRAINER_CACHE_SIZE = 4  # compiled epochs kept for reuse (each holds its traced epoch; the variables are shared)
FULL_GC_EVERY = 20  # trainings between full garbage collections
GRAPPLER_IN_TRAINING = False  # see _graph_optimizer_off
SINGLE_THREADED_EPOCHS = True  # see _single_threaded_wanted
SPLICED_EPOCHS = True  # see CompiledTrainer._trace


# --------------------------------------------------------------------------- threads
def configure_threads(n: int, inter_op: int | None = None) -> bool:
    """Limit TensorFlow's CPU thread pools (intra-op to ``n``, inter-op to ``inter_op or n``).

    TensorFlow fixes its pools when it runs its first operation; after that this is a no-op with
    a ``RuntimeWarning`` (unless the pools already have the requested sizes).

    Returns
    -------
    bool
        Whether the pools now have the requested sizes.
    """
    n = int(n)
    inter = int(inter_op or n)
    if n < 1 or inter < 1:
        raise ValueError(f"thread counts must be >= 1, got intra={n}, inter={inter}")
    try:
        tf.config.threading.set_intra_op_parallelism_threads(n)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
        return True
    except RuntimeError:
        warnings.warn(
            f"configure_threads({n}) ignored: TensorFlow already runs with intra-op "
            f"{tf.config.threading.get_intra_op_parallelism_threads()} / inter-op "
            f"{tf.config.threading.get_inter_op_parallelism_threads()} threads (0 = all cores); "
            "call it before any TensorFlow operation runs in this process",
            RuntimeWarning,
            stacklevel=2,
        )
        return False


# --------------------------------------------------------------------------- loss
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


@tf.autograph.experimental.do_not_convert
def _batch(i, batch_size, n, x, y):
    """The first and last row of mini-batch ``i`` and its rows."""
    start = i * batch_size
    stop = tf.minimum(start + batch_size, n)
    return start, stop, x[start:stop], y[start:stop]


@tf.autograph.experimental.do_not_convert
def _total(total, loss, start, stop):
    """The sum of the losses so far, the batch's mean ``loss`` counted once per row."""
    return total + loss * tf.cast(stop - start, tf.float32)


def _next(i):
    return i + 1


def _more_batches(via, i, total, batch_size, n, x, y):
    """The loop's condition: batch ``i`` holds rows (of ``n``, in batches of ``batch_size``)."""
    return via.call(("more_batches",), _more, i, batch_size, n)


def _more(i, batch_size, n):
    return i < (n + batch_size - 1) // batch_size


def _losses(total, n, val_loss):
    """The epoch's mean training loss and its validation loss, in one tensor."""
    return tf.stack([total / tf.cast(n, tf.float32), val_loss])


def _validation(loss, y, outputs):
    """The validation loss and the outputs kept of it."""
    return loss.value(y, outputs), loss.kept(outputs)


def loss_of(plan: NetworkPlan):
    """The training loss of a network's plan (a classifier's or a Gaussian network's)."""
    return CategoricalLoss if plan.n_classes is not None else GaussianLoss


# --------------------------------------------------------------------------- per-epoch bookkeeping
def _less32(a: float, b: float) -> bool:
    # Keras compares monitored values as float32 tensors (keras.ops.less); so do we, so that
    # near-ties go the same way.
    return bool(np.float32(a) < np.float32(b))


@dataclass(frozen=True)
class EpochDecision:
    """What to do after an epoch: keep its weights, change the learning rate, stop."""

    is_best: bool
    reduce_lr: bool
    new_lr: float
    stop: bool


class EpochBookkeeper:
    """Keras' ``ReduceLROnPlateau`` and ``EarlyStopping`` on the validation loss, in pure Python.

    Same rules as Keras 3 (mode ``min``, comparisons in float32 like ``keras.ops.less``):

    * learning rate: an epoch improves if ``val + min_delta_lr < best`` (or it is the first);
      otherwise, outside cooldown, ``wait`` grows and at ``patience_reduce_lr`` the rate is
      multiplied by ``factor`` (floored at ``min_lr``, only if still above it), ``wait`` resets
      and the cooldown starts;
    * early stopping: ``wait`` grows every epoch and resets when ``val < best`` (min_delta 0);
      training stops when ``wait >= patience_early_stopping`` (never at the first epoch);
    * best weights: those of the epoch early stopping last counted as an improvement, i.e. the
      first epoch of minimum validation loss; they are restored at the end in every case.

    Parameters
    ----------
    learning_rate : float
        Initial rate (held as float32, like the optimizer's variable).
    patience_reduce_lr, patience_early_stopping : int
    factor, min_delta_lr, cooldown, min_lr :
        Keras' ``ReduceLROnPlateau`` defaults.

    Examples
    --------
    >>> book = EpochBookkeeper(1e-2, patience_reduce_lr=1, patience_early_stopping=2)
    >>> [book.update(v).stop for v in (1.0, 1.0, 1.0)]
    [False, False, True]
    """

    def __init__(self, learning_rate: float, patience_reduce_lr: int, patience_early_stopping: int, *,
                 factor: float = 0.1, min_delta_lr: float = 1e-4, cooldown: int = 0, min_lr: float = 0.0):
        if not 0 < factor < 1:
            raise ValueError(f"factor must be in (0, 1), got {factor}")
        self.lr = float(np.float32(learning_rate))
        self.patience_reduce_lr = int(patience_reduce_lr)
        self.patience_early_stopping = int(patience_early_stopping)
        self.factor = float(factor)
        self.min_delta_lr = float(min_delta_lr)
        self.cooldown = int(cooldown)
        self.min_lr = float(min_lr)
        self.epoch = -1  # 0-based index of the last epoch seen
        self.best = math.inf  # lowest validation loss (early-stopping rule)
        self.best_epoch = -1  # 0-based
        self.stopped_epoch = None
        self.lr_reductions = 0
        self._lr_best = None
        self._lr_wait = 0
        self._cooldown_counter = 0
        self._es_wait = 0

    def update(self, val_loss: float) -> EpochDecision:
        """Record one epoch's validation loss and say what to do next."""
        self.epoch += 1
        current = float(val_loss)
        reduce_lr = self._update_lr(current)
        is_best, stop = self._update_early_stopping(current)
        if stop:
            self.stopped_epoch = self.epoch
        return EpochDecision(is_best=is_best, reduce_lr=reduce_lr, new_lr=self.lr, stop=stop)

    def _update_lr(self, current: float) -> bool:
        if self._cooldown_counter > 0:
            self._cooldown_counter -= 1
            self._lr_wait = 0
        if self._lr_best is None or _less32(current + self.min_delta_lr, self._lr_best):
            self._lr_best = current
            self._lr_wait = 0
            return False
        if self._cooldown_counter > 0:
            return False
        self._lr_wait += 1
        if self._lr_wait < self.patience_reduce_lr or not self.lr > np.float32(self.min_lr):
            return False
        self.lr = float(np.float32(max(self.lr * self.factor, self.min_lr)))
        self._cooldown_counter = self.cooldown
        self._lr_wait = 0
        self.lr_reductions += 1
        return True

    def _update_early_stopping(self, current: float) -> tuple[bool, bool]:
        self._es_wait += 1
        if self.best_epoch < 0 or _less32(current, self.best):
            self.best, self.best_epoch, self._es_wait = current, self.epoch, 0
            return True, False
        return False, self._es_wait >= self.patience_early_stopping and self.epoch > 0


# --------------------------------------------------------------------------- compiled trainer
_EPOCH_SIGNATURE = [tf.TensorSpec([None, None], tf.float32)] * 4 + [tf.TensorSpec([], tf.int32)]


class TrainerVariables:
    """The variables that one thread's trainings run on, of any length: the flat parameter vector
    and its best-epoch copy, the flat state vector (batch normalization's moving statistics) and
    its best-epoch copy, the shuffle generator (also that of random ops such as dropout), and one
    :class:`~autodeuq.nn.optimizers.FlatOptimizer` per optimizer.

    Every :class:`CompiledTrainer` of a thread reads and writes these (:func:`thread_variables`),
    and :meth:`CompiledTrainer.reset` sets all of them at the start of each training, so a new
    trainer creates no variable (creating them was a sizeable part of a small training's fixed
    cost: ``benchmarks/results/training_speed.md``). A thread runs one training at a time, and the
    trainer cache holds a thread's trainers for that thread only.
    """

    def __init__(self):
        any_length = tf.TensorShape([None])

        def vector(name):
            return tf.Variable(tf.zeros([0]), trainable=False, name=name, shape=any_length)

        self.params, self.best_params = vector("params"), vector("best_params")
        self.state, self.best_state = vector("state"), vector("best_state")
        self.generator = tf.random.Generator.from_seed(0)
        self._optimizers: dict[str, FlatOptimizer] = {}

    def optimizer(self, name: str) -> FlatOptimizer:
        """The optimizer ``name``'s variables (made at the first call)."""
        if name not in self._optimizers:
            self._optimizers[name] = FlatOptimizer(name, 0)
        return self._optimizers[name]


def reset_generator(generator: tf.random.Generator, seed: int):
    """``generator.reset_from_seed(seed)``, in one op for a seed in ``[0, 2**63)``.

    TensorFlow makes a generator's state from an integer seed by chopping it into 64-bit words,
    lowest first, as many as the state holds: ``[seed, 0, ...]`` for such a seed. Its
    ``create_rng_state`` does so in about ten eager ops; the tests compare the two states.
    """
    seed = int(seed)
    if not 0 <= seed < 2**63:
        generator.reset_from_seed(seed)
        return
    state = np.zeros(generator.state.shape, np.int64)
    state[0] = seed
    generator.state.assign(state)


_THREAD = threading.local()


def thread_variables() -> TrainerVariables:
    """The calling thread's :class:`TrainerVariables` (made at its first call, eagerly)."""
    variables = getattr(_THREAD, "variables", None)
    if variables is None:
        with tf.init_scope():
            variables = _THREAD.variables = TrainerVariables()
    return variables


class CompiledTrainer:
    """A traced whole-epoch training function for one network structure and optimizer.

    It runs on its thread's :class:`TrainerVariables` (the flat parameter vector, its best-epoch
    copy, the optimizer's variables, the shuffle generator and, when the network's ops have state,
    a flat state vector and its best-epoch copy); the network enters only as a
    :class:`~autodeuq.nn.plan.NetworkProgram` (plain ops, with its backward pass written out), so no
    Keras model is kept. :meth:`reset` loads a new training's initial weights, state, learning
    rate and seed, so one trace serves several trainings; the variables hold a training's values
    from its :meth:`reset` until the thread's next trainer is reset.

    Parameters
    ----------
    program : NetworkProgram
        The network's computation (and the shapes of its weights).
    optimizer_name : str
        A name of :data:`autodeuq.nn.optimizers.OPTIMIZERS`.
    loss : GaussianLoss or CategoricalLoss
        The network's loss (:func:`loss_of`).
    """

    def __init__(self, program: NetworkProgram, optimizer_name: str, loss=GaussianLoss):
        self.program = program
        self.loss = loss
        self.layout = flat_layout.FlatLayout(program.weight_shapes)
        self.state_layout = flat_layout.FlatLayout(program.state_shapes)
        shared = thread_variables()
        self.params, self.best_params = shared.params, shared.best_params
        self.state = self.best_state = None
        if self.state_layout.shapes:
            self.state, self.best_state = shared.state, shared.best_state
        self.optimizer = shared.optimizer(optimizer_name)
        self.generator = shared.generator
        self.traces = 0  # Python-side count of traces of the epoch function
        self.spliced = False  # whether its last trace was spliced from pieces (see _trace)
        self._concrete_epoch = None
        self._executor = contextlib.nullcontext  # the executor the traced epoch runs under

    def run_epoch(self, x, y, x_valid, y_valid, batch_size):
        """One epoch (traced at the first call): ``(losses, valid_out)``, ``losses`` holding the
        mean training loss and the validation loss, ``valid_out`` the validation outputs."""
        if self._concrete_epoch is None:
            self._concrete_epoch, self._executor = self._trace()
        with self._executor():
            return self._concrete_epoch(x, y, x_valid, y_valid, batch_size)

    def _trace(self):
        """The epoch's concrete function (calling it directly skips tf.function's per-call
        argument matching) and the executor it runs under: TensorFlow's single-threaded one
        where :func:`_single_threaded_wanted`, unless the traced loop body runs functions of its
        own (then it is traced again for the default executor; see :data:`NESTED_FUNCTION_OPS`).

        The epoch is spliced from pieces traced once per process (:mod:`autodeuq.nn.splice`) into a
        function of TensorFlow's runtime (no graph is built in Python) where
        :data:`SPLICED_EPOCHS` and the network's program allows it; otherwise, or when a piece
        cannot be spliced, it is traced op by op. The numbers are the same (the tests compare runs
        bit for bit).

        For the single-threaded executor the epoch's graph is built without TensorFlow's
        automatic control dependencies (:meth:`_wrapped`; what they cost a trace is in
        ``benchmarks/results/training_speed.md``). They would order the stateful ops (variable
        reads and writes, random draws) that no data dependency orders. That executor runs the
        loop body's calls one after the other and the ops of a graph in one fixed order, and the
        epoch orders its validation pass after the loop itself; the tests compare the numbers
        with the default trace's, bit for bit. The default executor, which runs independent ops
        in parallel, keeps the ``tf.function`` trace.
        """
        if _single_threaded_wanted():
            with _single_threaded():
                concrete = self._wrapped()
            if not _runs_nested_functions(concrete):
                return concrete, _single_threaded
        return self._traced(), contextlib.nullcontext

    def _spliced_first(self, build):
        """``build(splice)``'s function, spliced when that is possible (see :meth:`_trace`)."""
        self.spliced = SPLICED_EPOCHS and self.program.spliceable
        if self.spliced:
            try:
                return build(True)
            except NotSpliceable:
                self.spliced = False
        return build(False)

    def _traced(self):
        """A fresh trace of :meth:`_epoch` (for the executor of the caller's context)."""
        return self._spliced_first(lambda splice: self._spliced() if splice else tf.function(
            self._epoch, input_signature=_EPOCH_SIGNATURE, autograph=False).get_concrete_function())

    def _wrapped(self):
        """A fresh graph of :meth:`_epoch` without automatic control dependencies (see :meth:`_trace`)."""
        return self._spliced_first(lambda splice: self._spliced() if splice else tf.compat.v1.wrap_function(
            self._epoch, signature=_EPOCH_SIGNATURE))

    def _spliced(self) -> SplicedFunction:
        """:meth:`_epoch` spliced from pieces, as a function of TensorFlow's runtime (its stateful
        ops ordered by the splicer, as :meth:`_wrapped`'s by the executor; see :meth:`_trace`)."""
        via = Splicer()
        return via.function(self._epoch(*(via.argument(spec) for spec in _EPOCH_SIGNATURE), via=via))

    def _weights(self, via, flat):
        """The flat parameter vector ``flat`` as the program's list of weights."""
        return flat_layout.split(via, flat, self.layout)

    def _state(self, via, flat):
        """The flat state vector ``flat`` (None without state) as the program's list of state."""
        return [] if flat is None else flat_layout.split(via, flat, self.state_layout)

    def _read(self, via):
        """The current parameters and state (None without state)."""
        return via.call(("read",), self._read_values, variables=self._stored())

    def _stored(self) -> list:
        """The parameter and state variables."""
        return [self.params] + ([] if self.state is None else [self.state])

    @tf.autograph.experimental.do_not_convert
    def _read_values(self):
        return self.params.read_value(), None if self.state is None else self.state.read_value()

    def _epoch(self, x, y, x_valid, y_valid, batch_size, via=DIRECT):
        # Written as an explicit loop and traced without AutoGraph, which would only rewrite this
        # one loop and costs tracing time at every new plan. Spliced, the whole epoch is one
        # function of the runtime, the loop's body and condition its own (see _spliced).
        n, x, y = via.call(("shuffle",), self._shuffled, via.input(x), via.input(y),
                           variables=[self.generator.state])
        zero, no_loss = via.constant(0, tf.int32), via.constant(0.0, tf.float32)
        _, total = via.loop(_more_batches, self._batch_step, [zero, no_loss], [via.input(batch_size), n, x, y])
        if via is not DIRECT:
            params, state = self._read(via)  # after the loop: the splicer orders the stateful ops
        else:
            with tf.control_dependencies([total]):  # the loop's writes before these reads (see _trace)
                params, state = self._read_values()
        *outputs, _ = self.program.forward(self._weights(via, params), via.input(x_valid), self._state(via, state),
                                           via=via)
        val_loss, kept = via.call(("validation",), _validation, self.loss, via.input(y_valid), outputs)
        # one tensor for both losses: one transfer to the host per epoch
        losses = via.call(("losses",), _losses, total, n, val_loss)
        self.traces += 1  # counted once built (a spliced attempt that fails is not a trace)
        return losses, kept

    def _batch_step(self, via, i, total, batch_size, n, x, y):
        """The loop's body: the training step on batch ``i``; ``(i + 1, total)``, ``total`` the
        sum of the batches' losses weighted by their sizes."""
        start, stop, x_batch, y_batch = via.call(("batch",), _batch, i, batch_size, n, x, y)
        params, state = self._read(via)
        loss = self._step(via, params, state, x_batch, y_batch)
        return via.call(("next",), _next, i), via.call(("total",), _total, total, loss, start, stop)

    @tf.autograph.experimental.do_not_convert
    def _shuffled(self, x, y):
        """The rows' count and the rows in the epoch's seeded random order."""
        n = tf.shape(x)[0]
        order = tf.argsort(self.generator.uniform([n]))
        return n, tf.gather(x, order), tf.gather(y, order)

    def _step(self, via, params, state, x, y):
        """One training step on the batch ``(x, y)``: its mean loss (the parameters and state updated)."""
        *outputs, saved = self.program.forward(self._weights(via, params), x, self._state(via, state),
                                               training=True, rng=self.generator, via=via)
        loss, d_outputs = via.call(("loss",), self.loss.value_and_gradients, y, outputs)
        grad = via.call(("flat_gradient", *flat_layout.join_key(self.layout)), self._flat_gradient,
                        self.program.backward(saved, *d_outputs, via=via))
        via.call(("update", self.optimizer.name), lambda g: self.optimizer.apply(g, self.params), grad,
                 variables=[self.params, *self.optimizer.variables])
        if self.state is not None:
            via.call(("new_state", *flat_layout.join_key(self.state_layout)), self._assign_state,
                     self.program.new_state(saved, via=via), variables=[self.state])
        return loss

    @tf.autograph.experimental.do_not_convert
    def _assign_state(self, values):
        self.state.assign(flat_layout.join(values, self.state_layout))

    @tf.autograph.experimental.do_not_convert
    def _flat_gradient(self, grads):
        """The program's gradients (one per weight) as one vector laid out as the parameters
        (a trainer holding its weights in another layout overrides it)."""
        return flat_layout.join(grads, self.layout)

    def reset(self, initial_weights, learning_rate: float, seed: int, initial_state=()):
        flat = self.layout.flatten(initial_weights)
        self.params.assign(flat)
        self.best_params.assign(flat)
        if self.state is not None:
            flat = self.state_layout.flatten(initial_state)
            self.state.assign(flat)
            self.best_state.assign(flat)
        self.optimizer.reset(learning_rate, self.layout.size)
        reset_generator(self.generator, seed)

    def set_learning_rate(self, lr: float):
        self.optimizer.set_learning_rate(lr)

    def snapshot(self):
        self.best_params.assign(self.params)
        if self.state is not None:
            self.best_state.assign(self.state)

    def best_weights(self) -> list[np.ndarray]:
        return self.layout.unflatten(self.best_params.numpy())

    def best_state_values(self) -> list[np.ndarray]:
        """The ops' state at the best epoch, in the order of ``plan.state_variables``."""
        if self.state is None:
            return []
        return self.state_layout.unflatten(self.best_state.numpy())


_CACHE: OrderedDict[str, CompiledTrainer] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def _checkout_trainer(plan, optimizer_name):
    """A cached trainer for this plan and optimizer (removed from the cache while in use), or a
    new one; with the cache key."""
    key = json.dumps([plan.key, optimizer_name, threading.get_ident()])  # a thread's own variables
    with _CACHE_LOCK:
        trainer = _CACHE.pop(key, None)
    if trainer is not None:
        return key, trainer, True
    return key, CompiledTrainer(NetworkProgram(plan), optimizer_name, loss_of(plan)), False


def _checkin_trainer(key, trainer):
    with _CACHE_LOCK:
        _CACHE[key] = trainer
        _CACHE.move_to_end(key)
        while len(_CACHE) > TRAINER_CACHE_SIZE:
            _CACHE.popitem(last=False)


def clear_trainer_cache():
    """Drop every cached compiled trainer."""
    with _CACHE_LOCK:
        _CACHE.clear()


# --------------------------------------------------------------------------- training
def _check_config(config, space, dataset) -> str | None:
    """Why this configuration cannot be trained on this data, or None."""
    try:
        space.validate(config)
    except SpaceError as exc:
        return str(exc)
    if len(dataset.x_train) < 1 or len(dataset.x_valid) < 1:
        return "the dataset needs at least one training and one validation row"
    y_std = np.asarray(dataset.scaler.y_std, dtype=float)
    if not np.all(np.isfinite(y_std) & (y_std > 0)):
        return (f"target standard deviation(s) {y_std.tolist()} on the training split: "
                "a constant target cannot be standardized")
    return None


_trainings_since_gc = -1  # -1: nothing frozen yet


def _clear_state():
    """Every :data:`FULL_GC_EVERY` trainings: reset Keras' global state and TensorFlow's cache of
    eager kernels (``keras.backend.clear_session``), and collect garbage fully.

    Both are done in batches. A full ``gc.collect()`` costs more than many whole trainings once
    TensorFlow is imported (``benchmarks/results/training_speed.md``), so the cyclic garbage of
    old trainings is collected every so many, and the objects that exist before the first
    training (modules, TensorFlow's registries) are frozen once, so that collections, the
    automatic ones included, skip them. And emptying the kernel cache makes the next training
    build the kernel of each eager op it runs again (resetting the variables, drawing the initial
    weights), a sizeable part of its fixed cost; a training builds no Keras model, so the cache
    and Keras' state only need letting go of what trainings gone left there.
    """
    global _trainings_since_gc
    if _trainings_since_gc < 0:
        gc.freeze()
        _trainings_since_gc = 0
    _trainings_since_gc += 1
    if _trainings_since_gc >= FULL_GC_EVERY:
        keras.backend.clear_session(free_memory=False)
        gc.collect()
        _trainings_since_gc = 0


def _seed_generators(seed: int):
    """Seed Python's and NumPy's global generators, as ``keras.utils.set_random_seed(seed)`` does:
    a network's initial weights are drawn from seeds that Python's generator gives
    (:meth:`~autodeuq.nn.plan.NetworkPlan.initial_values`, as Keras' layers draw them).

    Not TensorFlow's global seed, which ``keras.utils.set_random_seed`` sets too: nothing in a
    training draws from it (the shuffles and dropout draw from the trainer's own generator), and
    setting it empties TensorFlow's cache of eager kernels (see :func:`_clear_state`).
    """
    random.seed(seed)
    np.random.seed(seed)


def _seed32(seed) -> int:
    """A non-negative seed as ``numpy.random.seed`` accepts one (below 2**32)."""
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if seed < 2**32:
        return seed
    return int(np.random.SeedSequence(seed).generate_state(1, np.uint32)[0])


def train(config, space, dataset, *, seed: int = 0, epochs: int | None = None,
          threads: int | None = None, discarder=None, schedule=None,
          time_limit: float | None = None) -> TrainResult:
    # Complexity 11: the one try block that turns every failure of a training into its result.
    """Train one configuration; never raises (problems become a failed :class:`TrainResult`).

    Parameters
    ----------
    config : dict
        ``{"arch": [...], "hp": {...}}`` (see :mod:`autodeuq.search.space`).
    space : SearchSpace
        Decodes the architecture; gives the default epoch budget.
    dataset : Dataset
        Original-unit arrays and the training-split ``scaler``.
    seed : int
        Seeds the initial weights and the per-epoch shuffles (reproducible on CPU). This also
        reseeds Python's and NumPy's global generators (:func:`_seed_generators`; TensorFlow's
        global seed is left as it is). Any non-negative integer; one of 2**32 or more is first
        reduced to 32 bits with ``numpy.random.SeedSequence``.
    epochs : int, optional
        Epoch budget; ``space.epochs`` when omitted (or 0).
    threads : int, optional
        Passed to :func:`configure_threads` (only effective before TensorFlow starts).
    discarder : SuccessiveHalving, optional
        Early discarding (:mod:`autodeuq.discard`): at each of its rungs (counted in epochs, or in
        optimizer steps, which this training's batch size turns into epochs) the training reports
        its best validation loss so far and stops if told to; the result is then ``"discarded"``,
        with the model and predictions of its best epoch so far.
    schedule : sequence of float, optional
        A refit: train exactly ``len(schedule)`` epochs, epoch ``k`` with learning rate
        ``schedule[k]`` (e.g. the rates an earlier training used up to its best epoch), without
        early stopping or plateau reductions, and keep the weights of the last epoch. The
        validation data then only gives the reported losses. Replaces ``epochs``.
    time_limit : float, optional
        Seconds this training may take, counted from its start: after an epoch, when another
        epoch as long as that one would end past the limit, training ends there, like an early
        stop (the best epoch so far is kept; ``extra["out_of_time"]`` says so). At least one epoch
        runs; a schedule (a refit) ignores it.

    Returns
    -------
    TrainResult
        ``objective`` = minimum validation NLL (standardized units) over the epochs,
        ``best_epoch`` its 1-based epoch, ``model_bytes`` the original-unit model with the weights
        of that epoch, ``valid_mean`` / ``valid_var`` its validation predictions (original units).
        ``extra`` holds the effective batch size, early-stopping and learning-rate facts, the
        number of traces this training caused, and a timing breakdown in seconds.

    Examples
    --------
    >>> space, data = load_space("toy"), toy_sine()
    >>> result = train(space.sample(np.random.default_rng(0)), space, data, epochs=5)
    >>> str(result.status), len(result.history["val_loss"]) <= 5
    ('done', True)
    """
    start_time = time.time()
    t0 = time.perf_counter()
    worker = worker_name()
    history: dict[str, list[float]] = {"loss": [], "val_loss": [], "lr": []}

    def failure(reason, **kwargs):
        return TrainResult.failure(reason=reason, epochs=len(history["loss"]), history=history,
                                   wall_time=time.perf_counter() - t0, worker=worker,
                                   start_time=start_time, end_time=time.time(), **kwargs)

    try:
        if threads:
            configure_threads(threads)
        reason = _check_config(config, space, dataset)
        if schedule is not None:
            schedule = [float(lr) for lr in schedule]
            if reason is None and not all(math.isfinite(lr) and lr > 0 for lr in schedule):
                reason = f"a schedule needs positive learning rates, got {schedule}"
        max_epochs = len(schedule) if schedule is not None else int(epochs or space.epochs)
        if reason is None and max_epochs < 1:
            reason = f"the epoch budget must be >= 1, got {max_epochs}"
        if reason is not None:
            return failure(reason)
        arch, hp = space.split(config)
        scaler = dataset.scaler
        n_features, n_targets = dataset.x_train.shape[1], dataset.y_train.shape[1]
        n_classes = dataset.labels.n_classes if dataset.is_classification else None
        batch_size = min(int(hp["batch_size"]), len(dataset.x_train))

        seed = _seed32(seed)
        _clear_state()
        _seed_generators(seed)
        plan = NetworkPlan.from_arch(space, arch, n_features, n_targets, n_classes)
        initial_weights, initial_state = plan.initial_values()  # the Keras model's, without building it
        n_params = plan.n_params
        key, trainer, reused = _checkout_trainer(plan, hp["optimizer"])
        traces_before = trainer.traces
        trainer.reset(initial_weights, hp["learning_rate"] if schedule is None else schedule[0], seed,
                      initial_state)
        tensors = tuple(tf.constant(np.asarray(a, dtype=np.float32)) for a in (
            scaler.transform_x(dataset.x_train), _training_targets(dataset, "train"),
            scaler.transform_x(dataset.x_valid), _training_targets(dataset, "valid"),
        )) + (tf.constant(batch_size, tf.int32),)
        book = EpochBookkeeper(hp["learning_rate"], hp["patience_reduce_lr"], hp["patience_early_stopping"])
        t_setup = time.perf_counter()

        limit = None if time_limit is None or schedule is not None else t0 + float(time_limit)
        with _graph_optimizer_off():
            reason, t_first, best_out, ended = _run_epochs(trainer, tensors, book, max_epochs, history,
                                                           discarder, schedule, limit, batch_size)
        discarded = ended == "discarded"
        traces = trainer.traces - traces_before
        _checkin_trainer(key, trainer)  # reusable even after a failure: reset() starts it afresh
        t_loop = time.perf_counter()
        if reason is not None:
            return failure(f"{reason} (optimizer={hp['optimizer']}, learning_rate={hp['learning_rate']:g})",
                           n_params=n_params)

        # the best epoch's validation pass ran with exactly the weights kept
        if n_classes is not None:
            valid_mean = valid_var = None
            valid_proba = _probabilities(best_out)
        else:
            valid_mean, valid_var = scaler.inverse_y(*split_output(best_out.astype(np.float64)))
            valid_proba = None
        model_bytes = network_bytes(plan, trainer.best_weights(), trainer.best_state_values(), scaler,
                                    classifier=n_classes is not None)
        t_end = time.perf_counter()
        return TrainResult(
            status=Status.DISCARDED if discarded else Status.DONE,
            objective=float(book.best),
            epochs=len(history["loss"]),
            best_epoch=book.best_epoch + 1,
            wall_time=t_end - t0,
            n_params=n_params,
            model_bytes=model_bytes,
            valid_mean=valid_mean,
            valid_var=valid_var,
            valid_proba=valid_proba,
            history=history,
            worker=worker,
            start_time=start_time,
            end_time=time.time(),
            extra={
                "batch_size": batch_size,
                "stopped_early": book.stopped_epoch is not None,
                "discarded_at": len(history["loss"]) if discarded else None,
                "out_of_time": ended == "out_of_time",
                "lr_reductions": book.lr_reductions,
                "traces": traces,
                "reused_trace": reused,
                "timing": {"setup": t_setup - t0, "first_epoch": t_first - t_setup,
                           "other_epochs": t_loop - t_first, "finish": t_end - t_loop},
            },
        )
    except Exception as exc:  # a training never takes its worker down
        return failure(f"{type(exc).__name__}: {exc}".strip())


def _training_targets(dataset, part: str) -> np.ndarray:
    """The targets of the training or validation rows as the loss reads them: standardized, or a
    classifier's (class code, row weight, label smoothing) rows (weights and smoothing on the
    training rows only: the validation loss, which selects epochs and networks, is the plain log
    loss)."""
    y = getattr(dataset, f"y_{part}")
    if not dataset.is_classification:
        return dataset.scaler.transform_y(y)
    from autodeuq.table.labels import class_row_weights

    train = part == "train"
    weights = class_row_weights(y[:, 0], dataset.labels.n_classes, dataset.class_weight) if train else np.ones(len(y))
    smoothing = np.full(len(y), dataset.label_smoothing if train else 0.0)
    return np.column_stack([y[:, 0], weights, smoothing])


def _probabilities(log_proba) -> np.ndarray:
    """Class probabilities (float64, rows summing to 1) from float32 log-probabilities."""
    log_proba = np.asarray(log_proba, dtype=np.float64)
    proba = np.exp(log_proba - log_proba.max(axis=1, keepdims=True))
    return proba / proba.sum(axis=1, keepdims=True)


def _run_epochs(trainer: CompiledTrainer, tensors, book: EpochBookkeeper, max_epochs: int, history,  # noqa: C901
                discarder=None, schedule=None, limit: float | None = None, batch_size: int | None = None):
    # One branch per way an epoch loop ends (budget, early stop, rung, time, schedule): the loop
    # reads as the training's steps in order; split, its state would travel between functions.
    """The epoch loop; with a ``schedule`` of learning rates, those epochs and the last one's weights.
    ``limit``: a ``perf_counter`` time that no further epoch may be expected to end after;
    ``batch_size``: the training's, for a discarder whose rungs count optimizer steps.

    Returns
    -------
    reason : str or None
        Why training failed.
    t_first : float
        ``perf_counter`` at the end of the first epoch (the one that traces).
    best_out : ndarray or None
        Validation outputs (standardized units) of the best epoch.
    ended : str or None
        ``"discarded"`` when the discarder stopped the training at a rung, ``"out_of_time"`` when
        ``limit`` did, else None.
    """
    t_first = time.perf_counter()
    best_out = None
    rungs = discarder.schedule(max_epochs, batch_size) if discarder is not None else {}
    for epoch in range(max_epochs):
        epoch_start = time.perf_counter()
        if schedule is not None:
            book.lr = schedule[epoch]
            trainer.set_learning_rate(book.lr)
        lr_used = book.lr
        losses, valid_out = trainer.run_epoch(*tensors)
        loss, val_loss = (float(v) for v in losses.numpy())
        if epoch == 0:
            t_first = time.perf_counter()
        history["loss"].append(loss)
        history["val_loss"].append(val_loss)
        history["lr"].append(lr_used)
        if not (math.isfinite(loss) and math.isfinite(val_loss)):
            what = "training" if not math.isfinite(loss) else "validation"
            return (f"non-finite {what} loss at epoch {epoch + 1} (loss={loss}, val_loss={val_loss})", t_first,
                    None, None)
        decision = book.update(val_loss)
        if schedule is not None:
            trainer.snapshot()
            best_out = valid_out.numpy()
            continue
        if decision.is_best:
            trainer.snapshot()
            best_out = valid_out.numpy()
        if decision.reduce_lr:
            trainer.set_learning_rate(decision.new_lr)
        if decision.stop:
            break
        if any(not discarder.should_continue(rung, book.best) for rung in rungs.get(epoch + 1, ())):
            return None, t_first, best_out, "discarded"
        now = time.perf_counter()
        if limit is not None and epoch + 1 < max_epochs and now + (now - epoch_start) > limit:
            return None, t_first, best_out, "out_of_time"
    return None, t_first, best_out, None


@contextlib.contextmanager
def _graph_optimizer_off():
    """Run without Grappler while training (restoring the previous setting afterwards).

    Grappler makes the first call of a freshly traced epoch slower, a large share of a short
    training (``benchmarks/grappler.py``; times in ``benchmarks/results/training_speed.md``), and
    brought no measurable per-epoch gain on these small networks.
    The setting is process-wide: one training at a time per process.
    """
    if GRAPPLER_IN_TRAINING:
        yield
        return
    previous = bool(tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False))
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": previous})


#: Ops that run functions of their own. Inside the epoch's loop body they can stall TensorFlow's
#: single-threaded executor (a ``tf.cond`` in the body, with one inter-op thread, never returned), so
#: an epoch whose body holds one runs under the default executor.
NESTED_FUNCTION_OPS = frozenset({"If", "StatelessIf", "Case", "StatelessCase", "While", "StatelessWhile",
                                 "PartitionedCall", "StatefulPartitionedCall"})


def _single_threaded_wanted() -> bool:
    """Whether the compiled epochs should trace and run under TensorFlow's single-threaded
    executor: when :data:`SINGLE_THREADED_EPOCHS` and no GPU is visible.

    The epochs' ops run one after the other anyway (each step needs the previous one's weights;
    each kernel still uses the intra-op threads), so the default executor's scheduling for
    concurrent ops is pure cost at every op of every step. Traced under this executor, the epoch's
    ``while_loop`` also stays a functional op (it is not lowered to v1 control flow, which that
    executor cannot run). The numbers are the same (the tests compare runs); the time saved is in
    ``benchmarks/results/training_speed.md``. Where a GPU is visible the default executor stays:
    the single-threaded one does not run asynchronous kernels, which a function split between host
    and device uses to pass tensors (and it was never tried on a GPU).
    """
    return SINGLE_THREADED_EPOCHS and not gpu_visible()


def _single_threaded():
    return tf.experimental.function_executor_type("SINGLE_THREADED_EXECUTOR")


def _runs_nested_functions(epoch) -> bool:
    """Whether a traced epoch's loop (a function of its graph's library, or of a spliced epoch's)
    runs functions of its own."""
    loops = epoch.library[1:] if isinstance(epoch, SplicedFunction) else epoch.graph.as_graph_def().library.function
    return any(node.op in NESTED_FUNCTION_OPS for function in loops for node in function.node_def)


def _outputs(model: keras.Model, x, batch_size: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 1:
        x = x[:, None]
    chunks = [np.asarray(model(x[i:i + batch_size], training=False)) for i in range(0, len(x), batch_size)]
    out = np.concatenate(chunks, axis=0) if chunks else np.zeros((0, model.output_shape[-1]), np.float32)
    return out.astype(np.float64)


def predict_log_proba(model: keras.Model, x, batch_size: int = 65536) -> np.ndarray:
    """Class log-probabilities (n, K), float64, of a classifier's network (which outputs logits)."""
    logits = _outputs(model, x, batch_size)
    return logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)


def predict(model: keras.Model, x, batch_size: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """Means and variances of an original-unit model (see :func:`~autodeuq.nn.model.with_scaling`).

    Returns
    -------
    mean, var : ndarray of shape (n, T), float64, original units
    """
    return split_output(_outputs(model, x, batch_size))
