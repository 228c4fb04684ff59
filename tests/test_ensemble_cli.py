"""The predictive ensemble, the CLI and the estimator API on real (tiny) trainings of the toy data."""
import json
import warnings

import numpy as np
import pandas as pd
import pytest

from autodeuq.cli import main
from autodeuq.ensemble import Ensemble, load_ensemble


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A toy-sine catalog and ensemble made through the CLI's whole job (serial, tiny budget)."""
    run = tmp_path_factory.mktemp("cli") / "run"
    code = main(["run", "--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "6", "--epochs", "15",
                 "--search", "random", "--size", "3", "--run-dir", str(run), "--no-progress"])
    assert code == 0
    return run


def test_run_writes_manifest_metrics_and_plots(run_dir):
    for name in ("ensemble.json", "metrics.json", "results.csv", "uncertainty.png", "calibration.png",
                 "search_trace.png"):
        assert (run_dir / name).stat().st_size > 0, name
    metrics = json.loads((run_dir / "metrics.json").read_text())
    members = metrics.pop("ensemble")["members"]
    assert members == [m["id"] for m in json.loads((run_dir / "ensemble.json").read_text())["members"]]
    search = metrics.pop("search")  # the catalog's evaluations by status, and the mutated children
    assert search["evaluations"] == search["done"] + search["discarded"] + search["failed"] + search["running"]
    assert 0 <= search["mutated"] <= search["evaluations"]
    assert set(metrics) == {"validation", "test"}
    expected = {"nll", "nll_gaussian", "rmse", "mae", "crps", "coverage_50", "coverage_90", "coverage_95",
                "coverage_gaussian_50", "coverage_gaussian_90", "coverage_gaussian_95",
                "coverage_conformal_50", "coverage_conformal_90", "coverage_conformal_95",
                "miscalibration_area", "sharpness"}
    for split in metrics.values():
        assert set(split) == expected
        assert all(np.isfinite(v["mean"]) and len(v["per_target"]) == 1 for v in split.values())


def test_decomposition_identities(run_dir):
    ens = load_ensemble(run_dir / "ensemble.json")
    x = np.linspace(-40, 40, 50)[:, None]
    pred = ens.predict(x)
    means, variances = ens.member_predictions(x)
    w = ens.weights[:, None, None]
    mean = (w * means).sum(0)
    mixture_var = (w * (variances + means**2)).sum(0) - mean**2
    np.testing.assert_allclose(pred.mean, mean, rtol=1e-10)
    np.testing.assert_allclose(pred.total, pred.aleatoric + pred.epistemic, rtol=0, atol=0)
    np.testing.assert_allclose(pred.total, mixture_var, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(pred.aleatoric, (w * variances).sum(0), rtol=1e-10)
    np.testing.assert_allclose(pred.std, np.sqrt(pred.total))
    assert pred.mean.shape == pred.epistemic.shape == (50, 1)


def test_tfp_distribution_matches_predict(run_dir):
    ens = load_ensemble(run_dir / "ensemble.json")
    x = np.linspace(-35, 35, 20)[:, None]
    pred = ens.predict(x)
    dist = ens.distribution(x)
    np.testing.assert_allclose(dist.mean().numpy(), pred.mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dist.variance().numpy(), pred.total, rtol=1e-4, atol=1e-5)


def test_saved_and_reloaded_ensemble_predicts_identically(run_dir, tmp_path):
    ens = Ensemble.from_catalog(run_dir, size=2, selector="topk")
    path = ens.save(run_dir / "top2.json")
    again = load_ensemble(path)
    assert again.member_ids == ens.member_ids and np.allclose(again.weights, [0.5, 0.5])
    x = np.linspace(-30, 30, 11)[:, None]
    a, b = ens.predict(x), again.predict(x)
    for field in ("mean", "aleatoric", "epistemic", "total"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert "pickle" not in path.read_text()


def test_predict_cli_writes_decomposed_columns(run_dir, tmp_path):
    pd.DataFrame({"x": np.linspace(-30, 30, 7)}).to_csv(tmp_path / "new.csv", index=False)
    out = tmp_path / "pred.csv"
    assert main(["predict", "--ensemble", str(run_dir / "ensemble.json"), "--data", str(tmp_path / "new.csv"),
                 "--out", str(out)]) == 0
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["y_mean", "y_std", "y_aleatoric_std", "y_epistemic_std"]
    np.testing.assert_allclose(frame["y_std"] ** 2, frame["y_aleatoric_std"] ** 2 + frame["y_epistemic_std"] ** 2)


def one_line_error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("autodeuq: error:") and "\n" not in err and "Traceback" not in err
    return err


def test_cli_errors_are_one_line(run_dir, tmp_path, capsys):
    assert "--size" in one_line_error(capsys, ["ensemble", "--run-dir", str(run_dir), "--size", "0"])
    pd.DataFrame({"a": [1.0], "b": [2.0]}).to_csv(tmp_path / "bad.csv", index=False)
    err = one_line_error(capsys, ["predict", "--ensemble", str(run_dir / "ensemble.json"),
                                  "--data", str(tmp_path / "bad.csv"), "--out", str(tmp_path / "o.csv")])
    assert "bad.csv" in err
    assert "catalog" in one_line_error(capsys, ["ensemble", "--run-dir", str(tmp_path / "nothing")]).lower()
    pd.DataFrame({"x": [1.0, 2.0, np.nan], "y": [1.0, 2.0, 3.0]}).to_csv(tmp_path / "nan.csv", index=False)
    err = one_line_error(capsys, ["search", "--data", str(tmp_path / "nan.csv"), "--target", "y",
                                  "--impute", "none", "--evaluator", "serial"])  # imputed by default
    assert "nan.csv" in err and "'x'" in err


def test_run_dir_without_success_is_refused(tmp_path, capsys):
    run = tmp_path / "failing"
    code = main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "1", "--epochs", "2",
                 "--eval-timeout", "0.001", "--run-dir", str(run), "--no-progress"])
    assert code == 1  # a search in which every evaluation failed fails
    capsys.readouterr()
    assert "no successful" in one_line_error(capsys, ["ensemble", "--run-dir", str(run)])


