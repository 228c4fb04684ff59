"""What the command line prints: no TensorFlow or Ray start-up noise, a resume line, nothing per evaluation."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autodeuq.cli import main
from autodeuq.quiet import filtered_native_stderr, is_noise

ROOT = Path(__file__).resolve().parent.parent
NOISE_MARKERS = ("absl::InitializeLog", "cuda drivers", "cudart_stub", "oneDNN", "Token authentication is enabled")


def _cli(*args, env=None):
    environment = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "RAY_AUTH_MODE")}
    environment["PYTHONPATH"] = str(ROOT) + os.pathsep + environment.get("PYTHONPATH", "")
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "autodeuq", *args], capture_output=True, text=True, env=environment,
                          timeout=600)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("console") / "run"
    assert main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "2", "--epochs", "3",
                 "--search", "random", "--run-dir", str(run), "--no-progress"]) == 0
    return run


def test_noise_patterns_match_only_the_start_up_lines():
    assert is_noise(b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n")
    assert is_noise(b"I0000 00:00:1795406620.690588   19489 cudart_stub.cc:31] Could not find cuda drivers on "
                    b"your machine, GPU will not be used.\n")
    assert not is_noise(b"E0000 00:00:1795406620.690588   19489 cuda_dnn.cc:8] Unable to register cuDNN factory\n")
    assert not is_noise(b"Traceback (most recent call last):\n")


def test_filtered_stderr_writes_back_everything_but_the_noise(capfd):
    with filtered_native_stderr():
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n")
        os.write(2, b"I0000 00:00:1.5   7 port.cc:153] oneDNN custom operations are on.\n")
        os.write(2, b"W0000 00:00:1.5   7 gpu.cc:9] a real warning\n")
    assert capfd.readouterr().err == "W0000 00:00:1.5   7 gpu.cc:9] a real warning\n"


@pytest.mark.slow
def test_ensemble_and_predict_print_no_tensorflow_noise(run_dir, tmp_path):
    result = _cli("ensemble", "--run-dir", str(run_dir), "--size", "1")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    data = tmp_path / "x.csv"
    data.write_text("x\n0.5\n1.5\n")
    result = _cli("predict", "--ensemble", str(run_dir / "ensemble.json"), "--data", str(data),
                  "--out", str(tmp_path / "p.csv"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    help_text = _cli("ensemble", "--help")
    assert help_text.returncode == 0 and help_text.stderr == ""


@pytest.mark.ray
def test_local_ray_start_prints_no_token_banner():
    code = ("from autodeuq.evaluator.ray import init_ray; import ray; init_ray(num_cpus=1); "
            "print(ray.is_initialized()); ray.shutdown()")
    environment = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    environment["PYTHONPATH"] = str(ROOT) + os.pathsep + environment.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                            timeout=600)
    assert result.stdout.strip() == "True", result.stderr
    assert not any(marker in result.stderr for marker in NOISE_MARKERS), result.stderr


def test_resumed_search_says_so_and_no_progress_prints_no_line_per_evaluation(run_dir, capsys):
    capsys.readouterr()
    assert main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "4", "--epochs", "3",
                 "--search", "random", "--run-dir", str(run_dir), "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3, lines  # start, resume, summary: nothing per evaluation
    assert lines[0].startswith("autodeuq: toy-sine")
    assert "; space toy (widths 16-256, batch sizes 1-32); " in lines[0]
    assert lines[1] == (f"resuming {run_dir}: 2 evaluation(s) finished (2 done, 0 failed); "
                        f"0 interrupted evaluation(s) run again")
    assert lines[2].startswith("search: 4 done")
