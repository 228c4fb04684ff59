"""The mixed-type regression benchmark script: tables, splits, scores, resume, report and its peers."""
import argparse
import json
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from benchmarks import mixed_regression as mixed


def namespace(**kw):
    return argparse.Namespace(**({"threads": 1, "max_evals": 2, "workers": 1, "runs_dir": "runs",
                                  "space": "tabular", "early_discarding": "auto", "selection_pool": None,
                                  "autogluon_python": None, "autogluon_time_limit": 10} | kw))


@pytest.fixture(scope="module")
def saratoga():
    return mixed.load_table("saratoga")


# (rows, feature columns, text columns, columns with missing values)
DOCUMENTED = {
    "saratoga": (1728, 15, ["heating", "fuel", "sewer", "waterfront", "newConstruction", "centralAir"], []),
    "ames": (2930, 73, 40, ["Mas_Vnr_Type", "Misc_Feature"]),
    "computers": (6259, 9, ["cd", "multi", "premium"], []),
}


@pytest.mark.parametrize("name", mixed.TABLES)
def test_tables_have_the_documented_shapes_and_columns(name):
    rows, columns, text, missing = DOCUMENTED[name]
    table = mixed.load_table(name)
    assert table.X.shape == (rows, columns) and table.y.shape == (rows,) and np.all(np.isfinite(table.y))
    assert table.categorical == text if isinstance(text, list) else len(table.categorical) == text
    assert all(isinstance(table.X[c].dtype, pd.CategoricalDtype) for c in table.categorical)
    assert [c for c in table.X if table.X[c].isna().any()] == missing
    assert "rownames" not in table.X and table.target not in table.X
    assert max(len(mixed.load_table(n).y) for n in mixed.TABLES) >= 5000  # the large table


def test_splits_are_disjoint_reproducible_and_sized(saratoga):
    fit, valid, test = mixed.split_indices(1728, 2)
    assert (len(fit), len(valid), len(test)) == (1105, 277, 346)
    assert len(np.unique(np.concatenate([fit, valid, test]))) == 1728
    again = mixed.split_indices(1728, 2)
    assert all(np.array_equal(a, b) for a, b in zip((fit, valid, test), again))
    assert not np.array_equal(mixed.split_indices(1728, 3)[2], test)
    data = mixed.make_split(saratoga, 2)
    assert data.sizes == {"n_fit": 1105, "n_valid": 277, "n_test": 346} and data.y_test.shape == (346, 1)
    np.testing.assert_array_equal(data.y_valid[:, 0], saratoga.y[valid])
    pd.testing.assert_frame_equal(data.x_test, saratoga.X.iloc[test].reset_index(drop=True))


def test_quantile_scores_by_hand():
    y = np.array([[0.0], [1.0], [2.0], [10.0]])
    q = np.array([[-1.0, 0.5, 1.0], [0.0, 1.0, 2.0], [3.0, 2.0, 2.5], [0.0, 8.0, 9.0]])  # row 2 crosses
    scores = mixed.quantile_scores(q, y)
    # medians after sorting each row: 0.5, 1, 2.5, 8; inside: rows 0, 1 (row 2: [2, 3] holds 2)
    assert scores["rmse"] == pytest.approx(np.sqrt((0.25 + 0 + 0.25 + 4) / 4))
    assert scores["coverage_90"] == pytest.approx(3 / 4)
    with pytest.raises(mixed.MethodError, match="quantiles of shape"):
        mixed.quantile_scores(q[:, :2], y)


def fake_gaussian(data, args):
    # The fitting rows' mean and variance for every test row: a known Gaussian NLL.
    n = len(data.y_test)
    mean, var = float(data.y_fit.mean()), float(data.y_fit.var())
    return np.full((1, n, 1), mean), np.full((1, n, 1), var), np.ones(1), {"note": "fake"}


def test_records_resume_and_report(tmp_path, monkeypatch, saratoga):
    calls = []

    def fake(data, args):
        calls.append((data.name, data.split))
        return fake_gaussian(data, args)

    monkeypatch.setitem(mixed.RUNNERS, "ngboost", fake)
    out = tmp_path / "out"
    argv = ["--methods", "ngboost", "--tables", "saratoga", "--splits", "0-1", "--results", str(out),
            "--machine", "test box"]
    assert mixed.main(argv) == 0
    assert calls == [("saratoga", 0), ("saratoga", 1)]
    records = json.loads((out / "mixed_regression_raw.json").read_text())["records"]
    assert [(r["method"], r["table"], r["split"], r["status"]) for r in records] == [
        ("ngboost", "saratoga", 0, "done"), ("ngboost", "saratoga", 1, "done")]
    data = mixed.make_split(saratoga, 0)
    mean, sd = data.y_fit.mean(), data.y_fit.std()
    expected = -np.mean(stats.norm.logpdf(data.y_test[:, 0], mean, sd))
    assert records[0]["nll_gaussian"] == pytest.approx(expected, rel=1e-9) == records[0]["nll"]
    assert records[0]["rmse"] == pytest.approx(np.sqrt(np.mean((data.y_test - mean) ** 2)), rel=1e-9)
    assert mixed.main(argv) == 0  # everything recorded: nothing runs again
    assert len(calls) == 2
    md = (out / "mixed_regression.md").read_text()
    nll = [r["nll_gaussian"] for r in records]
    assert f"| saratoga (1728 rows) | {np.mean(nll):.3f} ± {np.std(nll, ddof=1) / np.sqrt(2):.3f} |" in md
    assert "Machine: test box." in md
    assert "`python benchmarks/mixed_regression.py --methods ngboost --tables saratoga --splits 0-1 --results " \
           "RESULTS_DIR/out --machine 'test box'`" in md
    assert mixed.main(["--report", "--results", str(out)]) == 0
    assert (out / "mixed_regression.md").read_text() == md


