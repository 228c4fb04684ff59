"""The predictive ensemble, the CLI and the estimator API on real (tiny) trainings of the toy data."""
import json

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
    assert set(metrics) == {"validation", "test"}
    expected = {"nll", "nll_gaussian", "rmse", "mae", "crps", "coverage_50", "coverage_90", "coverage_95",
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
    ens = Ensemble.from_catalog(run_dir, size=2, method="topk")
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
    assert "larger than" in one_line_error(capsys, ["ensemble", "--run-dir", str(run_dir), "--size", "50"])
    pd.DataFrame({"a": [1.0], "b": [2.0]}).to_csv(tmp_path / "bad.csv", index=False)
    err = one_line_error(capsys, ["predict", "--ensemble", str(run_dir / "ensemble.json"),
                                  "--data", str(tmp_path / "bad.csv"), "--out", str(tmp_path / "o.csv")])
    assert "bad.csv" in err
    assert "catalog" in one_line_error(capsys, ["ensemble", "--run-dir", str(tmp_path / "nothing")]).lower()
    pd.DataFrame({"x": [1.0, 2.0, np.nan], "y": [1.0, 2.0, 3.0]}).to_csv(tmp_path / "nan.csv", index=False)
    err = one_line_error(capsys, ["search", "--data", str(tmp_path / "nan.csv"), "--target", "y",
                                  "--evaluator", "serial"])
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
                   "--max-evals", "--timeout", "--eval-timeout", "--workers", "--ray-address", "--cpus-per-eval",
                   "--gpus-per-eval", "--seed", "--run-dir"):
        assert option in text, option
