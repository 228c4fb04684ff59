"""The network of an architecture vector as a plan: its ops, in order, derived once.

A :class:`NetworkPlan` is the one description of a network (Egele et al. 2022; Egele 2024,
Figure 6.1): a chain of cells, each a dense decision (identity or ``Dense(units, activation)``)
plus skip connections to the outputs of up to ``skip_window`` previous cells (cell 0 is the
input), then a Gaussian head giving, per target, a mean and a positive variance, or, for a
classifier, a linear layer giving one logit per class (softmax outside the network: the
catalog's models output logits). A space may add
to each cell batch normalization of its Dense output and dropout of its output (see
``search_spaces/README.md``). From it come

* the Keras model (:meth:`NetworkPlan.build_model`, used by :func:`autodeuq.nn.model.build_network`);
* its weights' shapes and initial values, without a Keras model (:meth:`NetworkPlan.initial_values`);
* the plain-ops program the compiled trainer runs (:class:`NetworkProgram`);
* the saved ``.keras`` file of its trained weights, without a Keras model either
  (:mod:`autodeuq.nn.keras_file`);
* the key of the trainer's cache of compiled epochs (:attr:`NetworkPlan.key`).

Layer names are made here only (:func:`dense_name`, :func:`projection_name`, ...); saved
``.keras`` files carry them, so they never change.

Merge rule (a choice the method leaves open): the merge activation (ReLU by default) is applied
only to a cell that has at least one active skip. A cell without skips outputs its dense output
unchanged, so an identity cell without skips is a true no-op and ``linear`` activations stay
linear. A skip whose width differs from the cell's goes through a linear projection.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

from autodeuq.nn import ops
from autodeuq.nn.splice import DIRECT, NotSpliceable

INPUT_NAME = "features"
CORE_NAME = "autodeuq_core"
HEAD_RAW_NAME = "gaussian_raw"
HEAD_NAME = "gaussian_head"
LOGITS_NAME = "logits"


def dense_name(cell: int) -> str:
    """Name of the Dense layer of cell ``cell`` (1-based)."""
    return f"cell{cell}_dense"


def projection_name(cell: int, anchor: int) -> str:
    """Name of the linear projection of the skip from cell ``anchor`` (0 = input) into ``cell``."""
    return f"cell{cell}_skip_from{anchor}_proj"


def add_name(cell: int) -> str:
    """Name of the sum of a cell's output and its skips."""
    return f"cell{cell}_add"


def merge_name(cell: int) -> str:
    """Name of the merge activation applied to that sum."""
    return f"cell{cell}_merge"


def batch_norm_name(cell: int) -> str:
    """Name of the batch normalization of a cell's Dense output."""
    return f"cell{cell}_batch_norm"


def dropout_name(cell: int) -> str:
    """Name of the dropout of a cell's output."""
    return f"cell{cell}_dropout"


