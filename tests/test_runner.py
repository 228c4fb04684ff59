"""The search driver and the evaluators, with cheap fake objectives (no TensorFlow)."""
import heapq
import os
import time

import numpy as np
import pytest

from autodeuq.catalog import Catalog
from autodeuq.data import toy_sine
from autodeuq.evaluator import SerialEvaluator
from autodeuq.evaluator.base import Evaluator
from autodeuq.result import TrainResult
from autodeuq.runner import run_search
from autodeuq.space import load_space


class FakeObjective:
    """Objective = distance of the learning rate to 1e-2; fails (raises) on chosen ids; may sleep."""

    def __init__(self, n_valid, fail_ids=(), crash_ids=(), sleep=0.0):
        self.n_valid, self.fail_ids, self.crash_ids, self.sleep = n_valid, set(fail_ids), set(crash_ids), sleep

    def __call__(self, eval_id, config):
        start = time.time()
        if eval_id in self.crash_ids:
            os._exit(3)
        if eval_id in self.fail_ids:
            raise RuntimeError(f"planted failure {eval_id}")
        time.sleep(self.sleep)
        obj = abs(np.log10(config["hp"]["learning_rate"]) + 2.0)
        rng = np.random.default_rng(eval_id)
        return TrainResult("done", objective=float(obj), epochs=3, best_epoch=2, n_params=10,
                           model_bytes=b"fake", valid_mean=rng.normal(size=(self.n_valid, 1)),
                           valid_var=np.ones((self.n_valid, 1)), history={"loss": [1.0], "val_loss": [obj]},
                           start_time=start, end_time=time.time())


@pytest.fixture(scope="module")
def setup():
    return load_space("toy"), toy_sine(seed=0)


def test_serial_search_fills_the_catalog_and_records_failures(tmp_path, setup):
    space, data = setup
    objective = FakeObjective(len(data.y_valid), fail_ids={2})
    summary = run_search(space, data, SerialEvaluator(objective), tmp_path / "run", search="random",
                         max_evals=6, progress=False)
    assert summary.n_done == 5 and summary.n_failed == 1
    frame = Catalog(tmp_path / "run").to_dataframe()
    assert sorted(frame["status"]) == ["done"] * 5 + ["failed"]
    failed = frame[frame["status"] == "failed"].iloc[0]
    assert "planted failure" in failed["reason"]
    assert summary.best_objective == pytest.approx(frame.loc[frame["status"] == "done", "objective"].min())


def test_resume_counts_the_budget_and_refuses_other_data(tmp_path, setup):
    space, data = setup
    objective = FakeObjective(len(data.y_valid))
    run = tmp_path / "run"
    run_search(space, data, SerialEvaluator(objective), run, search="agebo", max_evals=3, progress=False)
    summary = run_search(space, data, SerialEvaluator(objective), run, search="agebo", max_evals=5, progress=False)
    frame = Catalog(run).to_dataframe()
    assert len(frame) == 5 and summary.n_done == 5
    assert frame["id"].is_unique
    from autodeuq.catalog import CatalogError

    with pytest.raises(CatalogError):
        run_search(space, toy_sine(seed=1), SerialEvaluator(objective), run, max_evals=6, progress=False)


def test_timeout_stops_the_search(tmp_path, setup):
    space, data = setup
    objective = FakeObjective(len(data.y_valid), sleep=0.3)
    summary = run_search(space, data, SerialEvaluator(objective), tmp_path / "run", search="random",
                         max_evals=100, timeout=1.0, progress=False)
    assert summary.stopped_by == "timeout" and 1 <= summary.n_done < 10


