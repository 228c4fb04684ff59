"""Tables with categorical columns and missing values: encoding and imputation fitted on the
training rows, saved as JSON with every model, applied at prediction (CLI, export, estimator)."""
import json
import warnings

import joblib
import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder

from autodeuq import AutoDEUQRegressor
from autodeuq.cli import main
from autodeuq.data import DataError, from_table, load_files, random_split
from autodeuq.ensemble import load_ensemble
from autodeuq.ensemble.predictive import ManifestError
from autodeuq.errors import ParameterError
from autodeuq.preprocess import TableOptions, TablePreprocessor

TINY = ["--evaluator", "serial", "--space", "toy", "--search", "random", "--max-evals", "2", "--epochs", "3",
        "--size", "2", "--no-progress"]


def mixed_table(n=60, seed=0):
    rng = np.random.default_rng(seed)
    color = rng.choice(["red", "green", "blue"], n)
    a = rng.normal(size=n)
    frame = pd.DataFrame({"id": [f"row{i}" for i in range(n)], "a": a, "color": color, "note": "x",
                          "y": 2 * a + np.where(color == "red", 3.0, 0.0) + rng.normal(0, 0.1, n)})
    frame.loc[frame.index.isin([3, 10, 17]), "a"] = np.nan
    frame.loc[frame.index.isin([5, 12]), "color"] = None
    return frame


def test_encoding_and_imputation_are_fitted_on_the_training_rows_only():
    frame = mixed_table()
    train, valid = random_split(len(frame), 1 / 3, 4)
    # 'purple' and a large value of 'a' only in validation rows: neither may reach the fit.
    frame.loc[valid[0], "color"] = "purple"
    frame.loc[valid[1], "a"] = 1e6
    ds = from_table(frame, ["y"], "t.csv", TableOptions(drop=("note",), id_column="id"), seed=4)
    prep = ds.preprocessor
    assert ds.feature_names == ["a", "color=blue", "color=green", "color=red"]
    a_fill, color = prep.columns[0]["fill"], prep.columns[1]
    assert a_fill == pytest.approx(frame["a"].iloc[train].mean())
    assert color["categories"] == ["blue", "green", "red"]
    assert color["fill"] == frame["color"].iloc[train].mode()[0]
    # The validation row with the unseen category encodes as all zeros; imputed rows hold the training mean.
    row = list(valid).index(valid[0])
    np.testing.assert_array_equal(ds.x_valid[row, 1:], [0.0, 0.0, 0.0])
    imputed = [list(train).index(i) for i in (3, 10, 17) if i in train]
    np.testing.assert_array_equal(ds.x_train[imputed, 0], a_fill)
    assert np.isfinite(ds.x_train).all() and np.isfinite(ds.x_valid).all()


@pytest.mark.parametrize("categorical", ["onehot", "ordinal"])
@pytest.mark.parametrize("impute", ["mean", "median"])
def test_numpy_transform_equals_scikit_learns(categorical, impute):
    train = mixed_table()
    new = mixed_table(25, seed=1)
    new.loc[[0, 4], "color"] = "purple"  # unseen
    new.loc[[1, 2], "a"] = np.nan
    new.loc[[6], "color"] = None
    prep = TablePreprocessor.fit(train, ["a", "color"], TableOptions(categorical=categorical, impute=impute), "t")
    encoder = (OneHotEncoder(handle_unknown="ignore", sparse_output=False) if categorical == "onehot"
               else OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1))
    reference = ColumnTransformer([
        ("numeric", SimpleImputer(strategy=impute), ["a"]),
        ("categorical", make_pipeline(SimpleImputer(strategy="most_frequent"), encoder), ["color"]),
    ])

    def sk(frame):
        return frame[["a", "color"]].assign(color=frame["color"].astype(object).where(frame["color"].notna(), np.nan))

    expected = reference.fit(sk(train)).transform(sk(new))
    np.testing.assert_array_equal(prep.transform(new, "new"), expected)
    # From its JSON, the same transform: nothing else is kept.
    again = TablePreprocessor.from_dict(json.loads(json.dumps(prep.to_dict())))
    np.testing.assert_array_equal(again.transform(new, "new"), expected)
    if categorical == "ordinal":
        assert set(expected[[0, 4], 1]) == {-1.0}


