"""Early discarding in a search: catalog entries, shared rung records (serial and Ray), resume."""
import copy
import os
import time

import numpy as np
import pytest

from autodeuq.catalog import Catalog, CatalogError
from autodeuq.data import toy_sine
from autodeuq.discard import SuccessiveHalving
from autodeuq.evaluator import SerialEvaluator, TrainingObjective
from autodeuq.options import SearchConfig, configure
from autodeuq.result import TrainResult
from autodeuq.runner import run_search
from autodeuq.space import load_space


@pytest.fixture(scope="module")
def setup():
    return load_space("toy"), toy_sine(seed=0)


def test_search_with_successive_halving_discards_at_rungs_and_resumes(tmp_path, setup):
    space, data = setup
    run = tmp_path / "run"
    sha = SuccessiveHalving(reduction=2)
    objective = TrainingObjective(space, data, seed=0, epochs=9, discarder=sha)
    summary = run_search(space, data, SerialEvaluator(objective), run, search="random", max_evals=8,
                         progress=False, run_options={"epochs": 9})
    cat = Catalog(run)
    frame = cat.to_dataframe()
    discarded = frame[frame["status"] == "discarded"]
    assert summary.n_discarded == len(discarded) >= 1 and summary.n_done + summary.n_discarded + summary.n_failed == 8
    assert set(discarded["epochs"]) <= {1, 2, 4, 8}  # rungs of r=2 below 9 epochs
    assert summary.epochs == int(frame["epochs"].sum()) < 8 * 9
    # the records are exactly what the finished trainings reported at the rungs they reached
    replayed = SuccessiveHalving(reduction=2)
    replayed.replay(cat.validation_loss_histories())
    assert replayed.records() == sha.records()
    # discarded entries are catalog models like the others: loadable, selectable
    ids = cat.validation_predictions().ids
    assert set(discarded["id"]) <= set(ids)

    # resuming continues from the same records; another rule is refused
    resumed = SuccessiveHalving(reduction=2)
    run_search(space, data, SerialEvaluator(objective.with_discarder(resumed)), run, search="random",
               max_evals=10, progress=False, run_options={"epochs": 9})
    assert sum(len(v) for v in resumed.records().values()) > sum(len(v) for v in sha.records().values())
    for other in (None, SuccessiveHalving(reduction=3)):
        with pytest.raises(CatalogError, match="mix the two"):
            run_search(space, data, SerialEvaluator(TrainingObjective(space, data, seed=0, epochs=9, discarder=other)),
                       run, search="random", max_evals=12, progress=False, run_options={"epochs": 9})


class RungReporter:
    """A cheap objective that reports losses at its rungs, as a training does, from any process."""

    def __init__(self, n_valid, discarder=None):
        self.n_valid, self.discarder = n_valid, discarder

    def with_discarder(self, discarder):
        clone = copy.copy(self)
        clone.discarder = discarder
        return clone

    def __call__(self, eval_id, config):
        start = time.time()
        loss = abs(np.log10(config["hp"]["learning_rate"]) + 2.0)
        status, epochs = "done", 9
        for rung in self.discarder.rungs(9):
            time.sleep(0.05)
            if not self.discarder.should_continue(rung, loss):
                status, epochs = "discarded", rung
                break
        rng = np.random.default_rng(eval_id)
        return TrainResult(status, objective=float(loss), epochs=epochs, best_epoch=epochs, model_bytes=b"fake",
                           valid_mean=rng.normal(size=(self.n_valid, 1)), valid_var=np.ones((self.n_valid, 1)),
                           history={"val_loss": [loss] * epochs}, start_time=start, end_time=time.time())


def test_ray_workers_share_one_set_of_rung_records(tmp_path, setup, ray_local):
    from autodeuq.evaluator.ray import RayEvaluator

    space, data = setup
    objective = RungReporter(len(data.y_valid), SuccessiveHalving(reduction=3))
    with RayEvaluator(objective, workers=2, num_cpus=2) as evaluator:
        summary = run_search(space, data, evaluator, tmp_path / "run", search="random", max_evals=12,
                             progress=False)
        records = evaluator.discarder.records()
    assert len(records[1]) == 12  # every training reported at rung 1, whichever worker ran it
    frame = Catalog(tmp_path / "run").to_dataframe()
    assert len(records.get(3, [])) == int((frame["epochs"] >= 3).sum())  # those promoted past rung 1
    assert summary.n_discarded == int((frame["status"] == "discarded").sum()) >= 1


