"""What users read about a run: NLL in the data's units, architectures in words, the leaderboard.

A fake catalog (no TensorFlow): two targets of very different scales, entries whose objective is
the standardized validation NLL of their stored (original-unit) predictions, as training makes it.
"""
import math
import time

import numpy as np
import pandas as pd
import pytest

from autodeuq import metrics, report
from autodeuq.catalog import Catalog
from autodeuq.cli import main
from autodeuq.data import from_arrays, toy_sine
from autodeuq.evaluator import SerialEvaluator
from autodeuq.result import TrainResult
from autodeuq.runner import PlainProgress, SearchSummary, _update_bar, run_search
from autodeuq.space import load_space

Y_SCALE = np.array([30.0, 0.2])  # targets in very different units: the conversion must be per target


def make_dataset():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(45, 2))
    y = (x @ [[1.0, -0.5], [0.3, 0.8]] + rng.normal(0, 0.5, (45, 2))) * Y_SCALE + [100.0, -3.0]
    return from_arrays(x, y, seed=0)


def standardized_result(dataset, rng, status="done", epochs=7):
    """A result whose objective is the standardized NLL of its original-unit validation predictions."""
    scaler = dataset.scaler
    z_mean = scaler.transform_y(dataset.y_valid) + rng.normal(0, 0.3, dataset.y_valid.shape)
    z_var = rng.uniform(0.2, 1.5, dataset.y_valid.shape)
    objective = float(metrics.gaussian_nll(scaler.transform_y(dataset.y_valid), z_mean, z_var).mean())
    mean, var = scaler.inverse_y(z_mean, z_var)
    return TrainResult(status=status, objective=objective, epochs=epochs, best_epoch=epochs - 1, wall_time=1.5,
                       n_params=123, model_bytes=b"fake-model", valid_mean=mean, valid_var=var,
                       history={"val_loss": [objective]}, worker="w", start_time=1.0, end_time=2.5)


ARCHS = {  # architecture vector of the toy space -> its description
    "a": ([1, 0, 0, 0, 1, 12, 1, 0, 1], "1: 16 elu | 2: identity +skip(input) | 3: 32 elu +skip(2,input)"),
    "b": ([11, 1, 0, 1, 0, 0, 0, 0, 0], "1: 16 tanh +skip(input) | 2: identity +skip(1) | 3: identity"),
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    dataset = make_dataset()
    space = load_space("toy")
    run = tmp_path_factory.mktemp("readable") / "run"
    writer = Catalog.create_or_resume(run, space, dataset, {"algorithm": "fake"}, seed=0)
    rng = np.random.default_rng(1)
    hp = space.sample(rng)["hp"]
    for arch, _ in (ARCHS["a"], ARCHS["b"], ARCHS["a"]):
        writer.record(writer.submit({"arch": arch, "hp": hp}), standardized_result(dataset, rng))
    writer.record(writer.submit({"arch": ARCHS["b"][0], "hp": hp}),
                  standardized_result(dataset, rng, status="discarded", epochs=1))
    writer.record(writer.submit({"arch": ARCHS["a"][0], "hp": hp}), TrainResult.failure("planted failure", worker="w"))
    writer.close()
    return run


# ----------------------------------------------------------------------------- NLL units
def test_valid_nll_is_the_original_unit_nll_of_the_stored_predictions(run_dir):
    cat = Catalog(run_dir)
    y_std = np.asarray(cat.meta["data"]["standardization"]["y_std"])
    assert cat.nll_offset == pytest.approx(np.mean(np.log(y_std)), rel=1e-12)
    frame = cat.to_dataframe().set_index("id")
    ids, means, variances = cat.validation_predictions()
    for i, entry_id in enumerate(ids):
        exact = metrics.gaussian_nll(cat.validation_targets(), means[i], variances[i]).mean()
        assert frame.loc[entry_id, "valid_nll"] == pytest.approx(exact, rel=1e-10)
        assert frame.loc[entry_id, "valid_nll"] == pytest.approx(frame.loc[entry_id, "objective"] + cat.nll_offset)
    assert math.isnan(frame.loc[5, "valid_nll"]) and frame.loc[5, "status"] == "failed"


def test_results_csv_has_the_readable_columns(run_dir):
    frame = Catalog(run_dir).to_dataframe()
    columns = list(frame.columns)
    assert columns.index("valid_nll") == columns.index("objective") + 1
    assert columns.index("architecture") == columns.index("arch") + 1
    assert frame["architecture"].tolist() == [ARCHS[k][1] for k in "ababa"]
    csv = pd.read_csv(run_dir / "results.csv")
    pd.testing.assert_frame_equal(csv, frame, check_dtype=False)


def test_architecture_in_words():
    space = load_space("toy")
    for arch, words in ARCHS.values():
        assert space.describe_arch(arch) == words
    tabular = load_space("tabular")
    arch = [0] * len(tabular.arch_dims)
    assert tabular.describe_arch(arch) == " | ".join(f"{k}: identity" for k in range(1, 6))


def test_progress_bar_shows_the_best_nll_in_original_units(run_dir):
    class Bar:
        def update(self, n):
            pass

        def set_postfix(self, **postfix):
            self.postfix = postfix

    cat, bar = Catalog(run_dir), Bar()
    _update_bar(bar, cat, 1, busy=1.0, slots=1, started=time.time() - 1)
    best = cat.to_dataframe()["valid_nll"].min()
    assert bar.postfix["best_nll"] == f"{best:.4f}" and "best" not in bar.postfix
    assert bar.postfix["best_nll"] != f"{cat.best()[1]:.4f}"


def test_search_summary_reports_original_units(tmp_path):
    space, data = load_space("toy"), toy_sine(seed=0)

    def objective(eval_id, config):
        rng = np.random.default_rng(eval_id)
        return TrainResult("done", objective=0.1 * eval_id, epochs=1, best_epoch=1, model_bytes=b"fake",
                           valid_mean=rng.normal(size=data.y_valid.shape), valid_var=np.ones(data.y_valid.shape))

    summary = run_search(space, data, SerialEvaluator(objective), tmp_path / "run", search="random",
                         max_evals=2, progress=False)
    offset = float(np.mean(np.log(data.scaler.y_std)))
    assert summary.best_objective == pytest.approx(0.1)
    assert summary.best_valid_nll == pytest.approx(0.1 + offset)
    assert f"best validation NLL {0.1 + offset:.4f} (id 1)" in str(summary)


def test_summary_without_a_best_entry_still_prints():
    summary = SearchSummary(run_dir=".", n_done=0, n_failed=1, best_id=None, best_objective=math.inf,
                            wall_time=1.0, busy_time=1.0, slots=1)
    assert "best validation NLL none" in str(summary)


def test_search_trace_plots_original_units(run_dir, monkeypatch):
    seen = {}

    def fake_plot(objectives, path, **kwargs):
        seen.update(objectives=np.asarray(objectives), **kwargs)
        return b"png"

    monkeypatch.setattr(report.plots, "plot_search_trace", fake_plot)
    report._trace_plot(Catalog(run_dir))
    frame = Catalog(run_dir).to_dataframe()
    shown = frame[frame["status"].isin(["done", "discarded", "failed"])].sort_values("id")
    expected = np.where(shown["status"] != "failed", shown["valid_nll"], np.inf)
    np.testing.assert_allclose(seen["objectives"], expected)
    assert seen["units"] == "original units"
    assert list(seen["status"]) == list(shown["status"]) and "discarded" in list(seen["status"])


# ----------------------------------------------------------------------------- leaderboard
def test_catalog_command_prints_the_leaderboard(run_dir, capsys):
    assert main(["catalog", "--run-dir", str(run_dir), "--top", "3"]) == 0
    out = capsys.readouterr().out
    frame = Catalog(run_dir).to_dataframe()
    models = frame[frame["status"].isin(["done", "discarded"])].sort_values(["valid_nll", "id"])
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["rank", "id", "valid_nll"])
    rows = [line for line in lines[header + 1:] if line.split()[:1] and line.split()[0].isdigit()]
    assert len(rows) == 3
    for rank, (row, (_, entry)) in enumerate(zip(rows, models.head(3).iterrows()), start=1):
        fields = row.split()
        assert fields[:4] == [str(rank), str(entry["id"]), f"{entry['valid_nll']:.4f}", entry["status"]]
        assert str(entry["epochs"]) in fields and row.endswith(entry["architecture"])
    assert "5 evaluations: 3 done, 1 discarded early, 1 failed" in out
    assert "original units" in out and "results.csv" in out