def test_no_evaluation_starts_that_could_not_finish_in_time(tmp_path, setup):
    """Evaluations of ~0.5 s under a 2 s limit: once less than that is left, none starts, so the search
    ends before its limit with nothing cancelled (a serial evaluation cannot be cancelled at all)."""
    space, data = setup
    summary = run_search(space, data, SerialEvaluator(FakeObjective(len(data.y_valid), sleep=0.5)), tmp_path / "run",
                         search="random", max_evals=100, timeout=2.0, progress=False)
    assert summary.stopped_by == "timeout" and summary.n_failed == 0 and 1 <= summary.n_done <= 3
    assert summary.wall_time < 2.0
    assert set(Catalog(tmp_path / "run").to_dataframe()["status"]) == {"done"}


def test_serial_eval_timeout_is_a_failure(tmp_path, setup):
    space, data = setup
    evaluator = SerialEvaluator(FakeObjective(len(data.y_valid), sleep=0.2), eval_timeout=0.05)
    summary = run_search(space, data, evaluator, tmp_path / "run", search="random", max_evals=2, progress=False)
    assert summary.n_failed == 2
    assert Catalog(tmp_path / "run").to_dataframe()["reason"].str.contains("timeout").all()


class VirtualClockEvaluator(Evaluator):
    """Eight slots whose evaluations each last ``seconds`` of a virtual clock (no sleeping)."""

    n_slots = 8

    def __init__(self, objective, seconds):
        self.objective, self.seconds, self.now, self.running = objective, seconds, time.time(), []

    def submit(self, eval_id, config):
        heapq.heappush(self.running, (self.now + self.seconds, eval_id, config))

    @property
    def n_running(self):
        return len(self.running)

    def wait(self, timeout=None):
        end, eval_id, config = heapq.heappop(self.running)
        self.now = max(self.now, end)
        result = self.objective(eval_id, config)
        result.start_time, result.end_time = end - self.seconds, end
        return [(eval_id, result)]


def test_the_driver_asks_ahead_in_batches_sized_by_what_an_ask_costs(tmp_path, setup, monkeypatch):
    """8 slots x 0.1 s evaluations and a searcher taking 10 ms per ask: 0.8 results arrive during
    an ask, so the driver, keeping up to 8 configurations asked ahead, asks for 4 at a time (a
    quarter of its time asking), not one per result."""
    from autodeuq.runner import _SearchSession
    from autodeuq.search.base import Searcher

    space, data = setup
    calls, sizes, real_ask = [], [], Searcher.ask

    def slow_ask(self, n=1):
        time.sleep(0.01)
        calls.append(n)
        return real_ask(self, n)

    real_sizes = _SearchSession.ahead_sizes
    monkeypatch.setattr(Searcher, "ask", slow_ask)
    monkeypatch.setattr(_SearchSession, "ahead_sizes", lambda self: sizes.append(real_sizes(self)) or sizes[-1])
    evaluator = VirtualClockEvaluator(FakeObjective(len(data.y_valid)), seconds=0.1)
    summary = run_search(space, data, evaluator, tmp_path / "run", search="random", max_evals=120, progress=False)
    assert summary.n_done == 120
    assert sizes[0] == (7, 8)  # nothing measured yet: one at a time
    low, high = sizes[-1]  # m = 8 / 0.1 s x 10 ms = 0.8: a batch of ceil(0.8 / 0.25) = 4 (more where asks are slower)
    assert high == 8 and high - low >= 4
    assert len(calls) <= 120 / 3  # one ask per 3-4 results
    assert sum(calls) <= 120 + 9  # what was asked ran, but for what was left asked ahead


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_ctrl_c_during_the_catalog_write_loses_no_result(tmp_path, setup, monkeypatch, when):
    """Ctrl-C arrives while the driver writes results (before or after their commit): the search
    stops as interrupted, and every result that had arrived is in the catalog, once."""
    from autodeuq.catalog import CatalogWriter

    space, data = setup
    real, calls = CatalogWriter.record_many, []

    def record_many(self, results):
        calls.append(len(results))
        if len(calls) == 3:
            if when == "after":
                real(self, results)
            raise KeyboardInterrupt
        return real(self, results)

    monkeypatch.setattr(CatalogWriter, "record_many", record_many)
    evaluator = VirtualClockEvaluator(FakeObjective(len(data.y_valid)), seconds=0.1)
    summary = run_search(space, data, evaluator, tmp_path / "run", search="random", max_evals=40, progress=False)
    assert summary.interrupted
    frame = Catalog(tmp_path / "run").to_dataframe()
    assert summary.n_done == (frame["status"] == "done").sum() == sum(calls[:2]) + calls[2]


