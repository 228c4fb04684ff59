"""Networks built from architecture vectors: structure, numerics, serialization."""

import copy

import keras
import numpy as np
import pytest

from autodeuq import ops
from autodeuq.activations import ACTIVATIONS, Activation
from autodeuq.data import Standardizer
from autodeuq.layers import GaussianHead, Standardize, Unstandardize
from autodeuq.model import (
    build_network,
    count_params,
    model_from_bytes,
    model_to_bytes,
    split_output,
    with_scaling,
)
from autodeuq.plan import (
    HEAD_NAME,
    HEAD_RAW_NAME,
    INPUT_NAME,
    NetworkPlan,
    NetworkProgram,
    add_name,
    dense_name,
    merge_name,
    projection_name,
)
from autodeuq.space import SearchSpace, SpaceError

from numerics import assert_same_math, float64_networks

ACTS = ["relu", "tanh", "linear", "swish"]
NP_ACTS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "linear": lambda x: x,
    "swish": lambda x: x / (1.0 + np.exp(-x)),
}


def small_space(num_cells=3, units=(4, 8), activations=ACTS, merge="relu"):
    return SearchSpace({
        "architecture": {"num_cells": num_cells, "skip_window": 3, "units": list(units),
                         "activations": list(activations), "merge_activation": merge},
        "training": {
            "learning_rate": {"low": 1e-4, "high": 1e-1, "log": True},
            "batch_size": {"low": 1, "high": 32, "log": True},
            "optimizer": ["adam"],
            "patience_reduce_lr": {"low": 10, "high": 20},
            "patience_early_stopping": {"low": 20, "high": 30},
        },
        "epochs": 5,
    })


def dense(space, units, act):
    """The dense-decision value of Dense(units, act)."""
    return 1 + space.units.index(units) * len(space.activations) + space.activations.index(act)


def inbound(model, layer_name):
    """Names of the layers feeding ``layer_name`` (input layer = 'features')."""
    tensors = model.get_layer(layer_name).input
    tensors = tensors if isinstance(tensors, (list, tuple)) else [tensors]
    return [t._keras_history.operation.name for t in tensors]


