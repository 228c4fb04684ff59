"""AutoDEUQRegressor: the whole job as a scikit-learn estimator, with a tiny budget."""
import numpy as np
import pytest
from sklearn.utils.estimator_checks import check_estimator

from autodeuq import AutoDEUQRegressor
from autodeuq.errors import ParameterError

TINY = dict(space="toy", search="random", max_evals=2, ensemble_size=2, epochs=3, evaluator="serial", seed=0)

# Checks that cannot apply, and why.
NOT_APPLICABLE = {
    # It requires predict(DataFrame with the fit's columns in reverse order) to raise; autodeuq
    # matches DataFrame columns by name instead (so the reversed frame is predicted correctly).
    # Unseen and missing column names are still refused: test_frame_columns_are_matched_by_name.
    "check_dataframe_column_names_consistency": "DataFrame columns are matched by name, not refused when reordered",
}


def test_fit_predict_and_uncertainty(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (60, 2))
    y = X[:, 0] - 2 * X[:, 1] + rng.normal(0, 0.1, 60)
    model = AutoDEUQRegressor(**{**TINY, "max_evals": 3, "epochs": 10}, run_dir=tmp_path / "run").fit(X, y)
    mean = model.predict(X)
    mean2, std = model.predict(X, return_std=True)
    parts = model.predict_uncertainty(X)
    assert mean.shape == (60,) and std.shape == (60,)
    np.testing.assert_allclose(mean, mean2)
    np.testing.assert_allclose(std**2, parts.aleatoric + parts.epistemic, rtol=1e-6)
    assert model.ensemble_.run_dir == tmp_path / "run" and (tmp_path / "run" / "catalog.sqlite").exists()
    lower, upper = parts.interval(0.9)  # the mixture stays with the value shaped like predict's
    assert lower.shape == upper.shape == (60, 1) and np.all(lower[:, 0] < mean) and np.all(mean < upper[:, 0])


def test_multi_output(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, (45, 1))
    Y = np.hstack([np.sin(3 * X), X**2]) + rng.normal(0, 0.05, (45, 2))
    model = AutoDEUQRegressor(**TINY).fit(X, Y)
    assert model.predict(X).shape == (45, 2)
    assert model.predict_uncertainty(X).epistemic.shape == (45, 2)


@pytest.mark.slow
def test_check_estimator():
    # check_regressors_train asks for R^2 > 0.5: 3 epochs reach it for some seeds only, 10 for seeds 0-2.
    results = check_estimator(AutoDEUQRegressor(**{**TINY, "epochs": 10}), on_fail=None)
    failed = [r for r in results if r["status"] == "failed" and r["check_name"] not in NOT_APPLICABLE]
    assert not failed, [(r["check_name"], str(r["exception"])[:300]) for r in failed]


def test_one_sample_is_refused_with_a_message_naming_it():
    with pytest.raises(ValueError, match="1 sample"):
        AutoDEUQRegressor(**TINY).fit(np.ones((1, 3)), np.ones(1))


def test_negative_seed_is_refused_naming_the_parameter():
    X = np.random.default_rng(0).normal(size=(30, 2))
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got -1"):
        AutoDEUQRegressor(**{**TINY, "seed": -1}).fit(X, X[:, 0])


def test_a_validation_fraction_with_validation_rows_is_refused(tmp_path):
    X = np.random.default_rng(0).normal(size=(30, 2))
    with pytest.raises(ParameterError, match="valid_fraction must be left at its default when X_valid is given"):
        AutoDEUQRegressor(**{**TINY, "valid_fraction": 0.2}, run_dir=tmp_path / "r").fit(X, X[:, 0], X, X[:, 1])
    assert not (tmp_path / "r").exists()


def test_cli_refuses_a_validation_file_with_a_validation_fraction(tmp_path, capsys):
    from autodeuq.cli import main

    table = tmp_path / "t.csv"
    table.write_text("a,y\n" + "".join(f"{i},{i % 3}\n" for i in range(12)))
    code = main(["search", "--data", str(table), "--valid", str(table), "--valid-fraction", "0.2",
                 "--run-dir", str(tmp_path / "r"), "--evaluator", "serial"])
    err = capsys.readouterr().err
    assert code == 2 and err == ("autodeuq: error: give either --valid FILE or --valid-fraction F, not both: the "
                                 "validation rows are --valid's\n")
    assert not (tmp_path / "r").exists()