def test_help_documents_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    text = capsys.readouterr().out
    for option in ("--data", "--target", "--valid", "--valid-fraction", "--dataset", "--space", "--search",
                   "--max-evals", "--timeout", "--eval-timeout", "--eval-budget", "--workers", "--ray-address",
                   "--cpus-per-eval",
                   "--gpus-per-eval", "--seed", "--run-dir", "--surrogate", "--acq", "--fixed-hp", "--fixed-arch",
                   "age-fixed-hp", "bo-fixed-arch", "--population-size", "--tournament-size"):
        assert option in text, option


def test_default_ensemble_has_k_distinct_members_or_says_why(run_dir):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ens = Ensemble.from_catalog(run_dir, size=3)
    assert not [w for w in caught if "distinct member" in str(w.message)]  # a full ensemble has no shortfall
    assert len(ens.member_ids) == 3 and ens.selection["shortfall"] is None
    n_done = len(ens.catalog.ids("done"))
    with pytest.warns(UserWarning, match=f"size {n_done + 2} asked, but the catalog has only {n_done} successful"):
        big = Ensemble.from_catalog(run_dir, size=n_done + 2)
    assert len(big.member_ids) == n_done
    assert f"only {n_done} successful" in big.selection["shortfall"]


@pytest.mark.parametrize("diversity", ["architecture", "activations"])
def test_diverse_selection_keeps_members_apart(run_dir, diversity):
    from autodeuq.ensemble.building import member_groups

    catalog = Ensemble.from_catalog(run_dir, size=1).catalog
    done = catalog.ids("done")
    labels = dict(zip(done, member_groups(catalog, done, diversity)))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ens = Ensemble.from_catalog(run_dir, size=3, diversity=diversity)
    chosen = [labels[i] for i in ens.member_ids]
    assert len(set(chosen)) == len(chosen) == min(3, len(set(labels.values())))
    if diversity == "activations":
        space = catalog.space
        for i in ens.member_ids:
            acts = {d.activation for d, _ in space.cells(catalog.config(i)["arch"]) if d.activation}
            assert labels[i] == ("+".join(sorted(acts)) or "identity")


