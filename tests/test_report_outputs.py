"""Where `ensemble` writes (beside --out), what it plots for several features, and the refit (the default)."""
import json
import shutil

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
    """A three-feature catalog searched with --test (serial, tiny budget); no ensemble yet.

    Fixed training hyperparameters that learn in a few epochs (Adam, learning rate 0.01): a
    refit's extra rows then fit better, so the refit keeps the refitted networks."""
    run = tables / "run"
    code = main(["search", "--data", str(tables / "train.csv"), "--test", str(tables / "test.csv"),
                 "--evaluator", "serial", "--max-evals", "4", "--epochs", "6", "--search", "age-fixed-hp",
                 "--fixed-hp", '{"learning_rate": 0.01}', "--run-dir", str(run), "--no-progress"])
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


def test_refit_is_the_default_and_lives_in_the_files_users_know(reported, tables, tmp_path, capsys):
    document = json.loads((reported / "metrics.json").read_text())
    catalog = Catalog(reported)
    members = document["ensemble"]["members"]
    refit_info = document["ensemble"]["selection"]["refit"]
    assert refit_info["refitted"] and refit_info["rows"] == 120  # training and validation rows together
    refitted_ids = [int(k) for k in refit_info["epochs"]]
    assert document["ensemble"]["refitted"] == [i for i in members if i in refitted_ids] != []
    assert set(refitted_ids) | set(refit_info["kept_original"]) == set(members) and refit_info["out_of_time"] == []
    assert all(refit_info["epochs"][str(k)] == catalog.entry(k)["best_epoch"] for k in refitted_ids)
    # the manifest names the catalog and lists each refitted network beside it, with its checksum
    manifest = json.loads((reported / "ensemble.json").read_text())
    assert manifest["format"] == "autodeuq-ensemble/3" and manifest["run_dir"] == "."
    for member in manifest["members"]:
        assert member["model"] == f"models/{member['id']}.keras"  # the catalog's network, before the refit
        if member["id"] in refitted_ids:
            assert member["refit_model"] == f"ensemble_refit/{member['id']}.keras"
            assert (reported / member["refit_model"]).stat().st_size == member["bytes"]
        else:
            assert "refit_model" not in member
    refitted = load_ensemble(reported / "ensemble.json")
    assert refitted.refitted_ids == document["ensemble"]["refitted"] and refitted.run_dir == reported.resolve()
    test = pd.read_csv(tables / "test.csv")
    means, variances = refitted.components(test[["a", "b", "c"]])
    expected = metrics.evaluate(means, variances, refitted.weights, test[["y"]].to_numpy())
    assert document["test"]["nll"]["mean"] == pytest.approx(expected["nll"]["mean"], rel=1e-9)

    # --no-refit: the same selection with the search's networks, recoverable from the manifest too
    other = tmp_path / "selected" / "ensemble.json"
    assert main(["ensemble", "--run-dir", str(reported), "--size", "2", "--no-refit", "--out", str(other)]) == 0
    assert "not refitted: turned off" in capsys.readouterr().out
    plain = json.loads(other.read_text())
    assert plain["format"] == "autodeuq-ensemble/1" and not (other.parent / "ensemble_refit").exists()
    selected_document = json.loads((other.parent / "metrics.json").read_text())
    assert selected_document["ensemble"]["members"] == members and selected_document["ensemble"]["refitted"] == []
    assert selected_document["ensemble"]["selection"]["refit"] == {"refitted": False,
                                                                   "reason": "not refitted: turned off"}
    # validation is the selection's score before the refit, in both; the test scores differ
    assert selected_document["validation"] == document["validation"]
    assert selected_document["test"]["nll"]["mean"] != document["test"]["nll"]["mean"]
    selected = load_ensemble(other)
    np.testing.assert_array_equal(refitted.without_refit().components(test)[0], selected.components(test)[0])
    assert not np.allclose(means, selected.components(test)[0])


