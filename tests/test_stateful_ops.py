"""Ops that behave differently in training (dropout) and carry state (batch normalization):
from a space file, through the plan, the program, the compiled trainer and the saved model."""
import copy

import keras
import numpy as np
import pytest
import tensorflow as tf

from autodeuq import ops
from autodeuq.data import from_arrays
from autodeuq.model import model_from_bytes
from autodeuq.plan import NetworkPlan, NetworkProgram, batch_norm_name, dropout_name
from autodeuq.space import SearchSpace, SpaceError, load_space
from autodeuq.train import gaussian_nll, predict, train

from numerics import assert_same_math, float64_networks

ACTS = ["relu", "tanh"]


def space_with(dropout=(0.0,), batch_norm=False, epochs=30, **architecture):
    return SearchSpace({
        "architecture": {"num_cells": 2, "skip_window": 3, "units": [8, 16], "activations": ACTS,
                         "dropout": list(dropout), "batch_norm": batch_norm, **architecture},
        "training": {
            "learning_rate": {"low": 1e-4, "high": 1e-1, "log": True},
            "batch_size": {"low": 1, "high": 256, "log": True},
            "optimizer": ["adam"],
            "patience_reduce_lr": {"low": 1, "high": 20},
            "patience_early_stopping": {"low": 1, "high": 30},
        },
        "epochs": epochs,
    })


def cell(space, units, act, skips, dropout=None, batch_norm=None):
    """The variables of one cell: Dense(units, act), its skip flags, then its extras."""
    values = [1 + space.units.index(units) * len(space.activations) + space.activations.index(act), *skips]
    if len(space.dropout) > 1:
        values.append(space.dropout.index(dropout))
    if space.batch_norm:
        values.append(int(batch_norm))
    return values


def make_data(n=150, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, size=(n, 2))
    y = np.sin(x[:, :1]) * 3.0 + x[:, 1:2] + rng.normal(size=(n, 1)) * (0.2 + 0.3 * (x[:, :1] > 0))
    return from_arrays(x, y, valid_fraction=1 / 3, seed=seed)


def config(arch, lr=0.01, batch_size=16):
    return {"arch": arch, "hp": {"learning_rate": lr, "batch_size": batch_size, "optimizer": "adam",
                                 "patience_reduce_lr": 10, "patience_early_stopping": 30}}


# ----------------------------------------------------------------------------- the space
def test_the_shipped_spaces_have_neither_and_keep_their_vectors():
    for name, n_vars in (("toy", 9), ("tabular", 17)):
        space = load_space(name)
        assert space.dropout == [0.0] and space.batch_norm is False and len(space.arch_dims) == n_vars
        plan = NetworkPlan.from_arch(space, space.sample_arch(np.random.default_rng(0)), 3, 1)
        assert not any(isinstance(op, (ops.Dropout, ops.BatchNormalization)) for op in plan.ops)


def test_a_space_file_adds_a_dropout_rate_and_batch_norm_per_cell():
    space = space_with(dropout=[0.0, 0.25], batch_norm=True)
    assert space.arch_names[:4] == ["cell1_dense", "cell1_skip_from0", "cell1_dropout", "cell1_batch_norm"]
    assert space.arch_dims[:4] == [5, 2, 2, 2]
    arch = cell(space, 16, "relu", [0], 0.25, True) + cell(space, 8, "tanh", [1, 0], 0.0, False)
    assert space.describe_arch(arch) == "1: 16 relu bn dropout 0.25 | 2: 8 tanh +skip(1)"
    names = [op.name for op in NetworkPlan.from_arch(space, arch, 2, 1).ops]
    assert names[:3] == ["cell1_dense", batch_norm_name(1), dropout_name(1)]
    assert dropout_name(2) not in names and batch_norm_name(2) not in names
    # one rate is every cell's, not a decision
    fixed = space_with(dropout=[0.1])
    assert "cell1_dropout" not in fixed.arch_names
    assert [op.name for op in NetworkPlan.from_arch(fixed, [1, 0, 0, 0, 0], 2, 1).ops][:2] == [
        "cell1_dense", dropout_name(1)]