def test_recalibrated_ensemble_scales_both_parts_and_round_trips(run_dir):
    ens = Ensemble.from_catalog(run_dir, size=3, calibrate="scale")
    scale = np.asarray(ens.calibration["scale"])
    assert scale.shape == (1,) and np.all(scale > 0)
    for key in ("validation_coverage_before", "validation_coverage_after"):
        assert set(ens.calibration[key]) == {"0.5", "0.9", "0.95"}
    x = np.linspace(-40, 40, 30)[:, None]
    pred = ens.predict(x)
    raw_means, raw_vars = ens.member_predictions(x)
    from autodeuq.metrics import mixture_moments

    mean, ale, epi = mixture_moments(raw_means, raw_vars, ens.weights)
    np.testing.assert_allclose(pred.mean, mean, rtol=1e-10)
    np.testing.assert_allclose(pred.aleatoric, ale * scale**2, rtol=1e-10)
    np.testing.assert_allclose(pred.epistemic, epi * scale**2, rtol=1e-8, atol=1e-12)
    again = load_ensemble(ens.save(run_dir / "calibrated.json"))
    assert again.calibration == json.loads(json.dumps(ens.calibration))
    np.testing.assert_allclose(again.predict(x).total, pred.total, rtol=1e-6)  # reloaded float32 networks
    np.testing.assert_allclose(again.distribution(x).variance().numpy(), pred.total, rtol=1e-4, atol=1e-5)


def test_ensemble_pickles_and_predicts_identically(run_dir):
    import pickle

    ens = load_ensemble(run_dir / "ensemble.json")
    x = np.linspace(-30, 30, 9)[:, None]
    before = ens.predict(x)  # models loaded and the graph compiled before pickling
    again = pickle.loads(pickle.dumps(ens))
    np.testing.assert_allclose(again.predict(x).total, before.total, rtol=1e-6)  # reloaded float32 networks
    assert again.member_ids == ens.member_ids


def test_negative_seed_names_the_option(tmp_path, capsys):
    err = one_line_error(capsys, ["search", "--dataset", "toy-sine", "--seed", "-1", "--evaluator", "serial",
                                  "--run-dir", str(tmp_path / "run")])
    assert "--seed" in err and "-1" in err


def test_report_of_a_recalibrated_ensemble_gives_coverage_before_and_after(run_dir, tmp_path):
    import shutil

    from autodeuq import metrics as m
    from autodeuq.options import EnsembleConfig, configure
    from autodeuq.report import build_and_report

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    report = build_and_report(copy, configure(EnsembleConfig, ensemble_size=3, calibrate="scale"))
    document = json.loads((copy / "metrics.json").read_text())
    block = document["calibration"]
    scale = np.asarray(block["scale"])
    assert scale.shape == (1,)
    for key in ("validation_coverage_before", "validation_coverage_after", "test_coverage_before",
                "test_coverage_after"):
        assert set(block[key]) == {"0.5", "0.9", "0.95"}
    ens = report.ensemble
    x_test, y_test = ens.catalog.test_data()
    raw_means, raw_vars = ens.member_predictions(x_test)
    assert block["test_coverage_before"]["0.9"] == m.coverage(raw_means, raw_vars, ens.weights, y_test, 0.9).tolist()
    cal = ens.recalibrated(raw_means, raw_vars)
    expected = float(m.coverage(*cal, ens.weights, y_test, 0.9)[0])
    assert document["test"]["coverage_90"]["mean"] == pytest.approx(expected)
    assert json.loads((copy / "ensemble.json").read_text())["calibration"]["scale"] == block["scale"]


