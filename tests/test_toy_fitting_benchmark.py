"""benchmarks/toy_fitting.py: one training of the toy space, the hyperparameters set, and the fit criterion."""
import numpy as np
import pytest

from autodeuq import metrics
from autodeuq.tasks import get_task
from benchmarks.toy_fitting import one_training
from benchmarks.toy_uncertainty import FIT_MARGIN


def test_the_constant_is_the_gaussian_of_the_targets_own_mean_and_variance():
    # The criterion the benchmark counts fits against.
    y = np.random.default_rng(0).normal(3.0, 2.0, size=(500, 1))
    _constant_nll = get_task("regression").constant_nll
    assert _constant_nll(y) == pytest.approx(-metrics.gaussian_logpdf(y, y.mean(), y.var()).mean(), rel=1e-12)
    assert _constant_nll(y) == pytest.approx(0.5 * np.log(2 * np.pi * np.e * y.var()), rel=1e-12)


def test_one_short_training_keeps_the_hyperparameters_it_was_given():
    options = {"optimizer": "rmsprop", "learning_rate": 2e-3, "batch_size": 32, "patience_reduce_lr": None,
               "patience_early_stopping": None, "epochs": 2, "x_scale": None, "seed": 5, "data_seed": 0}
    line = one_training((0, options))
    assert line["status"] == "done" and line["epochs"] == 2
    assert {k: line["hp"][k] for k in ("optimizer", "learning_rate", "batch_size")} == {
        "optimizer": "rmsprop", "learning_rate": 2e-3, "batch_size": 32}
    assert np.isfinite(line["nll"])
    # Two epochs do not learn the sine: the NLL stays near predicting the mean (about 1.9 nats).
    assert line["fits"] is False and line["nll"] > 1.9 - FIT_MARGIN


def test_the_data_seed_draws_other_data_for_the_same_configuration():
    options = {"optimizer": "rmsprop", "learning_rate": 2e-3, "batch_size": 32, "patience_reduce_lr": None,
               "patience_early_stopping": None, "epochs": 1, "x_scale": None, "seed": 5}
    first, other = (one_training((0, {**options, "data_seed": d})) for d in (0, 3))
    assert first["hp"] == other["hp"] and first["arch"] == other["arch"]
    assert first["nll"] != other["nll"]
