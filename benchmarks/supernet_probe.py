"""One traced epoch for every network of a space (a supernet), against one trace per network.

    python benchmarks/supernet_probe.py
    python benchmarks/supernet_probe.py --batch-sizes 4 32 256 --configs 10 --epochs 20

The compiled trainer (``autodeuq.nn.train``) traces a whole epoch per network plan; tracing and
instantiating that graph is most of a training's fixed cost (``benchmarks/training_costs.py``).
Every network of a space without dropout or batch normalization is one path through the same
chain (Egele et al. 2022; Egele 2024, Figure 6.1): per cell a Dense layer that may be left out
(identity) with one of the activations, per anchor a skip that may be left out and is projected
when the widths differ, the merge activation where a cell has a skip, the head. :class:`Supernet`
here is that chain with every choice a run-time switch (``tf.cond``, ``tf.switch_case`` on
variables) and every weight shape a run-time size, in the manner of the one-shot supernets of
architecture search (Pham et al. 2018) but without shared weights: only the program is shared. A
training loads its network's switches and sizes (no retrace) and runs the same graph.

The probe measures, for ``--configs`` networks of the ``tabular`` space (those of
``benchmarks/training_speed.py``, on its boston-sized problem) at each batch size: the plan's own
trainer (a fresh :class:`~autodeuq.nn.train.CompiledTrainer`: trace, instantiation and first epoch,
then ``--epochs`` more epochs) and the supernet's (traced once per optimizer before the clock
starts: loading the network, its first epoch, the same epochs), in CPU milliseconds, and the number
of epochs after which the supernet's slower epochs have spent what the trace saved. It first checks
the supernet's outputs and gradients against :class:`~autodeuq.nn.plan.NetworkProgram` on random
networks of the shipped spaces (the largest difference is printed).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from anywhere: import the checkout's packages
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from autodeuq import activations, ops, plan  # noqa: E402
from autodeuq.nn.flat import FlatLayout  # noqa: E402
from autodeuq.nn.optimizers import FlatOptimizer  # noqa: E402
from autodeuq.nn.splice import DIRECT  # noqa: E402
from autodeuq.nn.train import CompiledTrainer, GaussianLoss  # noqa: E402

_ORDER = tuple(activations.ACTIVATIONS)  # activation index -> name


def eligible(space) -> bool:
    """Whether every network of ``space`` is a path through its supernet (no dropout, no batch
    normalization)."""
    return not space.batch_norm and all(rate == 0 for rate in space.dropout)


def _flat(t):
    return tf.reshape(t, [-1])


_LINEAR = ops.Dense("linear", "x", 1, "linear")  # the plan's linear Dense op (its units come from the weights)


def _linear_backward(kernel, x, d_z):
    """``(d_x, d_kernel flattened, d_bias)`` of ``z = x @ kernel + bias``: the written-out backward of
    the plan's Dense op (:class:`autodeuq.nn.ops.Dense`)."""
    (d_x,), (d_kernel, d_bias) = _LINEAR.backward([kernel, None], [x], (None, None), d_z, [True])
    return d_x, _flat(d_kernel), d_bias


