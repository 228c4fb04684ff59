"""Reliability of the search driver: seeds, failing searches, resumes, Ray start/join, signals.

Fake objectives (no TensorFlow) where the trainings do not matter; subprocesses where a test
needs its own Ray instance, a signal or a bounded wall time.
"""
import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from autodeuq.catalog import Catalog, CatalogError
from autodeuq.cli import main
from autodeuq.data import toy_sine
from autodeuq.evaluator import SerialEvaluator
from autodeuq.result import TrainResult
from autodeuq.runner import run_search
from autodeuq.space import load_space

REPO = Path(__file__).resolve().parents[1]


class Fake:
    """Objective = distance of the learning rate to 1e-2; ``fail`` maps ids to a planted reason."""

    def __init__(self, n_valid, fail=None, bad_shape_ids=(), sleep=0.0):
        self.n_valid, self.fail, self.bad_shape_ids, self.sleep = n_valid, fail, set(bad_shape_ids), sleep

    def __call__(self, eval_id, config):
        start = time.time()
        if self.fail is not None and self.fail(eval_id):
            raise RuntimeError(self.fail(eval_id))
        time.sleep(self.sleep)
        obj = abs(np.log10(config["hp"]["learning_rate"]) + 2.0)
        n = self.n_valid + (1 if eval_id in self.bad_shape_ids else 0)
        return TrainResult("done", objective=float(obj), epochs=1, best_epoch=1, n_params=1, model_bytes=b"m",
                           valid_mean=np.zeros((n, 1)), valid_var=np.ones((n, 1)),
                           start_time=start, end_time=time.time())


@pytest.fixture(scope="module")
def setup():
    return load_space("toy"), toy_sine(seed=0)


def _env(ray_tmpdir=None):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("RAY_ADDRESS", None)
    if ray_tmpdir is not None:
        env["RAY_TMPDIR"] = str(ray_tmpdir)
    return env


# ----------------------------------------------------------------------------- item 1: seeds
@pytest.mark.parametrize("seed", [4295, 12345, 2**40])
def test_large_seeds_train(setup, seed):
    from autodeuq.evaluator import TrainingObjective

    space, data = setup
    config = space.sample(np.random.default_rng(0))
    objective = TrainingObjective(space, data, seed=seed, epochs=2)
    first, again, other = objective(7, config), objective(7, config), objective(8, config)
    assert first.ok, first.reason
    assert first.objective == again.objective  # same (seed, id): same training
    assert first.objective != other.objective  # another id: another seed


def test_train_accepts_any_non_negative_seed(setup):
    from autodeuq.train import train

    space, data = setup
    config = space.sample(np.random.default_rng(1))
    assert train(config, space, data, seed=2**40, epochs=2).ok
    refused = train(config, space, data, seed=-1, epochs=2)
    assert not refused.ok and "seed must be >= 0" in refused.reason


def test_evaluation_seeds_are_valid_and_distinct():
    from autodeuq.evaluator.base import evaluation_seed

    seeds = {evaluation_seed(s, i) for s in (0, 1, 4295, 2**64 + 3) for i in range(50)}
    assert len(seeds) == 200 and all(0 <= s < 2**32 for s in seeds)
    with pytest.raises(ValueError, match="seed"):
        evaluation_seed(-1, 0)


def test_cli_large_seed_trains(tmp_path):
    run = tmp_path / "run"
    code = main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "2", "--epochs", "2",
                 "--search", "random", "--seed", "12345", "--run-dir", str(run), "--no-progress"])
    assert code == 0
    assert Catalog(run).n_done == 2


def test_cli_refuses_negative_seed(capsys):
    assert main(["search", "--dataset", "toy-sine", "--seed", "-1", "--max-evals", "1", "--epochs", "1"]) == 2
    assert "--seed" in capsys.readouterr().err


# ----------------------------------------------------------------------------- item 2: failing searches
def test_first_evaluations_failing_the_same_way_stop_the_search(tmp_path, setup):
    space, data = setup
    objective = Fake(len(data.y_valid), fail=lambda i: f"planted failure in evaluation {i}")
    summary = run_search(space, data, SerialEvaluator(objective), tmp_path / "run", search="random",
                         max_evals=50, progress=False)
    assert summary.stopped_by == "failing"
    assert summary.n_done == 0 and summary.n_failed == 5
    assert "planted failure in evaluation" in summary.error and "5" in summary.error


