"""Fused flat-vector optimizers against Keras' optimizers with default settings."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from autodeuq.optimizers import OPTIMIZERS, FlatOptimizer, make_optimizer  # noqa: E402


def keras_run(name, start, grads, rates):
    var = keras.Variable(start)
    opt = make_optimizer(name, rates[0])
    out = []
    for g, lr in zip(grads, rates):
        opt.learning_rate = lr
        opt.apply_gradients([(tf.constant(g), var)])
        out.append(var.value.numpy().copy())
    return np.array(out)


def flat_run(name, start, grads, rates, opt=None):
    var = tf.Variable(start)
    opt = opt or FlatOptimizer(name, len(start))
    opt.reset(rates[0])
    step = tf.function(opt.apply)
    out = []
    for g, lr in zip(grads, rates):
        opt.set_learning_rate(lr)
        step(tf.constant(g), var)
        out.append(var.numpy().copy())
    return np.array(out)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_flat_optimizer_follows_keras(name):
    """20 steps with varied gradients (some tiny, some zero) and a learning-rate cut at step 10."""
    rng = np.random.default_rng(0)
    start = rng.normal(size=50).astype(np.float32)
    grads = (rng.normal(size=(20, 50)) * rng.choice([1e-4, 1.0, 10.0], size=(20, 50))).astype(np.float32)
    grads[:, :3] = 0.0
    rates = [0.03] * 10 + [0.003] * 10
    expected = keras_run(name, start, grads, rates)
    got = flat_run(name, start, grads, rates)
    assert np.abs(expected - start).max() > 1e-4  # the steps did move the weights (adadelta: slowly)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["adagrad", "nadam", "adam"])
def test_reset_restarts_the_optimizer(name):
    rng = np.random.default_rng(1)
    start = rng.normal(size=8).astype(np.float32)
    grads = rng.normal(size=(5, 8)).astype(np.float32)
    opt = FlatOptimizer(name, 8)
    first = flat_run(name, start, grads, [0.01] * 5, opt)
    flat_run(name, start, grads[::-1] * 3, [0.1] * 5, opt)  # changes slots, step, u_product
    np.testing.assert_array_equal(flat_run(name, start, grads, [0.01] * 5, opt), first)


def test_unknown_optimizer():
    with pytest.raises(ValueError, match="unknown optimizer 'lion'"):
        FlatOptimizer("lion", 3)
    with pytest.raises(ValueError, match="unknown optimizer 'lion'"):
        make_optimizer("lion", 0.1)


def test_the_space_accepts_exactly_the_registered_optimizers():
    from autodeuq.space import SpaceError, load_space

    spec = load_space("toy").to_dict()
    spec["training"]["optimizer"] = list(OPTIMIZERS)
    assert list(load_space(spec).configspace["optimizer"].choices) == list(OPTIMIZERS)
    spec["training"]["optimizer"] = ["adam", "lion"]
    with pytest.raises(SpaceError, match=r"unknown optimizer\(s\) \['lion'\]"):
        load_space(spec)