def test_missing_values_at_prediction_take_the_training_statistics():
    train = pd.DataFrame({"a": [1.0, 2.0, 3.0, 10.0, np.nan], "c": ["u", "v", "v", None, "u"]})
    new = pd.DataFrame({"c": [None, "u"], "a": [np.nan, 5.0]})  # any column order
    mean = TablePreprocessor.fit(train, ["a", "c"], TableOptions(), "t")
    # 'u' and 'v' are equally frequent: the smaller one fills, as scikit-learn's imputer does.
    np.testing.assert_array_equal(mean.transform(new), [[4.0, 1.0, 0.0], [5.0, 1.0, 0.0]])
    median = TablePreprocessor.fit(train, ["a", "c"], TableOptions(impute="median", categorical="ordinal"), "t")
    np.testing.assert_array_equal(median.transform(new), [[2.5, 0.0], [5.0, 0.0]])
    strict = TablePreprocessor.fit(train.dropna(), ["a", "c"], TableOptions(impute="none"), "t")
    with pytest.raises(DataError, match=r"new: feature column 'a' has 1 missing value\(s\) \(first at data row 1\)"):
        strict.transform(new, "new")


def error_of(call, parameters=None, kind=DataError):
    with pytest.raises(kind) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    if parameters is not None:  # what the user can change, named by the front end (--drop, drop=...)
        assert info.value.parameters == parameters
    return message


def test_what_cannot_be_handled_is_one_clear_error():
    frame = mixed_table()

    def fit(f=frame, **o):
        return from_table(f, ["y"], "t.csv", TableOptions(**o))

    message = error_of(lambda: fit(drop=("note", "id"), categorical="none"), ("categorical", "drop"))
    assert "t.csv: feature column 'color' is categorical (" in message and "encoding is 'none'" in message
    message = error_of(lambda: fit(drop=("note", "id"), impute="none"), ("impute", "drop"))
    assert "t.csv: feature column 'a' has 3 missing value(s) (first at data row 4)" in message
    message = error_of(lambda: fit(frame.assign(empty=np.nan), drop=("note", "id")), ("drop",))
    assert "feature column 'empty' has no value in the 40 training rows (of the table's 60 data rows" in message
    message = error_of(lambda: fit(frame.assign(y=frame["y"].where(frame.index != 7)), drop=("note", "id")))
    assert "t.csv: target column 'y'" in message and "row 8" in message
    assert "dropped column 'nope' not found" in error_of(lambda: fit(drop=("nope",)))
    assert "column 'y' is a target and cannot be the id column" in error_of(lambda: fit(id_column="y"))
    assert error_of(lambda: TableOptions(drop=("a", "a")), ("drop",), ParameterError).startswith(
        "drop must name each column once")
    assert error_of(lambda: TableOptions(drop="note"), ("drop",), ParameterError).startswith(
        "drop must be a list of column names")
    assert "impute must be one of" in error_of(lambda: TableOptions(impute="zero"), ("impute",), ParameterError)
    prep = fit(drop=("note",), id_column="id").preprocessor
    assert "numeric in the model but holds 'ten' at data row 2" in error_of(
        lambda: prep.transform(pd.DataFrame({"a": ["1", "ten"], "color": ["red", "red"]}), "new.csv"))
    assert "missing feature column(s) ['color']" in error_of(lambda: prep.transform(frame[["a"]], "new.csv"))


def test_a_malformed_record_is_refused_naming_the_field():
    spec = TablePreprocessor.fit(mixed_table(), ["a", "color"], TableOptions(), "t").to_dict()
    for change, field in ((lambda d: d["columns"][1].update(fill="purple"), "'fill' must be one of its categories"),
                          (lambda d: d["columns"][0].update(fill="x"), "'fill' must be a finite number"),
                          (lambda d: d.update(categorical="pickle"), "'preprocessing.categorical' must be one of"),
                          (lambda d: d["columns"][1].update(categories=[]), "'categories' must be a non-empty")):
        bad = json.loads(json.dumps(spec))
        change(bad)
        with pytest.raises(DataError, match=field):
            TablePreprocessor.from_dict(bad)


@pytest.fixture(scope="module")
def table_run(tmp_path_factory):
    """A catalog, ensemble and export made by the CLI from a mixed table with --drop and --id-column."""
    root = tmp_path_factory.mktemp("tables")
    mixed_table().to_csv(root / "train.csv", index=False)
    run = root / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["run", "--data", str(root / "train.csv"), "--target", "y", "--drop", "note",
                     "--id-column", "id", "--run-dir", str(run), *TINY]) == 0
    assert main(["export", "--ensemble", str(run / "ensemble.json"), "--out", str(root / "export")]) == 0
    return root