# ------------------------------------------------------------- ensemble size
def fake_catalog(run_dir, n_done, n_valid=None, predict=None):
    """A catalog of ``n_done`` successful entries (validation predictions only, no trainings); ``n_valid``
    validation rows (default: a third of 30); ``predict(i, y_valid)``: entry i's validation means (default:
    random), each with variance 1."""
    from autodeuq.catalog import Catalog as CatalogReader
    from autodeuq.data import from_arrays
    from autodeuq.result import TrainResult
    from autodeuq.space import load_space

    rng = np.random.default_rng(0)
    if n_valid is None:
        dataset = from_arrays(rng.normal(size=(30, 1)), rng.normal(size=30), seed=0)
    else:
        dataset = from_arrays(rng.normal(size=(30, 1)), rng.normal(size=30), rng.normal(size=(n_valid, 1)),
                              rng.normal(size=(n_valid, 1)), seed=0)
    writer = CatalogReader.create_or_resume(run_dir, load_space("toy"), dataset, {"search": "fake"}, seed=0)
    n_valid = len(dataset.y_valid)
    for i in range(n_done):
        entry = writer.submit(load_space("toy").sample(rng))
        writer.record(entry, TrainResult(
            status="done", objective=float(i), epochs=1, best_epoch=1, wall_time=0.1, n_params=10,
            model_bytes=b"fake", valid_var=np.full((n_valid, 1), 1.0),
            valid_mean=rng.normal(size=(n_valid, 1)) if predict is None else predict(i, dataset.y_valid),
            history={"loss": [1.0], "val_loss": [1.0], "lr": [0.01]}, worker="fake", start_time=0.0, end_time=1.0,
        ))
    writer.close()
    return run_dir


def test_from_catalog_larger_than_the_successes_warns_and_selects_among_all(tmp_path):
    from autodeuq.ensemble import EnsembleSizeWarning

    run = fake_catalog(tmp_path / "run", 3)
    with pytest.warns(EnsembleSizeWarning, match=r"size 7 asked, but the catalog has only 3 successful"):
        ens = Ensemble.from_catalog(run, size=7, selector="topk")
    assert len(ens.member_ids) == 3 and ens.selection["size"] == 3 and ens.selection["size_requested"] == 7
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(Ensemble.from_catalog(run, size=3, selector="topk").member_ids) == 3
    with pytest.raises(ValueError, match="size"):
        Ensemble.from_catalog(run, size=0)


def test_default_selection_is_greedy_to_k_distinct_members_on_all_validation_rows(tmp_path):
    from autodeuq.catalog import Catalog
    from autodeuq.ensemble import select

    run = fake_catalog(tmp_path / "run", 20)
    ens = Ensemble.from_catalog(run, size=3)
    catalog = Catalog(run)
    ids, means, variances = catalog.validation_predictions(catalog.model_ids())
    chosen = select(means, variances, catalog.validation_targets(), 3, "greedy", stop="size", pool=0.4)
    assert ens.member_ids == [ids[i] for i in chosen.indices] and len(ens.member_ids) == 3
    np.testing.assert_allclose(ens.weights, chosen.weights)
    assert ens.selection["bags"] == 0 and ens.selection["effective_size"] == pytest.approx(chosen.effective_size,
                                                                                           abs=1e-4)
    assert ens.selection["pool"] == 0.4  # a regression catalog's "auto": its best 8 of 20 models
    whole = Ensemble.from_catalog(run, size=3, pool=1.0)
    assert whole.selection["pool"] == 1.0


def test_a_selection_pool_selects_among_the_best_models_of_the_catalog(tmp_path):
    from autodeuq.catalog import Catalog
    from autodeuq.ensemble import select

    run = fake_catalog(tmp_path / "run", 8)
    ens = Ensemble.from_catalog(run, size=2, pool=0.25)
    catalog = Catalog(run)
    ids, means, variances = catalog.validation_predictions(catalog.model_ids())
    y = catalog.validation_targets()
    single = np.mean(0.5 * np.log(2 * np.pi * variances) + (means - y) ** 2 / (2 * variances), axis=(1, 2))
    best_two = np.sort(np.argsort(single)[:2])  # a quarter of 8 models
    chosen = select(means[best_two], variances[best_two], y, 2)
    assert ens.member_ids == [ids[best_two[i]] for i in chosen.indices]
    assert ens.selection["pool"] == 0.25


