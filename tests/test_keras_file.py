"""``.keras`` files written from a plan (no Keras model built) against Keras' own."""

import io
import json
import random
import zipfile

import h5py
import keras
import numpy as np
import pytest

from autodeuq import keras_file
from autodeuq.catalog.artifacts import _retyped, load_keras_model, load_network
from autodeuq.data import Standardizer, toy_sine
from autodeuq.keras_file import network_bytes
from autodeuq.model import model_from_bytes, model_to_bytes, with_scaling
from autodeuq.plan import NetworkPlan
from autodeuq.space import SearchSpace, load_space
from autodeuq.train import train


def stateful_space():
    """Cells with dropout and batch normalization decisions (the shipped spaces have neither)."""
    return SearchSpace({
        "architecture": {"num_cells": 4, "skip_window": 3, "units": [8, 16], "activations": ["relu", "swish"],
                         "dropout": [0.0, 0.3], "batch_norm": True},
        "training": {"learning_rate": {"low": 1e-4, "high": 1e-1, "log": True},
                     "batch_size": {"low": 1, "high": 256, "log": True}, "optimizer": ["adam"],
                     "patience_reduce_lr": {"low": 1, "high": 20}, "patience_early_stopping": {"low": 1, "high": 30}},
        "epochs": 5,
    })


def plans():
    """(label, plan) for networks of every kind of op: the shipped spaces, dropout and batch
    normalization, two targets, a classifier."""
    out = []
    for name, space in (("tabular", load_space("tabular")), ("toy", load_space("toy")),
                        ("stateful", stateful_space())):
        for i in range(4):
            arch = space.sample_arch(np.random.default_rng(i))
            n_targets, n_classes = (2, None) if i == 1 else (1, 3) if i == 2 else (1, None)
            out.append((f"{name}-{i}", NetworkPlan.from_arch(space, arch, 3, n_targets, n_classes)))
    kinds = {type(op).__name__ for _, plan in out for op in plan.ops}
    assert kinds == {"Dense", "Add", "Activation", "GaussianHead", "Dropout", "BatchNormalization"}
    return out


PLANS = plans()


def keras_model_with(plan, rng):
    """The plan's Keras core with random weights and state (not its initial ones)."""
    core = plan.build_model()
    for v in core.trainable_variables:
        v.assign(rng.normal(size=v.shape).astype(np.float32))
    for v in plan.state_variables(core):
        v.assign(rng.uniform(0.5, 2.0, size=v.shape).astype(np.float32))
    return core


def without_ids(config):
    """A model config without Keras' ids of shared objects (they differ between two savings)."""
    if isinstance(config, dict):
        return {k: without_ids(v) for k, v in config.items() if k != "shared_object_id"}
    if isinstance(config, list):
        return [without_ids(v) for v in config]
    return config


def saved_variables(model):
    """The variables a saved file carries, by path (a dropout layer's seed generator is not saved)."""
    return {v.path: v.numpy() for v in model.variables if "seed_generator" not in v.path}


@pytest.mark.parametrize("label,plan", PLANS, ids=[label for label, _ in PLANS])
def test_the_file_loads_to_the_model_keras_saves(label, plan):
    rng = np.random.default_rng(7)
    core = keras_model_with(plan, rng)
    x = rng.normal(size=(25, 3)) * 4.0 + 1.0
    scaler = Standardizer.fit(x, rng.normal(size=(25, plan.n_targets)) * 3.0 - 2.0)
    classifier = plan.n_classes is not None
    expected = model_from_bytes(model_to_bytes(with_scaling(core, scaler, classifier=classifier)))
    data = network_bytes(plan, [v.numpy() for v in core.trainable_variables],
                         [v.numpy() for v in plan.state_variables(core)], scaler, classifier=classifier)
    got = load_keras_model(data, label)  # the catalog's checks and Keras' safe mode
    assert without_ids(got.get_config()) == without_ids(expected.get_config())
    want, have = saved_variables(expected), saved_variables(got)
    assert list(have) == list(want)
    for path in want:
        np.testing.assert_array_equal(have[path], want[path], err_msg=path)
    x32 = x.astype(np.float32)
    np.testing.assert_array_equal(got.predict(x32, verbose=0), expected.predict(x32, verbose=0))