def test_a_refitted_run_directory_moves_exports_and_predicts(reported, tables, tmp_path):
    test = pd.read_csv(tables / "test.csv")
    expected = load_ensemble(reported / "ensemble.json").predict(test)
    moved = tmp_path / "moved"
    shutil.copytree(reported, moved, ignore=shutil.ignore_patterns("catalog.lock"))
    again = load_ensemble(moved / "ensemble.json")
    assert again.run_dir == moved.resolve() and again.refitted_ids
    np.testing.assert_allclose(again.predict(test).mean, expected.mean, rtol=1e-6)
    assert main(["export", "--ensemble", str(moved / "ensemble.json"), "--out", str(tmp_path / "shipped")]) == 0
    shipped = load_ensemble(tmp_path / "shipped")
    assert shipped.run_dir is None and shipped.refitted_ids == again.refitted_ids
    np.testing.assert_array_equal(shipped.predict(test).std, expected.std)
    assert main(["predict", "--ensemble", str(moved), "--data", str(tables / "test.csv"),
                 "--out", str(tmp_path / "p.csv")]) == 0
    np.testing.assert_allclose(pd.read_csv(tmp_path / "p.csv")["y_mean"], expected.mean[:, 0], rtol=1e-12)


def test_a_tampered_refitted_network_is_refused(reported, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(reported, copy, ignore=shutil.ignore_patterns("catalog.lock"))
    member = next((copy / "ensemble_refit").iterdir())
    member.write_bytes(member.read_bytes()[:-1] + b"x")
    assert main(["export", "--ensemble", str(copy / "ensemble.json"), "--out", str(tmp_path / "out")]) == 2
    assert "checksum mismatch" in capsys.readouterr().err


def test_saving_without_refit_removes_the_refitted_networks_saved_there_before(reported, tmp_path):
    ens = load_ensemble(reported / "ensemble.json")
    path = ens.save(tmp_path / "e.json")
    assert sorted(p.name for p in (tmp_path / "e_refit").iterdir()) == sorted(f"{i}.keras" for i in ens.refitted_ids)
    ens.without_refit().save(path)
    assert list((tmp_path / "e_refit").iterdir()) == []
    assert load_ensemble(path).refitted_ids == []


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


@pytest.mark.slow
def test_refit_on_ray_runs_the_members_at_once_like_the_serial_refit_and_reproducibly(reported, ray_local):
    from autodeuq.ensemble import Ensemble

    ens = Ensemble.from_catalog(reported, size=2)
    assert len(set(ens.member_ids)) == 2
    x, y = Catalog(reported).fit_data()
    serial = refit(ens, x, y)
    parallel = refit(ens, x, y, evaluator="ray", evaluator_options={"workers": 2})
    again = refit(ens, x, y, evaluator="ray", evaluator_options={"workers": 2})
    assert serial.selection["refit"]["parallel"] == 1 and parallel.selection["refit"]["parallel"] == 2
    # each retraining is seeded by its member: the same members, epochs and decisions wherever it ran
    assert parallel.selection["refit"]["epochs"] == serial.selection["refit"]["epochs"]
    assert parallel.refitted_ids == serial.refitted_ids != []
    np.testing.assert_array_equal(parallel.components(x[:10])[0], again.components(x[:10])[0])


def test_a_refit_that_fits_its_rows_worse_keeps_the_original_member(reported, monkeypatch):
    from autodeuq.ensemble import Ensemble
    from autodeuq.tasks import RegressionTask

    calls = []

    def nll(self, model, x, y):  # called for the refitted network, then for the original one
        calls.append(model)
        return 1.0 if len(calls) % 2 else 0.0

    monkeypatch.setattr(RegressionTask, "network_nll", nll)
    catalog = Catalog(reported)
    ens = Ensemble.from_catalog(reported, size=1)
    x, y = catalog.fit_data()
    kept = refit(ens, x, y)
    assert kept.selection["refit"]["kept_original"] == ens.member_ids and kept.selection["refit"]["epochs"] == {}
    np.testing.assert_array_equal(kept.components(x[:10])[0], ens.components(x[:10])[0])


def test_a_refit_as_good_within_noise_replaces_the_member(reported, monkeypatch):
    """Worse on its rows by less than a tenth of what the original gained over the constant
    Gaussian: the retraining did not fail, and it learned from more rows."""
    import autodeuq.ensemble.refit as refit_module
    from autodeuq.ensemble import Ensemble

    catalog = Catalog(reported)
    x, y = catalog.fit_data()
    from autodeuq.tasks import RegressionTask

    original = RegressionTask().constant_nll(y) - 1.0  # gained 1 nat over the constant Gaussian
    calls = []

    def nll(self, model, x, y):  # the refitted network first, then the original one
        calls.append(model)
        return original + (0.09 if len(calls) % 2 else 0.0)

    monkeypatch.setattr(RegressionTask, "network_nll", nll)
    ens = Ensemble.from_catalog(reported, size=1)
    refitted = refit(ens, x, y)
    assert refitted.selection["refit"]["kept_original"] == [] and refitted.refitted_ids == ens.member_ids
    assert refit_module.refit_failed(original + 0.11, original, original + 1.0)


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


def test_estimator_refits_by_default_keeps_its_catalog_and_pickles(tmp_path):
    import joblib

    from autodeuq import AutoDEUQRegressor

    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, (45, 1))
    y = np.sin(x[:, 0]) + rng.normal(0, 0.1, 45)
    options = dict(space="toy", search="random", max_evals=2, epochs=3, evaluator="serial", ensemble_size=2)
    model = AutoDEUQRegressor(**options, run_dir=tmp_path / "run").fit(x, y)
    info = model.ensemble_.selection["refit"]
    assert info["refitted"] and info["rows"] == 45
    assert len(info["epochs"]) + len(info["kept_original"]) == len(model.ensemble_.member_ids)
    assert model.ensemble_.run_dir == model.run_dir_  # the catalog stays the ensemble's
    mean, std = model.predict(x[:5], return_std=True)
    assert mean.shape == std.shape == (5,) and np.all(std > 0)
    joblib.dump(model, tmp_path / "model.joblib")
    again = joblib.load(tmp_path / "model.joblib")
    np.testing.assert_allclose(again.predict(x[:5]), mean, rtol=1e-6)
    assert again.ensemble_.refitted_ids == model.ensemble_.refitted_ids
    before = model.ensemble_.without_refit().predict(x[:5]).mean[:, 0]
    assert not np.allclose(before, mean)

    off = AutoDEUQRegressor(**options, run_dir=tmp_path / "run", refit=False).fit(x, y)
    assert off.ensemble_.selection["refit"] == {"refitted": False, "reason": "not refitted: turned off"}
    np.testing.assert_array_equal(off.predict(x[:5]), before)