@pytest.mark.parametrize("architecture, words", [
    ({"dropout": [0.0, 1.0]}, "architecture.dropout"), ({"dropout": []}, "architecture.dropout"),
    ({"dropout": [0.1, 0.1]}, "listed twice"), ({"batch_norm": "yes"}, "architecture.batch_norm"),
    ({"dropuot": [0.1]}, "unknown key"),
])
def test_bad_entries_are_refused(architecture, words):
    with pytest.raises(SpaceError, match=words):
        space_with(**architecture)


# ----------------------------------------------------------------------------- dropout
def test_dropout_drops_in_training_only():
    op = ops.Dropout("d", "x", 0.25)
    x = tf.ones([400, 50])
    out, scale = op.forward([], [x], training=True, rng=tf.random.Generator.from_seed(3))
    out = out.numpy()
    assert abs(np.mean(out == 0.0) - 0.25) < 0.01
    np.testing.assert_allclose(out[out != 0], 1 / 0.75, rtol=1e-6)
    inference, _ = op.forward([], [x])
    np.testing.assert_array_equal(inference.numpy(), x.numpy())
    d_input = op.backward([], [x], scale, tf.ones_like(x), [True])[0][0]
    np.testing.assert_array_equal(d_input.numpy(), out)  # the same mask


def test_dropout_network_trains_with_dropout_and_predicts_without(tmp_path):
    space = space_with(dropout=[0.5])
    arch = cell(space, 16, "tanh", [0]) + cell(space, 16, "tanh", [1, 0])
    plan = NetworkPlan.from_arch(space, arch, 2, 1)
    with float64_networks():
        model = plan.build_model()
    program = NetworkProgram(plan)
    weights = [v.value for v in model.trainable_variables]
    x = tf.constant(np.random.default_rng(0).normal(size=(64, 2)), tf.float64)
    rng = tf.random.Generator.from_seed(0)
    trained = [program.forward(weights, x, training=True, rng=rng)[0].numpy() for _ in range(2)]
    assert not np.allclose(trained[0], trained[1])  # a new mask each step
    assert_same_math(program(weights, x), model(x))
    assert not np.allclose(np.asarray(model(x, training=True)), np.asarray(model(x)))

    data = make_data()
    result = train(config(arch), space, data, seed=0, epochs=5)
    assert result.ok, result.reason
    saved = model_from_bytes(result.model_bytes)
    first, second = predict(saved, data.x_valid), predict(saved, data.x_valid)
    np.testing.assert_array_equal(first[0], second[0])
    # the validation pass of the best epoch ran without dropout, as the saved model predicts
    np.testing.assert_allclose(first[0], result.valid_mean, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- batch normalization
def bn_network(seed=0):
    space = space_with(batch_norm=True)
    arch = cell(space, 16, "tanh", [0], batch_norm=True) + cell(space, 8, "relu", [1, 1], batch_norm=True)
    keras.utils.set_random_seed(seed)
    plan = NetworkPlan.from_arch(space, arch, 2, 1)
    return space, arch, plan, plan.build_model()


def test_batch_norm_backward_falls_back_to_the_tape_and_equals_keras():
    # In float32 the two backward passes differed by 1.5e-4 relative on an AMD EPYC (the batch's
    # mean subtracted from 12 rows cancels): see numerics.py
    with float64_networks():
        _, _, plan, model = bn_network()
    assert not ops.BatchNormalization.writes_backward() and ops.Dropout.writes_backward()
    program = NetworkProgram(plan)
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(12, 2)) * 2, tf.float64)
    y = tf.constant(rng.normal(size=(12, 1)), tf.float64)
    state_before = [tf.constant(v.value) for v in plan.state_variables(model)]
    # Keras: the model in training mode and tf.GradientTape
    with tf.GradientTape() as tape:
        out = model(x, training=True)
        loss = gaussian_nll(y, out[:, :1], out[:, 1:])
    expected = tape.gradient(loss, model.trainable_variables)
    # the program: forward in training mode, written-out backward (the tape for batch norm)
    weights = [tf.constant(v.value) for v in model.trainable_variables]
    mean, var, saved = program.forward(weights, x, state_before, training=True)
    assert_same_math(np.concatenate([mean, var], axis=1), out)
    diff = mean - y
    scale = 1.0 / (12.0 * var)
    got = program.backward(saved, diff * scale, 0.5 * scale * (1.0 - diff**2 / var))
    for g, e, v in zip(got, expected, model.trainable_variables):
        assert_same_math(g, e, err_msg=v.path)
    # the state after the step is what Keras' layers hold after their training call
    keras_state = [np.asarray(v.value) for v in plan.state_variables(model)]
    assert not np.allclose(keras_state[0], 0.0)
    for new, expected_state in zip(program.new_state(saved), keras_state):
        assert_same_math(new, expected_state)