def test_rescore_redoes_the_ensemble_step_of_recorded_searches_only(tmp_path, monkeypatch):
    calls = []

    def fake(data, args, run_dir=None, scale=1.0, members=(1, 2)):
        calls.append((run_dir, args.space))
        means, variances, weights, _ = fake_gaussian(data, args)
        return means, variances * scale, weights, {
            "run_dir": str(tmp_path / "catalog"), "members": list(members), "weights": [0.5, 0.5],
            "effective_size": 2.0, "refitted": [], "evaluations": 90, "discarded": 8, "failed": 2, "mutated": 70,
            "search_s": 12.0 if run_dir is None else 0.1, "inputs": 3, "discarding_decision": None}

    monkeypatch.setitem(mixed.RUNNERS, "autodeuq", fake)
    monkeypatch.setitem(mixed.RUNNERS, "ngboost", fake_gaussian)
    entries = {"n": 100}
    monkeypatch.setattr("benchmarks.uci.catalog_entries", lambda run_dir: entries["n"])
    out = tmp_path / "out"
    argv = ["--methods", "autodeuq", "ngboost", "--tables", "saratoga", "--splits", "0", "--results", str(out)]
    assert mixed.main(argv) == 0
    first = {r["method"]: r for r in json.loads((out / "mixed_regression_raw.json").read_text())["records"]}
    monkeypatch.setitem(mixed.RUNNERS, "autodeuq",
                        lambda data, args, run_dir=None: fake(data, args, run_dir, scale=4.0, members=(2, 5)))
    assert mixed.main(argv + ["--rescore"]) == 0
    assert mixed.main(argv + ["--rescore"]) == 0  # already rescored with these settings: nothing to do
    assert calls == [(None, "tabular"), (tmp_path / "catalog", "tabular")]  # the recorded catalog, its space
    records = {r["method"]: r for r in json.loads((out / "mixed_regression_raw.json").read_text())["records"]}
    assert records["ngboost"] == first["ngboost"]  # not ours: untouched
    record, rescored = records["autodeuq"], records["autodeuq"]["info"]["rescored"]
    assert rescored["previous"]["nll_gaussian"] == first["autodeuq"]["nll_gaussian"] != record["nll_gaussian"]
    assert rescored["previous"]["members"] == [1, 2] and record["info"]["members"] == [2, 5]
    assert record["info"]["search_s"] == 12.0 and record["wall_s"] == first["autodeuq"]["wall_s"]  # the search's
    assert rescored["settings"] == "selection_bags=0, refit=auto, selection_pool=0.4, calibrate=scale"  # 1382 rows
    assert "Ensemble step of the 1 AutoDEUQ splits (`--rescore`" in (out / "mixed_regression.md").read_text()
    # Another pool is another setting: the split is due again, and the pool reaches the estimator.
    pools = []
    monkeypatch.setitem(mixed.RUNNERS, "autodeuq",
                        lambda data, args, run_dir=None: pools.append(args.selection_pool) or fake(data, args, run_dir))
    assert mixed.main(argv + ["--rescore", "--selection-pool", "0.6"]) == 0
    assert pools == [0.6]
    (record,) = [r for r in json.loads((out / "mixed_regression_raw.json").read_text())["records"]
                 if r["method"] == "autodeuq"]
    assert record["info"]["rescored"]["settings"].startswith("selection_bags=0, refit=auto, selection_pool=0.6,")
    # A catalog that is not the recorded one (it would train) is refused.
    entries["n"] = 99
    records["autodeuq"]["info"].pop("rescored")
    mixed.update_raw(out / "mixed_regression_raw.json", records["autodeuq"], mixed.RAW_FORMAT)
    with pytest.raises(RuntimeError, match="99 catalog entries, the record had 100; a rescore would train"):
        mixed.main(argv + ["--rescore"])
    assert len(calls) == 3


