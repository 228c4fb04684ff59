"""Prediction output that says what it holds: intervals, standard deviations vs variances, shapes.

Real (tiny) trainings of the toy data: a 3-model catalog and a 2-member ensemble.
"""
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from autodeuq import AutoDEUQRegressor, metrics
from autodeuq.catalog import Catalog
from autodeuq.cli import main
from autodeuq.ensemble import load_ensemble
from autodeuq.errors import AutoDEUQError


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("predict") / "run"
    assert main(["run", "--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "3", "--epochs", "4",
                 "--search", "random", "--size", "2", "--run-dir", str(run), "--no-progress"]) == 0
    assert len(json.loads((run / "ensemble.json").read_text())["members"]) == 2
    return run


@pytest.fixture()
def table(tmp_path):
    path = tmp_path / "new.csv"
    pd.DataFrame({"x": np.linspace(-40, 40, 9)}).to_csv(path, index=False)
    return path


def test_predict_writes_interval_columns_from_the_mixture_quantiles(run_dir, table, tmp_path, capsys):
    out = tmp_path / "pred.csv"
    assert main(["predict", "--ensemble", str(run_dir / "ensemble.json"), "--data", str(table), "--out", str(out),
                 "--interval", "0.9", "--interval", "0.5", "--interval", "0.975", "--interval-method", "mixture"]) == 0
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["y_mean", "y_std", "y_aleatoric_std", "y_epistemic_std", "y_lower_90", "y_upper_90",
                                   "y_lower_50", "y_upper_50", "y_lower_97_5", "y_upper_97_5"]
    ens = load_ensemble(run_dir / "ensemble.json")
    x = pd.read_csv(table)
    means, variances = ens.components(x)
    for level, suffix in ((0.9, "90"), (0.5, "50"), (0.975, "97_5")):
        lower, upper = metrics.central_interval(means, variances, ens.weights, level)
        np.testing.assert_allclose(frame[f"y_lower_{suffix}"], lower[:, 0], rtol=1e-12)
        np.testing.assert_allclose(frame[f"y_upper_{suffix}"], upper[:, 0], rtol=1e-12)
        mass = (metrics.mixture_cdf(means, variances, ens.weights, upper[:, :])
                - metrics.mixture_cdf(means, variances, ens.weights, lower[:, :]))
        np.testing.assert_allclose(mass, level, atol=1e-9)
    pred = ens.predict(x)
    np.testing.assert_allclose(frame["y_std"], pred.std[:, 0], rtol=1e-12)
    np.testing.assert_allclose(frame["y_aleatoric_std"], np.sqrt(pred.aleatoric[:, 0]), rtol=1e-12)
    np.testing.assert_allclose(frame["y_epistemic_std"], np.sqrt(pred.epistemic[:, 0]), rtol=1e-12)
    printed = capsys.readouterr().out
    assert "columns y_mean, y_std, y_aleatoric_std, y_epistemic_std, y_lower_90" in printed
    # one line, pointing to --help; the ~500-character legend is not repeated at every prediction
    assert "standard deviations" in printed and "predict --help" in printed
    assert "No column is a variance" not in printed and printed.count("\n") == 1 and len(printed) < 400


def test_predict_writes_the_prediction_table_of_the_mixture_value(run_dir, table, tmp_path):
    # The CSV is the value's to_frame, byte for byte, an id column first.
    levels = ["0.9", "0.5", "0.975", "0.90"]
    ids = pd.read_csv(table).assign(name=[f"row {i}" for i in range(9)])[["name", "x"]]
    ids.to_csv(tmp_path / "with_ids.csv", index=False)
    out, out_ids = tmp_path / "pred.csv", tmp_path / "pred_ids.csv"
    ensemble = str(run_dir / "ensemble.json")
    assert main(["predict", "--ensemble", ensemble, "--data", str(table), "--out", str(out),
                 *[a for level in levels for a in ("--interval", level)]]) == 0
    assert main(["predict", "--ensemble", ensemble, "--data", str(tmp_path / "with_ids.csv"), "--out", str(out_ids),
                 "--id-column", "name", *[a for level in levels for a in ("--interval", level)]]) == 0
    ens = load_ensemble(run_dir / "ensemble.json")
    frame = ens.predict(pd.read_csv(table)).to_frame(ens.target_names, levels=[float(v) for v in levels])
    assert out.read_bytes() == frame.to_csv(index=False).encode()
    assert out_ids.read_bytes() == frame.assign(name=ids["name"])[["name", *frame.columns]].to_csv(index=False).encode()


