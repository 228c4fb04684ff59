"""Outputs that never destroy what they should not, checked before any work; the new user's path.

Every write refuses an existing device, FIFO or socket (a rename over it would replace it) and an
output that is one of the command's inputs; output folders where no file can be made are refused
before the search; the table is checked before TensorFlow is imported; an edited manifest is
refused when it is read; a full disk names the file. One real (tiny) toy run serves them all.
"""
import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from autodeuq import fileio, metrics
from autodeuq.cli import factor_text, main
from autodeuq.ensemble import load_ensemble
from autodeuq.ensemble.manifest import ManifestError
from autodeuq.ensemble.refit import should_refit

SEARCH = ["--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "3", "--epochs", "4", "--search", "random",
          "--no-progress"]
TOY = [*SEARCH, "--size", "2"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("guarded") / "run"
    assert main(["run", *TOY, "--no-refit", "--run-dir", str(run)]) == 0
    return run


@pytest.fixture()
def table(tmp_path):
    path = tmp_path / "new.csv"
    pd.DataFrame({"x": np.linspace(-25, 25, 5)}).to_csv(path, index=False)  # inside the training range
    return path


def error_of(capsys, argv) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.err.count("\n") == 1, captured.err
    return captured.err


def predict(run_dir, data, out, *more):
    return ["predict", "--ensemble", str(run_dir / "ensemble.json"), "--data", str(data), "--out", str(out), *more]


# ----------------------------------------------------------------- special files and inputs
def test_predict_out_refuses_a_device_and_leaves_it_a_device(run_dir, table, tmp_path, capsys):
    # A device node of our own (as /dev/full: 1, 7), so that a regression cannot replace the machine's.
    device = tmp_path / "full"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except (PermissionError, OSError):
        pytest.skip("cannot make a device node here (not root, or a container without the capability)")
    err = error_of(capsys, predict(run_dir, table, device))
    assert f"--out {device}" in err and "character device" in err
    assert stat.S_ISCHR(os.lstat(device).st_mode)


def test_predict_out_refuses_a_fifo_and_leaves_it_a_fifo(run_dir, table, tmp_path, capsys):
    fifo = tmp_path / "reader"
    os.mkfifo(fifo)
    err = error_of(capsys, predict(run_dir, table, fifo))
    assert "FIFO" in err and str(fifo) in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_every_write_refuses_special_files(tmp_path):
    # The library's one writer: whatever command or function writes (manifests, exports, figures).
    fifo = tmp_path / "metrics.json"
    os.mkfifo(fifo)
    with pytest.raises(fileio.WriteError, match="FIFO"):
        fileio.atomic_write(fifo, b"{}")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]  # no temporary file left
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")  # a link is still replaced, never written through
    fileio.atomic_write(tmp_path / "link", b"x")
    assert (tmp_path / "link").read_bytes() == b"x" and not (tmp_path / "elsewhere").exists()


def test_predict_out_equal_to_its_input_is_refused_and_the_input_kept(run_dir, table, tmp_path, capsys):
    before = table.read_bytes()
    err = error_of(capsys, predict(run_dir, table, table))
    assert "same file as --data" in err
    link = tmp_path / "alias.csv"
    link.symlink_to(table)
    err = error_of(capsys, predict(run_dir, link, table))  # another name, the same file
    assert "same file as --data" in err
    hard = tmp_path / "hard.csv"
    os.link(table, hard)
    error_of(capsys, predict(run_dir, hard, table))
    err = error_of(capsys, predict(run_dir, table, run_dir / "ensemble.json"))
    assert "same file as --ensemble" in err
    assert table.read_bytes() == before and json.loads((run_dir / "ensemble.json").read_text())["members"]


def test_run_refuses_an_output_equal_to_an_input_before_searching(table, tmp_path, capsys):
    data = tmp_path / "train.csv"
    pd.DataFrame({"x": np.arange(30.0), "y": np.arange(30.0)}).to_csv(data, index=False)
    before = data.read_bytes()
    err = error_of(capsys, ["run", "--data", str(data), "--run-dir", str(tmp_path / "r"), "--out", str(data)])
    assert "same file as --data" in err
    test_before = table.read_bytes()
    err = error_of(capsys, ["run", "--data", str(data), "--test", str(table), "--run-dir", str(tmp_path / "r"),
                            "--out", str(table)])
    assert "same file as --test" in err
    assert data.read_bytes() == before and table.read_bytes() == test_before and not (tmp_path / "r").exists()