class Supernet:
    """The chain of a space's cells with run-time switches: see the module's docstring.

    Parameters
    ----------
    space : SearchSpace
        Gives the cells' anchors and the merge activation; must be :func:`eligible`.
    n_features, n_targets : int
    n_classes : int or None
        A classifier's classes: the head is then a linear layer of ``n_classes`` logits.
    """

    def __init__(self, space, n_features: int, n_targets: int, n_classes: int | None = None):
        if not eligible(space):
            raise ValueError("a space with dropout or batch normalization has no supernet")
        self.n_features, self.n_targets = int(n_features), int(n_targets)
        self.n_classes = None if n_classes is None else int(n_classes)
        self.anchors = [space.anchors(k) for k in range(1, space.num_cells + 1)]
        self.merge = activations.get(space.merge_activation)
        self.head = None if self.n_classes is not None else ops.GaussianHead(plan.HEAD_NAME, plan.HEAD_RAW_NAME,
                                                                                self.n_targets)
        # piece i: (layer name, "kernel" / "bias"); the switches: per cell [dense on, activation,
        # (skip on, projection on) per anchor]
        self._pieces, self._switch_at = [], []
        at = 0
        for k, anchors in enumerate(self.anchors, start=1):
            self._pieces += [(plan.dense_name(k), "kernel"), (plan.dense_name(k), "bias")]
            self._pieces += [(plan.projection_name(k, a), w) for a in anchors for w in ("kernel", "bias")]
            self._switch_at.append(at)
            at += 2 + 2 * len(anchors)
        head = plan.LOGITS_NAME if self.n_classes is not None else plan.HEAD_RAW_NAME
        self._pieces += [(head, "kernel"), (head, "bias")]
        self.n_pieces = len(self._pieces)
        self.n_switches = at
        self.switches = tf.Variable(tf.zeros([at], tf.int32), trainable=False, name="switches")
        self.sizes = tf.Variable(tf.zeros([self.n_pieces], tf.int32), trainable=False, name="sizes")
        self.shapes = tf.Variable(tf.zeros([self.n_pieces, 2], tf.int32), trainable=False, name="shapes")

    @staticmethod
    def key_of(space, network_plan) -> tuple:
        """What fixes a supernet's program: the space's chain and the plan's data widths and head
        (two plans with the same key are paths through the same supernet)."""
        return (space.num_cells, space.skip_window, space.merge_activation, network_plan.n_features,
                network_plan.n_targets, network_plan.n_classes)

    # ------------------------------------------------------------------ a network's layout
    def layout(self, space, arch) -> tuple[np.ndarray, np.ndarray]:
        """``(switches, shapes)`` of architecture ``arch``: the run-time switches and, per piece,
        its ``(rows, columns)`` (a bias: ``(1, units)``; a piece the network lacks: ``(0, 0)``)."""
        switches = np.zeros(self.n_switches, np.int32)
        shapes = np.zeros((self.n_pieces, 2), np.int32)
        widths = {0: self.n_features}
        piece = 0
        for k, ((dense, skips), anchors) in enumerate(zip(space.cells(arch), self.anchors), start=1):
            if dense.dropout > 0 or dense.batch_norm:
                raise ValueError(f"cell {k} has dropout or batch normalization: not a path of the supernet")
            at, width = self._switch_at[k - 1], widths[k - 1]
            if dense.units is not None:
                switches[at], switches[at + 1] = 1, _ORDER.index(dense.activation)
                shapes[piece], shapes[piece + 1] = (width, dense.units), (1, dense.units)
                width = int(dense.units)
            piece += 2
            for j, a in enumerate(anchors):
                if a in skips:
                    switches[at + 2 + 2 * j] = 1
                    if widths[a] != width:
                        switches[at + 3 + 2 * j] = 1
                        shapes[piece], shapes[piece + 1] = (widths[a], width), (1, width)
                piece += 2
            widths[k] = width
        outputs = self.n_classes if self.n_classes is not None else 2 * self.n_targets
        shapes[piece], shapes[piece + 1] = (widths[len(self.anchors)], outputs), (1, outputs)
        return switches, shapes

    def load(self, space, arch) -> list[tuple[int, int]]:
        """Switch the supernet to ``arch`` (no retrace); the shapes of its pieces."""
        switches, shapes = self.layout(space, arch)
        self.switches.assign(switches)
        self.shapes.assign(shapes)
        self.sizes.assign(shapes[:, 0] * shapes[:, 1])
        return [tuple(int(d) for d in s) for s in shapes]

    def layers(self) -> list[tuple[str, str]]:
        """Per piece, the Keras layer and weight (``"kernel"`` or ``"bias"``) it is."""
        return list(self._pieces)

    def to_flat(self, model, shapes) -> np.ndarray:
        """The flat parameter vector of the Keras ``model`` (built from the plan of the loaded
        network), in piece order."""
        parts = []
        for (name, weight), shape in zip(self._pieces, shapes):
            if shape[0] * shape[1]:
                parts.append(np.asarray(getattr(model.get_layer(name), weight).value.numpy(), np.float32).reshape(-1))
        return np.concatenate(parts)

    def assign(self, model, flat: np.ndarray, shapes) -> None:
        """Write the flat vector ``flat`` (piece order) into the Keras ``model``'s layers."""
        start = 0
        for (name, weight), shape in zip(self._pieces, shapes):
            size = shape[0] * shape[1]
            if size:
                variable = getattr(model.get_layer(name), weight)
                variable.assign(flat[start:start + size].reshape(variable.shape))
                start += size

    # ------------------------------------------------------------------ the program
    @tf.autograph.experimental.do_not_convert
    def read_layout(self) -> None:
        """Read the loaded network's switches and sizes once, at the start of a traced function;
        :meth:`pieces`, :meth:`forward` and :meth:`backward` of that function use these tensors."""
        switches = self.switches.read_value()
        self._flags = tf.unstack(tf.equal(switches, 1), num=self.n_switches)
        self._values = tf.unstack(switches, num=self.n_switches)
        self._sizes = self.sizes.read_value()
        shapes = self.shapes.read_value()
        self._shapes = [shapes[i] if i % 2 == 0 else shapes[i, 1:] for i in range(self.n_pieces)]

    @tf.autograph.experimental.do_not_convert
    def pieces(self, params) -> list:
        """The flat vector split into its pieces: kernels ``(rows, cols)``, biases ``(cols,)``."""
        parts = tf.split(params, self._sizes, num=self.n_pieces)
        return [tf.reshape(p, s) for p, s in zip(parts, self._shapes)]

    def _switch(self, k: int, offset: int):
        return self._flags[self._switch_at[k] + offset]

    @staticmethod
    def _by_activation(index, function):
        return tf.switch_case(index, [lambda a=a: function(activations.get(a)) for a in _ORDER])

    #: its switches are tf.cond inside the loop: its epochs are traced op by op (autodeuq.nn.splice)
    spliceable = False

    @tf.autograph.experimental.do_not_convert
    def forward(self, weights, x, state=(), training=False, rng=None, via=None):
        """``(mean, var, saved)``, or a classifier's ``(logits, saved)``: the interface of
        :meth:`autodeuq.nn.plan.NetworkProgram.forward` (no state, nothing random)."""
        outputs, saved = [x], []
        piece = 0
        for k, anchors in enumerate(self.anchors):
            at = self._switch_at[k]
            h = outputs[-1]
            kernel, bias = weights[piece], weights[piece + 1]
            act = self._values[at + 1]

            def dense(h=h, kernel=kernel, bias=bias, act=act):
                z = _LINEAR.forward([kernel, bias], [h])[0]
                return z, self._by_activation(act, lambda f: f.forward(z))

            z, h = tf.cond(self._switch(k, 0), dense, lambda h=h: (h, h))
            piece += 2
            total = h
            for j, a in enumerate(anchors):
                kernel, bias = weights[piece], weights[piece + 1]
                source = outputs[a]

                def term(source=source, kernel=kernel, bias=bias, j=j, k=k):
                    return tf.cond(self._switch(k, 3 + 2 * j),
                                   lambda: _LINEAR.forward([kernel, bias], [source])[0], lambda: source)

                total = total + tf.cond(self._switch(k, 2 + 2 * j), term, lambda: tf.zeros([], x.dtype))
                piece += 2
            merged = tf.reduce_any([self._switch(k, 2 + 2 * j) for j in range(len(anchors))]) if anchors \
                else tf.constant(False)
            out = tf.cond(merged, lambda total=total: self.merge.forward(total), lambda total=total: total)
            saved.append((z, h, total, out, merged))
            outputs.append(out)
        kernel, bias = weights[piece], weights[piece + 1]
        raw = _LINEAR.forward([kernel, bias], [outputs[-1]])[0]
        keep = {"weights": weights, "outputs": outputs, "cells": saved}
        if self.head is None:
            return raw, keep
        (mean, var), keep["raw_var"] = self.head.forward([], [raw])
        return mean, var, keep

    def new_state(self, saved, via=None) -> list:
        return []

    @tf.autograph.experimental.do_not_convert
    def backward(self, saved, *d_outputs, via=None) -> list:
        """Gradients w.r.t. every piece, each flattened (size 0 for a piece the network lacks)."""
        weights, outputs, cells = saved["weights"], saved["outputs"], saved["cells"]
        if self.head is None:
            d_raw = d_outputs[0]
        else:
            (d_raw,), _ = self.head.backward([], [], saved["raw_var"], d_outputs, [True])
        head = len(weights) - 2
        grads = [None] * len(weights)
        d_values = [None] * len(outputs)  # gradient reaching each cell's output
        d_values[-1], grads[head], grads[head + 1] = _linear_backward(weights[head], outputs[-1], d_raw)
        empty = tf.zeros([0], d_raw.dtype)
        piece = head
        for k in range(len(self.anchors) - 1, -1, -1):
            anchors, at = self.anchors[k], self._switch_at[k]
            z, h, total, out, merged = cells[k]
            d_out = d_values[k + 1]
            d_total = tf.cond(merged, lambda d=d_out, t=total, o=out: self.merge.gradient(d, t, o), lambda d=d_out: d)
            piece -= 2 * len(anchors)
            for j, a in enumerate(anchors):
                kernel, source, i = weights[piece + 2 * j], outputs[a], piece + 2 * j
                on, projected = self._switch(k, 2 + 2 * j), self._switch(k, 3 + 2 * j)

                def through(d=d_total, kernel=kernel, source=source, projected=projected):
                    return tf.cond(projected, lambda: _linear_backward(kernel, source, d), lambda: (d, empty, empty))

                d_source, grads[i], grads[i + 1] = tf.cond(
                    on, through, lambda d=d_total: (tf.zeros([], d.dtype), empty, empty))
                if a > 0:
                    d_values[a] = d_source if d_values[a] is None else d_values[a] + d_source
            piece -= 2
            kernel, act, x = weights[piece], self._values[at + 1], outputs[k]

            def dense(d=d_total, z=z, h=h, kernel=kernel, act=act, x=x):
                return _linear_backward(kernel, x, self._by_activation(act, lambda f: f.gradient(d, z, h)))

            d_x, grads[piece], grads[piece + 1] = tf.cond(
                self._switch(k, 0), dense, lambda d=d_total: (d, empty, empty))
            if k > 0:
                d_values[k] = d_x if d_values[k] is None else d_values[k] + d_x
        return grads