def test_an_ensemble_that_is_effectively_one_model_says_so(tmp_path):
    from autodeuq.ensemble import EnsembleSizeWarning

    # entry 0 predicts the validation targets exactly, the others are 5 units off: greedy selection with
    # replacement keeps re-adding entry 0, and the two members the ensemble must have weigh almost nothing
    run = fake_catalog(tmp_path / "run", 3, predict=lambda i, y: y + (0.0 if i == 0 else 5.0 + i))
    with pytest.warns(EnsembleSizeWarning, match=r"effectively one model: its 3 members weigh 0\.9\d\d") as caught:
        ens = Ensemble.from_catalog(run, size=3)
    effective = 1 / np.sum(ens.weights**2)
    assert len(caught) == 1 and f"(effective size {effective:.2f})" in str(caught[0].message)
    assert len(ens.member_ids) == 3 and effective < 1.5
    assert ens.selection["effective_size"] == pytest.approx(effective, abs=1e-4)
    with warnings.catch_warnings():  # equal weights: no warning
        warnings.simplefilter("error")
        assert Ensemble.from_catalog(run, size=3, selector="greedy-noreplace").selection["effective_size"] == 3
        assert len(Ensemble.from_catalog(run, size=1).member_ids) == 1  # one member asked: nothing to say


def test_cli_says_when_the_ensemble_is_effectively_one_model(run_dir, tmp_path, capsys, monkeypatch):
    from autodeuq.ensemble import building

    monkeypatch.setattr(building, "ONE_MODEL_EFFECTIVE_SIZE", 100.0)  # any ensemble of several members
    out = tmp_path / "one.json"
    assert main(["ensemble", "--run-dir", str(run_dir), "--size", "3", "--out", str(out)]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("autodeuq: warning:")]
    assert len(lines) == 1 and "is effectively one model" in lines[0], lines
    selection = json.loads((tmp_path / "metrics.json").read_text())["ensemble"]["selection"]
    weights = np.asarray(json.loads((tmp_path / "metrics.json").read_text())["ensemble"]["weights"])
    assert selection["effective_size"] == pytest.approx(1 / np.sum(weights**2), abs=1e-4)
    assert f"effective size {selection['effective_size']:.2f}" in lines[0]


def test_cli_ensemble_larger_than_the_catalog_warns_in_one_line(run_dir, tmp_path, capsys):
    from autodeuq.catalog import Catalog

    n_done = Catalog(run_dir).n_done
    out = tmp_path / "big.json"
    assert main(["ensemble", "--run-dir", str(run_dir), "--size", "50", "--out", str(out)]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines()
             if line.startswith("autodeuq: warning:") and "effectively one model" not in line]
    assert len(lines) == 1 and f"size 50 asked, but the catalog has only {n_done} successful" in lines[0], lines
    manifest = json.loads(out.read_text())
    assert manifest["selection"]["size"] == n_done and 1 <= len(manifest["members"]) <= n_done


def test_cli_run_refuses_a_bad_size_before_searching(tmp_path, capsys):
    run = tmp_path / "run"
    err = one_line_error(capsys, ["run", "--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "1",
                                  "--epochs", "1", "--size", "0", "--run-dir", str(run), "--no-progress"])
    assert "--size" in err and not run.exists()


# ------------------------------------------------------- search options
def test_search_options_are_checked_before_anything_runs(tmp_path, capsys):
    run = tmp_path / "run"
    base = ["search", "--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "1", "--epochs", "1",
            "--run-dir", str(run), "--no-progress"]
    cases = [
        (["--search", "age", "--surrogate", "gp"], "--surrogate"),
        (["--search", "random", "--acq", "ei"], "--acq"),
        (["--search", "age-fixed-hp", "--acq", "ei"], "--acq"),
        (["--search", "agebo", "--fixed-hp", "{}"], "--fixed-hp"),
        (["--search", "age", "--fixed-arch", "[0]"], "--fixed-arch"),
        (["--search", "age-fixed-hp", "--fixed-hp", '{"batch_size": 1000}'], "batch_size"),
        (["--search", "age-fixed-hp", "--fixed-hp", '{"lr": 0.1}'], "'lr'"),
        (["--search", "bo-fixed-arch", "--fixed-arch", "[1, 2]"], "2 variables"),
        (["--search", "bo-fixed-arch", "--surrogate", "rf", "--fixed-arch", '{"a": 1}'], "--fixed-arch"),
    ]
    for extra, needle in cases:
        err = one_line_error(capsys, base + extra)
        assert needle in err, (extra, err)
    with pytest.raises(SystemExit) as usage:  # text that is not JSON: argparse's usage error, one line
        main(base + ["--search", "age-fixed-hp", "--fixed-hp", "adam"])
    err = capsys.readouterr().err
    assert usage.value.code == 2 and "--fixed-hp: not valid JSON" in err and err.count("\n") == 1
    assert not run.exists()