def test_show_is_the_same_command_and_top_zero_lists_every_model(run_dir, capsys):
    assert main(["show", "--run-dir", str(run_dir), "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert sum(line.split()[:1] in (["1"], ["2"], ["3"], ["4"]) for line in out.splitlines()) == 4


def test_catalog_command_errors_are_one_line(tmp_path, capsys, run_dir):
    assert main(["catalog", "--run-dir", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autodeuq: error:") and "nothing" in err and err.count("\n") == 1
    assert main(["catalog", "--run-dir", str(run_dir), "--top", "-1"]) == 2
    assert "--top" in capsys.readouterr().err


def test_catalog_command_on_a_run_without_models(tmp_path, capsys):
    writer = Catalog.create_or_resume(tmp_path / "run", load_space("toy"), make_dataset(), {}, seed=0)
    writer.record(writer.submit(load_space("toy").sample(np.random.default_rng(0))), TrainResult.failure("boom"))
    writer.close()
    assert main(["catalog", "--run-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "no trained network" in out and "1 failed" in out


def test_progress_in_a_redirected_log_is_a_few_plain_lines(tmp_path, capsys):
    space, data = load_space("toy"), toy_sine(seed=0)

    def objective(eval_id, config):
        return TrainResult("done", objective=1.0 / eval_id, epochs=1, best_epoch=1, model_bytes=b"fake",
                           valid_mean=np.zeros(data.y_valid.shape), valid_var=np.ones(data.y_valid.shape))

    run_search(space, data, SerialEvaluator(objective), tmp_path / "run", search="random", max_evals=40,
               progress=True)
    err = capsys.readouterr().err  # not a terminal: no bar redrawn with carriage returns
    lines = [line for line in err.splitlines() if line.startswith("search:")]
    assert "\r" not in err and len(err) < 2000, err[:300]
    assert len(lines) == 10 and lines[0].startswith("search: 4/40 evals (10%)"), lines
    assert lines[-1].startswith("search: 40/40 evals (100%)") and "best_nll" in lines[-1], lines
    # the last line shows the best of all 40 (the last one: its objective 1/40 is the lowest)
    best = Catalog(tmp_path / "run").to_dataframe()["valid_nll"].min()
    assert f"best_nll {best:.4f}" in lines[-1], lines[-1]


def test_plain_progress_prints_each_tenth_once_whatever_the_steps():
    progress = PlainProgress(40)
    printed = []
    real_line = progress._line
    progress._line = lambda: printed.append(progress.n) or real_line()
    for n in (3, 3, 0, 5, 1, 12, 16):
        progress.update(n)
    progress.close()
    assert printed == [6, 11, 12, 24, 40]  # crossed 4 (at 6), 8 (at 11), 12, 16-24 (at 24), 28-40 (at 40)