class SupernetTrainer(CompiledTrainer):
    """The compiled trainer's epoch on a :class:`Supernet`: the network enters as the supernet's
    switches and sizes (:meth:`load`), the parameters as a flat vector of any length."""

    def __init__(self, supernet: Supernet, optimizer_name: str, loss=GaussianLoss):
        self.program, self.loss = supernet, loss
        self.shapes: list = []
        any_length = tf.TensorShape([None])
        self.params = tf.Variable(tf.zeros([0]), trainable=False, name="params", shape=any_length)
        self.best_params = tf.Variable(tf.zeros([0]), trainable=False, name="best_params", shape=any_length)
        self.state, self.best_state = None, None
        # the supernet lays its parameters out itself (Supernet.pieces), unpadded
        self.layout = self.state_layout = FlatLayout([])
        self.optimizer = FlatOptimizer(optimizer_name, 0)
        self.generator = tf.random.Generator.from_seed(0)
        self.traces = 0
        self._concrete_epoch = None

    def _trace(self):
        # its switches are tf.cond and tf.switch_case inside the loop: the default executor, as the
        # product's trainer falls back to for such loops (autodeuq.nn.train.NESTED_FUNCTION_OPS)
        return self._traced(), contextlib.nullcontext

    def load(self, space, arch) -> None:
        self.shapes = self.program.load(space, arch)

    def _epoch(self, x, y, x_valid, y_valid, batch_size, via=DIRECT):
        self.program.read_layout()
        return super()._epoch(x, y, x_valid, y_valid, batch_size, via)

    @tf.autograph.experimental.do_not_convert
    def _weights(self, via, flat):
        return self.program.pieces(flat)

    @tf.autograph.experimental.do_not_convert
    def _flat_gradient(self, grads):
        return tf.concat(grads, axis=0)  # the supernet's gradients come flat

    def reset(self, initial_weights, learning_rate: float, seed: int, initial_state=()):
        flat = np.asarray(initial_weights, np.float32).reshape(-1)
        self.params.assign(flat)
        self.best_params.assign(flat)
        self.optimizer.reset(learning_rate, size=flat.size)
        self.generator.reset_from_seed(int(seed))