def test_cli_runs_the_thesis_ablations(tmp_path):
    from autodeuq.catalog import Catalog
    from autodeuq.search import DEFAULT_FIXED_HP, default_fixed_arch
    from autodeuq.space import load_space

    base = ["search", "--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "2", "--epochs", "2",
            "--no-progress"]
    run = tmp_path / "age"
    assert main(base + ["--search", "age-fixed-hp", "--fixed-hp", '{"learning_rate": 0.005}',
                        "--run-dir", str(run)]) == 0
    expected = {**DEFAULT_FIXED_HP, "learning_rate": 0.005}
    catalog = Catalog(run)
    assert [config["hp"] for config, _ in catalog.history()] == [expected, expected]
    assert catalog.meta["search"]["search"] == "age-fixed-hp"
    # aging evolution sized for 2 evaluations: the smallest population
    assert catalog.meta["search"]["options"] == {"fixed_hp": expected, "population_size": 10, "sample_size": 3}

    run = tmp_path / "bo"
    assert main(base + ["--search", "bo-fixed-arch", "--surrogate", "rf", "--run-dir", str(run)]) == 0
    catalog = Catalog(run)
    arch = default_fixed_arch(load_space("toy"))
    assert [config["arch"] for config, _ in catalog.history()] == [arch, arch]
    assert catalog.meta["search"]["options"] == {"surrogate": "rf", "acq": "lcb", "random_interleave": 0.0,
                                                    "fixed_arch": arch}


