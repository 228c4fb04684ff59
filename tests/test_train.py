"""The compiled training loop: loss, bookkeeping semantics, results, failures, reproducibility."""
import math
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from autodeuq import train as train_mod
from autodeuq.data import from_arrays
from autodeuq.model import model_from_bytes
from autodeuq.nn import trainer as trainer_mod
from autodeuq.optimizers import OPTIMIZERS
from autodeuq.space import SearchSpace
from autodeuq.train import (
    CompiledTrainer,
    EpochBookkeeper,
    clear_trainer_cache,
    configure_threads,
    gaussian_nll,
    gaussian_nll_and_gradients,
    predict,
    train,
)

ACTS = ["relu", "tanh", "swish"]


def small_space(epochs=12):
    # Wide training ranges: train() refuses configurations outside the space, and these tests
    # need tiny patiences, a diverging learning rate and batches larger than the data.
    return SearchSpace({
        "architecture": {"num_cells": 2, "skip_window": 3, "units": [8, 16], "activations": ACTS,
                         "merge_activation": "relu"},
        "training": {
            "learning_rate": {"low": 1e-4, "high": 1e5, "log": True},
            "batch_size": {"low": 1, "high": 10_000, "log": True},
            "optimizer": sorted(OPTIMIZERS),
            "patience_reduce_lr": {"low": 0, "high": 20},
            "patience_early_stopping": {"low": 0, "high": 30},
        },
        "epochs": epochs,
    })


def dense(space, units, act):
    return 1 + space.units.index(units) * len(space.activations) + space.activations.index(act)


def make_data(n=120, n_targets=1, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, size=(n, 2))
    noise = rng.normal(size=(n, n_targets)) * (0.2 + 0.3 * (x[:, :1] > 0))
    y = np.sin(x[:, :1]) * np.arange(1, n_targets + 1) * 4.0 + x[:, 1:2] + 10.0 + noise
    return from_arrays(x, y, valid_fraction=1 / 3, seed=seed)


def config(space, *, optimizer="adam", lr=0.01, batch_size=16, p_lr=10, p_es=20, arch=None):
    arch = arch or [dense(space, 16, "tanh"), 1, dense(space, 8, "swish"), 1, 0]
    return {"arch": arch, "hp": {"learning_rate": lr, "batch_size": batch_size, "optimizer": optimizer,
                                 "patience_reduce_lr": p_lr, "patience_early_stopping": p_es}}


@pytest.fixture(scope="module")
def space():
    return small_space()


@pytest.fixture(scope="module")
def data():
    return make_data()


@pytest.fixture(scope="module")
def result(space, data):
    # patience 3 with a largish rate: early stopping (and so a best epoch before the last) happens
    res = train(config(space, lr=0.05, p_lr=1, p_es=3), space, data, seed=0, epochs=40)
    assert res.ok, res.reason
    return res


# --------------------------------------------------------------------------- loss
def test_gaussian_nll_closed_form():
    rng = np.random.default_rng(0)
    y, mu = rng.normal(size=(7, 2)), rng.normal(size=(7, 2))
    var = rng.uniform(0.1, 3.0, size=(7, 2))
    expected = np.mean(0.5 * np.log(2 * np.pi * var) + (y - mu) ** 2 / (2 * var))
    got = float(gaussian_nll(tf.constant(y), tf.constant(mu), tf.constant(var)))
    assert got == pytest.approx(expected, rel=1e-12)
    # the standard normal at its mean: 0.5 log(2 pi)
    assert float(gaussian_nll(tf.zeros((3, 1)), tf.zeros((3, 1)), tf.ones((3, 1)))) == pytest.approx(
        0.5 * math.log(2 * math.pi), rel=1e-6)


