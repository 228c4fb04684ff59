"""K fold copies of a configuration trained as one program (autodeuq.nn.batched): each copy runs
the algorithm of its single training (its losses match over the first epochs), a copy that has
stopped is frozen, and the fold entries the cross-fit writes from them load and predict."""
import numpy as np
import pytest
import tensorflow as tf

from autodeuq import pipeline
from autodeuq.catalog import Catalog
from autodeuq.data import from_arrays, toy_sine
from autodeuq.ensemble import crossfit
from autodeuq.ensemble.crossfit import assign_folds, cross_fit, fold_plan
from autodeuq.labels import Labels
from autodeuq.nn import batched
from autodeuq.nn.plan import NetworkPlan
from autodeuq.options import SearchConfig, configure
from autodeuq.space import load_space
from autodeuq.train import predict, predict_log_proba, train

FOLDS = 3
#: The batched program computes the same sums as a single training in another order (batched
#: matrix products, the optimizers' expressions instead of TensorFlow's fused kernels), so a copy's
#: numbers differ from its single training's by float32 rounding, which every step carries on.
#: Over the first two epochs of these trainings (about a dozen steps each) the losses measured
#: differ by at most ~3e-5 relative; 2e-4 (about 1,700 float32 units in the last place) bounds it.
RTOL = 2e-4
EPOCHS_COMPARED = 2