def test_dropout_backward_equals_its_tape_fallback():
    space = space_with(dropout=[0.3], batch_norm=True)
    arch = cell(space, 16, "tanh", [1], batch_norm=True) + cell(space, 16, "relu", [1, 1], batch_norm=False)
    plan = NetworkPlan.from_arch(space, arch, 2, 1)
    with float64_networks():
        model = plan.build_model()
    taped_op = lambda op: type(f"Tape{type(op).__name__}", (type(op),), {"backward": ops.Op.backward})  # noqa: E731
    taped = []
    for op in plan.ops:
        op = copy.copy(op)
        if isinstance(op, ops.Dropout):
            op.__class__ = taped_op(op)
        taped.append(op)
    taped = NetworkPlan(tuple(taped), plan.n_features, plan.n_targets)
    weights = [tf.constant(v.value) for v in model.trainable_variables]
    state = [tf.constant(v.value) for v in plan.state_variables(model)]
    x = tf.constant(np.random.default_rng(2).normal(size=(9, 2)), tf.float64)
    c = tf.constant(np.random.default_rng(3).normal(size=(9, 1)), tf.float64)
    results = []
    for p in (plan, taped):
        program = NetworkProgram(p)
        mean, var, saved = program.forward(weights, x, state, training=True, rng=tf.random.Generator.from_seed(5))
        results.append((mean.numpy(), program.backward(saved, c, -c)))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    for written, from_tape in zip(results[0][1], results[1][1]):
        assert_same_math(from_tape, written)