def test_predict_holds_the_mixture_of_the_members(run_dir):
    ens = load_ensemble(run_dir / "ensemble.json")
    x = np.linspace(-35, 35, 15)[:, None]
    pred = ens.predict(x)
    means, variances = ens.components(x)
    np.testing.assert_array_equal(pred.means, means)
    np.testing.assert_array_equal(pred.variances, variances)
    np.testing.assert_array_equal(pred.weights, ens.weights)
    again = ens.mixture(*ens.member_predictions(x))  # predictions made already: the same value
    for name in ("mean", "aleatoric", "epistemic", "total", "std", "means", "variances"):
        np.testing.assert_array_equal(getattr(again, name), getattr(pred, name))
    np.testing.assert_array_equal(pred.interval(0.8)[1], ens.interval(x, 0.8)[1])


def test_predict_without_interval_keeps_its_columns(run_dir, table, tmp_path):
    out = tmp_path / "pred.csv"
    assert main(["predict", "--ensemble", str(run_dir / "ensemble.json"), "--data", str(table), "--out", str(out)]) == 0
    assert list(pd.read_csv(out).columns) == ["y_mean", "y_std", "y_aleatoric_std", "y_epistemic_std"]


@pytest.mark.parametrize("level", ["90", "0", "1", "-0.5", "nan", "inf", "0.9999999999999999"])
def test_bad_interval_levels_are_one_line_errors(run_dir, table, tmp_path, capsys, level):
    out = tmp_path / "pred.csv"
    code = main(["predict", "--ensemble", str(run_dir / "ensemble.json"), "--data", str(table), "--out", str(out),
                 "--interval", level])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("autodeuq: error: --interval") and err.count("\n") == 1
    assert not out.exists()