def plan_of(space, arch, model):
    """The plan ``model`` was built from."""
    return NetworkPlan.from_arch(space, arch, model.input_shape[-1], model.output_shape[-1] // 2)


def numpy_forward(space, arch, model, x):
    """Independent re-implementation of the cell semantics of the joint space (Egele 2024, Figure 6.1)."""
    w = {layer.name: layer.get_weights() for layer in model.layers if layer.get_weights()}
    outs = {0: x}
    for k, (choice, skips) in enumerate(space.cells(arch), start=1):
        h = outs[k - 1]
        if choice.units is not None:
            kernel, bias = w[dense_name(k)]
            h = NP_ACTS[choice.activation](h @ kernel + bias)
        if skips:
            total = h
            for a in skips:
                s = outs[a]
                if s.shape[1] != h.shape[1]:
                    kernel, bias = w[projection_name(k, a)]
                    s = s @ kernel + bias
                total = total + s
            h = NP_ACTS[space.merge_activation](total)
        outs[k] = h
    kernel, bias = w[HEAD_RAW_NAME]
    raw = outs[len(outs) - 1] @ kernel + bias
    t = raw.shape[1] // 2
    return np.concatenate([raw[:, :t], np.log1p(np.exp(raw[:, t:])) + 1e-6], axis=1)


@pytest.fixture(scope="module")
def space():
    return small_space()


def test_identity_cells_without_skips_leave_only_the_head(space):
    arch = [0, 0, 0, 0, 0, 0, 0, 0, 0]
    model = build_network(space, arch, n_features=3, n_targets=1)
    assert model.output_shape == (None, 2)
    assert [layer.name for layer in model.layers] == [INPUT_NAME, HEAD_RAW_NAME, HEAD_NAME]
    assert inbound(model, HEAD_RAW_NAME) == [INPUT_NAME]


def test_dense_cell(space):
    arch = [dense(space, 8, "tanh"), 0, 0, 0, 0, 0, 0, 0, 0]
    model = build_network(space, arch, 3, 1)
    layer = model.get_layer(dense_name(1))
    assert layer.units == 8 and layer.activation.__name__ == "tanh"
    assert inbound(model, dense_name(1)) == [INPUT_NAME]
    assert inbound(model, HEAD_RAW_NAME) == [dense_name(1)]
    assert not any("merge" in layer.name or "add" in layer.name for layer in model.layers)


def test_skip_with_equal_widths_has_no_projection(space):
    # cell1 Dense(8), cell2 Dense(8) with a skip from cell 1 (anchor order: 1, 0)
    arch = [dense(space, 8, "relu"), 0, dense(space, 8, "tanh"), 1, 0, 0, 0, 0, 0]
    model = build_network(space, arch, 3, 1)
    names = [layer.name for layer in model.layers]
    assert add_name(2) in names and merge_name(2) in names
    assert not any("proj" in n for n in names)
    assert inbound(model, add_name(2)) == [dense_name(2), dense_name(1)]
    assert inbound(model, merge_name(2)) == [add_name(2)]
    assert model.get_layer(merge_name(2)).activation.__name__ == "relu"
    assert inbound(model, HEAD_RAW_NAME) == [merge_name(2)]


def test_skip_with_different_widths_is_projected(space):
    # cell2 Dense(8) with a skip from the 3-wide input (cell 0)
    arch = [0, 0, dense(space, 8, "relu"), 0, 1, 0, 0, 0, 0]
    model = build_network(space, arch, 3, 1)
    proj = model.get_layer(projection_name(2, 0))
    assert proj.units == 8 and proj.activation.__name__ == "linear"
    assert inbound(model, projection_name(2, 0)) == [INPUT_NAME]
    assert inbound(model, add_name(2)) == [dense_name(2), projection_name(2, 0)]


def test_identity_cell_with_skip_keeps_the_previous_width(space):
    # cell1 Dense(4); cell2 identity (width 4) with skips from cell 1 (same width) and the input (3 wide)
    arch = [dense(space, 4, "relu"), 0, 0, 1, 1, 0, 0, 0, 0]
    model = build_network(space, arch, 3, 1)
    assert inbound(model, add_name(2)) == [dense_name(1), dense_name(1), projection_name(2, 0)]
    assert model.get_layer(projection_name(2, 0)).units == 4
    assert projection_name(2, 1) not in [layer.name for layer in model.layers]


@pytest.mark.parametrize("arch_seed", range(8))
def test_network_matches_an_independent_numpy_forward(space, arch_seed):
    arch = space.sample_arch(np.random.default_rng(arch_seed))
    with float64_networks():
        model = build_network(space, arch, 3, 2)
        x = np.random.default_rng(1).normal(size=(5, 3))
        out = np.asarray(model(x))
    assert out.shape == (5, 4)
    assert_same_math(out, numpy_forward(space, arch, model, x))


@pytest.mark.parametrize("arch_seed", range(8))
def test_plain_ops_forward_equals_the_keras_model(space, arch_seed):
    arch = space.sample_arch(np.random.default_rng(100 + arch_seed))
    with float64_networks():
        model = build_network(space, arch, 3, 2)
        forward = NetworkProgram(plan_of(space, arch, model))
        x = np.random.default_rng(2).normal(size=(6, 3))
        weights = [v.value for v in model.trainable_variables]
        assert_same_math(np.asarray(forward(weights, x)), np.asarray(model(x)))


def test_the_space_accepts_exactly_the_registered_activations(monkeypatch):
    assert small_space(activations=list(ACTIVATIONS)).activations == list(ACTIVATIONS)
    with pytest.raises(SpaceError, match="unknown activation.*'mish'"):
        small_space(activations=["relu", "mish"])
    # a new activation is one entry of the table: the space takes it and networks use it
    monkeypatch.setitem(ACTIVATIONS, "mish", Activation("mish", gradient=None))
    space = small_space(activations=["relu", "mish"])
    model = build_network(space, [dense(space, 4, "mish")] + [0] * 8, 3, 1)
    assert model.get_layer(dense_name(1)).activation.__name__ == "mish"


def test_layer_names_come_from_the_plan():
    """The names saved models carry: the plan makes them, build_network uses them."""
    assert (dense_name(2), projection_name(3, 0), add_name(4), merge_name(4)) == (
        "cell2_dense", "cell3_skip_from0_proj", "cell4_add", "cell4_merge")
    assert (INPUT_NAME, HEAD_RAW_NAME, HEAD_NAME) == ("features", "gaussian_raw", "gaussian_head")
    space = small_space(num_cells=4, units=(3, 5), activations=ACTIVATIONS)
    for seed in range(6):
        arch = space.sample_arch(np.random.default_rng(seed))
        plan = NetworkPlan.from_arch(space, arch, 3, 2)
        model = build_network(space, arch, 3, 2)
        assert sorted(layer.name for layer in model.layers) == sorted(plan.layer_names)
        assert len(set(plan.layer_names)) == len(plan.layer_names)


def every_cell(space, act):
    """Every cell Dense(act), widths alternating so some skips need a projection, all skips on."""
    arch = []
    for cell in range(1, space.num_cells + 1):
        arch += [dense(space, space.units[cell % 2], act)] + [1] * len(space.anchors(cell))
    return arch


@pytest.mark.parametrize("case", [f"act={a}" for a in ACTIVATIONS] + [f"seed={i}" for i in range(4)])
def test_written_out_backward_equals_gradient_tape(case):
    """Each activation in every cell and as the merge activation; then random architectures."""
    import tensorflow as tf

    kind, value = case.split("=")
    space = small_space(num_cells=4, units=(3, 5), activations=ACTIVATIONS,
                        merge=value if kind == "act" else "relu")
    arch = every_cell(space, value) if kind == "act" else space.sample_arch(np.random.default_rng(int(value)))
    with float64_networks():
        model = build_network(space, arch, 3, 2)
    program = NetworkProgram(plan_of(space, arch, model))
    weights = [tf.constant(v.value) for v in model.trainable_variables]
    x, c_mean, c_var = random_inputs(3, 2)  # x wide enough to cross the kinks
    with tf.GradientTape() as tape:
        tape.watch(weights)
        mean, var, saved = program.forward(weights, x)
        loss = tf.reduce_sum(c_mean * mean) + tf.reduce_sum(c_var * var)
    expected = tape.gradient(loss, weights)
    assert_same_math(np.concatenate([mean, var], axis=1), np.asarray(model(x)))
    got = program.backward(saved, c_mean, c_var)
    assert len(got) == len(expected) == len(model.trainable_variables)
    for g, e, v in zip(got, expected, model.trainable_variables):
        assert g.shape == v.shape, v.path
        assert_same_math(g, e, err_msg=v.path)


def tape_gradients(program, weights, x, c_mean, c_var):
    """Outputs and gradients of ``sum(c_mean * mean) + sum(c_var * var)``, by tf.GradientTape."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch(weights)
        mean, var, _ = program.forward(weights, x)
        loss = tf.reduce_sum(c_mean * mean) + tf.reduce_sum(c_var * var)
    return np.concatenate([mean, var], axis=1), tape.gradient(loss, weights)


def without_backward(op):
    """A copy of ``op`` whose class (a subclass of its own) does not write its backward."""
    tape_op = copy.copy(op)
    tape_op.__class__ = type(f"Tape{type(op).__name__}", (type(op),), {"backward": ops.Op.backward})
    return tape_op


def random_inputs(n_features, n_targets, seed=7):
    """x (7 rows, spread by 2) and the two cotangents, in float64 (:func:`numerics.float64_networks`)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    return [tf.constant(rng.normal(size=(7, d)) * s, tf.float64)
            for d, s in ((n_features, 2.0), (n_targets, 1.0), (n_targets, 1.0))]


@pytest.mark.parametrize("case", ["every-cell", "same-input-twice", "seed=1", "seed=2"])
def test_ops_without_a_backward_fall_back_to_gradient_tape(case):
    """Every op of the plan without its written-out backward: the same gradients."""
    import tensorflow as tf

    space = small_space(num_cells=4, units=(3, 5), activations=ACTIVATIONS)
    if case == "every-cell":
        arch = every_cell(space, "tanh")
    elif case == "same-input-twice":  # cell 2: identity + skip from cell 1, i.e. Add(cell1, cell1, ...)
        arch = [dense(space, 5, "tanh"), 0, 0, 1, 1] + [0] * 8
    else:
        arch = space.sample_arch(np.random.default_rng(int(case.split("=")[1])))
    with float64_networks():
        model = build_network(space, arch, 3, 2)
    plan = plan_of(space, arch, model)
    taped = NetworkPlan(tuple(without_backward(op) for op in plan.ops), plan.n_features, plan.n_targets)
    assert all(type(op).backward is ops.Op.backward for op in taped.ops)
    if case == "same-input-twice":
        assert plan.ops[2].inputs[:2] == (dense_name(1), dense_name(1))
    weights = [tf.constant(v.value) for v in model.trainable_variables]
    x, c_mean, c_var = random_inputs(3, 2)
    results = []
    for p in (plan, taped):
        program = NetworkProgram(p)
        mean, var, saved = program.forward(weights, x)
        results.append((np.concatenate([mean, var], axis=1), program.backward(saved, c_mean, c_var)))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    for written, taped_grad, v in zip(results[0][1], results[1][1], model.trainable_variables):
        assert_same_math(taped_grad, written, err_msg=v.path)


class Square(ops.Op):
    """A new kind of layer in one class, without a backward: ``x ** 2``."""

    def layer(self):
        return keras.layers.Activation(keras.ops.square, name=self.name)

    def forward(self, weights, inputs):
        return inputs[0] ** 2, None


def test_a_new_op_is_one_class():
    """Inserted in a plan, it builds into the Keras model and trains through the program."""
    space = small_space()
    arch = [dense(space, 8, "tanh"), 0, dense(space, 4, "relu"), 1, 1, 0, 0, 0, 0]
    plan = NetworkPlan.from_arch(space, arch, 3, 2)
    head_raw = copy.copy(plan.ops[-2])
    assert head_raw.name == HEAD_RAW_NAME
    square = Square("square", head_raw.inputs)
    head_raw.inputs = (square.name,)
    plan = NetworkPlan(plan.ops[:-2] + (square, head_raw, plan.ops[-1]), 3, 2)
    with float64_networks():
        model = plan.build_model()
    assert "square" in [layer.name for layer in model.layers]
    program = NetworkProgram(plan)
    weights = [v.value for v in model.trainable_variables]
    x, c_mean, c_var = random_inputs(3, 2)
    out, expected = tape_gradients(program, weights, x, c_mean, c_var)
    assert_same_math(out, np.asarray(model(x)))
    _, _, saved = program.forward(weights, x)
    for got, e in zip(program.backward(saved, c_mean, c_var), expected):
        assert_same_math(got, e)


def test_tabular_space_builds_its_five_cells():
    from autodeuq.space import load_space

    space = load_space("tabular")
    arch = space.sample_arch(np.random.default_rng(0))
    model = build_network(space, arch, 13, 1)
    assert model.output_shape == (None, 2)
    dense_cells = [k for k, (c, _) in enumerate(space.cells(arch), start=1) if c.units is not None]
    assert {dense_name(k) for k in dense_cells} <= {layer.name for layer in model.layers}


def test_gaussian_head_variance_is_positive_and_softplus():
    raw = np.array([[0.5, -80.0], [1.0, 0.0], [2.0, 30.0]], dtype=np.float32)
    out = np.asarray(GaussianHead(1)(raw))
    np.testing.assert_allclose(out[:, 0], raw[:, 0])
    assert np.all(out[:, 1] > 0)
    np.testing.assert_allclose(out[:, 1], np.log1p(np.exp(raw[:, 1].astype(float))) + 1e-6, rtol=1e-5)


def test_scaling_layers_round_trip_units(space):
    rng = np.random.default_rng(0)
    x = rng.normal(5.0, 3.0, size=(40, 3))
    y = rng.normal(-2.0, 4.0, size=(40, 2))
    scaler = Standardizer.fit(x, y)
    core = build_network(space, space.sample_arch(rng), 3, 2)
    model = with_scaling(core, scaler)
    out = np.asarray(model(x.astype(np.float32)), dtype=np.float64)
    z = np.asarray(core(scaler.transform_x(x).astype(np.float32)), dtype=np.float64)
    mean, var = scaler.inverse_y(z[:, :2], z[:, 2:])
    np.testing.assert_allclose(out[:, :2], mean, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out[:, 2:], var, rtol=1e-4)
    assert Standardize(scaler.x_mean, scaler.x_std).get_config()["mean"] == pytest.approx(list(scaler.x_mean))
    assert Unstandardize(scaler.y_mean, scaler.y_std).get_config()["std"] == pytest.approx(list(scaler.y_std))


def test_split_output_and_count_params(space):
    out = np.arange(12.0).reshape(3, 4)
    mean, var = split_output(out)
    np.testing.assert_array_equal(mean, out[:, :2])
    np.testing.assert_array_equal(var, out[:, 2:])
    arch = [dense(space, 8, "relu"), 0, 0, 0, 0, 0, 0, 0, 0]
    model = build_network(space, arch, 3, 1)
    assert count_params(model) == (3 * 8 + 8) + (8 * 2 + 2)


@pytest.fixture(scope="module")
def scaled_model(space):
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(30, 3)), rng.normal(size=(30, 2))
    # every kind of cell: dense, projected skip, swish (our own serializable activation)
    arch = [dense(space, 8, "swish"), 1, 0, 1, 1, dense(space, 4, "tanh"), 1, 1, 1]
    return with_scaling(build_network(space, arch, 3, 2), Standardizer.fit(x, y)), x.astype(np.float32)


