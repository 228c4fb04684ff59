"""Prediction inputs: columns matched by name, refused values named by row, never a silent NaN."""
import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from autodeuq import AutoDEUQRegressor
from autodeuq.catalog import Catalog
from autodeuq.cli import main
from autodeuq.data import DataError
from autodeuq.ensemble import Ensemble, load_ensemble

TINY = dict(space="toy", search="random", max_evals=2, ensemble_size=2, epochs=3, evaluator="serial", seed=0)
FEATURES = ["weight", "horsepower", "year"]


def cars(n=45, seed=0):
    """A small table like ISLR's Auto: features of very different scales, one tiny (``year``)."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"weight": rng.uniform(1600, 5000, n), "horsepower": rng.uniform(45, 230, n),
                          "year": rng.uniform(0, 0.01, n)})
    frame["mpg"] = 50 - frame["weight"] / 200 + rng.normal(0, 1, n)
    return frame


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    run = tmp_path_factory.mktemp("names") / "run"
    frame = cars()
    model = AutoDEUQRegressor(**TINY, run_dir=run).fit(frame[FEATURES], frame["mpg"])
    Ensemble.from_catalog(run, size=2, selector="topk").save(run / "ensemble.json")  # two distinct members
    return model, frame


def test_fit_on_a_frame_records_the_real_column_names(fitted):
    model, _ = fitted
    assert list(model.feature_names_in_) == FEATURES
    data = Catalog(model.run_dir_).meta["data"]
    assert data["features"] == FEATURES and data["targets"] == ["mpg"]
    ensemble = load_ensemble(model.run_dir_ / "ensemble.json")
    assert ensemble.feature_names == FEATURES and ensemble.target_names == ["mpg"]


def test_a_reordered_frame_or_a_mapping_predicts_the_same(fitted):
    model, frame = fitted
    ordered = frame[FEATURES]
    shuffled = frame[["year", "mpg", "weight", "horsepower"]]   # the target column is ignored
    expected = model.ensemble_.predict(ordered.to_numpy())
    for table in (shuffled, {name: frame[name].to_numpy() for name in reversed(FEATURES)}):
        got = model.ensemble_.predict(table)
        np.testing.assert_array_equal(got.mean, expected.mean)
        np.testing.assert_array_equal(got.total, expected.total)
    np.testing.assert_array_equal(model.predict(frame[FEATURES[::-1]]), expected.mean[:, 0])


def test_missing_or_unknown_columns_are_named(fitted):
    model, frame = fitted
    with pytest.raises(DataError, match=r"missing feature column\(s\) \['horsepower'\]"):
        model.ensemble_.predict(frame[["weight", "year"]])
    with pytest.raises(DataError, match=r"unexpected column\(s\) \['origin'\]"):
        model.ensemble_.predict(frame[FEATURES].assign(origin=1.0))
    with pytest.raises(ValueError, match="horsepower"):
        model.predict(frame[["weight", "year"]])


def test_predictions_do_not_depend_on_the_row_order(fitted):
    model, frame = fitted
    x = frame[FEATURES].to_numpy()
    perm = np.random.default_rng(3).permutation(len(x))
    a, b = model.ensemble_.predict(x), model.ensemble_.predict(x[perm])
    np.testing.assert_allclose(b.mean, a.mean[perm], rtol=1e-12, atol=0)
    np.testing.assert_allclose(b.total, a.total[perm], rtol=1e-12, atol=0)


def test_cli_predict_takes_the_training_csv_as_it_is(fitted, tmp_path):
    model, frame = fitted
    csv = tmp_path / "auto.csv"
    frame[["mpg", "year", "horsepower", "weight"]].to_csv(csv, index=False)
    out = tmp_path / "pred.csv"
    assert main(["predict", "--ensemble", str(model.run_dir_ / "ensemble.json"), "--data", str(csv),
                 "--out", str(out)]) == 0
    written = pd.read_csv(out)
    assert list(written.columns) == ["mpg_mean", "mpg_std", "mpg_aleatoric_std", "mpg_epistemic_std"]
    expected = load_ensemble(model.run_dir_ / "ensemble.json").predict(frame[FEATURES].to_numpy()).mean[:, 0]
    np.testing.assert_allclose(written["mpg_mean"], expected, rtol=1e-12)


@pytest.mark.parametrize("value, fragment", [
    (1e300, "beyond the float32 range"),        # overflows float32 as it is
    (1e37, "standardized"),                     # fits float32, but not once scaled by year's tiny std
])
def test_out_of_range_inputs_are_refused_with_row_and_column(fitted, value, fragment):
    model, frame = fitted
    x = frame[FEATURES].to_numpy(copy=True)
    x[4, 2] = value
    with pytest.raises(DataError) as info:
        model.ensemble_.predict(x)
    message = str(info.value)
    assert fragment in message and "'year'" in message and "data row 5" in message, message


def test_cli_refuses_out_of_range_rows_and_writes_nothing(fitted, tmp_path, capsys):
    model, frame = fitted
    bad = frame[FEATURES].copy()
    bad.loc[2, "weight"] = 1e300
    bad.to_csv(tmp_path / "big.csv", index=False)
    out = tmp_path / "pred.csv"
    code = main(["predict", "--ensemble", str(model.run_dir_ / "ensemble.json"), "--data",
                 str(tmp_path / "big.csv"), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "big.csv" in err and "'weight'" in err and "data row 3" in err, err
    assert not out.exists()


def nan_member(batch, training=False):
    """A member whose output is NaN for rows with weight above 4000 (a stand-in for a broken network)."""
    heavy = batch[:, :1] > 4000
    out = tf.concat([batch[:, :1] * 0, batch[:, :1] * 0 + 1], axis=1)
    return tf.where(heavy, tf.constant(np.nan, out.dtype), out)


def test_non_finite_member_outputs_raise_naming_rows_and_member(fitted, tmp_path, monkeypatch, capsys):
    model, frame = fitted
    ensemble = load_ensemble(model.run_dir_ / "ensemble.json")
    models = ensemble.load_members()
    monkeypatch.setattr(Ensemble, "load_members", lambda self: [models[0], nan_member])
    x = frame[FEATURES].to_numpy()
    rows = ", ".join(str(r + 1) for r in np.flatnonzero(x[:, 0] > 4000)[:3])
    with pytest.raises(DataError) as info:
        ensemble.predict(x)
    message = str(info.value)
    assert f"member {ensemble.member_ids[1]}" in message and f"data row(s) {rows}" in message, message
    frame[FEATURES].to_csv(tmp_path / "new.csv", index=False)
    out = tmp_path / "pred.csv"
    code = main(["predict", "--ensemble", str(model.run_dir_ / "ensemble.json"), "--data",
                 str(tmp_path / "new.csv"), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "new.csv" in err and f"data row(s) {rows}" in err, err
    assert not out.exists()