# ----------------------------------------------------------------- before any work
def test_run_out_where_no_file_can_be_made_is_refused_before_the_search(tmp_path, capsys):
    run = tmp_path / "never"
    err = error_of(capsys, ["run", *TOY, "--run-dir", str(run), "--out", "/proc/x.json"])
    assert "--out /proc/x.json" in err and "cannot create a file in /proc" in err
    assert not run.exists()  # nothing ran
    err = error_of(capsys, ["run", *TOY, "--run-dir", "/proc/autodeuq-run"])
    assert "--run-dir /proc/autodeuq-run" in err
    err = error_of(capsys, ["search", *SEARCH, "--run-dir", "/proc/autodeuq-run"])
    assert "--run-dir /proc/autodeuq-run" in err
    afile = tmp_path / "a_file"
    afile.write_text("x")
    assert "not a directory" in error_of(capsys, ["run", *TOY, "--run-dir", str(afile)])


def test_predict_checks_the_table_before_importing_tensorflow(run_dir, tmp_path):
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"not_x": [1.0, 2.0]}).to_csv(bad, index=False)
    code = ("import sys\nfrom autodeuq.cli import main\n"
            f"status = main({predict(run_dir, bad, tmp_path / 'p.csv')!r})\n"
            "print(status, 'tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "False"], done.stdout + done.stderr
    assert "missing feature column(s) ['x']" in done.stderr


def test_predict_reads_an_npz_without_targets(run_dir, tmp_path):
    np.savez(tmp_path / "new.npz", X=np.linspace(-3, 3, 4)[:, None])
    assert main(predict(run_dir, tmp_path / "new.npz", tmp_path / "p.csv")) == 0
    assert len(pd.read_csv(tmp_path / "p.csv")) == 4


def test_a_manifest_edited_to_other_targets_is_refused_when_read(run_dir, tmp_path, capsys):
    folder = tmp_path / "export"
    assert main(["export", "--ensemble", str(run_dir / "ensemble.json"), "--out", str(folder)]) == 0
    manifest = json.loads((folder / "ensemble.json").read_text())
    manifest["targets"] = ["y", "z"]
    (folder / "ensemble.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match=r"'targets' names 2 target\(s\).*predicts 1"):
        load_ensemble(folder)
    capsys.readouterr()
    err = error_of(capsys, ["predict", "--ensemble", str(folder), "--data", str(run_dir / "results.csv"),
                            "--out", str(tmp_path / "p.csv")])
    assert str(folder / "ensemble.json") in err and "--target-names" not in err


def test_a_full_disk_names_the_file(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fileio, "_write_all", full)
    with pytest.raises(OSError) as raised:
        fileio.replace_file(tmp_path / "meta.json", b"{}")
    assert raised.value.filename == str(tmp_path / "meta.json") and raised.value.errno == errno.ENOSPC
    with pytest.raises(fileio.WriteError, match=f"cannot write {tmp_path / 'a.json'}: No space left"):
        fileio.atomic_write(tmp_path / "a.json", b"{}")
    assert list(tmp_path.iterdir()) == []


def test_a_search_on_a_full_disk_names_the_file(tmp_path, monkeypatch, capsys):
    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fileio, "_write_all", full)
    run = tmp_path / "run"
    assert main(["search", *SEARCH, "--run-dir", str(run)]) != 0
    err = capsys.readouterr().err
    assert "No space left on device" in err and str(run) in err and "Traceback" not in err


# ----------------------------------------------------------------- options and messages
def test_set_and_other_single_options_given_twice_are_refused(run_dir, table, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(predict(run_dir, table, tmp_path / "p.csv", "--set", "0.9", "--set", "0.8"))
    assert exited.value.code == 2 and "--set is given more than once" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(predict(run_dir, table, tmp_path / "p.csv", "--out", str(tmp_path / "q.csv")))
    assert "--out is given more than once" in capsys.readouterr().err


def test_predict_says_when_a_run_directory_manifest_names_another_catalog(run_dir, table, tmp_path, capsys):
    other = tmp_path / "other_run"
    other.mkdir()
    (other / "catalog.sqlite").write_bytes(b"")  # a run directory of its own
    manifest = json.loads((run_dir / "ensemble.json").read_text())
    manifest["run_dir"] = str(run_dir)
    (other / "ensemble.json").write_text(json.dumps(manifest))
    assert main(["predict", "--ensemble", str(other / "ensemble.json"), "--data", str(table),
                 "--out", str(tmp_path / "p.csv")]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"networks of the catalog in {run_dir}" in err
    assert main(predict(run_dir, table, tmp_path / "q.csv")) == 0  # its own catalog: nothing said
    assert capsys.readouterr().err == ""


def test_recalibration_factors_print_three_significant_digits():
    assert factor_text(0.99975) == "1.00" and factor_text(1.23456) == "1.23" and factor_text(12.0) == "12.0"


def test_the_refit_limit_names_the_option_that_refits_anyway():
    go, why = should_refit("auto", 5000)
    assert not go and "--refit" in why and "refit=True" in why


def test_metrics_report_the_mixture_and_the_gaussian_coverage(run_dir):
    rng = np.random.default_rng(0)
    means, variances = rng.normal(size=(3, 200, 1)), rng.uniform(0.5, 2, size=(3, 200, 1))
    y = rng.normal(size=(200, 1)) * 1.5
    scores = metrics.evaluate(means, variances, [0.2, 0.3, 0.5], y)
    mean, aleatoric, epistemic = metrics.mixture_moments(means, variances, [0.2, 0.3, 0.5])
    inside = np.abs(y - mean) <= 1.6448536269514722 * np.sqrt(aleatoric + epistemic)
    assert scores["coverage_gaussian_90"]["mean"] == pytest.approx(float(inside.mean()), abs=1e-12)
    written = json.loads((run_dir / "metrics.json").read_text())["validation"]
    assert {"coverage_90", "coverage_gaussian_90", "coverage_gaussian_50", "coverage_gaussian_95"} <= set(written)


def test_readme_shows_set_for_classifiers():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for line in readme.splitlines():
        if line.startswith("autodeuq predict") and "faults" in line:
            assert "--set" in line and "--interval" not in line
            break
    else:
        pytest.fail("README has no predict example for a classifier")


# ----------------------------------------------------------------- far from the data
def test_predict_warns_per_column_about_rows_outside_the_training_range(run_dir, tmp_path, capsys):
    from autodeuq.catalog import Catalog

    scaling = Catalog(run_dir).meta["data"]["standardization"]
    low, high = scaling["x_min"][0], scaling["x_max"][0]
    assert -30 <= low < high <= 30  # toy-sine's training inputs
    width = high - low
    inside = [low, high, high + 0.09 * width, low - 0.09 * width, 0.0]
    outside = [high + 0.11 * width, low - 3 * width, 10 * high]
    pd.DataFrame({"x": inside}).to_csv(tmp_path / "near.csv", index=False)
    pd.DataFrame({"x": inside + outside}).to_csv(tmp_path / "far.csv", index=False)
    assert main(predict(run_dir, tmp_path / "near.csv", tmp_path / "p.csv")) == 0
    assert capsys.readouterr().err == ""
    assert main(predict(run_dir, tmp_path / "far.csv", tmp_path / "p.csv")) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"autodeuq: warning: {tmp_path / 'far.csv'}: 3 of 8 row(s) lie "
                                                   "outside the training rows' range")
    assert "'x' in 3 row(s)" in err and "at data row 6" in err
    assert len(pd.read_csv(tmp_path / "p.csv")) == 8  # a warning, not a refusal


def test_the_training_range_travels_with_an_export_and_warns_in_python(run_dir, tmp_path):
    from autodeuq.ensemble.inputs import OutOfRangeWarning

    folder = tmp_path / "export"
    assert main(["export", "--ensemble", str(run_dir / "ensemble.json"), "--out", str(folder)]) == 0
    exported = load_ensemble(folder)
    assert {"x_min", "x_max"} <= set(exported.source.standardization)
    with pytest.warns(OutOfRangeWarning, match=r"'x' in 1 row\(s\)"):
        exported.predict(np.array([[0.0], [1e3]]))
    manifest = json.loads((folder / "ensemble.json").read_text())
    manifest["standardization"]["x_min"] = [1e9]
    (folder / "ensemble.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="x_min <= x_max"):
        load_ensemble(folder)


def test_the_report_beyond_the_data_warns_nothing(tmp_path, capsys):
    # toy-sine's test rows reach x = ±40 (22 of its 200 beyond the margin), and the uncertainty
    # figure's grid as far, on purpose: scoring and drawing say nothing of it
    assert main(["run", *TOY, "--run-dir", str(tmp_path / "r")]) == 0
    assert "outside the training" not in capsys.readouterr().err