def test_frame_columns_are_matched_by_name(tmp_path):
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(2)
    X = pd.DataFrame(rng.normal(size=(40, 3)) * [1.0, 10.0, 100.0], columns=["a", "b", "c"])
    y = pd.Series(X["a"] - X["b"] / 10 + rng.normal(0, 0.1, 40), name="target")
    model = AutoDEUQRegressor(**TINY, run_dir=tmp_path / "run").fit(X, y)
    assert model.ensemble_.feature_names == ["a", "b", "c"] and model.ensemble_.target_names == ["target"]
    np.testing.assert_array_equal(model.predict(X[["c", "a", "b"]]), model.predict(X.to_numpy()))
    with pytest.raises(ValueError, match="Feature names unseen at fit time:\n- d"):
        model.predict(X.rename(columns={"c": "d"}))
    with pytest.raises(ValueError, match="Feature names seen at fit time, yet now missing:\n- c"):
        model.predict(X[["a", "b"]])


def test_ensemble_size_above_the_successes_warns_and_uses_them_all(tmp_path):
    from autodeuq.ensemble import EnsembleSizeWarning

    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, (45, 1))
    y = np.sin(3 * X[:, 0])
    model = AutoDEUQRegressor(**{**TINY, "ensemble_size": 5}, run_dir=tmp_path / "run")
    with pytest.warns(EnsembleSizeWarning, match=r"size 5 asked, but the catalog has only 2 successful"):
        model.fit(X, y)
    assert model.search_summary_.n_done == 2
    assert model.ensemble_.selection["size"] == 2 and model.ensemble_.selection["size_requested"] == 5
    assert 1 <= len(model.ensemble_.member_ids) <= 2


def test_fit_says_when_the_ensemble_is_effectively_one_model(tmp_path, monkeypatch):
    from autodeuq.ensemble import EnsembleSizeWarning, building

    monkeypatch.setattr(building, "ONE_MODEL_EFFECTIVE_SIZE", 100.0)  # any ensemble of several members
    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, (45, 1))
    model = AutoDEUQRegressor(**{**TINY, "ensemble_size": 2}, run_dir=tmp_path / "run")
    with pytest.warns(EnsembleSizeWarning, match=r"effectively one model: its 2 members weigh"):
        model.fit(X, np.sin(3 * X[:, 0]))
    assert len(model.ensemble_.member_ids) == 2
    assert model.ensemble_.selection["effective_size"] == pytest.approx(1 / np.sum(model.ensemble_.weights**2),
                                                                        abs=1e-4)


def test_bad_ensemble_size_is_refused_before_the_search(tmp_path):
    X = np.random.default_rng(0).normal(size=(30, 1))
    for size in (0, 2.5):
        with pytest.raises(ValueError, match="ensemble_size"):
            AutoDEUQRegressor(**{**TINY, "ensemble_size": size}, run_dir=tmp_path / "run").fit(X, X[:, 0])
    assert not (tmp_path / "run").exists()


def test_temporary_catalog_lives_as_long_as_the_estimator():
    import gc
    import pickle
    import shutil

    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (45, 1))
    y = np.sin(3 * X[:, 0])
    model = AutoDEUQRegressor(**TINY).fit(X, y)
    first = model.run_dir_
    assert (first / "catalog.sqlite").exists()
    model.predict(X)
    model.fit(X, y)  # a refit replaces the temporary catalog
    second = model.run_dir_
    assert second != first and not first.exists() and second.exists()
    del model
    gc.collect()
    assert not second.exists()

    # a pickled estimator reads its models from the temporary catalog: pickling keeps it
    model = AutoDEUQRegressor(**TINY).fit(X, y)
    kept = model.run_dir_
    blob = pickle.dumps(model)
    del model
    gc.collect()
    try:
        assert kept.exists()
        assert pickle.loads(blob).predict(X).shape == (45,)
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def test_selection_options_are_checked_before_the_search_and_reach_the_ensemble(tmp_path):
    X = np.random.default_rng(4).uniform(-1, 1, (45, 1))
    y = np.sin(3 * X[:, 0])
    for name, value in (("selection_stop", "never"), ("diversity", "colour"), ("calibrate", "isotonic")):
        with pytest.raises(ValueError, match=name):
            AutoDEUQRegressor(**{**TINY, name: value}, run_dir=tmp_path / "bad").fit(X, y)
    assert not (tmp_path / "bad").exists()
    model = AutoDEUQRegressor(**{**TINY, "max_evals": 3, "ensemble_size": 2, "calibrate": "scale"},
                              run_dir=tmp_path / "run").fit(X, y)
    ens = model.ensemble_
    assert ens.selection["stop"] == "size" and len(ens.member_ids) == 2
    assert ens.calibration["method"] == "scale" and len(ens.calibration["scale"]) == 1