def test_auto_refits_small_data_only(reported, monkeypatch):
    import autodeuq.ensemble.refit as refit_module
    from autodeuq.ensemble import Ensemble

    ens = Ensemble.from_catalog(reported, size=1)
    x, y = Catalog(reported).fit_data()
    monkeypatch.setattr(refit_module.data, "SMALL_DATA_ROWS", 100)
    same, line = refit_module.refit_selected(ens, x, y, "auto")
    assert line.startswith("not refitted: 120 training and validation rows, more than the 100")
    assert same.refitted_ids == [] and same.selection["refit"]["refitted"] is False
    refitted, line = refit_module.refit_selected(ens, x, y, True)
    assert line.startswith("refit: asked for; 1 of 1 member(s) retrained on 120 rows")


def test_a_refit_that_would_overrun_the_time_limit_keeps_the_original_networks(reported, monkeypatch):
    import time

    import autodeuq.ensemble.refit as refit_module
    from autodeuq.ensemble import Ensemble

    ens = Ensemble.from_catalog(reported, size=2)
    x, y = Catalog(reported).fit_data()
    with pytest.warns(refit_module.RefitTimeWarning, match="no time left"):
        late, line = refit_module.refit_selected(ens, x, y, True, deadline=time.monotonic() - 1)
    assert line == "not refitted: no time left under the time limit" and late.refitted_ids == []
    # one member's retraining is estimated to outlast the deadline: it alone keeps its network
    slow = ens.member_ids[0]
    monkeypatch.setattr(refit_module, "estimated_seconds",
                        lambda entry, n, n_train: 1e9 if entry["id"] == slow else 0.0)
    with pytest.warns(refit_module.RefitTimeWarning, match=f"no time left under the time limit \\({slow}\\)"):
        partly, line = refit_module.refit_selected(ens, x, y, True, deadline=time.monotonic() + 3600)
    assert partly.selection["refit"]["out_of_time"] == [slow] and slow not in partly.refitted_ids
    assert f"no time left to retrain member(s) {slow}" in line