def test_written_out_nll_gradients_equal_gradient_tape():
    rng = np.random.default_rng(1)
    y, mu = tf.constant(rng.normal(size=(9, 2))), tf.constant(rng.normal(size=(9, 2)))
    var = tf.constant(rng.uniform(0.05, 3.0, size=(9, 2)))
    with tf.GradientTape() as tape:
        tape.watch([mu, var])
        loss = gaussian_nll(y, mu, var)
    d_mu, d_var = tape.gradient(loss, [mu, var])
    got = gaussian_nll_and_gradients(y, mu, var)
    assert float(got[0]) == float(loss)
    np.testing.assert_allclose(got[1], d_mu, rtol=1e-12)
    np.testing.assert_allclose(got[2], d_var, rtol=1e-10)


# --------------------------------------------------------------------------- bookkeeping vs Keras
def keras_replay(val_losses, lr, p_lr, p_es, **lr_options):
    """Run Keras' ReduceLROnPlateau + EarlyStopping(restore_best_weights) on a loss curve."""
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr), loss="mse")
    model.optimizer.build(model.trainable_variables)
    reduce = keras.callbacks.ReduceLROnPlateau(monitor="val_loss", patience=p_lr, **lr_options)
    stop = keras.callbacks.EarlyStopping(monitor="val_loss", patience=p_es, restore_best_weights=True)
    callbacks = keras.callbacks.CallbackList([reduce, stop], model=model)
    callbacks.on_train_begin()
    model.stop_training = False
    lrs = []
    for epoch, v in enumerate(val_losses):
        lrs.append(float(np.asarray(model.optimizer.learning_rate)))
        model.layers[0].kernel.assign([[float(epoch)]])  # the weights "of" this epoch
        callbacks.on_epoch_end(epoch, {"val_loss": v, "loss": v})
        if model.stop_training:
            break
    callbacks.on_train_end()
    restored_epoch = int(round(float(np.asarray(model.layers[0].kernel)[0, 0])))
    return lrs, len(lrs), restored_epoch


def book_replay(val_losses, lr, p_lr, p_es, **lr_options):
    book = EpochBookkeeper(lr, p_lr, p_es, **lr_options)
    lrs, best = [], None
    for v in val_losses:
        lrs.append(book.lr)
        decision = book.update(v)
        if decision.is_best:
            best = book.epoch
        if decision.stop:
            break
    return lrs, len(lrs), best


CURVES = {
    "decreasing": [1.0 / (k + 1) for k in range(30)],
    "plateau": [1.0, 0.8, 0.7] + [0.7] * 30,
    "tiny_gains": [1.0] + [1.0 - 5e-5 * k for k in range(1, 30)],  # below min_delta for the LR rule only
    "bounce": [2.0, 1.5, 1.6, 1.4, 1.45, 1.41, 1.39, 1.5, 1.6, 1.7, 1.35, 1.8, 1.9, 2.0, 2.1, 2.2, 2.3] + [3.0] * 10,
    "ties": [1.0, 0.5, 0.5, 0.5, 0.4, 0.4, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6],
}


@pytest.mark.parametrize("name", sorted(CURVES))
@pytest.mark.parametrize("p_lr,p_es", [(1, 3), (2, 4), (3, 3), (5, 2)])
def test_bookkeeper_matches_keras_callbacks(name, p_lr, p_es):
    curve = CURVES[name]
    lrs, n, best = book_replay(curve, 0.01, p_lr, p_es)
    k_lrs, k_n, k_best = keras_replay(curve, 0.01, p_lr, p_es)
    assert n == k_n
    assert best == k_best
    np.testing.assert_allclose(lrs, k_lrs, rtol=1e-6)


def test_bookkeeper_matches_keras_on_random_walks():
    rng = np.random.default_rng(0)
    for _ in range(20):
        curve = list(np.cumsum(rng.normal(0, 0.05, size=40)) + 1.0)
        p_lr, p_es = int(rng.integers(1, 6)), int(rng.integers(1, 8))
        lrs, n, best = book_replay(curve, 0.1, p_lr, p_es)
        k_lrs, k_n, k_best = keras_replay(curve, 0.1, p_lr, p_es)
        assert (n, best) == (k_n, k_best)
        np.testing.assert_allclose(lrs, k_lrs, rtol=1e-6)