def check(space, n_features: int, networks: int, seed: int = 0) -> float:
    """Largest difference, relative to the largest magnitude, between the supernet's and the plan
    program's outputs and gradients (eager, float32) on ``networks`` random networks of ``space``."""
    from autodeuq.nn.plan import NetworkPlan, NetworkProgram
    from autodeuq.nn.train import gaussian_nll_and_gradients

    supernet, rng, worst = Supernet(space, n_features, 1), np.random.default_rng(seed), 0.0
    for _ in range(networks):
        arch = space.sample_arch(rng)
        network_plan = NetworkPlan.from_arch(space, arch, n_features, 1)
        model = network_plan.build_model()
        shapes = supernet.load(space, arch)
        x = tf.constant(rng.normal(size=(7, n_features)), tf.float32)
        y = tf.constant(rng.normal(size=(7, 1)), tf.float32)
        supernet.read_layout()
        mean, var, saved = supernet.forward(supernet.pieces(tf.constant(supernet.to_flat(model, shapes))), x)
        grad = tf.concat(supernet.backward(saved, *gaussian_nll_and_gradients(y, mean, var)[1:]), 0).numpy()
        program = NetworkProgram(network_plan)
        mean2, var2, saved2 = program.forward([v.value for v in model.trainable_variables], x)
        grads2 = dict(zip((id(v) for v in model.trainable_variables),
                          program.backward(saved2, *gaussian_nll_and_gradients(y, mean2, var2)[1:])))
        grad2 = np.concatenate([np.asarray(grads2[id(getattr(model.get_layer(name), weight))]).reshape(-1)
                                for (name, weight), s in zip(supernet.layers(), shapes) if s[0] * s[1]])
        for a, b in ((mean, mean2), (var, var2), (grad, grad2)):
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            worst = max(worst, float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)))
    return worst