def test_predictions_trace_once_per_ensemble_without_retracing_warnings(reported):
    import logging

    from autodeuq.ensemble import Ensemble

    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("tensorflow")
    logger.addHandler(handler)
    x, _ = Catalog(reported).fit_data()
    try:
        for _ in range(6):  # a benchmark builds ensembles in a loop
            ens = Ensemble.from_catalog(reported, size=2)
            for rows in (7, 31, 120):
                ens.member_predictions(x[:rows], encoded=True)
            assert ens._predict_fn.experimental_get_tracing_count() == 1
    finally:
        logger.removeHandler(handler)
    assert not [m for m in messages if "retracing" in m]


def _drawn_figure(monkeypatch, plot, *args, **kwargs):
    """The figure ``plot`` draws, drawn once (for display coordinates), instead of its PNG."""
    from autodeuq import plots

    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or b"")
    plot(*args, **kwargs)
    fig = figures[0]
    fig.canvas.draw()
    return fig


def _prediction(mean, aleatoric, epistemic):
    from autodeuq.ensemble import UncertaintyPrediction

    total = aleatoric + epistemic
    return UncertaintyPrediction(mean, aleatoric, epistemic, total, np.sqrt(total))


@pytest.mark.parametrize("corner", ["upper left", "upper right", "lower right"])
def test_error_vs_std_legend_covers_no_point_of_largest_error(monkeypatch, corner):
    from autodeuq import plots

    rng = np.random.default_rng(0)
    n = 300
    std = rng.uniform(0.5, 1.5, n)
    y = rng.normal(0, std)
    worst = {"upper left": np.argmin(std), "upper right": np.argmax(std), "lower right": np.argmax(std)}[corner]
    y[worst] = 0.01 if corner == "lower right" else 9.0 * (1 if corner == "upper left" else 3)  # the extreme row
    prediction = _prediction(np.zeros((n, 1)), (std ** 2)[:, None], np.zeros((n, 1)))
    fig = _drawn_figure(monkeypatch, plots.plot_error_vs_std, y[:, None], prediction, None, ["y"])
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    error = np.abs(y)
    for k in np.argsort(error)[-5:]:  # the rows of largest error
        x_disp, y_disp = ax.transData.transform((std[k], error[k]))
        assert not legend.contains(x_disp, y_disp), (k, std[k], error[k])
    x_disp, y_disp = ax.transData.transform((std[worst], error[worst]))
    assert not legend.contains(x_disp, y_disp)


def test_predicted_vs_observed_draws_at_most_200_error_bars_on_many_rows(monkeypatch):
    from autodeuq import plots

    rng = np.random.default_rng(1)
    n = 1252
    mean = rng.normal(size=(n, 1))
    y = mean + rng.normal(0, 0.3, (n, 1))
    prediction = _prediction(mean, np.full((n, 1), 0.09), np.full((n, 1), 0.01))
    fig = _drawn_figure(monkeypatch, plots.plot_predicted_vs_observed, y, prediction, None, ["y"])
    for ax in fig.axes:
        (bars,) = [c for c in ax.containers if hasattr(c, "has_yerr")]
        n_bars = len(bars.lines[2][0].get_segments())
        assert 0 < n_bars <= 200, n_bars
        # every row still a point, and the legend says the bars are on some of them
        assert max(len(line.get_xdata()) for line in ax.get_lines()) == n
        assert f"of {n} rows" in " ".join(t.get_text() for t in ax.get_legend().get_texts())
        # the bars spread over the whole range of the predictions
        centres = np.array([seg[:, 1].mean() for seg in bars.lines[2][0].get_segments()])
        assert centres.min() == pytest.approx(mean.min()) and centres.max() == pytest.approx(mean.max())
    small = _drawn_figure(monkeypatch, plots.plot_predicted_vs_observed, y[:50], _prediction(
        mean[:50], np.full((50, 1), 0.09), np.full((50, 1), 0.01)), None, ["y"])
    (bars,) = [c for c in small.axes[0].containers if hasattr(c, "has_yerr")]
    assert len(bars.lines[2][0].get_segments()) == 50  # a few rows: a bar on each


