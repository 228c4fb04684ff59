"""The compiled epoch: one traced function that runs a whole epoch of a network's training (seeded
shuffle, every mini-batch step, then the validation loss) on a flat parameter vector
(:class:`CompiledTrainer`), the per-thread variables it runs on (:class:`TrainerVariables`), the
cache of traced epochs, and the choice of the executor they run under.

Why and how (flat vector, splicing, the single-threaded executor): see :mod:`autodeuq.nn.train`,
which runs the epochs and does the per-epoch bookkeeping.
"""
from __future__ import annotations

import contextlib
import json
import threading
from collections import OrderedDict

import numpy as np
import tensorflow as tf

from autodeuq.nn import flat as flat_layout
from autodeuq.nn.losses import GaussianLoss, loss_of
from autodeuq.nn.ops import gpu_visible
from autodeuq.nn.optimizers import FlatOptimizer
from autodeuq.nn.plan import NetworkProgram
from autodeuq.nn.splice import DIRECT, NotSpliceable, SplicedFunction, Splicer

TRAINER_CACHE_SIZE = 4  # compiled epochs kept for reuse (each holds its traced epoch; the variables are shared)
SINGLE_THREADED_EPOCHS = True  # see _single_threaded_wanted
SPLICED_EPOCHS = True  # see CompiledTrainer._trace


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