def test_model_bytes_round_trip(scaled_model):
    model, x = scaled_model
    again = model_from_bytes(model_to_bytes(model))
    np.testing.assert_allclose(np.asarray(again(x)), np.asarray(model(x)), rtol=1e-6)


def test_saving_builds_keras_attribute_skipsets_once_per_kind(scaled_model):
    from keras.src.saving import saving_lib

    model, _ = scaled_model
    model_to_bytes(model)
    remembered = saving_lib.get_attr_skipset
    assert remembered.autodeuq_memo
    kinds = remembered.cache_info().currsize
    assert kinds >= 2  # at least "Functional" and "Layer"
    model_to_bytes(model)
    assert remembered.cache_info().currsize == kinds  # the second save computed nothing new
    # what Keras' own function gives, so the saved file is the same
    assert remembered("Layer") == remembered.__wrapped__("Layer")


def test_keras_load_model_in_safe_mode(scaled_model, tmp_path):
    model, x = scaled_model
    path = tmp_path / "net.keras"
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(model(x)), rtol=1e-6)
    assert {type(layer).__name__ for layer in loaded.layers} >= {"Standardize", "Unstandardize"}
    assert not any(type(layer).__name__ == "Lambda" for layer in loaded.layers)


@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (True, False), (False, True)])
def test_the_programs_matmul_is_the_one_tensorflow_runs_in_a_function(transpose_a, transpose_b):
    """``ops.matmul`` in a graph: oneDNN's ``_MklMatMul`` exactly where TensorFlow's rewrite would
    make one (float32, oneDNN on, no GPU), the numbers of ``tf.matmul`` in a ``tf.function`` (which
    that rewrite reaches) bit for bit; eagerly, ``tf.matmul``'s."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    a = tf.constant(rng.normal(size=(13, 7) if transpose_a else (7, 13)), tf.float32)
    b = tf.constant(rng.normal(size=(5, 13) if transpose_b else (13, 5)), tf.float32)

    def product(fn):
        return tf.function(lambda a, b: fn(a, b, transpose_a=transpose_a, transpose_b=transpose_b), autograph=False)

    ours = product(ops.matmul)
    np.testing.assert_array_equal(ours(a, b), product(tf.matmul)(a, b))
    kinds = {op.type for op in ours.get_concrete_function(a, b).graph.get_operations()}
    assert ("_MklMatMul" in kinds) is ops._onednn_matmuls()
    assert ("MatMul" in kinds) is not ops._onednn_matmuls()
    np.testing.assert_array_equal(ops.matmul(a, b, transpose_a, transpose_b),
                                  tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b))