def test_a_retraining_that_fails_keeps_the_members_network_and_says_why(reported, monkeypatch):
    import autodeuq.ensemble.refit as refit_module
    from autodeuq.core.result import TrainResult
    from autodeuq.ensemble import Ensemble

    ens = Ensemble.from_catalog(reported, size=2)
    x, y = Catalog(reported).fit_data()
    first = ens.member_ids[0]
    train = refit_module.RefitObjective.__call__

    def failing(self, eval_id, config):  # the first member's retraining diverges (plain SGD, a large rate)
        if eval_id == first:
            return TrainResult.failure("non-finite training loss at epoch 1 (loss=nan, val_loss=nan)")
        return train(self, eval_id, config)

    monkeypatch.setattr(refit_module.RefitObjective, "__call__", failing)
    refitted, line = refit_module.refit_selected(ens, x, y, True)
    info = refitted.selection["refit"]
    assert info["failed"] == {str(first): "non-finite training loss at epoch 1 (loss=nan, val_loss=nan)"}
    assert first in info["kept_original"] and first not in refitted.refitted_ids
    assert f"the search's network kept for member(s) {first}, whose retraining failed (" in line
    np.testing.assert_array_equal(refitted.member_predictions(x[:3])[0][0], ens.member_predictions(x[:3])[0][0])


def test_the_ensemble_stage_opens_its_catalog_once_and_reads_each_file_once(searched, tmp_path, monkeypatch):
    # Issue 65: the stage opened the catalog three times and read its members' predictions twice.
    import collections

    import autodeuq.catalog.predictions as predictions
    from autodeuq.app.options import EnsembleConfig, configure
    from autodeuq.catalog.store import Catalog as StoreCatalog
    from autodeuq.report import build_and_report

    run = tmp_path / "run"
    shutil.copytree(searched, run)
    opened, files = [], collections.Counter()
    setup, read = StoreCatalog._setup, predictions.read_verified

    def counted_setup(self, *args):
        opened.append(self)
        return setup(self, *args)

    def counted_read(path, *args, **kwargs):
        files[path] += 1
        return read(path, *args, **kwargs)

    monkeypatch.setattr(StoreCatalog, "_setup", counted_setup)
    monkeypatch.setattr(predictions, "read_verified", counted_read)
    report = build_and_report(run, configure(EnsembleConfig, ensemble_size=2, refit=False, crossfit=False))
    assert len(opened) == 1 and report.ensemble.catalog is opened[0]
    with Catalog(run) as catalog:
        candidates = catalog.model_ids()
    assert max(files.values()) == 1  # every file read once
    assert sorted(p.name for p in files if p.parent.name == "predictions") == sorted(f"{i}.npz" for i in candidates)
    assert sorted(p.name for p in files if p.parent.name == "models") == sorted(
        f"{i}.keras" for i in report.ensemble.member_ids)


def test_a_catalog_reads_an_entrys_predictions_once_and_hands_them_out_read_only(searched):
    with Catalog(searched) as catalog:
        first = catalog.validation_predictions()
        again = catalog.validation_predictions()
        entry = catalog.ids()[0]
        arrays = catalog._read_predictions(entry)
        assert catalog._read_predictions(entry) is arrays and not arrays[0].flags.writeable
    np.testing.assert_array_equal(first.means, again.means)
    with pytest.raises(ValueError, match="read-only"):
        arrays[0][0, 0] = 1.0


def test_an_ensemble_of_a_catalog_opened_by_a_relative_path_unpickles_elsewhere(searched, tmp_path, monkeypatch):
    # The stage's one catalog may be opened by the path the user gave; a pickle reopens it by its absolute path.
    import pickle

    from autodeuq.app.options import EnsembleConfig, configure
    from autodeuq.app.pipeline import select_ensemble

    monkeypatch.chdir(searched.parent)
    ens = select_ensemble(searched.name, configure(EnsembleConfig, ensemble_size=1, refit=False, crossfit=False))
    assert not ens.catalog.run_dir.is_absolute()
    data = pickle.dumps(ens)
    monkeypatch.chdir(tmp_path)
    again = pickle.loads(data)
    assert again.catalog.run_dir == searched.resolve() and again.member_ids == ens.member_ids
    rows = Catalog(searched).fit_data()[0][:5]
    np.testing.assert_array_equal(again.components(rows, encoded=True)[0], ens.components(rows, encoded=True)[0])