def test_predict_help_says_which_columns_are_standard_deviations(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["predict", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--interval" in text and "<target>_lower_<100 L>" in text
    assert "<target>_aleatoric_std and <target>_epistemic_std (standard deviations" in text
    assert "No column is a variance" in text


def test_ensemble_interval_and_named_scales(run_dir):
    ens = load_ensemble(run_dir / "ensemble.json")
    x = np.linspace(-35, 35, 15)[:, None]
    lower, upper = ens.interval(x, 0.8, method="mixture")
    expected = metrics.central_interval(*ens.components(x), ens.weights, 0.8)
    np.testing.assert_array_equal(lower, expected[0])
    np.testing.assert_array_equal(upper, expected[1])
    assert lower.shape == upper.shape == (15, 1) and np.all(lower < upper)
    for bad in (0, 1, 1.5, -0.1, True, "0.9", float("nan"), 0.9999999999999999):
        with pytest.raises(AutoDEUQError, match="^level must be a probability strictly between 0 and 1"):
            ens.interval(x, bad)
    with pytest.raises(AutoDEUQError, match="method must be one of"):
        ens.interval(x, 0.9, method="gaussian")
    pred = ens.predict(x)
    np.testing.assert_array_equal(pred.aleatoric_std, np.sqrt(pred.aleatoric))
    np.testing.assert_array_equal(pred.epistemic_std, np.sqrt(pred.epistemic))
    np.testing.assert_array_equal(pred.total_std, pred.std)
    for name in ("aleatoric", "epistemic", "total"):
        assert getattr(pred, f"{name}_var") is getattr(pred, name)
    np.testing.assert_allclose(pred.total_std**2, pred.aleatoric_std**2 + pred.epistemic_std**2, rtol=1e-12)


def test_catalog_valid_nll_is_the_nll_of_real_models_in_original_units(run_dir):
    cat = Catalog(run_dir)
    frame = cat.to_dataframe().set_index("id")
    ids, means, variances = cat.validation_predictions()
    y = cat.validation_targets()
    for i, entry_id in enumerate(ids):
        # The objective comes from the float32 training graph, the stored predictions from the
        # saved (original-unit) model: equal up to float32 rounding.
        exact = metrics.gaussian_nll(y, means[i], variances[i]).mean()
        assert frame.loc[entry_id, "valid_nll"] == pytest.approx(exact, rel=1e-4, abs=1e-4)
    assert abs(frame["valid_nll"] - frame["objective"]).min() > 0.1  # toy-sine's y_std is far from 1


def test_regressor_predict_and_predict_uncertainty_agree_on_shapes(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (40, 2))
    y = X[:, 0] - X[:, 1] + rng.normal(0, 0.1, 40)
    model = AutoDEUQRegressor(space="toy", search="random", max_evals=2, ensemble_size=2, epochs=3,
                              evaluator="serial", seed=0, run_dir=tmp_path / "run").fit(X, y)
    mean, std = model.predict(X, return_std=True)
    parts = model.predict_uncertainty(X)
    for array in (mean, std, parts.mean, parts.aleatoric, parts.epistemic, parts.total, parts.std,
                  parts.aleatoric_std, parts.epistemic_std):
        assert array.shape == (40,)
    np.testing.assert_array_equal(parts.mean, mean)
    np.testing.assert_array_equal(parts.std, std)
    # intervals shaped like predict's: conformal (the ensemble keeps its held-out scores), or the mixture's
    assert model.ensemble_.conformal is not None
    lower, upper = model.predict_interval(X, 0.9)
    want = model.ensemble_.interval(X, 0.9)
    assert lower.shape == upper.shape == (40,)
    np.testing.assert_array_equal(lower, want[0][:, 0])
    np.testing.assert_array_equal(upper, want[1][:, 0])
    np.testing.assert_array_equal(parts.interval(0.9)[1][:, 0], upper)
    np.testing.assert_array_equal(model.predict_interval(X, 0.9, method="mixture")[0],
                                  model.ensemble_.interval(X, 0.9, method="mixture")[0][:, 0])
    model2 = AutoDEUQRegressor(space="toy", search="random", max_evals=2, ensemble_size=2, epochs=3,
                               evaluator="serial", seed=0, run_dir=tmp_path / "run2").fit(X, y[:, None])
    assert model2.predict(X).shape == model2.predict_uncertainty(X).epistemic.shape == (40, 1)


# --------------------------------------------------------------------------- conformal intervals
def test_predict_interval_is_conformal_and_metrics_report_its_coverage(run_dir, table, tmp_path):
    """The run's ensemble keeps the normalized scores of its validation rows, each predicted by an
    ensemble selected without it; `predict --interval 0.9` writes mean +- q std, and metrics.json
    reports the conformal coverage beside the mixture's."""
    from autodeuq.ensemble import conformal

    ens = load_ensemble(run_dir / "ensemble.json")
    catalog = Catalog(run_dir)
    n_valid = len(catalog.validation_targets())
    assert ens.conformal["method"] == "normalized" and ens.conformal["n"] == n_valid
    assert len(ens.conformal["scores"]) == 1 and ens.conformal["folds"] == 2
    assert "validation rows" in ens.selection["conformal"]
    out = tmp_path / "pred.csv"
    assert main(["predict", "--ensemble", str(run_dir / "ensemble.json"), "--data", str(table), "--out", str(out),
                 "--interval", "0.9"]) == 0
    frame = pd.read_csv(out)
    pred = ens.predict(pd.read_csv(table))
    q = conformal.quantile(ens.conformal, 0.9)[0]
    k = int(np.ceil((n_valid + 1) * 0.9 - 1e-9))
    assert q == ens.conformal["scores"][0][k - 1]
    np.testing.assert_allclose(frame["y_lower_90"], pred.mean[:, 0] - q * pred.std[:, 0], rtol=1e-12)
    np.testing.assert_allclose(frame["y_upper_90"], pred.mean[:, 0] + q * pred.std[:, 0], rtol=1e-12)
    mixture = pred.interval(0.9, method="mixture")
    assert not np.allclose(frame["y_upper_90"], mixture[1][:, 0])
    document = json.loads((run_dir / "metrics.json").read_text())
    for split in ("validation", "test"):
        for level in (50, 90, 95):
            assert {f"coverage_{level}", f"coverage_gaussian_{level}", f"coverage_conformal_{level}"} <= set(
                document[split])
            assert 0 <= document[split][f"coverage_conformal_{level}"]["mean"] <= 1
    # on the validation rows the scores came from, the coverage is what the scores make it
    _, means, variances = catalog.validation_predictions(ens.member_ids)
    value = ens.without_refit().mixture(means, variances)
    want = conformal.coverage(ens.conformal, value.mean, value.std, catalog.validation_targets(), 0.9)
    assert document["validation"]["coverage_conformal_90"]["per_target"] == pytest.approx(want.tolist())


def test_conformal_scores_round_trip_and_older_manifests_give_mixture_intervals(run_dir, tmp_path, capsys):
    from autodeuq.ensemble import ManifestError

    ens = load_ensemble(run_dir / "ensemble.json")
    x = np.linspace(-25, 25, 7)[:, None]
    folder = tmp_path / "export"
    ens.save(folder, self_contained=True)
    exported = load_ensemble(folder)
    assert exported.conformal == ens.conformal
    np.testing.assert_array_equal(exported.interval(x, 0.9), ens.interval(x, 0.9))
    manifest = json.loads((folder / "ensemble.json").read_text())
    assert manifest["conformal"]["scores"] == ens.conformal["scores"]
    older = {k: v for k, v in manifest.items() if k != "conformal"}  # as an older autodeuq wrote it
    (folder / "ensemble.json").write_text(json.dumps(older))
    old = load_ensemble(folder)
    assert old.conformal is None
    np.testing.assert_array_equal(old.interval(x, 0.9), ens.interval(x, 0.9, method="mixture"))
    with pytest.raises(AutoDEUQError, match="holds no conformal scores"):
        old.interval(x, 0.9, method="conformal")
    pd.DataFrame({"x": x[:, 0]}).to_csv(tmp_path / "x.csv", index=False)
    code = main(["predict", "--ensemble", str(folder), "--data", str(tmp_path / "x.csv"), "--out",
                 str(tmp_path / "p.csv"), "--interval", "0.9", "--interval-method", "conformal"])
    err = capsys.readouterr().err
    assert code == 2 and "--interval-method conformal" in err and err.count("\n") == 1
    for bad, match in (([1, 2], "'conformal' must be an object"), ({**manifest["conformal"], "n": -1}, "'n'")):
        (folder / "ensemble.json").write_text(json.dumps({**manifest, "conformal": bad}))
        with pytest.raises(ManifestError, match=match):
            load_ensemble(folder)


def test_a_level_beyond_the_held_out_rows_is_an_infinite_interval_with_a_warning(run_dir, table, tmp_path, capsys):
    ens = load_ensemble(run_dir / "ensemble.json")
    level = 1 - 1 / (2 * ens.conformal["n"] + 2)  # (n + 1) L = n + 1/2 > n
    out = tmp_path / "pred.csv"
    assert main(["predict", "--ensemble", str(run_dir / "ensemble.json"), "--data", str(table), "--out", str(out),
                 "--interval", str(level)]) == 0
    frame = pd.read_csv(out)
    assert np.isinf(frame.filter(like="_lower_")).all().all() and np.isinf(frame.filter(like="_upper_")).all().all()
    err = capsys.readouterr().err
    infinite = [line for line in err.splitlines() if "interval is infinite" in line]
    assert len(infinite) == 1 and infinite[0].startswith("autodeuq: warning: conformal level")
    assert f"the ensemble has {ens.conformal['n']}: its interval is infinite" in infinite[0]



def test_predict_on_onnx_runtime_writes_the_same_conformal_intervals(run_dir, table, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    outs = {engine: tmp_path / f"{engine}.csv" for engine in ("tensorflow", "onnx")}
    for engine, out in outs.items():
        assert main(["predict", "--ensemble", str(run_dir / "ensemble.json"), "--data", str(table), "--out", str(out),
                     "--interval", "0.9", "--engine", engine]) == 0
    have, want = pd.read_csv(outs["onnx"]), pd.read_csv(outs["tensorflow"])
    assert list(have.columns) == list(want.columns)
    scale = np.abs(want.to_numpy()).max()  # the members compute in float32 on ONNX Runtime
    np.testing.assert_allclose(have.to_numpy(), want.to_numpy(), rtol=0, atol=1e-4 * scale)
    ens = load_ensemble(run_dir / "ensemble.json", engine="tensorflow")
    pred = ens.predict(pd.read_csv(table))
    assert not np.allclose(want["y_upper_90"], pred.interval(0.9, "mixture")[1][:, 0])
    q = conformal_quantile(ens, 0.9)
    np.testing.assert_allclose(want["y_upper_90"], pred.mean[:, 0] + q * pred.std[:, 0], rtol=1e-12)
    shutil.rmtree(run_dir / "onnx")  # the other tests' ensemble predicts with TensorFlow again


def conformal_quantile(ens, level):
    from autodeuq.ensemble import conformal

    return conformal.quantile(ens.conformal, level)[0]