@dataclass(frozen=True)
class NetworkPlan:
    """The ops of one network, in the order they run (and their layers are created).

    Attributes
    ----------
    ops : tuple of Op
        Each reads the network input (:data:`INPUT_NAME`) or earlier ops' outputs; the last is
        the Gaussian head, whose output is ``(mean, var)``, or a classifier's logits layer.
    n_features, n_targets : int
    n_classes : int or None
        A classifier's classes (one target); None for a Gaussian network.
    """

    ops: tuple
    n_features: int
    n_targets: int
    n_classes: int | None = None

    @classmethod
    def from_arch(cls, space, arch, n_features: int, n_targets: int, n_classes: int | None = None) -> NetworkPlan:
        """The plan of architecture vector ``arch`` of ``space``; with ``n_classes``, a classifier's.

        Examples
        --------
        >>> space = load_space("toy")
        >>> [op.name for op in NetworkPlan.from_arch(space, [1, 0, 0, 0, 0, 0, 0, 0, 0], 1, 1).ops]
        ['cell1_dense', 'gaussian_raw', 'gaussian_head']
        """
        plan = []
        outputs, widths = {0: INPUT_NAME}, {0: int(n_features)}  # cell index -> output value, width
        for k, (dense, skips) in enumerate(space.cells(arch), start=1):
            x, width = outputs[k - 1], widths[k - 1]
            if dense.units is not None:
                plan.append(ops.Dense(dense_name(k), x, dense.units, dense.activation))
                x, width = dense_name(k), dense.units
                if dense.batch_norm:
                    plan.append(ops.BatchNormalization(batch_norm_name(k), x))
                    x = batch_norm_name(k)
            if skips:
                terms = [x]
                for a in skips:
                    if widths[a] == width:
                        terms.append(outputs[a])
                    else:
                        plan.append(ops.Dense(projection_name(k, a), outputs[a], width, "linear"))
                        terms.append(projection_name(k, a))
                plan.append(ops.Add(add_name(k), terms))
                plan.append(ops.Activation(merge_name(k), add_name(k), space.merge_activation))
                x = merge_name(k)
            if dense.dropout > 0:
                plan.append(ops.Dropout(dropout_name(k), x, dense.dropout))
                x = dropout_name(k)
            outputs[k], widths[k] = x, width
        if n_classes is not None:
            plan.append(ops.Dense(LOGITS_NAME, outputs[len(outputs) - 1], int(n_classes), "linear"))
            return cls(tuple(plan), int(n_features), 1, int(n_classes))
        plan.append(ops.Dense(HEAD_RAW_NAME, outputs[len(outputs) - 1], 2 * int(n_targets), "linear"))
        plan.append(ops.GaussianHead(HEAD_NAME, HEAD_RAW_NAME, n_targets))
        return cls(tuple(plan), int(n_features), int(n_targets))

    @property
    def layer_names(self) -> list[str]:
        """The names of the Keras model's layers, input first."""
        return [INPUT_NAME] + [op.name for op in self.ops]

    @property
    def key(self) -> str:
        """A string equal for two plans exactly when they compute the same function of their
        weights (the trainer's cache key)."""
        return json.dumps([self.n_features, self.n_targets,
                           [[type(op).__name__, op.name, list(op.inputs), op.config()] for op in self.ops]])

    def widths(self) -> dict[str, int]:
        """The width of every value: the input's and each op's output."""
        widths = {INPUT_NAME: self.n_features}
        for op in self.ops:
            widths[op.name] = op.output_width([widths[i] for i in op.inputs])
        return widths

    def _with_input_widths(self) -> list[tuple[ops.Op, list[int]]]:
        """Each op with the widths of its inputs."""
        widths = self.widths()
        return [(op, [widths[i] for i in op.inputs]) for op in self.ops]

    def op_shapes(self) -> list[tuple[ops.Op, list[tuple[int, ...]], list[tuple[int, ...]]]]:
        """Each op with the shapes of its trainable weights and of its state, in the plan's order."""
        return [(op, op.weight_shapes(inputs), op.state_shapes(inputs)) for op, inputs in self._with_input_widths()]

    def weight_shapes(self) -> list[tuple[int, ...]]:
        """The shapes of the trainable weights, op by op: the order of the Keras model's
        ``trainable_variables`` and of a :class:`NetworkProgram`'s weights."""
        return [shape for _, weights, _ in self.op_shapes() for shape in weights]

    def state_shapes(self) -> list[tuple[int, ...]]:
        """The shapes of the ops' state, op by op (the order of :meth:`state_variables`)."""
        return [shape for _, _, state in self.op_shapes() for shape in state]

    @property
    def n_params(self) -> int:
        """The number of trainable parameters."""
        return int(sum(int(np.prod(s)) for s in self.weight_shapes()))

    def initial_values(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """``(weights, state)`` as the Keras model starts them (:meth:`autodeuq.nn.ops.Op.initial_weights`):
        after the same ``keras.utils.set_random_seed(s)``, equal to the variables of
        :meth:`build_model`'s model, without building it."""
        weights, state = [], []
        for op, inputs in self._with_input_widths():
            weights += op.initial_weights(inputs)
            state += op.initial_state(inputs)
        return weights, state

    def state_variables(self, model: keras.Model) -> list:
        """The variables of ``model`` (built from this plan) that hold the ops' state
        (:meth:`autodeuq.nn.ops.Op.state_variables`), op by op: the order of a program's state."""
        return [v for op in self.ops for v in op.state_variables(model.get_layer(op.name))]

    def build_model(self, name: str = CORE_NAME) -> keras.Model:
        """The Keras model: input ``(n, n_features)`` -> output ``(n, 2T)`` (means, variances), or a
        classifier's ``(n, K)`` logits."""
        values = {INPUT_NAME: keras.Input(shape=(self.n_features,), name=INPUT_NAME)}
        for op in self.ops:
            values[op.name] = op.call_layer(op.layer(), [values[i] for i in op.inputs])
        return keras.Model(values[INPUT_NAME], values[self.ops[-1].name], name=name)


class NetworkProgram:
    """A plan's computation as plain ops on a list of weights, with its backward pass.

    ``program(weights, x)`` gives the network's output (``(n, 2T)``, or a classifier's ``(n, K)``
    logits) in inference, where ``weights`` lists tensors in the order of
    :meth:`NetworkPlan.weight_shapes` (that of the Keras model's ``trainable_variables``); it
    applies the same ops in the same order as the Keras layers, so it gives the same numbers.
    :meth:`forward` and :meth:`backward` are the training pair: each op's forward keeps what its
    backward needs (:mod:`autodeuq.nn.ops`), and an op without a written-out backward runs its
    forward under a ``tf.GradientTape``. The tests check the outputs against the Keras model and
    the gradients against ``tf.GradientTape``.

    Parameters
    ----------
    plan : NetworkPlan
    """

    def __init__(self, plan: NetworkPlan):
        self.steps, self.weight_shapes, self.state_shapes = [], [], []
        for op, weights, state in plan.op_shapes():
            n_weights, n_state = len(self.weight_shapes), len(self.state_shapes)
            self.steps.append((op, list(range(n_weights, n_weights + len(weights))),
                               list(range(n_state, n_state + len(state))), op.mode_keywords(), op.writes_backward()))
            self.weight_shapes += weights
            self.state_shapes += state
        self.output = plan.ops[-1].name
        self.n_weights = len(self.weight_shapes)

    def __call__(self, weights, x, state=()):
        *outputs, _ = self.forward(weights, x, state)
        return outputs[0] if len(outputs) == 1 else tf.concat(outputs, axis=1)

    @property
    def spliceable(self) -> bool:
        """Whether every op writes its backward out, so that a training step can be spliced from
        pieces (:mod:`autodeuq.nn.splice`): a taped op's backward needs its forward's tape."""
        return all(written for *_, written in self.steps)

    @tf.autograph.experimental.do_not_convert  # static Python loops: nothing for AutoGraph to do
    def forward(self, weights, x, state=(), training=False, rng=None, via=DIRECT):
        """``(mean, var, saved)``: the outputs, each ``(n, T)``, and what :meth:`backward` and
        :meth:`new_state` need; a classifier's ``(logits, saved)``.

        Parameters
        ----------
        weights : list of tensors
            In the order of :meth:`NetworkPlan.weight_shapes`.
        x : tensor (n, n_features)
        state : list of tensors
            The ops' state (shapes :attr:`state_shapes`); may be left out when it is empty.
        training : bool
            A training step (dropout drops, batch normalization uses the batch's statistics).
        rng : tf.random.Generator, optional
            The generator of random ops in training.
        via : Direct or Splicer
            How each op's forward is traced: directly, or as a piece of a spliced graph (then the
            values are :class:`autodeuq.nn.splice.Ref`; see :mod:`autodeuq.nn.splice`).
        """
        values, saved = {INPUT_NAME: x}, {}
        for op, where, state_where, keywords, written in self.steps:
            values[op.name], saved[op.name] = _forward_op(
                via, op, written, keywords, [weights[i] for i in where], [values[i] for i in op.inputs],
                [state[i] for i in state_where], training, rng)
        out = values[self.output]
        outputs = out if isinstance(out, tuple) else (out,)
        return (*outputs, {"weights": weights, "values": values, "saved": saved, "state": list(state)})

    @tf.autograph.experimental.do_not_convert
    def new_state(self, saved, via=DIRECT) -> list:
        """The ops' state after the training step whose :meth:`forward` gave ``saved``."""
        state = list(saved["state"])
        for op, _, state_where, _, written in self.steps:
            if state_where:
                own = saved["saved"][op.name] if written else saved["saved"][op.name].saved
                new = via.call(("new_state", op.piece_key()), op.new_state,
                               [state[i] for i in state_where], own)
                for i, value in zip(state_where, new):
                    state[i] = value
        return state

    @tf.autograph.experimental.do_not_convert
    def backward(self, saved, *d_outputs, via=DIRECT):
        """Gradients of a loss w.r.t. every weight, from its gradients w.r.t. the outputs.

        Parameters
        ----------
        saved : dict
            From :meth:`forward`.
        *d_outputs : tf.Tensor
            Gradients of the loss w.r.t. each output :meth:`forward` returned: ``d_mean, d_var``
            of shape (n, T), or a classifier's ``d_logits`` (n, K).
        via : Direct or Splicer
            As in :meth:`forward`.

        Returns
        -------
        list of tf.Tensor
            One gradient per weight, in the order of :meth:`NetworkPlan.weight_shapes`.
        """
        weights, values = saved["weights"], saved["values"]
        grads = [None] * self.n_weights
        # gradients reaching each value
        upstream = {self.output: [d_outputs[0] if len(d_outputs) == 1 else tuple(d_outputs)]}
        for op, where, _, _, written in reversed(self.steps):
            pending = upstream.pop(op.name, [])
            if not pending:
                continue
            d_output = pending[0] if len(pending) == 1 else via.call(("add_n",), _add_n, *pending)
            if not written and via is not DIRECT:
                raise NotSpliceable(f"{op!r} takes its gradients from a tape")
            d_inputs, d_weights = via.call(
                ("backward", op.piece_key()), op.backward, [weights[i] for i in where],
                [values[i] for i in op.inputs], saved["saved"][op.name], d_output, [i != INPUT_NAME for i in op.inputs])
            for i, g in zip(where, d_weights):
                grads[i] = g
            for name, d in zip(op.inputs, d_inputs):
                if name != INPUT_NAME:
                    upstream.setdefault(name, []).append(d)
        return grads


def _add_n(*values):
    return tf.add_n(list(values))


def _forward_op(via, op: ops.Op, written: bool, keywords, weights, inputs, state, training: bool, rng):
    """One op's forward through ``via`` (see :meth:`NetworkProgram.forward`)."""
    if not written and via is not DIRECT:
        raise NotSpliceable(f"{op!r} takes its gradients from a tape")
    run = op.forward if written else op.taped_forward

    def forward(weights, inputs, state):
        mode = {"training": training, "rng": rng, "state": state}
        return run(weights, inputs, **{k: mode[k] for k in keywords})

    # a random op's piece reads and moves the training's generator
    draws = training and rng is not None and "rng" in keywords
    return via.call(("forward", op.piece_key(), training, draws), forward, weights, inputs, state,
                    variables=[rng.state] if draws else [])