def glorot_kernels(model, seed: int) -> None:
    """Draw every kernel of ``model`` from Keras' default Glorot uniform with a NumPy generator.

    Not through ``keras.utils.set_random_seed``, as ``autodeuq.nn.train.train`` seeds a network: that
    also clears TensorFlow's caches of instantiated functions (so does ``keras.backend.clear_session``,
    which ``train`` calls too), and the supernet's one graph would be instantiated again at every
    training (400-570 ms on the development machine)."""
    rng = np.random.default_rng(seed)
    for variable in model.trainable_variables:
        if len(variable.shape) == 2:
            fan_in, fan_out = (int(d) for d in variable.shape)
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            variable.assign(rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32))


def _cpu_ms(function):
    t = time.process_time()
    out = function()
    return out, 1000 * (time.process_time() - t)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[4, 32, 256])
    parser.add_argument("--configs", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=20, help="epochs timed after the first")
    parser.add_argument("--check-networks", type=int, default=20)
    args = parser.parse_args(argv)
    from autodeuq.nn.train import configure_threads

    configure_threads(1)
    from autodeuq.nn.optimizers import OPTIMIZERS
    from autodeuq.nn.plan import NetworkPlan, NetworkProgram
    from autodeuq.nn.train import _graph_optimizer_off
    from autodeuq.search.space import load_space
    from benchmarks.training_speed import boston_like

    for name, n_features in (("toy", 1), ("tabular", 13)):
        print(f"check {name}: largest relative difference to the plan's program "
              f"{check(load_space(name), n_features, args.check_networks):.2e} ({args.check_networks} networks)")
    space, data = load_space("tabular"), boston_like()
    s = data.scaler
    arrays = (s.transform_x(data.x_train), s.transform_y(data.y_train), s.transform_x(data.x_valid),
              s.transform_y(data.y_valid))
    tensors = [tf.constant(np.asarray(a, np.float32)) for a in arrays]
    configs = [space.sample(np.random.default_rng(1000 + i)) for i in range(args.configs)]
    supernet = Supernet(space, tensors[0].shape[1], 1)
    trainers = {name: SupernetTrainer(supernet, name) for name in OPTIMIZERS}
    print(f"tabular space, boston-sized problem ({len(data.x_train)} training rows), {args.configs} networks, "
          f"1 + {args.epochs} epochs each; CPU ms, medians over the networks")
    with _graph_optimizer_off():
        for batch_size in args.batch_sizes:
            batch = tf.constant(batch_size)
            for i, trainer in enumerate(trainers.values()):  # one trace per optimizer, before the clock
                trainer.load(space, configs[0]["arch"])
                model = NetworkPlan.from_arch(space, configs[0]["arch"], tensors[0].shape[1], 1).build_model()
                trainer.reset(supernet.to_flat(model, trainer.shapes), 1e-3, 0)
                trainer.run_epoch(*tensors, batch)
            rows = []
            for i, config in enumerate(configs):
                network_plan = NetworkPlan.from_arch(space, config["arch"], tensors[0].shape[1], 1)
                model = network_plan.build_model()
                glorot_kernels(model, i)
                weights = [v.value.numpy() for v in model.trainable_variables]
                lr, name = config["hp"]["learning_rate"], config["hp"]["optimizer"]

                def plan_first():
                    trainer = CompiledTrainer(NetworkProgram(network_plan), name)
                    trainer.reset(weights, lr, i)
                    return trainer, trainer.run_epoch(*tensors, batch)[0].numpy()

                (own, own_loss), own_first = _cpu_ms(plan_first)
                _, own_later = _cpu_ms(lambda: [own.run_epoch(*tensors, batch)[0].numpy() for _ in range(args.epochs)])
                shared = trainers[name]

                def shared_first():
                    shared.load(space, config["arch"])
                    shared.reset(supernet.to_flat(model, shared.shapes), lr, i)
                    return shared.run_epoch(*tensors, batch)[0].numpy()

                shared_loss, shared_first_ms = _cpu_ms(shared_first)
                _, shared_later = _cpu_ms(
                    lambda: [shared.run_epoch(*tensors, batch)[0].numpy() for _ in range(args.epochs)])
                rows.append((own_first, own_later / args.epochs, shared_first_ms, shared_later / args.epochs,
                             abs(float(own_loss[0]) - float(shared_loss[0])) / abs(float(own_loss[0]))))
            own_first, own_epoch, shared_first, shared_epoch, difference = np.median(np.asarray(rows), axis=0)
            even = (own_first - shared_first) / (shared_epoch - own_epoch) if shared_epoch > own_epoch else float("inf")
            print(f"batch size {batch_size:4d}: own trace: first epoch {own_first:6.1f}, "
                  f"later {own_epoch:6.2f}/epoch | "
                  f"supernet: first epoch {shared_first:6.1f}, later {shared_epoch:6.2f}/epoch "
                  f"({shared_epoch / own_epoch:.2f}x) | even after {even:5.1f} epochs | first-epoch loss "
                  f"relative difference {difference:.1e}")


if __name__ == "__main__":
    main()
