"""A graph spliced from pieces traced once (autodeuq.splice): the same ops as a direct trace, the
same numbers, and a training epoch spliced bit for bit like the one traced op by op."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import autodeuq.nn.trainer as trainer_settings
import autodeuq.train as training
from autodeuq import ops, splice
from autodeuq.optimizers import OPTIMIZERS
from autodeuq.plan import NetworkPlan, NetworkProgram
from autodeuq.space import SearchSpace, load_space
from autodeuq.splice import DIRECT, NotSpliceable, Splicer

SIGNATURE = [tf.TensorSpec([None, None], tf.float32)] * 2


def spliced_graph(body):
    """``body(via)``'s outputs computed twice, through a spliced graph and directly, each in its
    own graph (as the trainer's epochs are built); the concrete functions."""
    def build(via_of):
        return tf.compat.v1.wrap_function(lambda a, b: body(via_of(), a, b), signature=SIGNATURE)
    return build(Splicer), build(lambda: DIRECT)


def dense_relu(weights, x):
    return tf.nn.relu(tf.matmul(x, weights))


def test_a_piece_is_traced_once_for_every_size_and_gives_the_direct_numbers():
    splice.clear_pieces()

    def body(via, a, b):
        x, w = via.input(a), via.input(b)
        once = via.call(("dense_relu",), dense_relu, w, x)
        twice = via.call(("dense_relu",), dense_relu, w, once)  # the same piece, fed from the first
        return via.run([once, twice])

    spliced, direct = spliced_graph(body)
    assert len(splice._PIECES) == 1
    rng = np.random.default_rng(0)
    for n, width in ((5, 3), (17, 8)):  # other sizes: the same graph, no new piece
        a = tf.constant(rng.normal(size=(n, width)), tf.float32)
        b = tf.constant(rng.normal(size=(width, width)), tf.float32)
        for got, expected in zip(spliced(a, b), direct(a, b), strict=True):
            assert got.shape == (n, width)
            np.testing.assert_array_equal(got.numpy(), expected.numpy())
    ops = [op.type for op in spliced.graph.get_operations()]
    assert ops.count("MatMul") == 2 and ops.count("Relu") == 2


def test_outputs_that_are_inputs_or_plain_values_pass_through():
    def piece(x, y):
        return x, None, [tf.add(x, y), y], 3

    def body(via, a, b):
        out = via.call(("pass",), piece, via.input(a), via.input(b))
        assert out[1] is None and out[3] == 3
        return via.run([out[0], out[2][0], out[2][1]])

    spliced, _ = spliced_graph(body)
    a, b = tf.ones([2, 2]), tf.fill([2, 2], 2.0)
    got = [t.numpy() for t in spliced(a, b)]
    np.testing.assert_array_equal(got[0], a.numpy())
    np.testing.assert_array_equal(got[1], a.numpy() + b.numpy())
    np.testing.assert_array_equal(got[2], b.numpy())


def test_the_key_and_the_arguments_plain_values_and_structure_tell_pieces_apart():
    splice.clear_pieces()

    def scaled(x, factor):
        return x * factor

    def body(via, a, b):
        x = via.input(a)
        return via.run([via.call(("scaled",), scaled, x, 2.0), via.call(("scaled",), scaled, x, 3.0),
                        via.call(("other",), scaled, x, 2.0)])

    spliced, _ = spliced_graph(body)
    assert len(splice._PIECES) == 3
    a = tf.ones([1, 2])
    assert [float(t.numpy()[0, 0]) for t in spliced(a, a)] == [2.0, 3.0, 2.0]


def test_a_piece_reads_the_variables_each_call_names():
    """Traced with one variable, a piece reads another when a call names it in the same role."""
    first, second = tf.Variable([1.0, 2.0]), tf.Variable([5.0, 6.0])

    def shifted(x, variable):
        return x + variable.read_value()

    def body(via, a, b):
        x = via.input(a)
        return via.run([via.call(("shifted",), lambda x: shifted(x, v), x, variables=[v]) for v in (first, second)])

    splice.clear_pieces()
    spliced, direct = spliced_graph(body)
    assert len(splice._PIECES) == 1
    x = tf.zeros([1, 2])
    for got, expected in zip(spliced(x, x), direct(x, x), strict=True):
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    second.assign([7.0, 8.0])  # read when the graph runs
    np.testing.assert_array_equal(spliced(x, x)[1].numpy(), [[7.0, 8.0]])


def test_a_piece_that_reads_a_variable_it_was_not_given_cannot_be_spliced():
    variable = tf.Variable(tf.ones([2]))

    def read(x):
        return x + variable.read_value()

    with pytest.raises(NotSpliceable, match="not given as variables"):
        spliced_graph(lambda via, a, b: via.run(via.call(("read",), read, via.input(a))))


def test_a_piece_with_functions_of_its_own_cannot_be_spliced():
    def branching(x):
        return tf.cond(tf.reduce_all(x > 0), lambda: x, lambda: -x)

    with pytest.raises(NotSpliceable, match="functions of its own"):
        spliced_graph(lambda via, a, b: via.run(via.call(("cond",), branching, via.input(a))))


def test_stateful_ops_run_in_the_order_their_pieces_were_called():
    """Two updates of one variable that no data orders: (v * 2) + 1, never (v + 1) * 2."""
    variable = tf.Variable(3.0)

    def double():
        variable.assign(variable.read_value() * 2.0)

    def increment():
        variable.assign_add(1.0)

    def body(via, a, b):
        via.call(("double",), double, variables=[variable])
        via.call(("increment",), increment, variables=[variable])
        return via.run(via.call(("read",), variable.read_value, variables=[variable]))

    spliced = tf.compat.v1.wrap_function(lambda a, b: body(Splicer(), a, b), signature=SIGNATURE)
    for _ in range(3):
        variable.assign(3.0)
        assert float(spliced(tf.zeros([1, 1]), tf.zeros([1, 1]))) == 7.0


# ----------------------------------------------------------------------------- training epochs
def regularized_space(**architecture):
    return SearchSpace({
        "architecture": {"num_cells": 3, "skip_window": 3, "units": [8, 16], "activations": ["relu", "gelu", "tanh"],
                         **architecture},
        "training": {"learning_rate": {"low": 1e-4, "high": 1e-1, "log": True},
                     "batch_size": {"low": 1, "high": 256, "log": True}, "optimizer": ["adam"],
                     "patience_reduce_lr": {"low": 1, "high": 20}, "patience_early_stopping": {"low": 1, "high": 30}},
        "epochs": 10,
    })


def epochs_of(plan, optimizer, splice_it, rows=60, n_epochs=3):
    """Losses, validation outputs, weights, state and generator state after each of ``n_epochs``
    epochs of a trainer whose epoch is spliced or traced op by op; and whether it was spliced."""
    rng = np.random.default_rng(4)
    n_features = plan.n_features
    y_train = (rng.integers(0, plan.n_classes, size=(rows, 1)) if plan.n_classes else
               rng.normal(size=(rows, plan.n_targets)))
    y_valid = (rng.integers(0, plan.n_classes, size=(rows // 2, 1)) if plan.n_classes else
               rng.normal(size=(rows // 2, plan.n_targets)))
    if plan.n_classes:  # (code, weight, smoothing)
        y_train = np.column_stack([y_train, np.ones(rows), np.full(rows, 0.1)])
        y_valid = np.column_stack([y_valid, np.ones(rows // 2), np.zeros(rows // 2)])
    tensors = [tf.constant(np.asarray(a, np.float32)) for a in (
        rng.normal(size=(rows, n_features)), y_train, rng.normal(size=(rows // 2, n_features)), y_valid)]
    tensors.append(tf.constant(8))
    keras.utils.set_random_seed(11)
    weights, state = plan.initial_values()
    trainer = training.CompiledTrainer(NetworkProgram(plan), optimizer, training.loss_of(plan))
    trainer.reset(weights, 1e-2, 5, state)
    previous = trainer_settings.SPLICED_EPOCHS
    trainer_settings.SPLICED_EPOCHS = splice_it
    try:
        with training._graph_optimizer_off():
            runs = []
            for _ in range(n_epochs):
                losses, kept = trainer.run_epoch(*tensors)
                runs.append([losses.numpy(), kept.numpy(), trainer.params.numpy(), trainer.generator.state.numpy()]
                            + ([] if trainer.state is None else [trainer.state.numpy()]))
    finally:
        trainer_settings.SPLICED_EPOCHS = previous
    return runs, trainer.spliced


def assert_same_epochs(plan, optimizer="adam", spliced=True):
    expected, direct_spliced = epochs_of(plan, optimizer, False)
    got, was_spliced = epochs_of(plan, optimizer, True)
    assert not direct_spliced and was_spliced is spliced
    for epoch_expected, epoch_got in zip(expected, got, strict=True):
        for a, b in zip(epoch_expected, epoch_got, strict=True):
            np.testing.assert_array_equal(b, a)


def sampled_plans(space, count, n_features=5, n_targets=1, n_classes=None, seed=0):
    rng = np.random.default_rng(seed)
    return [NetworkPlan.from_arch(space, space.sample_arch(rng), n_features, n_targets, n_classes)
            for _ in range(count)]


def _less(i, limit):
    return i < limit


def _plus_one(i):
    return i + 1


def _add_square(total, x, i):
    return total + tf.reduce_sum(x) * tf.cast(i * i, tf.float32)


def test_a_spliced_epochs_functions_are_registered_while_its_trainer_lives():
    """The spliced epoch's function and its loop's are TensorFlow runtime functions for as long as
    the trainer holds them, then removed (a search makes thousands)."""
    import gc

    from tensorflow.python.eager import context

    plan = sampled_plans(load_space("tabular"), 1, seed=5)[0]
    trainer = training.CompiledTrainer(NetworkProgram(plan), "adam")
    weights, _ = plan.initial_values()
    trainer.reset(weights, 1e-2, 0)
    tensors = [tf.constant(np.ones((8, plan.n_features), np.float32)), tf.constant(np.ones((8, 1), np.float32)),
               tf.constant(np.ones((4, plan.n_features), np.float32)), tf.constant(np.ones((4, 1), np.float32)),
               tf.constant(4)]
    with training._graph_optimizer_off():
        losses, _ = trainer.run_epoch(*tensors)
    assert trainer.spliced and np.all(np.isfinite(losses.numpy()))
    names = [f.signature.name for f in trainer._concrete_epoch.library]
    assert len(names) == 3 and all(context.context().has_function(name) for name in names)
    del trainer
    gc.collect()
    assert not any(context.context().has_function(name) for name in names)


@pytest.mark.parametrize("single_threaded", [False, True])
def test_a_spliced_loop_computes_what_tf_while_loop_computes(single_threaded):
    """A ``While`` spliced from pieces (its condition and body functions of the graph, a variable
    updated in its body, an invariant handed on) gives ``tf.while_loop``'s numbers and variable
    updates, lowered to v1 control flow for the default executor and kept functional for the
    single-threaded one, as ``tf.while_loop`` decides."""
    counter = tf.Variable(0.0)

    def condition(via, i, total, limit, x):
        return via.call(("less",), _less, i, limit)

    def body(via, i, total, limit, x):
        via.call(("bump",), lambda: counter.assign_add(1.0), variables=[counter])
        return via.call(("next",), _plus_one, i), via.call(("add",), _add_square, total, x, i)

    def loop(via, limit, x):
        start = [via.constant(0, tf.int32), via.constant(0.0, tf.float32)]
        return via.run(via.loop(condition, body, start, [via.input(limit), via.input(x)]))

    signature = [tf.TensorSpec([], tf.int32), tf.TensorSpec([None], tf.float32)]
    executor = training._single_threaded if single_threaded else training.contextlib.nullcontext
    results = []
    for via_of in (Splicer, lambda: DIRECT):
        with executor():
            function = tf.function(lambda limit, x: loop(via_of(), limit, x), input_signature=signature,
                                   autograph=False).get_concrete_function()
            counter.assign(0.0)
            i, total = function(tf.constant(5), tf.constant([0.5, 1.0]))
        (while_op,) = [op for op in function.graph.get_operations() if op.type == "While"]
        assert while_op.node_def.attr["_lower_using_switch_merge"].b is not single_threaded  # False if absent
        results.append((int(i), float(total), float(counter.numpy())))
    assert results[0] == results[1] == (5, 1.5 * (1 + 4 + 9 + 16), 5.0)


@pytest.mark.parametrize("seed", range(3))
def test_spliced_epochs_of_the_tabular_space_equal_the_direct_trace(seed):
    for plan in sampled_plans(load_space("tabular"), 2, seed=seed):
        assert_same_epochs(plan)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_spliced_epochs_equal_the_direct_trace_for_every_optimizer(optimizer):
    assert_same_epochs(sampled_plans(load_space("tabular"), 1, seed=7)[0], optimizer)


def test_spliced_epochs_with_dropout_draw_as_the_direct_trace():
    """Dropout's pieces read the trainer's generator (each trainer's own), in the same order."""
    space = regularized_space(dropout=[0.0, 0.3, 0.5])
    plans = [p for p in sampled_plans(space, 40, seed=1)
             if sum(type(op).__name__ == "Dropout" for op in p.ops) >= 2][:2]
    assert len(plans) == 2
    for plan in plans:
        assert_same_epochs(plan)


def test_spliced_epochs_of_classifiers_and_two_targets_equal_the_direct_trace():
    space = load_space("tabular")
    assert_same_epochs(sampled_plans(space, 1, n_classes=3, seed=2)[0])
    assert_same_epochs(sampled_plans(space, 1, n_targets=2, seed=3)[0])


def test_a_network_with_a_taped_op_is_traced_op_by_op():
    """Batch normalization takes its gradients from a tape: its epochs are not spliced, and the
    numbers are those of the direct trace."""
    space = regularized_space(batch_norm=True)
    plan = next(p for p in sampled_plans(space, 40, seed=2)
                if any(type(op).__name__ == "BatchNormalization" for op in p.ops))
    assert not NetworkProgram(plan).spliceable
    assert_same_epochs(plan, spliced=False)


def test_a_trainer_whose_step_cannot_be_spliced_is_traced_op_by_op():
    class Branching(training.CompiledTrainer):
        def _flat_gradient(self, grads):
            flat = super()._flat_gradient(grads)
            return tf.cond(tf.reduce_all(tf.math.is_finite(flat)), lambda: flat, lambda: flat)

    plan = sampled_plans(load_space("tabular"), 1, seed=5)[0]
    trainer = Branching(NetworkProgram(plan), "adam")
    with training._graph_optimizer_off():
        trainer._trace()
    assert not trainer.spliced and trainer.traces >= 1


def test_a_spliced_epoch_holds_the_ops_of_the_direct_trace():
    """The same ops, kind for kind, in the loop body, its condition and around them; the spliced
    graph only adds the placeholders its pieces were fed through (never run), holds each distinct
    constant once, and lacks ``tf.while_loop``'s own loop counter (an addition in the body)."""
    import collections

    plan = sampled_plans(load_space("tabular"), 1, seed=3)[0]
    counts = []
    for splice_it in (False, True):
        previous, trainer_settings.SPLICED_EPOCHS = trainer_settings.SPLICED_EPOCHS, splice_it
        try:
            trainer = training.CompiledTrainer(NetworkProgram(plan), "adam")
            with training._graph_optimizer_off(), training._single_threaded():
                epoch = trainer._wrapped()
        finally:
            trainer_settings.SPLICED_EPOCHS = previous
        assert trainer.spliced is splice_it
        if splice_it:  # the epoch's function, then its loop's
            nodes = [list(f.node_def) for f in epoch.library]
        else:
            graph_def = epoch.graph.as_graph_def()
            nodes = [list(graph_def.node)] + [list(f.node_def) for f in graph_def.library.function]
        counts.append([collections.Counter(n.op for n in part if n.op != "Placeholder") for part in nodes])
        if splice_it:
            for part in nodes:
                constants = [n for n in part if n.op == "Const"]
                assert len({n.attr["value"].SerializeToString(deterministic=True) for n in constants}) == len(constants)
    direct, spliced = counts
    assert sum(part["Const"] for part in spliced) < sum(part["Const"] for part in direct)
    for part in direct + spliced:
        del part["Const"]
    body = max(range(1, len(direct)), key=lambda k: direct[k]["MatMul"] + direct[k]["_MklMatMul"])  # see ops.matmul
    assert direct[body]["AddV2"] >= 1
    direct[body]["AddV2"] -= 1  # tf.while_loop's loop counter
    assert sorted(map(sorted, (c.items() for c in spliced))) == sorted(map(sorted, (c.items() for c in direct)))
    assert sum(c["MatMul"] + c["_MklMatMul"] for c in spliced) > 0
    # the loop body's products are oneDNN's where TensorFlow's graph rewrite would make them so
    assert (direct[body]["_MklMatMul"] > 0) is ops._onednn_matmuls() is (direct[body]["MatMul"] == 0)