def test_predict_copies_the_id_column_and_encodes_the_table(table_run):
    new = mixed_table(8, seed=2).drop(columns=["y"])
    new.loc[0, "color"] = "purple"
    new.loc[1, "a"] = np.nan
    new = new[["color", "id", "note", "a"]]  # any order; the dropped column may be present
    new.to_csv(table_run / "new.csv", index=False)
    outputs = []
    for source in (table_run / "run" / "ensemble.json", table_run / "export"):
        out = table_run / f"pred_{len(outputs)}.csv"
        assert main(["predict", "--ensemble", str(source), "--data", str(table_run / "new.csv"),
                     "--out", str(out)]) == 0
        outputs.append(pd.read_csv(out))
    pred = outputs[0]
    assert list(pred.columns) == ["id", "y_mean", "y_std", "y_aleatoric_std", "y_epistemic_std"]
    assert pred["id"].tolist() == new["id"].tolist()
    assert np.isfinite(pred.drop(columns="id").to_numpy()).all()
    pd.testing.assert_frame_equal(outputs[1], pred)  # the export carries the preprocessing
    # The same rows through the Python API: the encoded inputs are the preprocessing's.
    # (pandas' default CSV float parser may be an ulp off the written decimal: compare within that)
    ens = load_ensemble(table_run / "export")
    np.testing.assert_allclose(ens.predict(new.drop(columns=["id"])).mean[:, 0], pred["y_mean"], rtol=1e-12)
    prep = ens.preprocessor
    expected = prep.transform(new, "new")
    np.testing.assert_allclose(ens.predict(expected, encoded=True).mean[:, 0], pred["y_mean"], rtol=1e-12)
    # Without the id column in the table, predictions have no id column.
    new.drop(columns=["id"]).to_csv(table_run / "no_id.csv", index=False)
    assert main(["predict", "--ensemble", str(table_run / "export"), "--data", str(table_run / "no_id.csv"),
                 "--out", str(table_run / "no_id_pred.csv")]) == 0
    assert "id" not in pd.read_csv(table_run / "no_id_pred.csv").columns
    # --id-column names another column to copy.
    assert main(["predict", "--ensemble", str(table_run / "export"), "--data", str(table_run / "new.csv"),
                 "--out", str(table_run / "note_pred.csv"), "--id-column", "note"]) == 0
    assert pd.read_csv(table_run / "note_pred.csv").columns[0] == "note"


def test_ensemble_scores_a_raw_test_table(table_run):
    test = mixed_table(20, seed=3)
    test.loc[0, "color"] = "purple"
    test.to_csv(table_run / "test.csv", index=False)
    out = table_run / "rescored" / "ensemble.json"
    assert main(["ensemble", "--run-dir", str(table_run / "run"), "--size", "2", "--test",
                 str(table_run / "test.csv"), "--out", str(out)]) == 0
    metrics = json.loads((out.parent / "metrics.json").read_text())  # beside the --out manifest
    assert np.isfinite(metrics["test"]["rmse"]["mean"])
    ens = load_ensemble(out)
    pred = ens.predict(test.drop(columns=["y"]))
    rmse = np.sqrt(np.mean((pred.mean[:, 0] - test["y"].to_numpy()) ** 2))
    assert metrics["test"]["rmse"]["mean"] == pytest.approx(rmse, rel=1e-9)


