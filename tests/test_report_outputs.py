"""Where `ensemble` writes (beside --out), what it plots for several features, and --refit."""
import json

import numpy as np
import pandas as pd
import pytest

from autodeuq import metrics
from autodeuq.catalog import Catalog
from autodeuq.cli import main
from autodeuq.ensemble import load_ensemble
from autodeuq.ensemble.refit import member_schedule, refit

FIGURES = ("search_trace.png", "calibration.png", "predicted_vs_observed.png", "error_vs_std.png")


def _table(rng, n):
    x = rng.uniform(-2, 2, (n, 3))
    y = x[:, 0] ** 2 + np.sin(2 * x[:, 1]) + 0.3 * x[:, 2] + rng.normal(0, 0.3, n)
    return pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "y": y})


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tables")
    rng = np.random.default_rng(0)
    _table(rng, 120).to_csv(folder / "train.csv", index=False)
    _table(rng, 40).to_csv(folder / "test.csv", index=False)
    return folder


@pytest.fixture(scope="module")
def searched(tables):
    """A three-feature catalog searched with --test (serial, tiny budget); no ensemble yet."""
    run = tables / "run"
    code = main(["search", "--data", str(tables / "train.csv"), "--test", str(tables / "test.csv"),
                 "--evaluator", "serial", "--max-evals", "4", "--epochs", "6", "--search", "random",
                 "--run-dir", str(run), "--no-progress"])
    assert code == 0
    return run


@pytest.fixture(scope="module")
def reported(searched):
    assert main(["ensemble", "--run-dir", str(searched), "--size", "2"]) == 0
    return searched


def test_search_test_file_is_scored_by_a_later_ensemble(reported, tables):
    document = json.loads((reported / "metrics.json").read_text())
    test = pd.read_csv(tables / "test.csv")
    ens = load_ensemble(reported / "ensemble.json")
    means, variances = ens.components(test[["a", "b", "c"]])
    expected = metrics.evaluate(means, variances, ens.weights, test[["y"]].to_numpy())
    assert document["test"]["nll"]["mean"] == pytest.approx(expected["nll"]["mean"], rel=1e-9)