def test_batch_norm_statistics_are_trained_saved_and_loaded(tmp_path):
    space, arch, plan, _ = bn_network()
    data = make_data()
    result = train(config(arch), space, data, seed=0, epochs=8)
    assert result.ok, result.reason
    saved = model_from_bytes(result.model_bytes)
    core = saved.get_layer("autodeuq_core")
    moving_mean = np.asarray(core.get_layer(batch_norm_name(1)).moving_mean.value)
    moving_var = np.asarray(core.get_layer(batch_norm_name(1)).moving_variance.value)
    assert np.all(np.abs(moving_mean) > 1e-4) and not np.allclose(moving_var, 1.0)
    # the saved statistics are those the best epoch's validation pass used
    mean, var = predict(saved, data.x_valid)
    np.testing.assert_allclose(mean, result.valid_mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(var, result.valid_var, rtol=1e-5, atol=1e-5)
    # a second training of the same plan reuses the compiled epoch from fresh statistics, also
    # after a network of other widths trained on the thread's state variables in between
    other = cell(space, 8, "relu", [0], batch_norm=True) + cell(space, 16, "tanh", [1, 0], batch_norm=True)
    assert train(config(other), space, data, seed=1, epochs=2).ok
    again = train(config(arch), space, data, seed=0, epochs=8)
    assert again.extra["reused_trace"] and again.history == result.history


def keras_fit(arch, space, data, *, epochs, seed, batch_size):
    """The same network (same initial weights) trained by Keras ``fit`` with Adam: its history."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(seed)
    model = NetworkPlan.from_arch(space, arch, 2, 1).build_model()
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=lambda y, out: gaussian_nll(y, out[:, :1], out[:, 1:]))
    s = data.scaler
    f32 = lambda a: np.asarray(a, dtype=np.float32)  # noqa: E731
    return model.fit(f32(s.transform_x(data.x_train)), f32(s.transform_y(data.y_train)), batch_size=batch_size,
                     validation_data=(f32(s.transform_x(data.x_valid)), f32(s.transform_y(data.y_valid))),
                     epochs=epochs, verbose=0, shuffle=True).history


def test_batch_norm_network_trains_as_with_keras_fit():
    """Full batches (no shuffle order, no dropout mask to differ): the same losses epoch by epoch."""
    space, arch, _, _ = bn_network()
    data = make_data(n=300)
    ours = train(config(arch, batch_size=256), space, data, seed=0, epochs=10)
    theirs = keras_fit(arch, space, data, epochs=10, seed=0, batch_size=256)
    np.testing.assert_allclose(ours.history["loss"], theirs["loss"], rtol=1e-4)
    np.testing.assert_allclose(ours.history["val_loss"], theirs["val_loss"], rtol=1e-4)  # moving statistics


@pytest.mark.slow
def test_plan_trainer_and_keras_fit_reach_similar_losses_with_dropout_and_batch_norm():
    space = space_with(dropout=[0.0, 0.1], batch_norm=True)
    arch = cell(space, 16, "tanh", [0], 0.1, True) + cell(space, 16, "relu", [1, 0], 0.0, True)
    data = make_data(n=300)
    hp = config(arch, batch_size=32)
    hp["hp"]["patience_reduce_lr"] = 20  # no plateau reduction: Keras fit below has none
    ours = [train(hp, space, data, seed=s, epochs=30).objective for s in range(3)]
    theirs = [min(keras_fit(arch, space, data, epochs=30, seed=s, batch_size=32)["val_loss"]) for s in range(3)]
    assert abs(np.median(ours) - np.median(theirs)) < 0.3, (ours, theirs)
    assert max(ours + theirs) < 1.0  # both learned (a constant predictor scores ~1.4)


def test_the_epoch_graph_without_automatic_control_dependencies_gives_the_same_numbers():
    """Under the single-threaded executor the epoch's graph is built without TensorFlow's
    automatic control dependencies (``CompiledTrainer._wrapped``). With dropout in several cells
    (random draws from one generator) and batch normalization (state written every step), its
    losses, validation outputs, weights, state and generator equal the ``tf.function`` trace's,
    bit for bit, epoch after epoch."""
    import autodeuq.train as training

    space = space_with(dropout=(0.0, 0.5), batch_norm=True, num_cells=3)
    plans = []
    for seed in range(200):
        plan = NetworkPlan.from_arch(space, space.sample_arch(np.random.default_rng(seed)), 2, 1)
        kinds = [type(op).__name__ for op in plan.ops]
        if kinds.count("Dropout") >= 2 and "BatchNormalization" in kinds:
            plans.append(plan)
        if len(plans) == 3:
            break
    assert len(plans) == 3
    rng = np.random.default_rng(4)
    tensors = [tf.constant(rng.normal(size=shape).astype(np.float32))
               for shape in ((60, 2), (60, 1), (30, 2), (30, 1))] + [tf.constant(8)]
    for plan in plans:
        weights, state = plan.initial_values()
        runs = []
        for build in ("_traced", "_wrapped"):
            trainer = training.CompiledTrainer(NetworkProgram(plan), "adam", training.loss_of(plan))
            with training._graph_optimizer_off(), training._single_threaded():
                epoch = getattr(trainer, build)()
                trainer.reset(weights, 1e-2, 3, state)
                outs = [epoch(*tensors) for _ in range(4)]
                runs.append([o[0].numpy() for o in outs] + [outs[-1][1].numpy(), trainer.params.numpy(),
                                                             trainer.state.numpy(), trainer.generator.state.numpy()])
        for traced, wrapped in zip(*runs, strict=True):
            np.testing.assert_array_equal(wrapped, traced)