@pytest.mark.parametrize("label,plan", PLANS, ids=[label for label, _ in PLANS])
def test_initial_values_are_the_keras_models_after_the_same_seed(label, plan):
    keras.utils.set_random_seed(11)
    weights, state = plan.initial_values()
    keras.utils.set_random_seed(11)
    core = plan.build_model()
    assert [w.shape for w in weights] == [tuple(v.shape) for v in core.trainable_variables] == plan.weight_shapes()
    for w, v in zip(weights, core.trainable_variables):
        np.testing.assert_array_equal(w, v.numpy(), err_msg=v.path)
    for s, v in zip(state, plan.state_variables(core), strict=True):
        np.testing.assert_array_equal(s, v.numpy(), err_msg=v.path)
    assert plan.n_params == sum(int(np.prod(v.shape)) for v in core.trainable_variables)
    assert plan.state_shapes() == [tuple(v.shape) for v in plan.state_variables(core)]


def test_writing_leaves_pythons_random_state_as_it_was():
    """Making a Keras Dense layer (for its serialized entry) draws from Python's generator; the
    writer puts it back, so a file written between two draws changes neither."""
    _, plan = PLANS[0]
    weights, state = plan.initial_values()
    scaler = Standardizer.fit(np.arange(12.0).reshape(4, 3), np.arange(4.0).reshape(4, 1))
    keras_file._ENTRIES.clear()  # entries made anew: the layers are made
    before = random.getstate()
    network_bytes(plan, weights, state, scaler)
    assert random.getstate() == before


def test_weights_of_other_shapes_are_refused():
    _, plan = PLANS[0]
    weights, state = plan.initial_values()
    scaler = Standardizer.fit(np.arange(12.0).reshape(4, 3), np.arange(4.0).reshape(4, 1))
    with pytest.raises(ValueError, match="shapes"):
        network_bytes(plan, weights[:-1], state, scaler)
    with pytest.raises(ValueError, match="shapes"):
        network_bytes(plan, [w.T for w in weights], state, scaler)


def test_a_trainings_file_predicts_its_recorded_validation_outputs():
    space, data = load_space("toy"), toy_sine()
    result = train(space.sample(np.random.default_rng(4)), space, data, seed=3, epochs=3)
    assert str(result.status) == "done"
    model = load_keras_model(result.model_bytes, "training")
    out = model.predict(np.asarray(data.x_valid, np.float32), verbose=0).astype(np.float64)
    mean, var = out[:, :1], out[:, 1:]
    # float32 arithmetic both ways, in another order: relative to the magnitudes
    scale = np.abs(result.valid_mean).max() + 1.0
    np.testing.assert_allclose(mean, result.valid_mean, rtol=0, atol=1e-4 * scale)
    np.testing.assert_allclose(var, result.valid_var, rtol=1e-3, atol=1e-4 * float(np.max(result.valid_var)))


# --------------------------------------------------------------------------- reading files back
def scaled_file(plan, seed=7, keras_saved=False):
    """(bytes, Keras model of the file, x): a file of the plan's network with random weights, as
    autodeuq writes it, or as Keras' own saver wrote the same model (the catalogs written before
    autodeuq wrote its files itself)."""
    rng = np.random.default_rng(seed)
    core = keras_model_with(plan, rng)
    x = rng.normal(size=(25, 3)) * 4.0 + 1.0
    scaler = Standardizer.fit(x, rng.normal(size=(25, plan.n_targets)) * 3.0 - 2.0)
    classifier = plan.n_classes is not None
    if keras_saved:
        data = model_to_bytes(with_scaling(core, scaler, classifier=classifier))
    else:
        data = network_bytes(plan, [v.numpy() for v in core.trainable_variables],
                             [v.numpy() for v in plan.state_variables(core)], scaler, classifier=classifier)
    return data, load_keras_model(data, "file"), x


def assert_predicts_as(network, model, x):
    """The same outputs as the Keras model's: float64 to 1e-12 of their magnitude, float32 to 1e-6."""
    want64 = np.asarray(_retyped(model, "float64")(x, training=False))
    have64 = np.asarray(network.astype("float64")(x, training=False))
    np.testing.assert_allclose(have64, want64, rtol=1e-12, atol=1e-12 * (np.abs(want64).max() + 1.0))
    x32 = x.astype(np.float32)
    want32 = np.asarray(model(x32, training=False), np.float64)
    have32 = np.asarray(network(x32), np.float64)
    np.testing.assert_allclose(have32, want32, rtol=1e-6, atol=1e-6 * (np.abs(want32).max() + 1.0))