# ----------------------------------------------------------------------------- Ray
def test_ray_killed_worker_is_a_failure_and_search_goes_on(tmp_path, setup, ray_local):
    from autodeuq.evaluator.ray import RayEvaluator

    space, data = setup
    evaluator = RayEvaluator(FakeObjective(len(data.y_valid), crash_ids={1}, fail_ids={3}), workers=2)
    summary = run_search(space, data, evaluator, tmp_path / "run", search="random", max_evals=5, progress=False)
    frame = Catalog(tmp_path / "run").to_dataframe().set_index("id")
    assert summary.n_done == 3 and summary.n_failed == 2
    assert "died" in frame.loc[1, "reason"] or "crash" in frame.loc[1, "reason"].lower()
    assert "planted failure" in frame.loc[3, "reason"]


def test_results_ready_together_keep_theirs_when_one_of_them_crashed(setup, ray_local):
    """The ready items are fetched from Ray in one call; a crashed task among them is a failure of
    its own and the others' results are kept."""
    from autodeuq.evaluator.ray import RayEvaluator

    space, data = setup
    evaluator = RayEvaluator(FakeObjective(len(data.y_valid), crash_ids={1}, fail_ids={2}), workers=2)
    rng = np.random.default_rng(0)
    for eval_id in (1, 2, 3):
        evaluator.submit(eval_id, space.sample(rng))
    time.sleep(4.0)  # all ended: the crash, the raised failure and the result are ready together
    finished = []
    while evaluator.n_running:
        finished += evaluator.wait(timeout=30)
    results = dict(finished)
    assert sorted(results) == [1, 2, 3]
    assert "died" in results[1].reason and "planted failure 2" in results[2].reason and results[3].ok


def test_ray_eval_timeout_cancels(tmp_path, setup, ray_local):
    from autodeuq.evaluator.ray import RayEvaluator

    space, data = setup
    evaluator = RayEvaluator(FakeObjective(len(data.y_valid), sleep=30), workers=2, eval_timeout=1.0)
    started = time.time()
    summary = run_search(space, data, evaluator, tmp_path / "run", search="random", max_evals=2, progress=False)
    assert time.time() - started < 20
    assert summary.n_failed == 2
    assert Catalog(tmp_path / "run").to_dataframe()["reason"].str.contains("timeout").all()


@pytest.mark.slow
def test_ray_runs_real_trainings_in_parallel(tmp_path, setup, ray_local):
    from autodeuq.evaluator import TrainingObjective
    from autodeuq.evaluator.ray import RayEvaluator

    space, data = setup
    # Six trainings of 30 epochs: with four of 5 epochs, about one CI run in ten found no two
    # overlapping, as one worker process can finish several short trainings while the other
    # is still starting (importing TensorFlow).
    objective = TrainingObjective(space, data, seed=0, epochs=30, threads=1)
    evaluator = RayEvaluator(objective, workers=2)
    summary = run_search(space, data, evaluator, tmp_path / "run", search="agebo", max_evals=6, progress=False)
    frame = Catalog(tmp_path / "run").to_dataframe().sort_values("start_time")
    assert summary.n_done + summary.n_failed == 6 and summary.n_done >= 1
    assert frame["worker"].nunique() == 2
    # Two evaluations ran at the same time: some start precedes the previous one's end.
    assert (frame["start_time"].to_numpy()[1:] < frame["end_time"].to_numpy()[:-1]).any()