def test_the_export_stores_the_preprocessing_as_json(table_run):
    manifest = json.loads((table_run / "export" / "ensemble.json").read_text())
    prep = manifest["preprocessing"]
    assert prep["id_column"] == "id" and prep["drop"] == ["note"] and prep["categorical"] == "onehot"
    assert [c["name"] for c in prep["columns"]] == ["a", "color"]
    assert manifest["features"] == ["a", "color=blue", "color=green", "color=red"]
    assert sorted(p.name for p in (table_run / "export").iterdir()) == ["ensemble.json", "members"]
    # A record that does not encode to the manifest's features is refused, naming the file.
    prep["columns"][1]["categories"] = ["blue", "red"]
    prep["columns"][1]["fill"] = "red"
    bad = table_run / "bad_export"
    bad.mkdir()
    (bad / "members").symlink_to(table_run / "export" / "members")
    (bad / "ensemble.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match=r"bad_export/ensemble.json: 'preprocessing' encodes the columns"):
        load_ensemble(bad)


def test_cli_refusals_are_one_line(table_run, capsys):
    def error(argv):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err
        return err

    train = str(table_run / "train.csv")
    err = error(["search", "--data", train, "--target", "y", "--categorical", "none", "--run-dir",
                 str(table_run / "none"), "--evaluator", "serial", "--max-evals", "1"])
    assert "train.csv: feature column 'id' is categorical" in err and err.endswith("(--categorical, --drop)")
    assert not (table_run / "none").exists()  # refused before anything is written
    assert "--drop applies to --data tables" in error(["search", "--dataset", "toy-sine", "--drop", "x"])
    err = error(["predict", "--ensemble", str(table_run / "export"), "--data", train, "--out",
                 str(table_run / "x.csv"), "--id-column", "nope"])
    assert "--id-column nope" in err and "no such column" in err


def test_estimator_takes_frames_with_text_and_missing_values_and_round_trips(tmp_path):
    frame = mixed_table()
    X, y = frame.drop(columns=["y"]), frame["y"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoDEUQRegressor(space="toy", search="random", max_evals=2, ensemble_size=2, epochs=3,
                                  evaluator="serial", seed=0, categorical="ordinal", impute="median",
                                  drop=["note"], id_column="id", run_dir=tmp_path / "run").fit(X, y)
    assert model.ensemble_.feature_names == ["a", "color"] and list(model.feature_names_in_) == list(X.columns)
    prep = model.ensemble_.preprocessor
    assert prep.columns[0]["fill"] == pytest.approx(X["a"].iloc[random_split(60, 1 / 3, 0)[0]].median())
    new = X.iloc[:6].copy()
    new.loc[0, "color"] = "purple"
    new.loc[1, "a"] = np.nan
    mean = model.predict(new)
    np.testing.assert_array_equal(model.predict(new[list(reversed(new.columns))]), mean)
    joblib.dump(model, tmp_path / "model.joblib")
    np.testing.assert_allclose(joblib.load(tmp_path / "model.joblib").predict(new), mean, rtol=1e-6)
    # The catalog's records let `autodeuq predict` read the original table.
    new.to_csv(tmp_path / "new.csv", index=False)
    model.ensemble_.save(tmp_path / "ensemble.json")
    assert main(["predict", "--ensemble", str(tmp_path / "ensemble.json"), "--data", str(tmp_path / "new.csv"),
                 "--out", str(tmp_path / "pred.csv")]) == 0
    pred = pd.read_csv(tmp_path / "pred.csv")
    assert pred["id"].tolist() == new["id"].tolist()
    np.testing.assert_allclose(pred["y_mean"], mean, rtol=1e-12)
    with pytest.raises(DataError, match="feature column 'color' is categorical"):
        AutoDEUQRegressor(categorical="none", drop=["note", "id"], evaluator="serial").fit(X, y)


def search_without_gaps(tmp_path) -> list[str]:
    """The `search` command line of a tiny run on a table without missing values in ``tmp_path``."""
    mixed_table().dropna().to_csv(tmp_path / "full.csv", index=False)
    return ["search", "--data", str(tmp_path / "full.csv"), "--target", "y", "--drop", "note", "--id-column", "id",
            "--run-dir", str(tmp_path / "run"), "--evaluator", "serial", "--space", "toy", "--epochs", "2",
            "--no-progress"]


def test_a_run_resumes_when_a_recorded_fill_differs_in_the_last_place_only(tmp_path, capsys):
    # Another pandas version can sum a column's mean in another order: the same fill but for the
    # last place. A fill that really differs is another encoding.
    import sqlite3

    base = search_without_gaps(tmp_path)
    assert main([*base, "--max-evals", "1"]) == 0

    def record_fill(factor):
        with sqlite3.connect(tmp_path / "run" / "catalog.sqlite") as db:
            meta = json.loads(db.execute("SELECT value FROM run WHERE key = 'meta_json'").fetchone()[0])
            column = meta["data"]["preprocessing"]["columns"][0]
            assert column["name"] == "a" and isinstance(column["fill"], float)
            column["fill"] *= factor
            db.execute("UPDATE run SET value = ? WHERE key = 'meta_json'", (json.dumps(meta),))

    record_fill(1 + 4 * np.finfo(float).eps)
    assert main([*base, "--max-evals", "2"]) == 0
    record_fill(1 + 1e-6)
    capsys.readouterr()
    assert main([*base, "--max-evals", "3"]) == 2
    assert "another table encoding (other categories or fill values)" in capsys.readouterr().err


def test_a_run_is_not_resumed_under_another_encoding(tmp_path, capsys):
    # No gaps: --impute median encodes these rows as --impute mean does, but predicts other fills.
    base = search_without_gaps(tmp_path)
    assert main([*base, "--max-evals", "1"]) == 0
    capsys.readouterr()
    assert main([*base, "--max-evals", "1", "--impute", "median"]) == 2
    err = capsys.readouterr().err
    assert "another table encoding (impute 'mean' recorded, 'median' asked)" in err
    assert main([*base, "--max-evals", "2"]) == 0  # the same options resume


def test_validation_and_test_files_are_encoded_with_the_training_fit(tmp_path):
    train, other = mixed_table(), mixed_table(12, seed=5)
    other.loc[0, "color"] = "purple"
    train.to_csv(tmp_path / "train.csv", index=False)
    # Columns in another order, without the dropped and the id column.
    other[["y", "color", "a"]].to_csv(tmp_path / "valid.csv", index=False)
    other.to_csv(tmp_path / "test.csv", index=False)
    options = TableOptions(drop=("note",), id_column="id")
    ds = load_files(tmp_path / "train.csv", ["y"], valid=tmp_path / "valid.csv", test=tmp_path / "test.csv",
                    options=options)
    np.testing.assert_array_equal(ds.x_valid, ds.preprocessor.transform(other, "valid"))
    np.testing.assert_array_equal(ds.x_test, ds.x_valid)
    np.testing.assert_array_equal(ds.x_valid[0, 1:], [0.0, 0.0, 0.0])  # 'purple'
    assert ds.preprocessor.columns[0]["fill"] == pytest.approx(train["a"].mean())  # all of train.csv trains
    other.assign(extra=1.0).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DataError, match=r"bad\.csv: columns do not match .* unexpected column\(s\) \['extra'\]"):
        load_files(tmp_path / "train.csv", ["y"], valid=tmp_path / "bad.csv", options=options)


# ----------------------------------------------------------------------------- input defects
def text_table(n=30, seed=0):
    """A numeric column 'a' and a text column 't' (the table that made an infinite value crash)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.normal(size=n), "t": rng.choice(["u", "v"], n), "y": rng.normal(size=n)})


def cli_error(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and err.startswith("autodeuq: error: ")
    return err


def test_an_infinite_feature_is_one_error_whichever_split_its_row_lands_in():
    frame = text_table()
    train, valid = random_split(len(frame), 1 / 3, 0)
    for row in [*train[:4], *valid[:2]]:
        bad = frame.copy()
        bad.loc[row, "a"] = -np.inf if row % 2 else np.inf
        message = error_of(lambda: from_table(bad, ["y"], "t.csv"))
        assert message == f"t.csv: feature column 'a' has 1 infinite value(s) (first at data row {row + 1})"
    bad = frame.copy()
    bad.loc[train[0], "a"] = 1e39  # beyond float32
    assert f"beyond the float32 range the networks are trained in (first: 1e+39 at data row {train[0] + 1})" in (
        error_of(lambda: from_table(bad, ["y"], "t.csv")))


def test_an_infinite_or_huge_training_value_is_one_line_from_the_cli_and_a_data_error_from_the_estimator(
        tmp_path, capsys):
    frame = text_table()
    train, _ = random_split(len(frame), 1 / 3, 0)
    row = int(train[1])
    lines = frame.to_csv(index=False).splitlines()
    # pandas 3's reader makes both infinite; pandas 2's reads the long decimal as text, which is
    # refused as a number beyond float32 (test_a_numeric_column_with_a_stray_cell_...).
    overflow_is_text = int(pd.__version__.split(".")[0]) < 3
    for value in ("inf", "1" * 401 + ".5"):
        cells = lines[row + 1].split(",")
        cells[0] = value
        path = tmp_path / "train.csv"
        path.write_text("\n".join([*lines[:row + 1], ",".join(cells), *lines[row + 2:]]) + "\n")
        err = cli_error(["search", "--data", str(path), "--target", "y", "--run-dir", str(tmp_path / "run"),
                         "--evaluator", "serial", "--max-evals", "1"], capsys)
        if overflow_is_text and value != "inf":
            assert "feature column 'a' holds " in err and "beyond the float32 range" in err
        else:
            assert err.endswith(f"train.csv: feature column 'a' has 1 infinite value(s) (first at data row {row + 1})")
        assert not (tmp_path / "run").exists()
    X = frame.drop(columns=["y"])
    X.loc[row, "a"] = np.inf
    with pytest.raises(DataError, match=rf"^X: feature column 'a' has 1 infinite value\(s\) \(first at data row "
                                        rf"{row + 1}\)$"):
        AutoDEUQRegressor(evaluator="serial").fit(X, frame["y"])


@pytest.mark.parametrize("cell, why", [("abc", ""), ("1,234", " (a thousands separator)"),
                                       ("1" * 401, " (beyond the float32 range the networks are trained in)")])
def test_a_numeric_column_with_a_stray_cell_is_refused_not_made_categorical(tmp_path, capsys, cell, why):
    frame = text_table().assign(a=np.arange(30) * 7)  # integers: a 401-digit one is not read as a float
    lines = frame.to_csv(index=False).splitlines()
    lines[16] = ",".join([f'"{cell}"', *lines[16].split(",")[1:]])  # data row 16 (line 1 is the header)
    path = tmp_path / "train.csv"
    path.write_text("\n".join(lines) + "\n")
    shown = repr(cell) if len(cell) < 25 else f"'{cell[:12]}...' ({len(cell)} characters)"
    expected = (f"{path}: feature column 'a' holds numbers, but 1 of its 30 non-missing cells is not a plain "
                f"number: {shown} at data row 16{why}; write plain numbers (no thousands separators), leave a "
                f"cell empty to mark it missing, drop the column, or declare it categorical (its cells are then "
                f"categories)")
    with pytest.raises(DataError) as info:
        load_files(path, ["y"])
    assert str(info.value) == expected and info.value.parameters == ("drop", "categorical_columns")
    err = cli_error(["search", "--data", str(path), "--target", "y", "--run-dir", str(tmp_path / "run"),
                     "--evaluator", "serial", "--max-evals", "1"], capsys)
    assert err == f"autodeuq: error: {expected} (--drop, --categorical-columns)"


def test_text_columns_that_are_mostly_text_or_all_numbers_stay_categorical():
    frame = text_table()
    # Mostly words with a few numbers: categories. Numbers given as text throughout: categories, as before.
    frame["size"] = np.where(np.arange(30) % 5 == 0, "3", np.where(np.arange(30) % 2, "small", "large"))
    frame["code"] = np.where(np.arange(30) % 2, "01", "02")
    ds = from_table(frame, ["y"], "t.csv")
    assert ds.feature_names == ["a", "t=u", "t=v", "size=3", "size=large", "size=small", "code=01", "code=02"]


def test_an_id_column_of_text_is_refused_with_the_way_out(tmp_path, capsys):
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"player": [f"player {i}" for i in range(140)], "a": rng.normal(size=140),
                          "y": rng.normal(size=140)})
    message = error_of(lambda: from_table(frame, ["y"], "t.csv"), ("categorical_columns", "id_column", "drop"))
    assert message == ("t.csv: feature column 'player' looks like an identifier or free text, not categories: 93 "
                       "distinct values in the 93 training rows (of the table's 140 data rows: the validation rows "
                       "and any left out are not counted), more than a categorical column may have (20 distinct "
                       "values, or more if they are at most 50% of the training rows): declare it categorical if "
                       "it is one, else make it the id column or drop it")
    assert from_table(frame, ["y"], "t.csv", TableOptions(id_column="player")).feature_names == ["a"]
    assert from_table(frame, ["y"], "t.csv", TableOptions(drop=("player",))).feature_names == ["a"]
    frame.to_csv(tmp_path / "players.csv", index=False)
    err = cli_error(["search", "--data", str(tmp_path / "players.csv"), "--target", "y", "--run-dir",
                     str(tmp_path / "run"), "--evaluator", "serial", "--max-evals", "1"], capsys)
    assert "feature column 'player' looks like an identifier" in err
    assert err.endswith("(--categorical-columns, --id-column, --drop)")
    # Many categories, but few for the rows: still categories (20 any time; more up to half the training rows).
    frame["player"] = [f"team {i % 30}" for i in range(140)]
    assert len(from_table(frame, ["y"], "t.csv").feature_names) == 31
    def categories(distinct, rows):
        table = pd.DataFrame({"c": [f"p{i % distinct}" for i in range(rows)]})
        return len(TablePreprocessor.fit(table, ["c"], TableOptions(categorical="ordinal"), "t").columns[0]
                   ["categories"])

    assert categories(20, 20) == 20 and categories(21, 42) == 21
    assert "21 distinct values in the 41 training rows (all of the table's data rows)" in error_of(
        lambda: categories(21, 41), ("categorical_columns", "id_column", "drop"))


def cars(n=93, seed=0):
    """A table like the one of issue 64: a 32-value Manufacturer, a numeric-coded Cylinders, a Model per row."""
    rng = np.random.default_rng(seed)
    cylinders = rng.choice([4, 6, 8], n)
    return pd.DataFrame({"Manufacturer": [f"maker{i % 32}" for i in range(n)],
                         "Model": [f"model {i}" for i in range(n)], "Cylinders": cylinders, "a": rng.normal(size=n),
                         "y": cylinders + rng.normal(0, 0.1, n)})


def test_a_real_category_with_many_values_is_kept_when_declared_categorical(tmp_path, capsys):
    frame = cars().drop(columns=["Model"])
    frame["Manufacturer"] = [f"maker{i % 40}" for i in range(len(frame))]  # 40 makers in 62 training rows
    message = error_of(lambda: from_table(frame, ["y"], "t.csv"), ("categorical_columns", "id_column", "drop"))
    assert "feature column 'Manufacturer' looks like an identifier" in message and "declare it categorical" in message
    declared = TableOptions(categorical_columns=("Manufacturer",))
    dataset = from_table(frame, ["y"], "t.csv", declared)
    assert len([n for n in dataset.feature_names if n.startswith("Manufacturer=")]) > 31  # of 40, in 62 rows
    # The option of each front end: the command line's flag (comma-separated, repeatable) and the estimator's.
    frame.to_csv(tmp_path / "cars.csv", index=False)
    argv = ["search", "--data", str(tmp_path / "cars.csv"), "--target", "y", "--run-dir", str(tmp_path / "run"),
            *TINY[:-3], "--no-progress"]
    assert "--categorical-columns" in cli_error(argv, capsys)
    assert main([*argv, "--categorical-columns", "Manufacturer", "--max-evals", "1"]) == 0
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoDEUQRegressor(search="random", max_evals=1, epochs=2, space="toy", evaluator="serial",
                                  progress=False, ensemble_size=1, categorical_columns=["Manufacturer"])
        model.fit(frame.drop(columns=["y"]), frame["y"])
    assert model.ensemble_.preprocessor.columns[0]["declared"] is True


def test_a_numeric_coded_column_with_a_stray_text_cell_is_kept_when_declared_categorical(tmp_path):
    frame = cars().drop(columns=["Model"])
    frame["Cylinders"] = frame["Cylinders"].astype(object)
    frame.loc[7, "Cylinders"] = "rotary"
    message = error_of(lambda: from_table(frame, ["y"], "t.csv"), ("drop", "categorical_columns"))
    assert "'rotary' at data row 8" in message and "declare it categorical" in message
    options = TableOptions(categorical_columns=("Manufacturer", "Cylinders"))
    dataset = from_table(frame, ["y"], "t.csv", options)
    assert {n for n in dataset.feature_names if n.startswith("Cylinders=")} <= {
        "Cylinders=4", "Cylinders=6", "Cylinders=8", "Cylinders=rotary"}
    # The stray cell only in the test file: refused with the way out, kept as an unseen category once declared.
    train = cars().drop(columns=["Model"])
    test = train.iloc[:10].astype({"Cylinders": object})
    test.loc[3, "Cylinders"] = "rotary"
    message = error_of(lambda: from_table(train, ["y"], "train.csv", TableOptions(categorical_columns=(
        "Manufacturer",)), test=(test, "test.csv")), ("categorical_columns",))
    assert message == ("test.csv: feature column 'Cylinders' is numeric in the model but holds 'rotary' at data row "
                       "4: fix the cell, or fit the model with the column declared categorical")
    dataset = from_table(train, ["y"], "train.csv", options, test=(test, "test.csv"))
    cylinders = [k for k, n in enumerate(dataset.feature_names) if n.startswith("Cylinders=")]
    assert [dataset.feature_names[k] for k in cylinders] == ["Cylinders=4", "Cylinders=6", "Cylinders=8"]
    assert dataset.x_test[3, cylinders].tolist() == [0.0, 0.0, 0.0]  # unseen: all zeros
    # A number is a category by its value: 6 of an integer column, 6.0 of one with gaps and "6" of a text one.
    prep = TablePreprocessor.from_dict(json.loads(json.dumps(dataset.preprocessor.to_dict())))
    six = pd.DataFrame({"Manufacturer": ["maker1"] * 3, "Cylinders": [6, 6.0, "6"], "a": [0.0] * 3})
    encoded = prep.transform(six)[:, cylinders]
    assert encoded.tolist() == [[0.0, 1.0, 0.0]] * 3 and prep.unseen_categories(six) == {}
    with pytest.warns(UserWarning, match=r"column 'Cylinders' in 1 row\(s\) \(first 'rotary' at data row 4\)"):
        prep.warn_unseen(test)


def test_every_identifier_like_column_is_named_in_one_message(tmp_path, capsys):
    frame = cars().assign(Serial=[f"s-{i}" for i in range(93)], Comment=[f"fine {i % 50}" for i in range(93)])
    frame["Manufacturer"] = [f"maker{i % 40}" for i in range(93)]
    message = error_of(lambda: from_table(frame, ["y"], "t.csv"), ("categorical_columns", "id_column", "drop"))
    assert message.startswith("t.csv: 4 feature columns look like identifiers or free text, not categories: "
                              "'Manufacturer' (")
    assert "'Model' (62 distinct values), 'Serial' (62 distinct values), 'Comment' (" in message
    # Which rows were counted: the training rows, of the table's data rows.
    assert ("in the 62 training rows (of the table's 93 data rows: the validation rows and any left out are not "
            "counted)") in message
    options = TableOptions(categorical_columns=("Manufacturer",), id_column="Model", drop=("Serial", "Comment"))
    assert from_table(frame, ["y"], "t.csv", options).feature_names[-2:] == ["Cylinders", "a"]
    frame.to_csv(tmp_path / "cars.csv", index=False)
    err = cli_error(["search", "--data", str(tmp_path / "cars.csv"), "--target", "y", "--run-dir",
                     str(tmp_path / "run"), "--evaluator", "serial", "--max-evals", "1"], capsys)
    assert "4 feature columns look like identifiers" in err
    assert err.endswith("(--categorical-columns, --id-column, --drop)")


def test_a_declared_categorical_column_must_be_a_feature():
    frame = cars()
    for options, words in [(TableOptions(categorical_columns=("Make",)), "declared categorical column 'Make' not "
                                                                         "found"),
                           (TableOptions(categorical_columns=("y",)), "is a target")]:
        assert words in error_of(lambda: from_table(frame, ["y"], "t.csv", options))
    with pytest.raises(DataError, match="declared categorical and is also dropped"):
        TableOptions(categorical_columns=("Model",), drop=("Model",))
    with pytest.raises(ParameterError, match="categorical_columns must name each column once"):
        TableOptions(categorical_columns=("Model", "Model"))


def test_unseen_categories_at_prediction_are_counted_per_column(table_run, capsys):
    from autodeuq import UnseenCategoryWarning

    new = mixed_table(8, seed=2).drop(columns=["y"])
    new.loc[[0, 5], "color"] = ["purple", "pink"]
    new.to_csv(table_run / "unseen.csv", index=False)
    ens = load_ensemble(table_run / "export")
    with pytest.warns(UnseenCategoryWarning) as caught:
        ens.predict(new.drop(columns=["id"]), source="new")
    assert len(caught) == 1 and caught[0].filename == __file__
    assert str(caught[0].message) == ("new: 2 of 8 row(s) hold categories not seen in training: column 'color' in "
                                      "2 row(s) (first 'purple' at data row 1); they are encoded as all zeros")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnseenCategoryWarning)
        ens.predict(mixed_table(8, seed=2).drop(columns=["y", "id"]))  # no unseen category: no warning
    capsys.readouterr()
    assert main(["predict", "--ensemble", str(table_run / "export"), "--data", str(table_run / "unseen.csv"),
                 "--out", str(table_run / "unseen_pred.csv")]) == 0
    err = capsys.readouterr().err.strip()
    assert err == (f"autodeuq: warning: {table_run / 'unseen.csv'}: 2 of 8 row(s) hold categories not seen in "
                   f"training: column 'color' in 2 row(s) (first 'purple' at data row 1); they are encoded as all "
                   f"zeros")


def test_rows_with_a_missing_target_are_refused_or_dropped_and_counted(tmp_path, capsys):
    from autodeuq.cli import _configs, _load_dataset, build_parser
    from autodeuq.options import TableConfig

    frame = text_table()
    frame.loc[[3, 11], "y"] = np.nan
    message = error_of(lambda: from_table(frame, ["y"], "t.csv"), ("drop_missing_target",))
    assert message == ("t.csv: target column 'y' has 2 missing value(s) (first at data row 4): fill them, or leave "
                       "out the rows whose target is missing")
    ds = from_table(frame, ["y"], "t.csv", TableOptions(drop_missing_target=True))
    assert ds.dropped_missing_target == {"t.csv": 2}
    assert (len(ds.x_train), len(ds.x_valid)) == (19, 9)
    np.testing.assert_array_equal(np.sort(np.concatenate([ds.y_train, ds.y_valid])[:, 0]),
                                  np.sort(frame["y"].dropna()))
    # A later error still names the table's own data row.
    bad = frame.assign(a=frame["a"].where(frame.index != 20, np.inf))
    assert "first at data row 21" in error_of(lambda: from_table(bad, ["y"], "t.csv",
                                                                 TableOptions(drop_missing_target=True)))
    # The command line: refused with the option named, or dropped and counted (validation file too).
    frame.iloc[:20].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[20:].assign(y=frame["y"].iloc[20:].where(frame.index[20:] != 25)).to_csv(tmp_path / "valid.csv",
                                                                                            index=False)
    argv = ["search", "--data", str(tmp_path / "train.csv"), "--valid", str(tmp_path / "valid.csv"), "--target", "y",
            "--run-dir", str(tmp_path / "run"), "--evaluator", "serial", "--max-evals", "1"]
    assert cli_error(argv, capsys).endswith("leave out the rows whose target is missing (--drop-missing-target)")
    args = build_parser().parse_args([*argv, "--drop-missing-target"])
    ds = _load_dataset(args, _configs(args, TableConfig)[0], seed=0)
    assert (len(ds.x_train), len(ds.x_valid)) == (18, 9)
    assert capsys.readouterr().out.splitlines() == [
        f"autodeuq: {tmp_path / 'train.csv'}: left out 2 row(s) whose target is missing (--drop-missing-target)",
        f"autodeuq: {tmp_path / 'valid.csv'}: left out 1 row(s) whose target is missing (--drop-missing-target)"]
    # The estimator: the same refusal, an AutoDEUQError, and the parameter checked.
    with pytest.raises(DataError, match="target column 'y' has 2 missing") as info:
        AutoDEUQRegressor(evaluator="serial").fit(frame.drop(columns=["y"]), frame["y"])
    assert info.value.parameters == ("drop_missing_target",)
    assert error_of(lambda: TableOptions(drop_missing_target="yes"), ("drop_missing_target",),
                    ParameterError).startswith("drop_missing_target must be True or False")
