"""The cross-fitted ensemble stage (autodeuq.ensemble.crossfit): fold networks as catalog entries,
resumed; selection and recalibration on their out-of-fold predictions; members and weights."""
import numpy as np
import pytest

from autodeuq import pipeline
from autodeuq.catalog import Catalog, CatalogError
from autodeuq.catalog.folds import FOLD_ID_START, is_fold_id
from autodeuq.data import from_arrays, toy_sine
from autodeuq.ensemble import load_ensemble
from autodeuq.ensemble.crossfit import assign_folds, check_folds, cross_fit, fold_plan
from autodeuq.ensemble.selection import select, select_categorical
from autodeuq.errors import ParameterError
from autodeuq.labels import Labels
from autodeuq.options import EnsembleConfig, SearchConfig, configure
from autodeuq.space import load_space

FOLDS = 3


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A small regression catalog: 6 evaluations of a few epochs on the toy sine."""
    run_dir = tmp_path_factory.mktemp("crossfit") / "run"
    config = configure(SearchConfig, search="random", max_evals=6, epochs=4, seed=1, evaluator="serial",
                       progress=False, early_discarding="none")
    pipeline.fill_catalog(load_space("toy"), toy_sine(seed=0), run_dir, config).raise_for_error()
    return run_dir


def ensemble_config(**values):
    return configure(EnsembleConfig, **{"crossfit": True, "crossfit_folds": FOLDS, "ensemble_size": 2, **values})


def test_folds_cover_every_row_once_and_keep_the_classes_in_proportion():
    plan = fold_plan(103, 5, seed=7)
    folds = assign_folds(plan)
    assert folds.shape == (103,) and set(folds.tolist()) == set(range(5))
    assert np.bincount(folds).max() - np.bincount(folds).min() <= 1
    assert np.array_equal(folds, assign_folds(fold_plan(103, 5, seed=7)))  # the same plan, the same folds
    assert not np.array_equal(folds, assign_folds(fold_plan(103, 5, seed=8)))
    codes = np.repeat([0, 1, 2], [60, 30, 13])
    folds = assign_folds(fold_plan(103, 5, seed=0), codes)
    for c, n in ((0, 60), (1, 30), (2, 13)):
        counts = np.bincount(folds[codes == c], minlength=5)
        assert counts.sum() == n and counts.max() - counts.min() <= 1


def test_fold_counts_the_rows_cannot_carry_are_refused():
    with pytest.raises(ParameterError, match="^crossfit_folds must be an integer >= 2"):
        check_folds(1, 100)
    with pytest.raises(ParameterError, match="fewer than 2 rows per fold: the catalog stores 9"):
        check_folds(5, 9)
    with pytest.raises(ParameterError, match="cannot cross-fit a class of 1 row"):
        check_folds(2, 20, codes=[0] * 19 + [1])


def test_auto_cross_fits_small_classification_tables_only(searched, tmp_path):
    go, why = pipeline.should_crossfit("auto", searched)
    assert not go and why.startswith("not cross-fitted: a regression run (auto cross-fits classification runs")
    assert pipeline.should_crossfit(True, searched) == (True, "cross-fitted: asked for")
    assert pipeline.should_crossfit(False, searched) == (False, "not cross-fitted: turned off")


def test_a_fold_count_below_two_is_refused_before_any_work():
    with pytest.raises(ParameterError, match="^crossfit_folds must be an integer >= 2"):
        configure(EnsembleConfig, crossfit_folds=1)


def test_fold_networks_are_catalog_entries_apart_from_the_search(searched):
    with Catalog(searched) as catalog:
        search_ids = catalog.model_ids()
        fitted = cross_fit(catalog, 3, FOLDS, seed=0)
        folds = catalog.fold_entries(fitted.plan)
        assert catalog.model_ids() == search_ids  # the search's entries, as before
        assert len(catalog.to_dataframe()) == len(catalog.ids(None))
        n_rows = len(catalog.fit_data()[0])
    assert len(folds) == 3 * FOLDS and all(is_fold_id(f["id"]) and f["id"] >= FOLD_ID_START for f in folds)
    expected = sorted((e, k) for e in fitted.entries for k in range(FOLDS))
    assert sorted((f["entry"], f["fold"]) for f in folds) == expected
    assert fitted.record["trained"] == 3 * FOLDS and fitted.record["resumed"] == 0
    # Each configuration's out-of-fold predictions cover every row once, with positive variances.
    means, variances = fitted.arrays
    assert means.shape == variances.shape == (3, n_rows, 1)
    assert np.all(np.isfinite(means)) and np.all(variances > 0)
    # The configurations are the best of the search by validation loss, one each.
    with Catalog(searched) as catalog:
        objectives = sorted((catalog.entry(i)["objective"], i) for i in catalog.ids("done"))
    assert fitted.entries == [i for _, i in objectives[:3]]


def test_fold_ids_follow_the_configurations_and_folds_not_the_order_the_trainings_end(searched, monkeypatch):
    # The trainings start longest first (by the search's measured seconds) and, on Ray, end in any
    # order: the ids must not follow that order, or the members' order, and with it the float sums of
    # the prediction, would change from run to run. Here they start (and end) in reverse.
    from autodeuq.ensemble import refit

    planned = refit.plan_within_deadline
    monkeypatch.setattr(refit, "plan_within_deadline",
                        lambda *args, **kwargs: (lambda run, late: (run[::-1], late))(*planned(*args, **kwargs)))
    with Catalog(searched) as catalog:
        fitted = cross_fit(catalog, 2, FOLDS, seed=11)
        folds = catalog.fold_entries(fitted.plan)
    by_id = [(f["entry"], f["fold"]) for f in sorted(folds, key=lambda f: f["id"])]
    assert by_id == [(e, k) for e in fitted.entries for k in range(FOLDS)]
    ids = sorted(f["id"] for f in folds)
    assert ids == list(range(ids[0], ids[0] + 2 * FOLDS))


def test_a_crossfit_resumes_with_the_folds_it_has_and_trains_only_the_missing_ones(searched):
    with Catalog(searched) as catalog:
        first = cross_fit(catalog, 2, FOLDS, seed=5)
        again = cross_fit(catalog, 3, FOLDS, seed=5)  # one configuration more
        same = cross_fit(catalog, 3, FOLDS, seed=5)
    assert first.record["trained"] == 2 * FOLDS
    assert again.record["trained"] == FOLDS and again.record["resumed"] == 2 * FOLDS
    assert same.record["trained"] == 0 and same.record["resumed"] == 3 * FOLDS
    assert again.fold_ids == same.fold_ids and {e: first.fold_ids[e] for e in first.entries} == \
        {e: same.fold_ids[e] for e in first.entries}
    for a, b in zip(again.arrays, same.arrays):
        assert np.array_equal(a, b)


def test_the_ensemble_is_selected_on_the_out_of_fold_predictions_and_predicts_with_the_fold_networks(searched):
    ensemble = pipeline.select_ensemble(searched, ensemble_config(calibrate="none"), seed=0)
    record = ensemble.selection["crossfit"]
    with Catalog(searched) as catalog:
        fitted = cross_fit(catalog, 4, FOLDS, seed=0)  # read back: what the stage selected on
        fold_of = {i: catalog.fold_entry(i) for i in ensemble.member_ids}
    assert fitted.record["trained"] == 0
    chosen = select(*fitted.arrays, fitted.y, size=2, selector="greedy", pool=1.0)
    assert record["entries"] == [fitted.entries[i] for i in chosen.indices]
    np.testing.assert_allclose(record["weights"], chosen.weights, rtol=0, atol=1e-12)
    # Members: the fold networks of each configuration selected, each of its weight / K.
    assert ensemble.member_ids == [i for e in record["entries"] for i in fitted.fold_ids[e]]
    for i, w in zip(ensemble.member_ids, ensemble.weights):
        k = record["entries"].index(fold_of[i]["entry"])
        assert w == pytest.approx(record["weights"][k] / FOLDS, abs=1e-12)
    # The prediction is the mixture of the fold networks: the decomposition stays exact.
    x = np.linspace(-4, 4, 9).reshape(-1, 1)
    value = ensemble.predict(x)
    means, variances = ensemble.member_predictions(x)
    w = ensemble.weights[:, None, None]
    mean = np.sum(w * means, axis=0)
    np.testing.assert_allclose(value.mean, mean, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(value.aleatoric, np.sum(w * variances, axis=0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(value.epistemic, np.sum(w * (means - mean) ** 2, axis=0), rtol=1e-9, atol=1e-12)
    # The conformal scores: one per training and validation row, out of fold and out of selection.
    assert ensemble.conformal["n"] == len(fitted.y) and "out-of-fold" in ensemble.conformal["held_out"]
    # Not refitted: the line says why.
    same, line = pipeline.refit_ensemble(ensemble, False)
    assert line.startswith("not refitted: the members are the fold networks") and same.member_ids == ensemble.member_ids


def test_a_refit_after_a_crossfit_retrains_the_configurations_selected_on_every_row(searched):
    ensemble = pipeline.select_ensemble(searched, ensemble_config(), seed=0)
    record = ensemble.selection["crossfit"]
    same, line = pipeline.refit_ensemble(ensemble, "auto")  # auto keeps the fold networks the scores are of
    assert line == "not refitted: the members are the fold networks (auto: cross-fitted)"
    assert same.member_ids == ensemble.member_ids
    refitted, line = pipeline.refit_ensemble(ensemble, True)
    assert line.startswith("refit: the configurations selected retrain on every row (asked for)")
    assert refitted.member_ids == record["entries"]  # the search entries, their networks retrained
    np.testing.assert_allclose(refitted.weights, np.asarray(record["weights"]) / np.sum(record["weights"]),
                               atol=1e-12)
    assert refitted.calibration == ensemble.calibration  # fitted on the out-of-fold predictions
    assert refitted.conformal == ensemble.conformal
    assert refitted.selection["refit"]["rows"] == len(Catalog(searched).fit_data()[0])
    assert set(refitted.refitted_ids) | set(refitted.selection["refit"]["kept_original"]) == set(record["entries"])


def test_a_cross_fitted_ensemble_saves_and_loads_with_its_fold_members(searched, tmp_path):
    ensemble = pipeline.select_ensemble(searched, ensemble_config(), seed=0)
    assert ensemble.calibration["method"] == "scale"  # fitted on the out-of-fold rows, whatever their number
    x = np.linspace(-3, 3, 7).reshape(-1, 1)
    expected = ensemble.predict(x)
    for path, contained in ((tmp_path / "ensemble.json", False), (tmp_path / "alone", True)):
        loaded = load_ensemble(ensemble.save(path, self_contained=contained))
        assert loaded.member_ids == ensemble.member_ids
        value = loaded.predict(x)
        np.testing.assert_allclose(value.mean, expected.mean, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(value.total, expected.total, rtol=1e-6, atol=1e-9)


def test_the_report_scores_the_out_of_fold_prediction_of_every_row(searched, tmp_path):
    from autodeuq.report import RegressionScores, build_and_report

    report = build_and_report(searched, ensemble_config(refit=False), manifest=tmp_path / "ensemble.json")
    assert "cross-fitted: asked for" in report.refit and "not refitted: the members are the fold" in report.refit
    with Catalog(searched) as catalog:
        n_rows = len(catalog.fit_data()[0])
    with Catalog(searched) as catalog:
        validation, y = RegressionScores.validation(report.ensemble, catalog)
    assert len(y) == n_rows and validation.mean.shape == (n_rows, 1)
    assert report.metrics["validation"]["nll"]["mean"] == pytest.approx(
        float(np.mean(-_mixture_logpdf(validation, y))), rel=1e-9)
    assert (tmp_path / "metrics.json").exists()


def _mixture_logpdf(prediction, y):
    from scipy.stats import norm

    pdf = np.sum(prediction.weights[:, None, None] * norm.pdf(y, prediction.means, np.sqrt(prediction.variances)),
                 axis=0)
    return np.log(pdf)


def test_a_damaged_fold_predictions_file_is_refused_naming_it(searched, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(searched, copy)
    with Catalog(copy) as catalog:
        fitted = cross_fit(catalog, 1, FOLDS, seed=0)
        fold_id = fitted.fold_ids[fitted.entries[0]][0]
        path = catalog.predictions_path(fold_id)
    path.write_bytes(b"not an archive")
    damaged = f"entry {fold_id}: predictions file .* corrupt \\(checksum mismatch\\)"
    with Catalog(copy) as catalog, pytest.raises(CatalogError, match=damaged):
        cross_fit(catalog, 1, FOLDS, seed=0)


def test_a_classifier_is_cross_fitted_on_stratified_folds_with_a_temperature(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 2))
    codes = (x[:, 0] + 0.5 * rng.normal(size=120) > 0).astype(float)
    labels = Labels(["no", "yes"])
    data = from_arrays(x, codes, labels=labels, seed=0)
    config = configure(SearchConfig, search="random", max_evals=4, epochs=3, seed=0, evaluator="serial",
                       progress=False, early_discarding="none")
    pipeline.fill_catalog(load_space("toy"), data, tmp_path / "run", config).raise_for_error()
    assert pipeline.should_crossfit("auto", tmp_path / "run") == (
        True, "cross-fitted: 120 training and validation rows (auto: at most 2000)")
    with Catalog(tmp_path / "run") as catalog:  # the limit is the task's, not the refit's small tables
        for rows, go in ((1437, True), (2000, True), (2001, False)):
            catalog.row_counts = lambda rows=rows: (rows - 200, 200)
            assert pipeline.should_crossfit("auto", catalog)[0] is go
    ensemble = pipeline.select_ensemble(tmp_path / "run", ensemble_config(), seed=0)
    assert type(ensemble).__name__ == "ClassifierEnsemble" and ensemble.calibration["method"] == "temperature"
    record = ensemble.selection["crossfit"]
    with Catalog(tmp_path / "run") as catalog:
        fitted = cross_fit(catalog, 4, FOLDS, seed=0)
    chosen = select_categorical(fitted.arrays[0], fitted.y[:, 0].astype(int), size=2, selector="greedy-noreplace")
    assert record["entries"] == [fitted.entries[i] for i in chosen.indices]
    proba = ensemble.predict(x[:5]).proba
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-9)