def test_cli_early_discarding_option(tmp_path, capsys):
    from autodeuq.cli import main

    code = main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--search", "random", "--max-evals", "5",
                 "--epochs", "4", "--early-discarding", "sha", "--sha-reduction", "2", "--run-dir", str(tmp_path / "r"),
                 "--no-progress"])
    assert code == 0
    meta = Catalog(tmp_path / "r").meta
    # --sha-min-epochs auto: toy-sine is a small table, so the first rung is epoch 3
    assert meta["search"]["early_discarding"] == {"policy": "sha", "min_epochs": 3, "reduction": 2}
    assert "successive halving: first rung at epoch 3" in capsys.readouterr().out
    assert main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--search", "random", "--max-evals", "2",
                 "--epochs", "4", "--early-discarding", "sha", "--sha-min-epochs", "1", "--run-dir",
                 str(tmp_path / "r1"), "--no-progress"]) == 0
    assert Catalog(tmp_path / "r1").meta["search"]["early_discarding"]["min_epochs"] == 1
    capsys.readouterr()
    assert main(["search", "--dataset", "toy-sine", "--early-discarding", "sha", "--sha-min-epochs", "0",
                 "--run-dir", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith('--sha-min-epochs must be "auto" or an integer >= 1, got 0')
    assert main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--early-discarding", "sha",
                 "--sha-reduction", "1", "--run-dir", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--sha-reduction" in err[0]
    assert not (tmp_path / "bad").exists()


def test_auto_discards_when_the_first_trainings_project_a_search_over_its_budget(tmp_path, setup):
    from autodeuq import pipeline

    space, data = setup
    lines = []

    def fill(run, max_evals, **kw):
        config = configure(SearchConfig, search="random", max_evals=max_evals, epochs=4, evaluator="serial",
                           progress=False, **kw)
        return pipeline.fill_catalog(space, data, run, config, log=lines.append)

    def recorded(run):
        search = Catalog(run).meta["search"]
        return search["early_discarding"], search.get("discarding_decision")

    # A budget no search reaches: after 4 trainings (two rounds of one worker), no discarding, recorded.
    fill(tmp_path / "cheap", 5, discard_budget=1e6)
    rule, decision = recorded(tmp_path / "cheap")
    assert rule is None and decision["policy"] == "none" and decision["after_trainings"] == 4
    assert decision["budget_s"] == 1e6 and 0 < decision["projected_s"] < 1e6
    assert [line for line in lines if "projected" in line] == [
        f"no early discarding: the search is projected to take {decision['projected_s']:.0f} s, within the budget "
        f"of 1000000 s (projected again after each training)"]
    # A budget every search exceeds: successive halving rules the trainings after the first 4.
    lines.clear()
    fill(tmp_path / "costly", 10, discard_budget=1e-3)
    rule, decision = recorded(tmp_path / "costly")
    assert rule == {"policy": "sha", "min_epochs": 3, "reduction": 3} and decision["policy"] == "sha"
    assert any(line.startswith("successive halving turned on: the search was projected to take") for line in lines)
    frame = Catalog(tmp_path / "costly").to_dataframe().sort_values("id")
    assert (frame["status"].iloc[:4] != "discarded").all()  # decided after them: they ran to their own end
    # A resumed search keeps successive halving once it is on, whatever the budget now says, and
    # says nothing more.
    lines.clear()
    fill(tmp_path / "costly", 11, discard_budget=1e6)
    assert recorded(tmp_path / "costly")[0]["policy"] == "sha" and Catalog(tmp_path / "costly").n_finished == 11
    assert not any("projected" in line for line in lines)
    # One without discarding decides again from its own trainings: resumed to a larger budget, a
    # search may cost more than the one that decided.
    fill(tmp_path / "cheap", 6, discard_budget=1e-3)  # one more training: too few to project
    assert recorded(tmp_path / "cheap")[0] is None and Catalog(tmp_path / "cheap").n_finished == 6
    fill(tmp_path / "cheap", 11, discard_budget=1e-3)
    rule, decision = recorded(tmp_path / "cheap")
    assert rule["policy"] == "sha" and decision["policy"] == "sha" and decision["after_trainings"] == 4
    assert Catalog(tmp_path / "cheap").n_finished == 11
    # Asking by name for what the catalog was not searched with is refused, as before.
    with pytest.raises(CatalogError, match="asks for no early discarding"):
        fill(tmp_path / "cheap", 12, early_discarding="none")


def test_auto_decides_the_same_on_an_idle_and_on_a_loaded_machine(tmp_path, setup):
    # The same command and seed: the same projection and decision, with two processes busy on
    # every core or not; what the decision was modelled from is recorded with it.
    import subprocess
    import sys

    from autodeuq import pipeline
    from autodeuq.discard.cost import MEASURE

    space, data = setup

    def decision(run):
        config = configure(SearchConfig, search="random", max_evals=5, epochs=4, evaluator="serial", progress=False,
                           seed=3)
        pipeline.fill_catalog(space, data, run, config)
        return Catalog(run).meta["search"]["discarding_decision"]

    idle = decision(tmp_path / "idle")
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        loaded = decision(tmp_path / "loaded")
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert idle == loaded and idle["measure"] == MEASURE and idle["after_trainings"] == 4
    assert idle["projected_s"] > 0


def test_auto_turns_discarding_on_later_when_the_trainings_grow_longer():
    # A search projected within its budget at first is projected again after each result: when
    # the trainings the search turns to later take longer, successive halving goes on from then,
    # its rungs learn what was reported, and each decision is recorded.
    from autodeuq.discard.cost import (
        EPOCH_SECONDS,
        MEASURE,
        SAMPLE_PARAM_SECONDS,
        STEP_SECONDS,
        DiscardByCost,
        training_cost,
    )
    from autodeuq.discard.scheduler import Scheduler

    class Evaluator:
        n_slots, discarder = 2, None

        def set_discarder(self, rule):
            self.discarder = rule

    class Writer:
        def __init__(self):
            self.recorded = []

        def record_discarding(self, rule, decision):
            self.recorded.append((rule, dict(decision)))

        def validation_loss_histories(self, batch_sizes=False):
            return [([1.0, 0.9, 0.8], 32), ([2.0, 1.9], 32)]

    rule = SuccessiveHalving(min_epochs=1, reduction=3)
    # 1,000 rows in batches of 10 (100 steps an epoch) of a 10,000-parameter network: 1 epoch is
    # 100 x (STEP + 10 x 10,000 x SAMPLE_PARAM) + EPOCH modelled seconds.
    scheduler = Scheduler(by_cost=DiscardByCost(rule, budget_s=100.0, after=4, rows=1000))
    epoch = 100 * (STEP_SECONDS + 10 * 10_000 * SAMPLE_PARAM_SECONDS) + EPOCH_SECONDS
    assert training_cost(1, 1000, 10, 10_000) == pytest.approx(epoch, rel=1e-12)
    evaluator, writer = Evaluator(), Writer()
    trainings, lines = [], []

    def finish(epochs):
        trainings.append((epochs, 10, 10_000))
        lines.append(scheduler.after_record(evaluator, writer, trainings, remaining=100 - len(trainings)))

    def projected(costs):  # (the modelled seconds so far + their median x evaluations left) / 2 workers
        return (sum(costs) + np.median(costs) * (100 - len(costs))) / 2

    small, large = 20, 400  # epochs (an epoch models about 0.018 s): about 18 s projected, then 191 s
    for _ in range(4):
        finish(small)
    budget_line = f"no early discarding: the search is projected to take {projected([small * epoch] * 4):.0f} s"
    assert lines[:3] == [None] * 3 and lines[3].startswith(budget_line)
    assert writer.recorded == [(None, {"policy": "none", "projected_s": round(projected([small * epoch] * 4), 1),
                                       "budget_s": 100.0, "after_trainings": 4, "measure": MEASURE})]
    for _ in range(3):
        finish(large)  # the median stays that of the short trainings: within the budget still
    assert lines[4:] == [None] * 3 and evaluator.discarder is None and len(writer.recorded) == 1
    finish(large)  # median now between the two: over the budget
    costs = [small * epoch] * 4 + [large * epoch] * 4
    assert projected(costs) > 100.0
    assert lines[-1] == (f"successive halving turned on: the search was projected to take {projected(costs):.0f} s, "
                         f"more than the budget of 100 s (after 8 trainings)")
    assert evaluator.discarder is rule and scheduler.rule is rule and scheduler.by_cost is None
    assert writer.recorded[-1] == (rule.describe(), {"policy": "sha", "projected_s": round(projected(costs), 1),
                                                     "budget_s": 100.0, "after_trainings": 8, "measure": MEASURE})
    # the rungs learned the finished trainings' reports: epoch 1 of both, epoch 3 of the first
    assert rule.records() == {1: [1.0, 2.0], 3: [0.8]}
    # once on, it stays on
    finish(1)
    assert lines[-1] is None and len(writer.recorded) == 2


def test_auto_first_rung_follows_the_data_and_a_resumed_catalog(tmp_path, setup, monkeypatch):
    from autodeuq import data as data_module
    from autodeuq import pipeline

    space, data = setup
    lines = []

    def fill(run, max_evals=3, **kw):
        config = configure(SearchConfig, search="random", max_evals=max_evals, epochs=4, evaluator="serial",
                           early_discarding="sha", progress=False, **kw)
        return pipeline.fill_catalog(space, data, run, config, log=lines.append)

    def first(run):
        return Catalog(run).meta["search"]["early_discarding"]["min_epochs"]

    fill(tmp_path / "auto")  # toy-sine is a small table
    assert first(tmp_path / "auto") == 3 and any("first rung at epoch 3" in line for line in lines)
    fill(tmp_path / "one", sha_min_epochs=1)
    # "auto" resumes a catalog with the first rung it was searched with; another one is refused
    lines.clear()
    fill(tmp_path / "one", max_evals=4)
    assert first(tmp_path / "one") == 1 and Catalog(tmp_path / "one").n_finished == 4
    assert not any("first rung" in line for line in lines)
    with pytest.raises(CatalogError, match="min_epochs 1"):
        fill(tmp_path / "one", sha_min_epochs=2, max_evals=5)
    monkeypatch.setattr(data_module, "SMALL_DATA_ROWS", len(data.x_train) + len(data.x_valid) - 1)
    fill(tmp_path / "large")
    assert first(tmp_path / "large") == 1


def test_rungs_in_steps_use_the_middle_batch_searched_and_resume(tmp_path, setup):
    from autodeuq import pipeline
    from autodeuq.discard import rung_schedule
    from autodeuq.space import SearchSpace

    space, data = setup
    spec = copy.deepcopy(space.spec)
    spec["training"]["batch_size"] = {"low": 8, "high": 64, "log": True}
    space = SearchSpace(spec)
    run = tmp_path / "run"

    def fill(max_evals, **kw):
        config = configure(SearchConfig, search="random", max_evals=max_evals, epochs=12, evaluator="serial",
                           early_discarding="sha", sha_min_epochs=1, sha_reduction=2, progress=False, **kw)
        return pipeline.fill_catalog(space, data, run, config)

    fill(10, sha_rungs="steps")
    cat = Catalog(run)
    assert cat.meta["search"]["early_discarding"] == {"policy": "sha", "min_epochs": 1, "reduction": 2,
                                                     "reference_batch": 23}  # sqrt(8 * 64)
    frame = cat.to_dataframe()
    discarded = [cat.entry(i) for i in frame.loc[frame["status"] == "discarded", "id"]]
    assert discarded  # each stopped at an epoch where its own batch size reaches a rung
    for entry in discarded:
        assert entry["epochs"] in rung_schedule(12, 1, 2, entry["extra"]["batch_size"], 23)
    # "auto" resumes the catalog with its unit; epochs are refused
    fill(12)
    assert Catalog(run).n_finished == 12 and "reference_batch" in Catalog(run).meta["search"]["early_discarding"]
    with pytest.raises(CatalogError, match="reference_batch 23"):
        fill(13, sha_rungs="epochs")
    with pytest.raises(ValueError, match="sha_rungs"):
        fill(13, sha_rungs="updates")


def test_cli_sha_rungs_option(tmp_path, capsys):
    from autodeuq.cli import main

    assert main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--search", "random", "--max-evals", "2",
                 "--epochs", "3", "--early-discarding", "sha", "--sha-rungs", "steps", "--run-dir",
                 str(tmp_path / "r"), "--no-progress"]) == 0
    assert Catalog(tmp_path / "r").meta["search"]["early_discarding"]["reference_batch"] == 6  # toy: batches 1-32
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["search", "--dataset", "toy-sine", "--sha-rungs", "updates", "--run-dir", str(tmp_path / "bad")])
    assert "--sha-rungs" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_the_driver_owns_the_rule_and_hands_it_to_the_evaluator(tmp_path, setup, monkeypatch):
    """The objective carries no rule: the scheduler gives it to the evaluator the search runs on."""
    from autodeuq import pipeline
    from autodeuq.evaluator import SerialEvaluator

    space, data = setup
    seen = []
    original = SerialEvaluator.set_discarder

    def recording(self, discarder):
        seen.append(None if discarder is None else discarder.describe())
        original(self, discarder)

    monkeypatch.setattr(SerialEvaluator, "set_discarder", recording)
    config = configure(SearchConfig, search="random", max_evals=3, epochs=4, evaluator="serial",
                       early_discarding="sha", progress=False)
    pipeline.fill_catalog(space, data, tmp_path / "run", config)
    assert seen == [{"policy": "sha", "min_epochs": 3, "reduction": 3}]