@pytest.mark.parametrize("keras_saved", [False, True], ids=["written", "keras-saved"])
@pytest.mark.parametrize("label,plan", PLANS, ids=[label for label, _ in PLANS])
def test_a_file_reads_back_to_its_plan_weights_and_predictions(label, plan, keras_saved):
    data, model, x = scaled_file(plan, keras_saved=keras_saved)
    network = keras_file.read_network(data)
    if keras_saved and plan.n_classes is not None:
        # Keras' saver numbers a classifier's output node 1 (the core's call in the scaled
        # model), the writer 0: not the written configuration, so Keras loads it
        assert network is None and isinstance(load_network(data, label), keras.Model)
        return
    assert network is not None
    assert network.plan.key == plan.key and network.plan.n_classes == plan.n_classes
    assert network.output_shape == model.output_shape
    assert (sum(a.size for a in network._arrays[0] + network._arrays[1])
            == sum(v.size for v in saved_variables(model).values()))
    assert_predicts_as(network, model, x)
    assert isinstance(load_network(data, label), keras_file.SavedNetwork)
    with pytest.raises(ValueError, match="only predicts"):
        network(x, training=True)


def test_a_file_that_is_not_exactly_a_plans_network_goes_through_keras():
    _, plan = PLANS[0]
    data, model, x = scaled_file(plan)

    def rewritten(data, member, change):
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(data)) as old, zipfile.ZipFile(out, "w") as new:
            for name in old.namelist():
                new.writestr(name, change(old.read(name)) if name == member else old.read(name))
        return out.getvalue()

    def config_change(edit):
        def change(raw):
            config = json.loads(raw)
            edit(config)
            return json.dumps(config).encode()
        return change

    core = lambda config: config["config"]["layers"][2]["config"]["layers"]  # noqa: E731
    dense = next(i for i, layer in enumerate(core(json.loads(zipfile.ZipFile(io.BytesIO(data)).read("config.json"))))
                 if layer["class_name"] == "Dense")
    refused = {
        # a setting the plan's program would not compute
        "use_bias": config_change(lambda c: core(c)[dense]["config"].update(use_bias=False)),
        "kernel regularizer": config_change(lambda c: core(c)[dense]["config"].update(kernel_regularizer="l2")),
        # a layer of no op
        "layer kind": config_change(lambda c: core(c)[dense].update(class_name="EinsumDense")),
    }
    assert keras_file.read_network(rewritten(data, "config.json", config_change(lambda c: None))) is not None
    for label, change in refused.items():
        assert keras_file.read_network(rewritten(data, "config.json", change)) is None, label

    with h5py.File(io.BytesIO(zipfile.ZipFile(io.BytesIO(data)).read("model.weights.h5")), "r") as f:
        paths = []
        f.visititems(lambda p, item: paths.append(p) if isinstance(item, h5py.Dataset) else None)
    kernel = next(p for p in paths if p.endswith("vars/0"))

    def with_h5(edit):
        def change(raw):
            buffer = io.BytesIO(raw)
            with h5py.File(buffer, "r+") as f:
                edit(f)
            return buffer.getvalue()
        return change

    def extra(f):
        f.create_dataset("extra/vars/0", data=np.zeros(3, np.float32))

    def reshaped(f):
        value = f[kernel][()]
        del f[kernel]
        f.create_dataset(kernel, data=value.reshape(-1))

    def float64(f):
        value = f[kernel][()]
        del f[kernel]
        f.create_dataset(kernel, data=value.astype(np.float64))

    assert keras_file.read_network(rewritten(data, "model.weights.h5", with_h5(lambda f: None))) is not None
    for label, edit in {"extra dataset": extra, "other shape": reshaped, "float64": float64}.items():
        assert keras_file.read_network(rewritten(data, "model.weights.h5", with_h5(edit))) is None, label

    # a file Keras reads and the plan reader does not is still loaded, by Keras
    other = rewritten(data, "config.json", refused["kernel regularizer"])
    loaded = load_network(other, "other")
    assert isinstance(loaded, keras.Model)
    np.testing.assert_array_equal(np.asarray(loaded(x.astype(np.float32))), np.asarray(model(x.astype(np.float32))))
    assert load_network(other, "other", "float64")(x, training=False).dtype == "float64"