def test_a_failing_run_is_recorded_and_listed(tmp_path, monkeypatch):
    def broken(data, args):
        raise mixed.MethodError("no prediction")

    monkeypatch.setitem(mixed.RUNNERS, "catboost", broken)
    out = tmp_path / "out"
    assert mixed.main(["--methods", "catboost", "--tables", "saratoga", "--splits", "0", "--results", str(out)]) == 0
    record, = json.loads((out / "mixed_regression_raw.json").read_text())["records"]
    assert record["status"] == "failed" and record["reason"] == "MethodError: no prediction"
    assert "- catboost saratoga split 0: MethodError: no prediction" in (out / "mixed_regression.md").read_text()


def test_a_bad_space_is_refused_before_any_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        mixed.main(["--methods", "autodeuq", "--space", str(tmp_path / "none.yaml"), "--results", str(tmp_path)])
    assert stop.value.code == 2 and "--space:" in capsys.readouterr().err
    assert not (tmp_path / "mixed_regression_raw.json").exists()


def test_autogluon_needs_its_python(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        mixed.main(["--methods", "autogluon", "--results", str(tmp_path)])
    assert stop.value.code == 2 and "--autogluon-python" in capsys.readouterr().err


def test_autogluon_runner_reads_what_its_python_wrote(saratoga, tmp_path):
    # A stand-in interpreter that runs a fake AutoGluon: quantiles of the test rows' own targets
    # (so the scores are known) written where the runner reads them.
    fake = tmp_path / "fake_python"
    fake.write_text(f"""#!{sys.executable}
import pickle, sys
folder = sys.argv[-1]
with open(folder + "/split.pkl", "rb") as f:
    s = pickle.load(f)
y = s["test"][s["target"]].to_numpy(dtype=float)
assert list(s["fit"].columns)[-1] == s["target"] and s["quantiles"] == [0.05, 0.5, 0.95]
import numpy as np
with open(folder + "/out.pkl", "wb") as f:
    pickle.dump({{"quantiles": np.stack([y - 1, y, y + 1], axis=1), "models": ["Fake"], "best": "Fake"}}, f)
""")
    fake.chmod(0o755)
    data = mixed.make_split(saratoga, 0)
    means, quantiles, weights, info = mixed.run_autogluon(data, namespace(autogluon_python=str(fake)))
    assert means is None and weights is None and info["models"] == ["Fake"]
    assert mixed.quantile_scores(quantiles, data.y_test) == {"rmse": 0.0, "coverage_90": 1.0}
    failing = tmp_path / "failing_python"
    failing.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('no autogluon here')\n")
    failing.chmod(0o755)
    with pytest.raises(mixed.MethodError, match="AutoGluon exited with 1: no autogluon here"):
        mixed.run_autogluon(data, namespace(autogluon_python=str(failing)))


def test_catboost_uses_the_text_columns_natively(saratoga):
    pytest.importorskip("catboost")
    data = mixed.make_split(saratoga, 0)
    means, variances, weights, info = mixed.run_catboost(data, namespace(), iterations=30, depths=(2,), od_wait=10)
    assert means.shape == variances.shape == (1, len(data.y_test), 1) and np.all(variances > 0)
    assert info["depth"] == 2 and info["trees"] <= 30


def test_ngboost_runs_on_the_one_hot_table(saratoga):
    pytest.importorskip("ngboost")
    data = mixed.make_split(saratoga, 0)
    means, variances, weights, info = mixed.run_ngboost_onehot(data, namespace())
    assert means.shape == (1, len(data.y_test), 1) and np.all(variances > 0)
    assert info["inputs"] == 9 + sum(saratoga.X[c].nunique() for c in saratoga.categorical)


def test_report_lists_what_auto_decided_on_each_split(tmp_path, monkeypatch):
    decisions = {0: {"policy": "none", "projected_s": 412.3, "after_trainings": 4, "budget_s": 600.0},
                 1: {"policy": "sha", "projected_s": 655.0, "after_trainings": 61, "budget_s": 600.0}}

    def fake(data, args):
        means, variances, weights, _ = fake_gaussian(data, args)
        return means, variances, weights, {"effective_size": 1.0, "discarded": 3 * data.split,
                                           "failed": 1, "evaluations": 99 - 3 * data.split, "mutated": 77, "inputs": 24,
                                           "discarding_decision": decisions.get(data.split),
                                           "early_discarding": "none" if data.split == 3 else "auto"}

    monkeypatch.setitem(mixed.RUNNERS, "autodeuq", fake)
    out = tmp_path / "out"
    assert mixed.main(["--methods", "autodeuq", "--tables", "saratoga", "--splits", "0-3", "--results", str(out)]) == 0
    rows = [line for line in (out / "mixed_regression.md").read_text().splitlines() if line.startswith("| saratoga | ")]
    assert [row.split(" | ")[6:8] for row in rows] == [
        ["0 of 100", "none (412 s, 4)"], ["3 of 100", "successive halving (655 s, 61)"],
        ["6 of 100", "–"],  # a record from before the benchmark kept the decision
        ["9 of 100", "none (set, not decided)"]]  # --early-discarding none