@pytest.mark.parametrize("first, rungs", [(2, {2, 6}), ("auto", {3})])
def test_successive_halving_settings_reach_the_search(tmp_path, first, rungs):
    from autodeuq.catalog import Catalog

    X = np.random.default_rng(6).uniform(-1, 1, (45, 1))
    model = AutoDEUQRegressor(**{**TINY, "max_evals": 5, "epochs": 8}, early_discarding="sha", sha_min_epochs=first,
                              run_dir=tmp_path / "run").fit(X, np.sin(3 * X[:, 0]))
    with Catalog(model.run_dir_) as catalog:
        recorded = catalog.meta["search"]["early_discarding"]
        frame = catalog.to_dataframe()
    # "auto" on 45 rows (a small table): the first rung at epoch 3, the next at 9 (beyond the 8 epochs)
    assert recorded == {"policy": "sha", "min_epochs": min(rungs), "reduction": 3}
    stopped = frame.loc[frame["status"] == "discarded", "epochs"]
    assert len(stopped) >= 1 and set(stopped) <= rungs


BAD_PARAMETERS = [
    ("space", 3), ("search", "grid"), ("max_evals", 0), ("ensemble_size", 2.5), ("workers", 0), ("run_dir", 5),
    ("seed", -1), ("epochs", 0), ("evaluator", "dask"), ("valid_fraction", 1.5), ("selector", "best"),
    ("selection_score", "crps"), ("selection_stop", "never"), ("diversity", "colour"), ("calibrate", "isotonic"),
    ("selection_bags", -1), ("selection_pool", 0), ("early_discarding", "hyperband"), ("timeout", 0),
    ("progress", "yes"),
    ("categorical", "label"), ("categorical_columns", "color"), ("impute", "zero"),
    ("drop", "note"), ("id_column", 3), ("drop_missing_target", "yes"),
    ("refit", "yes"), ("crossfit", "maybe"), ("crossfit_folds", 1), ("crossfit_configs", 0),
    ("eval_budget", -5), ("sha_min_epochs", "soon"), ("sha_reduction", 1), ("sha_rungs", "updates"),
    ("population_size", 1), ("tournament_size", 0), ("surrogate", "svm"), ("acq", "ucb"), ("fixed_hp", "adam"),
    ("random_interleave", 1.5), ("fixed_arch", {"a": 1}), ("eval_timeout", 0), ("ray_address", 6379),
    ("cpus_per_eval", 0),
    ("gpus_per_eval", -1), ("new_run", "yes"), ("iepoch_epochs", 0), ("iepoch_top_k", 0), ("discard_budget", 0),
    ("task", "ordinal"), ("class_weight", "heavy"), ("label_smoothing", 0.7),
]
#: The settings under which an option applies (else its value is not used).
APPLIES = {"fixed_hp": {"search": "age-fixed-hp"}, "fixed_arch": {"search": "bo-fixed-arch"},
           "surrogate": {"search": "bo"}, "acq": {"search": "bo"}, "random_interleave": {"search": "bo"},
           "iepoch_epochs": {"early_discarding": "iepoch"}, "iepoch_top_k": {"early_discarding": "iepoch"}}


def test_every_parameter_is_covered_by_the_bad_value_table():
    assert {name for name, _ in BAD_PARAMETERS} == set(AutoDEUQRegressor().get_params())


@pytest.mark.parametrize("name, value", BAD_PARAMETERS)
def test_a_bad_parameter_is_refused_before_any_work(tmp_path, name, value):
    from autodeuq.errors import AutoDEUQError, ParameterError

    params = {**TINY, "run_dir": tmp_path / "run", **APPLIES.get(name, {}), name: value}
    # one row is also bad data: the parameter is checked first, before the data and the search
    with pytest.raises(ParameterError, match=f"^{name} must ") as caught:
        AutoDEUQRegressor(**params).fit(np.ones((1, 2)), np.ones(1))
    assert caught.value.parameter == name and isinstance(caught.value, (AutoDEUQError, ValueError))
    assert not (tmp_path / "run").exists()


def test_parameters_are_keyword_only_and_unknown_ones_refused():
    with pytest.raises(TypeError):
        AutoDEUQRegressor("tabular")
    with pytest.raises(TypeError, match="unexpected keyword argument 'verbose'"):
        AutoDEUQRegressor(verbose=True)


def test_an_unknown_space_is_refused_before_any_work(tmp_path):
    from autodeuq.space import SpaceError

    with pytest.raises(SpaceError, match="unknown search space 'tabularr'"):
        AutoDEUQRegressor(**{**TINY, "space": "tabularr"}, run_dir=tmp_path / "run").fit(np.ones((1, 2)), np.ones(1))
    assert not (tmp_path / "run").exists()