@pytest.mark.parametrize("name", ["plateau", "bounce", "tiny_gains"])
def test_bookkeeper_matches_keras_with_cooldown_and_min_lr(name):
    curve = CURVES[name]
    ours = book_replay(curve, 0.01, 1, 8, cooldown=2, min_lr=5e-5)
    theirs = keras_replay(curve, 0.01, 1, 8, cooldown=2, min_lr=5e-5)
    assert ours[1:] == theirs[1:]
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6)


def test_bookkeeper_by_hand():
    book = EpochBookkeeper(0.1, patience_reduce_lr=2, patience_early_stopping=3)
    decisions = [book.update(v) for v in (1.0, 0.9, 0.95, 0.96, 0.97)]
    assert [d.is_best for d in decisions] == [True, True, False, False, False]
    assert [d.reduce_lr for d in decisions] == [False, False, False, True, False]
    assert [d.stop for d in decisions] == [False, False, False, False, True]
    assert decisions[3].new_lr == pytest.approx(0.01)
    assert (book.best, book.best_epoch, book.stopped_epoch) == (0.9, 1, 4)


# --------------------------------------------------------------------------- training results
def test_objective_is_min_of_history_and_best_epoch_its_argmin(result):
    val = result.history["val_loss"]
    assert len(val) == len(result.history["loss"]) == len(result.history["lr"]) == result.epochs
    assert result.objective == min(val)
    assert result.best_epoch == int(np.argmin(val)) + 1
    assert result.extra["stopped_early"] and result.best_epoch < result.epochs


def test_loop_replays_the_bookkeeper(result):
    """The learning rates used and the stopping epoch are those the bookkeeper gives on the history."""
    lrs, n, best = book_replay(result.history["val_loss"], 0.05, 1, 3)
    assert n == result.epochs and best + 1 == result.best_epoch
    np.testing.assert_allclose(result.history["lr"], lrs, rtol=1e-6)
    assert result.extra["lr_reductions"] >= 1 and min(result.history["lr"]) < 0.05


def test_kept_weights_are_the_best_epochs(result, data):
    """Validation NLL of the returned predictions (standardized units) is the objective."""
    s = data.scaler
    mean = (result.valid_mean - s.y_mean) / s.y_std
    var = result.valid_var / s.y_std**2
    y = s.transform_y(data.y_valid)
    nll = np.mean(0.5 * np.log(2 * np.pi * var) + (y - mean) ** 2 / (2 * var))
    assert nll == pytest.approx(result.objective, rel=1e-4, abs=1e-4)
    assert nll < result.history["val_loss"][-1]


def test_saved_model_reproduces_validation_predictions(result, data, tmp_path):
    assert result.valid_mean.shape == result.valid_var.shape == (len(data.x_valid), 1)
    model = model_from_bytes(result.model_bytes)
    mean, var = predict(model, data.x_valid)
    # the training pass standardizes in float64, the saved model in float32: float32 agreement
    np.testing.assert_allclose(mean, result.valid_mean, rtol=1e-5, atol=1e-6 * np.abs(result.valid_mean).max())
    np.testing.assert_allclose(var, result.valid_var, rtol=1e-5)
    path = tmp_path / "m.keras"
    path.write_bytes(result.model_bytes)
    loaded = keras.models.load_model(path, safe_mode=True)
    mean2, _ = predict(loaded, data.x_valid)
    np.testing.assert_allclose(mean2, mean, rtol=1e-6)


def test_result_metadata(result):
    assert result.status == "done" and result.reason is None
    assert result.n_params > 0 and result.wall_time > 0
    assert ":" in result.worker and result.end_time >= result.start_time
    assert result.extra["traces"] == 1  # one trace for the whole training, not one per epoch


def test_multi_output():
    space = small_space()
    data = make_data(n=90, n_targets=2, seed=1)
    res = train(config(space, batch_size=8), space, data, seed=0, epochs=4)
    assert res.ok, res.reason
    assert res.valid_mean.shape == res.valid_var.shape == (len(data.x_valid), 2)
    assert np.all(res.valid_var > 0)
    # the two targets have different scales: predictions are in each target's own units
    assert abs(res.valid_mean[:, 1].mean() - data.y_valid[:, 1].mean()) < 3 * data.y_valid[:, 1].std()