def fold_datasets(n=103, classes=False, folds=FOLDS):
    """``folds`` fold datasets of a small regression table, or of a three-class one."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, size=(n, 2))
    options = {}
    if classes:
        y = ((x[:, :1] + 0.5 * x[:, 1:] > 0).astype(float) + (x[:, :1] > 1.5)).astype(float)
        options = {"labels": Labels(["a", "b", "c"])}
    else:
        y = np.sin(x[:, :1]) + 0.1 * rng.normal(size=(n, 1))
    assignment = assign_folds(fold_plan(n, folds, seed=0), y[:, 0] if classes else None)
    return [from_arrays(x[assignment != k], y[assignment != k], x[assignment == k], y[assignment == k],
                        name=f"fold {k}", **options) for k in range(folds)]


def config(space, optimizer="adam", lr=0.01, batch_size=16, **hp_values):
    arch, hp = space.split(space.sample(np.random.default_rng(3)))
    hp.update(optimizer=optimizer, learning_rate=lr, batch_size=batch_size, **hp_values)
    return {"arch": arch, "hp": hp}


@pytest.fixture(scope="module")
def space():
    return load_space("toy")


@pytest.mark.parametrize("optimizer", sorted(batched.SLOTS))
def test_each_copy_trains_as_its_single_training_over_the_first_epochs(space, optimizer):
    datasets = fold_datasets()
    cfg = config(space, optimizer=optimizer, lr=0.003)
    assert batched.batchable(NetworkPlan.from_arch(space, cfg["arch"], 2, 1))
    copies = batched.train_copies(cfg, space, datasets, seed=5, epochs=EPOCHS_COMPARED)
    for dataset, copy in zip(datasets, copies):
        single = train(cfg, space, dataset, seed=5, epochs=EPOCHS_COMPARED)
        assert copy.ok and single.ok and copy.epochs == single.epochs == EPOCHS_COMPARED
        for key in ("loss", "val_loss"):
            np.testing.assert_allclose(copy.history[key], single.history[key], rtol=RTOL)
        assert copy.history["lr"] == single.history["lr"]
        np.testing.assert_allclose(copy.valid_mean, single.valid_mean, rtol=RTOL * 10, atol=RTOL)


def test_a_classifier_copy_trains_as_its_single_training(space):
    datasets = fold_datasets(classes=True)
    cfg = config(space, optimizer="adam", lr=0.003)
    copies = batched.train_copies(cfg, space, datasets, seed=5, epochs=EPOCHS_COMPARED)
    for dataset, copy in zip(datasets, copies):
        single = train(cfg, space, dataset, seed=5, epochs=EPOCHS_COMPARED)
        assert copy.ok and single.ok and copy.valid_mean is None
        for key in ("loss", "val_loss"):
            np.testing.assert_allclose(copy.history[key], single.history[key], rtol=RTOL)
        np.testing.assert_allclose(copy.valid_proba, single.valid_proba, rtol=RTOL * 10, atol=RTOL)
        from autodeuq.model import model_from_bytes

        log_proba = predict_log_proba(model_from_bytes(copy.model_bytes), dataset.x_valid)
        np.testing.assert_allclose(np.exp(log_proba), copy.valid_proba, rtol=1e-4, atol=1e-6)


def test_a_copy_that_stopped_is_frozen_and_one_without_rows_in_a_batch_is_not_stepped(space):
    cfg = config(space, optimizer="adam")
    plan = NetworkPlan.from_arch(space, cfg["arch"], 2, 1)
    trainer = batched.BatchedTrainer(plan, "adam")
    k, n_max, size = 3, 32, trainer.program.size
    rng = np.random.default_rng(0)
    params = tf.constant(rng.normal(scale=0.1, size=(k, size)).astype(np.float32))
    slots = {"m": tf.zeros([k, size]), "v": tf.zeros([k, size])}
    n = tf.constant([n_max, n_max, 16], tf.int32)  # copy 2: rows for the first of two batches only
    x = tf.constant(rng.normal(size=(k, n_max, 2)).astype(np.float32))
    y = tf.constant(rng.normal(size=(k, n_max, 1)).astype(np.float32))
    order = tf.constant(np.tile(np.arange(n_max, dtype=np.int32), (k, 1)))
    valid = [tf.constant(rng.normal(size=(k, 8, 2)).astype(np.float32)),
             tf.constant(rng.normal(size=(k, 8, 1)).astype(np.float32)), tf.ones([k, 8])]
    active = tf.constant([True, False, True])
    new_params, new_slots, steps, losses, val_losses, kept = trainer.epoch(
        params, slots, tf.zeros([k]), tf.fill([k], 0.01), active, x, y, n, order, *valid, tf.constant(16),
        tf.constant([0, 0]))
    assert steps.numpy().tolist() == [2.0, 0.0, 1.0]  # two batches; frozen; one batch with rows
    assert np.array_equal(new_params[1].numpy(), params[1].numpy())
    assert not np.array_equal(new_params[0].numpy(), params[0].numpy())
    for slot in new_slots.values():
        assert not np.any(slot[1].numpy())
    assert np.all(np.isfinite(losses.numpy())) and np.all(np.isfinite(val_losses.numpy()))
    assert kept.shape == (k, 8, 2)


def test_copies_stop_on_their_own_held_out_rows_and_keep_their_best_weights(space):
    datasets = fold_datasets()
    cfg = config(space, optimizer="adam", lr=0.05, patience_early_stopping=2, patience_reduce_lr=1)
    copies = batched.train_copies(cfg, space, datasets, seed=2, epochs=40)
    assert all(c.ok for c in copies)
    assert len({c.epochs for c in copies}) > 1  # they stopped at different epochs
    for dataset, copy in zip(datasets, copies):
        history = copy.history["val_loss"]
        assert copy.epochs == len(history) and copy.extra["stopped_early"] == (copy.epochs < 40)
        assert copy.best_epoch == int(np.argmin(np.float32(history))) + 1
        assert copy.objective == pytest.approx(min(history))
        # the saved network is that of the best epoch: it predicts the validation outputs recorded then
        from autodeuq.model import model_from_bytes

        mean, var = predict(model_from_bytes(copy.model_bytes), dataset.x_valid)
        np.testing.assert_allclose(mean, copy.valid_mean, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(var, copy.valid_var, rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("batched") / "run"
    search = configure(SearchConfig, search="random", max_evals=4, epochs=4, seed=1, evaluator="serial",
                       progress=False, early_discarding="none")
    pipeline.fill_catalog(load_space("toy"), toy_sine(seed=0), run_dir, search).raise_for_error()
    return run_dir


@pytest.mark.parametrize("mode", ["batched", "separate"])
def test_the_fold_entries_written_load_and_predict_their_held_out_rows(searched, monkeypatch, mode):
    monkeypatch.setattr(crossfit, "FOLD_TRAINING", mode)
    with Catalog(searched) as catalog:
        plan_rows = len(catalog.fit_data()[0])
        fitted = cross_fit(catalog, 2, FOLDS, seed=10 + (mode == "separate"))
        x = catalog.fit_data()[0]
        for entry in fitted.entries:
            for fold_id in fitted.fold_ids[entry]:
                rows, (mean, var) = catalog.fold_predictions(fold_id)
                predicted_mean, predicted_var = predict(catalog.load_model(fold_id), x[rows])
                np.testing.assert_allclose(predicted_mean, mean, rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(predicted_var, var, rtol=1e-4, atol=1e-6)
    assert fitted.record["trained"] == 2 * FOLDS and fitted.arrays[0].shape[1] == plan_rows
    assert np.all(np.isfinite(fitted.arrays[0]))