def test_varied_failures_do_not_stop_the_search(tmp_path, setup):
    space, data = setup
    objective = Fake(len(data.y_valid), fail=lambda i: {1: "disk full", 3: "out of memory"}.get(i))
    summary = run_search(space, data, SerialEvaluator(objective), tmp_path / "run", search="random",
                         max_evals=8, progress=False)
    assert summary.stopped_by == "max_evals" and summary.n_done == 6 and summary.error is None


def test_all_failed_summary_names_the_most_common_reason(tmp_path, setup):
    space, data = setup
    objective = Fake(len(data.y_valid), fail=lambda i: "disk full" if i == 2 else "out of memory")
    summary = run_search(space, data, SerialEvaluator(objective), tmp_path / "run", search="random",
                         max_evals=3, progress=False)
    assert summary.n_done == 0 and summary.n_failed == 3
    assert "all 3 evaluations failed" in summary.error and "out of memory" in summary.error
    assert "2 of 3" in summary.error


def test_api_raises_the_failure_reason(tmp_path, monkeypatch):
    from autodeuq import AutoDEUQRegressor
    from autodeuq.evaluator import TrainingObjective
    from autodeuq.runner import SearchError

    monkeypatch.setattr(TrainingObjective, "__call__", lambda self, i, c: TrainResult.failure("planted: no GPU"))
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(30, 2)), rng.normal(size=30)
    model = AutoDEUQRegressor(space="toy", search="random", max_evals=3, evaluator="serial", run_dir=tmp_path / "r")
    with pytest.raises(SearchError, match="planted: no GPU"):
        model.fit(X, y)


def test_cli_search_where_every_evaluation_fails_exits_1(tmp_path, capsys):
    code = main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "2", "--epochs", "2",
                 "--search", "random", "--eval-timeout", "0.0001", "--run-dir", str(tmp_path / "run"),
                 "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert err[-1].startswith("autodeuq: error: ") and "per-evaluation limit (eval_timeout) of 0.0001 s" in err[-1]


@pytest.mark.parametrize("flag", ["--timeout", "--eval-timeout", "--eval-budget"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_cli_refuses_non_positive_timeouts(tmp_path, capsys, flag, value):
    code = main(["search", "--dataset", "toy-sine", "--evaluator", "serial", flag, value, "--max-evals", "1",
                 "--epochs", "1", "--run-dir", str(tmp_path / "run"), "--no-progress"])
    assert code == 2
    assert f"{flag} must be > 0" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_run_search_refuses_non_positive_timeout(tmp_path, setup):
    space, data = setup
    with pytest.raises(ValueError, match="timeout"):
        run_search(space, data, SerialEvaluator(Fake(1)), tmp_path / "run", max_evals=2, timeout=0, progress=False)
    with pytest.raises(ValueError, match="eval_timeout"):
        SerialEvaluator(Fake(1), eval_timeout=0)


# ----------------------------------------------------------------------------- item 6: what the searcher learns
def test_searcher_learns_what_the_catalog_records(tmp_path, setup, monkeypatch):
    from autodeuq import runner

    told = []
    real_create = runner.searchers.create

    def spying_create(*args, **kwargs):
        searcher = real_create(*args, **kwargs)
        tell = searcher.tell

        def spy(results):
            told.extend(results)
            return tell(results)

        searcher.tell = spy
        return searcher

    monkeypatch.setattr(runner.searchers, "create", spying_create)
    space, data = setup
    run = tmp_path / "run"
    with pytest.warns(RuntimeWarning, match="recorded as failed"):
        run_search(space, data, SerialEvaluator(Fake(len(data.y_valid), bad_shape_ids={2})), run,
                   search="random", max_evals=4, progress=False)
    recorded = Catalog(run).history()
    assert [o for _, o in recorded].count(None) == 1
    assert told == recorded


# ----------------------------------------------------------------------------- item 7: resumes and options
def test_resume_with_another_epoch_budget_is_refused(tmp_path, setup):
    space, data = setup
    run = tmp_path / "run"
    objective = Fake(len(data.y_valid))
    run_search(space, data, SerialEvaluator(objective), run, search="random", max_evals=1, progress=False,
               run_options={"epochs": 5})
    with pytest.raises(CatalogError, match="epoch"):
        run_search(space, data, SerialEvaluator(objective), run, search="random", max_evals=2, progress=False,
                   run_options={"epochs": 7})
    with pytest.raises(CatalogError, match="epoch"):
        run_search(space, data, SerialEvaluator(objective), run, search="random", max_evals=2, progress=False)
    assert len(Catalog(run).meta["sessions"]) == 1  # refused before a session was opened
    # the same budget spelled differently (the space's own) is the same budget
    other = tmp_path / "other"
    run_search(space, data, SerialEvaluator(objective), other, search="random", max_evals=1, progress=False)
    summary = run_search(space, data, SerialEvaluator(objective), other, search="random", max_evals=2,
                         progress=False, run_options={"epochs": space.epochs})
    assert summary.n_done == 2


def test_cli_refuses_a_repeated_target(tmp_path, capsys):
    rng = np.random.default_rng(0)
    table = tmp_path / "t.csv"
    table.write_text("x,y\n" + "\n".join(f"{a:.4f},{b:.4f}" for a, b in rng.normal(size=(20, 2))) + "\n")
    code = main(["search", "--data", str(table), "--target", "y", "--target", "y", "--evaluator", "serial",
                 "--run-dir", str(tmp_path / "run")])
    assert code == 2
    assert "--target y" in capsys.readouterr().err and not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, flag", [(["--cpus-per-eval", "0"], "--cpus-per-eval"),
                                        (["--cpus-per-eval", "-1"], "--cpus-per-eval"),
                                        (["--gpus-per-eval", "-1"], "--gpus-per-eval")])