def test_reproducible_and_seed_sensitive(space, data):
    cfg = config(space, optimizer="rmsprop", lr=0.003, batch_size=8)
    a = train(cfg, space, data, seed=7, epochs=5)
    b = train(cfg, space, data, seed=7, epochs=5)  # reuses the traced epoch
    c = train(cfg, space, data, seed=8, epochs=5)
    assert b.extra["reused_trace"] and b.extra["traces"] == 0
    assert a.objective == b.objective and a.history == b.history
    assert c.objective != a.objective


def _loop_lowered(trainer) -> bool:
    epoch = trainer._concrete_epoch
    nodes = (epoch.definition.node_def if isinstance(epoch, trainer_mod.SplicedFunction)
             else [op.node_def for op in epoch.graph.get_operations()])
    (loop,) = [node for node in nodes if node.op in ("While", "StatelessWhile")]
    return loop.attr["_lower_using_switch_merge"].b  # False where the attribute is absent


def test_the_single_threaded_executor_keeps_the_numbers_and_the_loop_functional(space, data, monkeypatch):
    """The epochs trace and run under TensorFlow's single-threaded executor where no GPU is
    visible: the same losses as the default executor, and a ``while_loop`` that stays a functional
    op (v1 control flow, which that executor cannot run, would fail the training).

    The training epochs are equal bit for bit. The validation pass may round differently: under
    the default executor a kernel may run on the intra-op thread pool, which on some CPUs sums in
    another order (seen on an Intel Xeon, not on an AMD EPYC: one float32 unit in the last place
    of the loss). A sum of ``n`` float32 terms in another order differs by at most about
    ``n * eps`` of its terms' magnitudes, so the validation losses are compared to ``n_valid * eps``,
    relative."""
    import autodeuq.nn.trainer as training  # the compiled epoch's module: its settings live there

    cfg = config(space, optimizer="adam", lr=0.01, batch_size=8)
    runs = {}
    for single, gpu in ((False, False), (True, False), (True, True)):
        monkeypatch.setattr(training, "SINGLE_THREADED_EPOCHS", single)
        monkeypatch.setattr(training, "gpu_visible", lambda gpu=gpu: gpu)  # a GPU: the default executor
        clear_trainer_cache()
        runs[single, gpu] = train(cfg, space, data, seed=5, epochs=4)
        assert runs[single, gpu].ok and runs[single, gpu].extra["traces"] == 1
        (trainer,) = training._CACHE.values()
        assert _loop_lowered(trainer) is not (single and not gpu)
        assert (trainer._executor is training._single_threaded) is (single and not gpu)
    tolerance = len(data.y_valid) * np.finfo(np.float32).eps
    for run in (runs[False, False], runs[True, True]):
        assert run.history["loss"] == runs[True, False].history["loss"]
        assert run.history["lr"] == runs[True, False].history["lr"]
        np.testing.assert_allclose(run.history["val_loss"], runs[True, False].history["val_loss"],
                                   rtol=tolerance, atol=0)
    clear_trainer_cache()


class _BranchingTrainer(CompiledTrainer):
    """A trainer whose loop body holds a ``tf.cond`` (an identity on the gradient)."""

    def _flat_gradient(self, grads):
        flat = super()._flat_gradient(grads)
        return tf.cond(tf.reduce_all(tf.math.is_finite(flat)), lambda: flat, lambda: flat)


