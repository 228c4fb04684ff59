"""The toy benchmark's count of catalog networks that fit the data."""
from __future__ import annotations

import numpy as np

from autodeuq.catalog import Catalog
from autodeuq.data import from_arrays
from autodeuq.result import TrainResult
from autodeuq.space import load_space
from benchmarks.toy_uncertainty import FIT_MARGIN, fitted_networks


def result(objective: float, n_valid: int) -> TrainResult:
    return TrainResult(status="done", objective=objective, epochs=3, best_epoch=2, wall_time=0.1, n_params=10,
                       model_bytes=b"fake-keras", valid_mean=np.zeros((n_valid, 1)), valid_var=np.ones((n_valid, 1)),
                       history={"loss": [1.0], "val_loss": [1.0], "lr": [0.01]}, worker="fake",
                       start_time=0.0, end_time=1.0)


def test_a_network_fits_when_it_beats_the_constant_gaussian_by_the_margin(tmp_path):
    rng = np.random.default_rng(0)
    data = from_arrays(rng.normal(size=(40, 1)), 3.0 * rng.normal(size=40) + 5.0, seed=0)
    space = load_space("toy")
    catalog = Catalog.create_or_resume(tmp_path / "run", space, data, {"algorithm": "fake"}, seed=0)
    y = catalog.validation_targets()
    constant = 0.5 * np.log(2 * np.pi * np.e * np.var(y))  # NLL of N(mean, var) of the targets, data units
    # objectives are in standardized units: data-unit NLL minus the catalog's offset log(y_std)
    objectives = [constant - FIT_MARGIN - 0.1, constant - FIT_MARGIN + 0.1, constant, constant - 2.0]
    for objective in objectives:
        entry = catalog.submit(space.sample(rng))
        catalog.record(entry, result(objective - catalog.nll_offset, len(y)))
    catalog.record(catalog.submit(space.sample(rng)), TrainResult.failure("boom", wall_time=0.1, worker="fake"))
    catalog.close()
    assert fitted_networks(tmp_path / "run") == (2, 4)