def test_cli_refuses_non_positive_resources(tmp_path, capsys, args, flag):
    code = main(["search", "--dataset", "toy-sine", *args, "--max-evals", "1", "--epochs", "1",
                 "--run-dir", str(tmp_path / "run"), "--no-progress"])
    assert code == 2
    assert flag in capsys.readouterr().err


def test_ray_evaluator_refuses_non_positive_resources():
    from autodeuq.evaluator.ray import RayEvaluator

    for kwargs in ({"cpus_per_eval": 0}, {"cpus_per_eval": -2}, {"gpus_per_eval": -1}, {"eval_timeout": 0}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            RayEvaluator(Fake(1), **kwargs)


# ----------------------------------------------------------------------------- item 12: starting / joining Ray
@pytest.mark.ray
def test_stale_cluster_pointer_does_not_hang_the_default_start():
    tmp = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # short: Ray's socket paths must stay short
    (tmp / "ray").mkdir()
    (tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:1")  # a head that is long gone
    code = ("import ray; from autodeuq.evaluator.ray import init_ray; init_ray(); "
            "print('gcs', ray.get_runtime_context().gcs_address); ray.shutdown()")
    started = time.time()
    try:
        proc = subprocess.run([sys.executable, "-c", code], env=_env(tmp), capture_output=True, text=True,
                              timeout=75)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    gcs = proc.stdout.split("gcs ")[-1].strip()
    assert gcs and not gcs.endswith(":1")
    assert time.time() - started < 60


def test_unreachable_ray_address_fails_fast_with_one_line(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "autodeuq", "search", "--dataset", "toy-sine", "--max-evals", "1",
                           "--ray-address", f"127.0.0.1:{port}", "--run-dir", str(tmp_path / "run"),
                           "--no-progress"], env=_env(tmp_path), capture_output=True, text=True, timeout=90)
    assert time.time() - started < 45
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autodeuq: error: cannot connect to Ray at"), proc.stderr
    # the address given, first (Ray dials a loopback address as the machine's own)
    assert f"nothing answers at 127.0.0.1:{port}" in lines[0], lines[0]


@pytest.mark.ray
def test_ray_address_environment_variable_is_honoured(tmp_path):
    code = ("import sys; from autodeuq.evaluator.ray import init_ray, RayConnectionError\n"
            "try:\n    init_ray(connect_timeout=2)\n"
            "except RayConnectionError as e:\n    print('ERR', e); sys.exit(7)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=dict(_env(tmp_path), RAY_ADDRESS="127.0.0.1:1"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7 and "RAY_ADDRESS" in proc.stdout, proc.stdout + proc.stderr[-2000:]


RAY_DRIVER = """
import os, signal, time
from autodeuq.evaluator.ray import _import_ray, init_ray

signal.signal(signal.SIGINT, signal.default_int_handler)
ray = _import_ray()
init_ray(num_cpus=1)

@ray.remote(num_cpus=0)
class Rungs:  # an actor, as successive halving keeps its records in one
    def pid(self):
        return os.getpid()

actor = Rungs.remote()
print("up", ray.get(actor.pid.remote()), flush=True)
time.sleep(600)
"""


def _session_processes(ray_tmp: Path) -> set[int]:
    """Live Ray processes holding a file open under ``ray_tmp`` (this test's own Ray sessions only)."""
    import ray

    from autodeuq.evaluator.ray_reaper import is_ray_process

    ray_dir, found = os.path.dirname(os.path.abspath(ray.__file__)), set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "stat").read_text().rpartition(")")[2].split()[0] == "Z":
                continue  # ended; only its parent's wait is missing
            targets = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
            argv = [a.decode() for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue
        if any(t.startswith(str(ray_tmp) + "/") for t in targets) and is_ray_process(argv, ray_dir):
            found.add(int(entry.name))
    return found


@pytest.mark.ray
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", ["kill-9", "ctrl-c"])
def test_a_local_ray_instance_does_not_outlive_its_driver(how):
    ray_tmp = Path(tempfile.mkdtemp(prefix="rk", dir="/tmp")).resolve()  # short: Ray's socket paths
    proc = subprocess.Popen([sys.executable, "-c", RAY_DRIVER], env=_env(ray_tmp), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen = set()
    try:
        if how == "ctrl-c":  # while Ray starts: a terminal sends SIGINT to the whole process group
            deadline = time.time() + 60
            while len(_session_processes(ray_tmp) - {proc.pid}) < 2 and proc.poll() is None:
                assert time.time() < deadline, "Ray's processes never appeared"
                time.sleep(0.05)
            time.sleep(0.5)
            seen = _session_processes(ray_tmp) - {proc.pid}
            os.killpg(proc.pid, signal.SIGINT)
        else:
            line = proc.stdout.readline()  # Ray's start (~5-8 s)
            if not line:
                err = proc.communicate(timeout=30)[1]
                if "cannot start a local Ray instance" in err:
                    pytest.skip(f"Ray cannot start here: {err.strip().splitlines()[-1]}")
                raise AssertionError(err[-3000:])
            seen = _session_processes(ray_tmp) - {proc.pid}
            assert line.startswith("up ") and int(line.split()[1]) in seen, (line, seen)
            assert len(seen) >= 4, seen  # GCS server, raylet, agents, the actor's worker
            # a bystander reading one of the session's logs (tail -f, say) is no Ray process: it stays
            log = next(p for p in ray_tmp.rglob("*.out") if p.is_file())
            with open(log, "rb") as held:
                bystander = subprocess.Popen(["sleep", "60"], stdin=held)
            proc.kill()
        assert proc.wait(timeout=60) != 0
        deadline = time.time() + 30
        while (left := _session_processes(ray_tmp) | {p for p in seen if _running(p)}) and time.time() < deadline:
            time.sleep(0.25)
        assert not left, [Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p in left if _running(p)]
        if how == "kill-9":
            assert bystander.poll() is None
    finally:
        if how == "kill-9" and "bystander" in locals():
            bystander.kill()
            bystander.wait()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _session_processes(ray_tmp):  # only this test's session: never another's Ray
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


# ----------------------------------------------------------------------------- item 13: signals, Ctrl-C in fit
def _wait_for_running_entry(run, proc, limit=120):
    deadline = time.time() + limit
    while time.time() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if Catalog(run).ids("running"):
                return
        except CatalogError:
            pass
        time.sleep(0.5)
    raise AssertionError("the search never started an evaluation")


SIGTERM_DURING_RAY_INIT = """
import os, signal, sys
from autodeuq.evaluator.ray import _import_ray, init_ray
from autodeuq.runner import Terminated, sigterm_interrupts

ray = _import_ray()
import ray._private.worker as worker

connect = worker.connect

def connect_then_sigterm(*args, **kwargs):
    out = connect(*args, **kwargs)  # the driver's native core worker now exists
    os.kill(os.getpid(), signal.SIGTERM)
    return out

worker.connect = connect_then_sigterm
with sigterm_interrupts() as watch:
    try:
        init_ray(num_cpus=1)
    except Terminated:
        print("terminated", ray.is_initialized(), watch.received, os.environ.get("RAY_DISABLE_FAILURE_SIGNAL_HANDLER"))
        sys.exit(0)
print("not terminated")
"""


@pytest.mark.ray
def test_a_sigterm_while_ray_starts_reaches_the_callers_handler_without_a_native_dump(tmp_path):
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths must stay short
    try:
        proc = subprocess.run([sys.executable, "-c", SIGTERM_DURING_RAY_INIT], env=_env(ray_tmp), cwd=tmp_path,
                              capture_output=True, text=True, timeout=240)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    # Before: Ray's handlers exited with status 15 mid-start, or dumped a native stack and aborted.
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["terminated", "True", "True", "None"]
    assert "SIGTERM received" not in proc.stderr and "PC: @" not in proc.stderr


@pytest.mark.parametrize("evaluator", ["ray", "serial"])
def test_sigterm_stops_the_search_like_ctrl_c(tmp_path, evaluator):
    run = tmp_path / "run"
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths must stay short
    proc = subprocess.Popen([sys.executable, "-m", "autodeuq", "search", "--dataset", "toy-sine", "--evaluator",
                             evaluator, "--workers", "1", "--max-evals", "50", "--epochs", "400", "--search",
                             "random", "--run-dir", str(run), "--no-progress"],
                            env=_env(ray_tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_running_entry(run, proc)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 143, err[-3000:]
    assert "SIGTERM received" not in err and "PC: @" not in err
    assert "run the same command again to resume" in out
    catalog = Catalog(run)
    assert catalog.ids("running")  # the evaluation cut short is trained again on resume
    with open(run / "catalog.lock", "a+") as lock:  # the writer let go of the run
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


class SigtermInside(Fake):
    """Evaluation ``at`` sends this process SIGTERM; ``swallow`` says what becomes of the
    :class:`~autodeuq.runner.Terminated` it raises there: ``"import"`` turns it into the
    ``ImportError`` that pybind11 makes of an exception raised while a module initializes,
    ``"all"`` catches it and trains on."""

    def __init__(self, n_valid, at, swallow):
        super().__init__(n_valid)
        self.at, self.swallow = at, swallow

    def __call__(self, eval_id, config):
        if eval_id == self.at:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises within this
            except KeyboardInterrupt as exc:
                if self.swallow == "import":
                    raise ImportError("initialization failed") from exc
        return super().__call__(eval_id, config)


@pytest.mark.parametrize("swallow", ["import", "all"])
def test_a_sigterm_that_an_evaluation_turns_into_an_error_or_swallows_still_stops_the_search(tmp_path, setup,
                                                                                              swallow):
    space, data = setup
    summary = run_search(space, data, SerialEvaluator(SigtermInside(len(data.y_valid), 2, swallow)),
                         tmp_path / "run", search="random", max_evals=10, progress=False)
    assert summary.interrupted and summary.stopped_by == "terminated"
    frame = Catalog(tmp_path / "run").to_dataframe().set_index("id")
    assert (frame["status"] == "failed").sum() == 0
    # The evaluation the signal cut short is trained again on resume; one that finished is kept.
    assert frame.loc[2, "status"] == ("running" if swallow == "import" else "done")
    assert len(frame) == 2 and frame.loc[1, "status"] == "done"  # ids count from 1


def test_fit_reraises_ctrl_c_and_leaves_the_run_resumable(tmp_path, monkeypatch):
    from autodeuq import AutoDEUQRegressor
    from autodeuq.evaluator import TrainingObjective

    calls = []
    real_call = TrainingObjective.__call__

    def interrupted_on_second(self, eval_id, config):
        calls.append(eval_id)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_call(self, eval_id, config)

    monkeypatch.setattr(TrainingObjective, "__call__", interrupted_on_second)
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (40, 1))
    y = X[:, 0] + rng.normal(0, 0.1, 40)
    options = dict(space="toy", search="random", max_evals=3, ensemble_size=2, epochs=3, evaluator="serial",
                   seed=0, run_dir=tmp_path / "run")
    model = AutoDEUQRegressor(**options)
    with pytest.raises(KeyboardInterrupt):
        model.fit(X, y)
    assert not hasattr(model, "ensemble_")
    catalog = Catalog(tmp_path / "run")
    assert catalog.n_done == 1 and len(catalog.ids("running")) == 1
    monkeypatch.setattr(TrainingObjective, "__call__", real_call)
    AutoDEUQRegressor(**options).fit(X, y)  # resumes: the interrupted entry is trained again
    assert Catalog(tmp_path / "run").n_done == 3


# ----------------------------------------------------------------------------- items 6, 15: Ray evaluator
def test_eval_timeout_counts_from_the_start_on_a_worker(tmp_path, setup, ray_local):
    from autodeuq.evaluator.ray import RayEvaluator

    space, data = setup
    # Another job holds the cluster's 2 CPUs for 2 s: the evaluation waits ~2 s in Ray's queue, then runs ~2 s.
    blocker = ray_local.remote(num_cpus=2)(hold_cpus).remote(2.0)
    evaluator = RayEvaluator(Fake(len(data.y_valid), sleep=2.0), workers=1, cpus_per_eval=2, eval_timeout=3.5)
    with evaluator:
        summary = run_search(space, data, evaluator, tmp_path / "run", search="random", max_evals=1,
                             progress=False)
    ray_local.get(blocker)
    assert summary.n_done == 1, Catalog(tmp_path / "run").to_dataframe()["reason"].tolist()
    entry = Catalog(tmp_path / "run").entry(1)
    assert entry["end_time"] - entry["submit_time"] > 3.5  # it did wait


def hold_cpus(seconds):
    time.sleep(seconds)


def test_more_workers_than_the_cluster_holds_run_what_it_holds_with_a_warning(setup, ray_local):
    from autodeuq.evaluator.ray import ConcurrencyWarning, RayEvaluator

    space, data = setup
    with pytest.warns(ConcurrencyWarning, match="8 parallel evaluations asked, but the Ray cluster runs at most 2 "
                                                "at once .*: running 2"):
        evaluator = RayEvaluator(Fake(len(data.y_valid)), workers=8)
    with evaluator:
        assert evaluator.n_slots == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with RayEvaluator(Fake(len(data.y_valid)), workers=2) as evaluator:
            assert evaluator.n_slots == 2


def test_crashed_worker_keeps_utilization_and_times_sane(tmp_path, setup, ray_local):
    from autodeuq.evaluator.ray import RayEvaluator

    space, data = setup

    def crash_first(eval_id, config):
        if eval_id == 1:
            os._exit(3)
        return Fake(len(data.y_valid))(eval_id, config)

    started = time.time()
    with RayEvaluator(crash_first, workers=1) as evaluator:
        summary = run_search(space, data, evaluator, tmp_path / "run", search="random", max_evals=2,
                             progress=False)
    assert summary.n_failed == 1 and 0 < summary.utilization <= 1.0
    crashed = Catalog(tmp_path / "run").entry(1)
    assert "died" in crashed["reason"]
    assert started - 1 <= crashed["start_time"] <= crashed["end_time"] <= time.time()


def test_ray_tasks_are_cancelled_when_the_driver_fails(tmp_path, setup, ray_local):
    from autodeuq.evaluator.ray import RayEvaluator

    space, data = setup
    evaluator = RayEvaluator(Fake(len(data.y_valid), sleep=60), workers=2)
    real_wait = evaluator.wait

    def broken_wait(timeout=None):
        real_wait(timeout=2.0)  # the two evaluations are running by now
        raise RuntimeError("planted driver bug")

    evaluator.wait = broken_wait
    with pytest.raises(RuntimeError, match="planted driver bug"):
        with evaluator:
            run_search(space, data, evaluator, tmp_path / "run", search="random", max_evals=4, progress=False)
    assert evaluator.n_running == 0
    deadline = time.time() + 20
    while ray_local.available_resources().get("CPU", 0) < 2 and time.time() < deadline:
        time.sleep(0.2)
    assert ray_local.available_resources().get("CPU", 0) == 2  # the tasks are gone, not still sleeping
    assert len(Catalog(tmp_path / "run").ids("running")) == 2  # and stay resumable