def test_a_loop_that_runs_functions_of_its_own_falls_back_to_the_default_executor(space, data):
    """Nested control flow in the loop body can stall the single-threaded executor (with one
    inter-op thread a ``tf.cond`` there never returned), so such an epoch is traced again for the
    default executor, and trains to the same numbers."""
    import autodeuq.train as training
    from autodeuq.plan import NetworkPlan, NetworkProgram

    arch = [dense(space, 8, "relu"), 0, 0, 1, 1]
    network_plan = NetworkPlan.from_arch(space, arch, data.x_train.shape[1], 1)
    model = network_plan.build_model()
    tensors = [tf.constant(np.asarray(a, np.float32).reshape(len(a), -1))
               for a in (data.x_train, data.y_train, data.x_valid, data.y_valid)] + [tf.constant(16)]
    losses = []
    for kind in (CompiledTrainer, _BranchingTrainer):
        trainer = kind(NetworkProgram(network_plan), "adam")
        trainer.reset([v.value.numpy() for v in model.trainable_variables], 1e-2, 0)
        with training._graph_optimizer_off():
            # the decision first (as run_epoch's first call takes it), so that a wrong one fails here
            trainer._concrete_epoch, trainer._executor = trainer._trace()
            nested = kind is _BranchingTrainer
            assert training._runs_nested_functions(trainer._concrete_epoch) is nested
            assert (trainer._executor is training._single_threaded) is (training._single_threaded_wanted()
                                                                         and not nested)
            assert trainer.traces == (2 if nested and training._single_threaded_wanted() else 1)
            losses.append([trainer.run_epoch(*tensors)[0].numpy() for _ in range(3)])
    np.testing.assert_array_equal(losses[0], losses[1])


def test_trainers_share_their_threads_variables_and_keep_their_numbers(space, data):
    """A thread's trainers run on one set of variables (:class:`TrainerVariables`), reset at each
    training: a trainer reused after another network of another size trained on them (its
    parameter vector and its optimizer's slots; batch normalization's state in
    ``test_stateful_ops``) trains as it did first. Another thread has variables of its own, and
    trains to the same numbers."""
    import threading

    wide = config(space, optimizer="adam", lr=0.01, batch_size=16,
                  arch=[dense(space, 16, "relu"), 0, dense(space, 8, "tanh"), 1, 1])
    narrow = config(space, optimizer="adam", lr=0.02, batch_size=8, arch=[dense(space, 8, "relu"), 0, 0, 1, 1])
    clear_trainer_cache()
    first = train(wide, space, data, seed=3, epochs=3)
    other = train(narrow, space, data, seed=4, epochs=3)
    again = train(wide, space, data, seed=3, epochs=3)
    assert first.ok and other.ok and again.extra["reused_trace"]
    assert again.history == first.history  # (the files differ in their saving time only)
    np.testing.assert_array_equal(again.valid_mean, first.valid_mean)
    trainers = list(train_mod._CACHE.values())
    assert len(trainers) == 2 and trainers[0].params is trainers[1].params
    assert trainers[0].optimizer is trainers[1].optimizer is train_mod.thread_variables().optimizer("adam")
    assert trainers[0].params.shape.as_list() == [None]

    elsewhere = {}

    def in_a_thread():
        elsewhere["result"] = train(wide, space, data, seed=3, epochs=3)
        elsewhere["variables"] = train_mod.thread_variables()

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert elsewhere["variables"] is not train_mod.thread_variables()
    assert elsewhere["result"].history == first.history and not elsewhere["result"].extra["reused_trace"]
    clear_trainer_cache()


@pytest.mark.parametrize("seed", [0, 1, 7, 2**32 - 1, 2**62 + 5])
def test_a_generator_reset_in_one_op_has_tensorflows_state(seed):
    expected, got = tf.random.Generator.from_seed(0), tf.random.Generator.from_seed(0)
    expected.reset_from_seed(seed)
    train_mod.reset_generator(got, seed)
    np.testing.assert_array_equal(got.state.numpy(), expected.state.numpy())
    np.testing.assert_array_equal(got.uniform([5]).numpy(), expected.uniform([5]).numpy())


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_reused_trainer_equals_a_fresh_one(space, data, optimizer):
    """Optimizer state (moments, accumulators, iteration counts) is reset between trainings."""
    cfg = config(space, optimizer=optimizer, lr=0.01, batch_size=32,
                 arch=[dense(space, 8, "relu"), 0, 0, 1, 1])
    clear_trainer_cache()
    fresh = train(cfg, space, data, seed=3, epochs=3)
    train(config(space, optimizer=optimizer, lr=0.05, batch_size=7, arch=cfg["arch"]), space, data, seed=1, epochs=2)
    reused = train(cfg, space, data, seed=3, epochs=3)
    assert fresh.ok and reused.ok and reused.extra["traces"] == 0
    assert reused.history == fresh.history