def test_cli_ensemble_selection_options_reach_the_manifest_and_metrics(run_dir, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    out = tmp_path / "chosen.json"
    assert main(["ensemble", "--run-dir", str(copy), "--size", "2", "--selection-stop", "improvement",
                 "--diversity", "architecture", "--calibrate", "scale", "--selection-bags", "3",
                 "--selection-pool", "0.5", "--out", str(out)]) == 0
    manifest = json.loads(out.read_text())
    assert manifest["selection"]["stop"] == "improvement" and manifest["selection"]["diversity"] == "architecture"
    assert manifest["selection"]["bags"] == 3 and manifest["selection"]["pool"] == 0.5
    assert manifest["calibration"]["method"] == "scale"
    document = json.loads((out.parent / "metrics.json").read_text())  # beside the --out manifest
    assert document["calibration"]["scale"] == manifest["calibration"]["scale"]
    assert [m["id"] for m in manifest["members"]] == document["ensemble"]["members"]


def test_cli_selection_score_reaches_the_manifest(run_dir, tmp_path, capsys):
    out = tmp_path / "score.json"
    assert main(["ensemble", "--run-dir", str(run_dir), "--selection-score", "gaussian", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["selection"]["score"] == "gaussian"
    with pytest.raises(SystemExit):  # the pre-release name is gone
        main(["ensemble", "--run-dir", str(run_dir), "--objective", "gaussian"])
    capsys.readouterr()
    err = one_line_error(capsys, ["ensemble", "--run-dir", str(run_dir), "--selection-bags", "-1"])
    assert "--selection-bags must be an integer >= 0, got -1" in err


def test_recalibration_with_too_few_validation_rows_is_one_line(tmp_path, capsys):
    run = fake_catalog(tmp_path / "run", 3, n_valid=1)
    err = one_line_error(capsys, ["ensemble", "--run-dir", str(run), "--size", "2", "--calibrate", "scale"])
    assert "recalibration cross-fits on 2 folds of the validation rows, and there are 1" in err
    assert err.endswith("(--calibrate)")


def test_auto_recalibration_follows_the_number_of_rows(run_dir, tmp_path, monkeypatch, capsys):
    import shutil

    from autodeuq import data as data_module

    rows = len(Ensemble.from_catalog(run_dir, size=3).catalog.fit_data()[1])
    small = Ensemble.from_catalog(run_dir, size=3)  # the default, "auto", on a small table
    assert small.calibration is None and small.scale is None
    assert small.selection["calibration"].startswith(f"not recalibrated: {rows} training and validation rows")
    monkeypatch.setattr(data_module, "SMALL_DATA_ROWS", rows - 1)
    large = Ensemble.from_catalog(run_dir, size=3, calibrate="auto")
    assert large.calibration == Ensemble.from_catalog(run_dir, size=3, calibrate="scale").calibration
    why = f"recalibrated: {rows} training and validation rows (auto: more than {rows - 1})"
    assert large.selection["calibration"] == why
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    assert main(["ensemble", "--run-dir", str(copy), "--size", "3", "--no-refit"]) == 0
    scale = load_ensemble(copy / "ensemble.json").scale
    out = capsys.readouterr().out
    assert f"{why}; predictive std x {scale[0]:.3g} (per target)" in out
    assert "\nconformal intervals: normalized scores of " in out
    assert "validation rows, each predicted by an ensemble selected on the other 1 fold(s)" in out


def test_from_catalog_fits_conformal_scores_on_the_out_of_selection_mixtures(tmp_path):
    """The scores are those of the recalibration's held-out mixtures, one per validation row; the
    recalibration's scale does not move the conformal intervals; too few rows: none, and why."""
    from autodeuq.catalog import Catalog
    from autodeuq.ensemble import conformal, select
    from autodeuq.ensemble.calibration import apply_scale

    run = fake_catalog(tmp_path / "run", 12, n_valid=40, predict=lambda i, y: y + (i + 1) * 0.1)
    plain = Ensemble.from_catalog(run, size=3, calibrate="none", calibration_folds=2, seed=3)
    scaled = Ensemble.from_catalog(run, size=3, calibrate="scale", calibration_folds=2, seed=3)
    assert plain.conformal["n"] == scaled.conformal["n"] == 40 and plain.conformal["folds"] == 2
    assert "40 validation rows, each predicted by an ensemble selected on the other 1 fold" in \
        plain.selection["conformal"]
    # the scaled ensemble's scores, rebuilt from the selections without each fold of its recalibration
    catalog = Catalog(run)
    ids, means, variances = catalog.validation_predictions(catalog.model_ids())
    y = catalog.validation_targets()
    held_out = []
    for held in np.array_split(np.random.default_rng(3).permutation(40), 2):
        rows = np.setdiff1d(np.arange(40), held)
        pick = select(means[:, rows], variances[:, rows], y[rows], 3, "greedy", stop="size",
                      pool=plain.selection["pool"])
        m, v = apply_scale(means[pick.indices][:, held], variances[pick.indices][:, held], pick.weights,
                           scaled.scale)
        mean = np.tensordot(pick.weights, m, axes=1)
        std = np.sqrt(np.tensordot(pick.weights, v + (m - mean) ** 2, axes=1))
        held_out.append((y[held], mean, std))
    want = conformal.fit_regression(*(np.concatenate(parts) for parts in zip(*held_out)))
    np.testing.assert_allclose(scaled.conformal["scores"], want["scores"], rtol=1e-12)
    # the same members, so the scale cancels in the interval: mean +- (q / c) (c std)
    assert plain.member_ids == scaled.member_ids
    members = [ids.index(i) for i in plain.member_ids]
    np.testing.assert_allclose(scaled.mixture(means[members], variances[members]).interval(0.9),
                               plain.mixture(means[members], variances[members]).interval(0.9), rtol=1e-9)
    few = Ensemble.from_catalog(fake_catalog(tmp_path / "few", 3, n_valid=1), size=2, calibrate="none")
    assert few.conformal is None and few.selection["conformal"].startswith("none:")