def test_several_features_get_the_practitioners_figures(reported):
    for name in FIGURES:
        assert (reported / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert not (reported / "uncertainty.png").exists()


def test_out_elsewhere_leaves_the_run_folder_untouched(reported, tmp_path):
    before = {name: (reported / name).read_bytes() for name in ("metrics.json", "ensemble.json", *FIGURES)}
    other = tmp_path / "other" / "ensemble.json"
    assert main(["ensemble", "--run-dir", str(reported), "--size", "1", "--out", str(other)]) == 0
    assert {name: (reported / name).read_bytes() for name in before} == before
    document = json.loads((other.parent / "metrics.json").read_text())
    assert len(document["ensemble"]["members"]) == 1 and "test" in document
    for name in FIGURES:
        assert (other.parent / name).stat().st_size > 0


def test_refit_on_the_command_line(reported, tables):
    original = json.loads((reported / "metrics.json").read_text())
    assert main(["ensemble", "--run-dir", str(reported), "--size", "2", "--refit"]) == 0
    folder = reported / "refit"
    document = json.loads((folder / "metrics.json").read_text())
    catalog = Catalog(reported)
    members = document["ensemble"]["members"]
    assert members == original["ensemble"]["members"]
    refit_info = document["ensemble"]["selection"]["refit"]
    assert refit_info["rows"] == 120  # training and validation rows together
    refitted_ids = set(refit_info["epochs"])
    assert refitted_ids | {str(i) for i in refit_info["kept_original"]} == {str(i) for i in members}
    assert all(refit_info["epochs"][k] == catalog.entry(int(k))["best_epoch"] for k in refitted_ids)
    # validation is the selection's score before the refit; test is the refitted members'
    assert document["validation"] == original["validation"]
    refitted, selected = load_ensemble(folder), load_ensemble(reported / "ensemble.json")
    test = pd.read_csv(tables / "test.csv")[["a", "b", "c"]]
    means, variances = refitted.components(test)
    expected = metrics.evaluate(means, variances, refitted.weights, pd.read_csv(tables / "test.csv")[["y"]].to_numpy())
    assert document["test"]["nll"]["mean"] == pytest.approx(expected["nll"]["mean"], rel=1e-9)
    if refitted_ids:
        assert not np.allclose(means, selected.components(test)[0])


def test_refit_out_must_name_a_folder_manifest(reported, tmp_path, capsys):
    assert main(["ensemble", "--run-dir", str(reported), "--refit", "--out", str(tmp_path / "x.json")]) == 2
    assert "FOLDER/ensemble.json" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_refit_replays_the_schedule_to_the_best_epoch_and_is_reproducible(reported):
    from autodeuq.ensemble import Ensemble

    catalog = Catalog(reported)
    ens = Ensemble.from_catalog(reported, size=1)
    entry = catalog.entry(ens.member_ids[0])
    schedule = member_schedule(entry)
    assert len(schedule) == entry["best_epoch"] and schedule == entry["history"]["lr"][:entry["best_epoch"]]
    x, y = catalog.fit_data()
    first, second = refit(ens, x, y), refit(ens, x, y)
    np.testing.assert_array_equal(first.components(x[:10])[0], second.components(x[:10])[0])


def test_a_refit_that_fits_its_rows_worse_keeps_the_original_member(reported, monkeypatch):
    import autodeuq.ensemble.refit as refit_module
    from autodeuq.ensemble import Ensemble

    calls = []

    def nll(model, x, y):  # called for the refitted network, then for the original one
        calls.append(model)
        return 1.0 if len(calls) % 2 else 0.0

    monkeypatch.setattr(refit_module, "_nll", nll)
    catalog = Catalog(reported)
    ens = Ensemble.from_catalog(reported, size=1)
    x, y = catalog.fit_data()
    kept = refit(ens, x, y)
    assert kept.selection["refit"]["kept_original"] == ens.member_ids and kept.selection["refit"]["epochs"] == {}
    np.testing.assert_array_equal(kept.components(x[:10])[0], ens.components(x[:10])[0])


def test_train_with_a_schedule_runs_those_epochs_and_keeps_the_last(reported):
    from autodeuq.data import from_arrays
    from autodeuq.train import train

    catalog = Catalog(reported)
    x, y = catalog.fit_data()
    data = from_arrays(x, y, x, y)
    config = catalog.config(catalog.ids()[0])
    result = train(config, catalog.space, data, seed=3, schedule=[0.01, 0.005, 0.001])
    assert result.ok and result.epochs == 3
    assert result.history["lr"] == pytest.approx([0.01, 0.005, 0.001])
    # the model kept is the last epoch's: its validation predictions give the last recorded loss
    z = (y - data.scaler.y_mean) / data.scaler.y_std
    zm = (result.valid_mean - data.scaler.y_mean) / data.scaler.y_std
    zv = result.valid_var / data.scaler.y_std ** 2
    nll = np.mean(0.5 * np.log(2 * np.pi * zv) + (z - zm) ** 2 / (2 * zv))
    assert nll == pytest.approx(result.history["val_loss"][-1], rel=1e-4)


def test_estimator_refit_trains_the_members_on_every_row(tmp_path):
    from autodeuq import AutoDEUQRegressor

    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, (45, 1))
    y = np.sin(x[:, 0]) + rng.normal(0, 0.1, 45)
    model = AutoDEUQRegressor(space="toy", search="random", max_evals=2, epochs=3, evaluator="serial",
                              ensemble_size=1, run_dir=tmp_path / "run", refit=True).fit(x, y)
    info = model.ensemble_.selection["refit"]
    assert info["rows"] == 45 and len(info["epochs"]) + len(info["kept_original"]) == 1
    assert model.ensemble_.run_dir is None  # the refitted networks are held in memory
    mean, std = model.predict(x[:5], return_std=True)
    assert mean.shape == std.shape == (5,) and np.all(std > 0)