def test_batch_size_is_clipped_to_the_training_rows(space, data):
    res = train(config(space, batch_size=10_000), space, data, epochs=2)
    assert res.ok and res.extra["batch_size"] == len(data.x_train)


# --------------------------------------------------------------------------- failures
def test_exploding_learning_rate_is_a_failure(space, data):
    res = train(config(space, optimizer="sgd", lr=1e4, batch_size=4), space, data, epochs=5)
    assert res.status == "failed" and not res.ok
    assert "non-finite" in res.reason and res.objective == math.inf
    assert res.model_bytes is None and res.epochs >= 1


@pytest.mark.parametrize("change,words", [
    ({"optimizer": "lbfgs"}, "optimizer"),
    ({"learning_rate": 1e6}, "learning_rate"),  # a number, but outside the space's range
    ({"extra": 1}, "hp must have exactly the keys"),
    ({"learning_rate": float("nan")}, "learning_rate"),
    ({"batch_size": 0}, "batch_size"),
])
def test_bad_configuration_is_a_failure_not_an_exception(space, data, change, words):
    cfg = config(space)
    cfg["hp"].update(change)
    res = train(cfg, space, data, epochs=2)
    assert res.status == "failed" and words in res.reason


def test_non_positive_epoch_budget_fails(space, data):
    res = train(config(space), space, data, epochs=-1)
    assert res.status == "failed" and "epoch budget" in res.reason


def test_wrong_arch_length_and_constant_target_fail(space, data):
    res = train({"arch": [1, 0], "hp": config(space)["hp"]}, space, data, epochs=2)
    assert res.status == "failed" and "arch" in res.reason
    flat = make_data()
    flat.scaler.y_std = np.zeros_like(flat.scaler.y_std)
    res = train(config(space), space, flat, epochs=2)
    assert res.status == "failed" and "constant" in res.reason


def test_configure_threads_too_late_warns():
    tf.constant(1.0) + 1.0  # TensorFlow is running
    wanted = tf.config.threading.get_intra_op_parallelism_threads() + 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert configure_threads(wanted) is False
    assert any(issubclass(w.category, RuntimeWarning) for w in caught)


def test_trainer_cache_is_bounded(space, data):
    clear_trainer_cache()
    for units in (8, 16):
        for act in ACTS:
            arch = [dense(space, units, act), 0, 0, 0, 0]
            assert train(config(space, arch=arch, batch_size=64), space, data, epochs=1).ok
    assert len(train_mod._CACHE) == trainer_mod.TRAINER_CACHE_SIZE


# --------------------------------------------------------------------------- early discarding
class StubDiscarder:
    """Says stop at ``stop_at``; records when and with what loss it was consulted."""

    def __init__(self, stop_at=None, reduction=3, reference_batch=None):
        from autodeuq.discard import rung_schedule

        self.stop_at, self.calls, self.batch_sizes = stop_at, [], []
        self._schedule = lambda m, b: rung_schedule(m, 1, reduction, b, reference_batch)

    def schedule(self, max_epochs, batch_size=None):
        self.batch_sizes.append(batch_size)
        return self._schedule(max_epochs, batch_size)

    def should_continue(self, rung, loss):
        self.calls.append((rung, loss))
        return rung != self.stop_at


def test_discarded_training_stops_at_its_rung_with_its_best_model(space, data):
    stub = StubDiscarder(stop_at=3)
    res = train(config(space, lr=0.01), space, data, seed=1, epochs=20, discarder=stub)
    assert res.status == "discarded" and res.ok
    assert res.epochs == 3 and len(res.history["val_loss"]) == 3
    assert [e for e, _ in stub.calls] == [1, 3]
    # each rung hears the best validation loss so far; the objective is the best of the 3 epochs
    assert stub.calls[1][1] == pytest.approx(min(res.history["val_loss"]), rel=1e-6)
    assert res.objective == pytest.approx(min(res.history["val_loss"]), rel=1e-6)
    assert res.extra["discarded_at"] == 3
    mean, _ = predict(model_from_bytes(res.model_bytes), data.x_valid)
    np.testing.assert_allclose(mean, res.valid_mean, rtol=1e-5, atol=1e-5)


def test_rungs_counted_in_steps_come_later_for_larger_batches(space, data):
    # batches of 32 rows against a reference of 8: rung m at epoch 4 m; the discarder hears rung 3
    # (its records' key) once 12 epochs have run, with the best loss of those 12 epochs
    stub = StubDiscarder(stop_at=3, reference_batch=8)
    res = train(config(space, lr=0.01, batch_size=32, p_es=30), space, data, seed=1, epochs=40, discarder=stub)
    assert stub.batch_sizes == [32]
    assert res.status == "discarded" and res.epochs == 12 and res.extra["discarded_at"] == 12
    assert [r for r, _ in stub.calls] == [1, 3]
    assert stub.calls[0][1] == pytest.approx(min(res.history["val_loss"][:4]), rel=1e-6)
    assert stub.calls[1][1] == pytest.approx(min(res.history["val_loss"]), rel=1e-6)


def test_promoted_training_runs_to_its_end_and_is_done(space, data):
    stub = StubDiscarder(stop_at=None)
    res = train(config(space, lr=0.01, p_es=30), space, data, seed=1, epochs=12, discarder=stub)
    assert res.status == "done" and res.epochs == 12 and res.extra["discarded_at"] is None
    assert [e for e, _ in stub.calls] == [1, 3, 9]
    plain = train(config(space, lr=0.01, p_es=30), space, data, seed=1, epochs=12)
    assert plain.objective == pytest.approx(res.objective, rel=1e-6)  # consulting changes nothing


def test_time_limit_ends_training_before_an_epoch_that_would_pass_it(space, data, monkeypatch):
    import time as real_time

    import autodeuq.train as train_module

    clock = {"now": 0.0}  # every epoch takes exactly one second of this clock

    class Clock:
        perf_counter = staticmethod(lambda: clock["now"])
        time = staticmethod(real_time.time)

    run_epoch = train_module.CompiledTrainer.run_epoch

    def one_second_epoch(self, *args):
        clock["now"] += 1.0
        return run_epoch(self, *args)

    monkeypatch.setattr(train_module, "time", Clock)
    monkeypatch.setattr(train_module.CompiledTrainer, "run_epoch", one_second_epoch)
    cfg = config(space, lr=0.01, p_es=30)
    # after epoch 3 (at 3 s), a fourth would end at 4 s > 3.5 s: the training ends there, as done
    res = train(cfg, space, data, seed=1, epochs=12, time_limit=3.5)
    assert res.status == "done" and res.epochs == 3 and res.extra["out_of_time"] is True
    assert res.objective == pytest.approx(min(res.history["val_loss"]), rel=1e-6)
    mean, _ = predict(model_from_bytes(res.model_bytes), data.x_valid)
    np.testing.assert_allclose(mean, res.valid_mean, rtol=1e-5, atol=1e-5)
    # the same training without a limit: its first three epochs are those epochs
    plain = train(cfg, space, data, seed=1, epochs=12)
    assert plain.epochs == 12 and plain.extra["out_of_time"] is False
    np.testing.assert_allclose(plain.history["val_loss"][:3], res.history["val_loss"], rtol=1e-6)
    # a limit that the last epoch fits in changes nothing; a refit's schedule ignores the limit
    assert train(cfg, space, data, seed=1, epochs=12, time_limit=12.5).epochs == 12
    clock["now"] = 0.0
    assert train(cfg, space, data, seed=1, schedule=[0.01] * 4, time_limit=0.5).epochs == 4
