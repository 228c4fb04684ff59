"""i-Epoch: search-phase trainings capped at i epochs, the top k trained again to the full budget
(serial and Ray), the link between the two entries, resume in either phase, the options."""
import copy
import time

import numpy as np
import pytest

from autodeuq.catalog import Catalog, CatalogError
from autodeuq.data import toy_sine
from autodeuq.discard import IEpoch
from autodeuq.errors import ParameterError
from autodeuq.evaluator import SerialEvaluator, TrainingObjective
from autodeuq.result import TrainResult
from autodeuq.runner import run_search
from autodeuq.space import load_space


@pytest.fixture(scope="module")
def setup():
    return load_space("toy"), toy_sine(seed=0)


# --------------------------------------------------------------------------- the rule
def test_rule_caps_every_training_at_i_epochs_below_the_budget():
    rule = IEpoch(epochs=3, top_k=2)
    assert rule.rungs(200) == [3] and rule.rungs(4) == [3] and rule.rungs(3) == [] and rule.rungs(2) == []
    assert not rule.should_continue(3, -10.0)
    assert rule.describe() == {"policy": "iepoch", "epochs": 3, "top_k": 2}


def test_promotions_are_the_k_distinct_configurations_of_lowest_loss():
    a, b, c, d = ({"arch": [k], "hp": {"learning_rate": 0.1 * k}} for k in range(1, 5))
    candidates = [(1, a, 0.9), (2, b, 0.3), (3, dict(b), 0.2), (4, c, float("nan")), (5, d, 0.3), (6, a, 0.3)]
    # b's best entry (3) stands for it; 5 and 6 tie at 0.3: lower id first; NaN ranks last
    assert IEpoch(top_k=3).promotions(candidates) == [3, 5, 6]
    assert IEpoch(top_k=10).promotions(candidates) == [3, 5, 6, 4]
    assert IEpoch(top_k=1).promotions([]) == []


@pytest.mark.parametrize("kwargs, name", [({"epochs": 0}, "iepoch_epochs"), ({"epochs": 1.5}, "iepoch_epochs"),
                                          ({"top_k": 0}, "iepoch_top_k"), ({"top_k": True}, "iepoch_top_k")])
def test_invalid_settings_name_their_parameter(kwargs, name):
    with pytest.raises(ParameterError) as caught:
        IEpoch(**kwargs)
    assert caught.value.parameter == name


# --------------------------------------------------------------------------- a real search
def test_search_caps_then_trains_the_top_k_to_the_full_budget(tmp_path, setup):
    space, data = setup
    run = tmp_path / "run"
    objective = TrainingObjective(space, data, seed=0, epochs=6, discarder=IEpoch(epochs=2, top_k=3))
    summary = run_search(space, data, SerialEvaluator(objective), run, search="random", max_evals=6,
                         progress=False, run_options={"epochs": 6})
    cat = Catalog(run)
    frame = cat.to_dataframe().set_index("id")
    full = cat.full_trainings()
    search_ids = [i for i in frame.index if i not in full]
    assert len(search_ids) == 6 and len(full) == 3 and summary.n_done + summary.n_discarded == 9
    # the search phase: every training stopped after 2 epochs, a model kept
    assert set(frame.loc[search_ids, "status"]) == {"discarded"}
    assert set(frame.loc[search_ids, "epochs"]) == {2}
    # the full trainings: the 3 lowest losses of the search phase, own entries, trained to the budget
    best3 = frame.loc[search_ids, "objective"].sort_values(kind="stable").index[:3]
    assert sorted(full.values()) == sorted(best3)
    for full_id, short_id in full.items():
        entry = cat.entry(full_id)
        assert entry["status"] == "done" and entry["epochs"] == 6 and entry["config"] == cat.config(short_id)
        assert entry["extra"]["promoted_from"] == short_id and entry["extra"]["discarded_at"] is None
    assert summary.epochs == 6 * 2 + 3 * 6
    assert set(full) <= set(cat.validation_predictions().ids)  # selectable like any model

    # a finished run resumes to nothing new; another rule is refused
    again = run_search(space, data, SerialEvaluator(objective), run, search="random", max_evals=6,
                       progress=False, run_options={"epochs": 6})
    assert again.n_done + again.n_discarded == 9
    with pytest.raises(CatalogError, match="mix the two"):
        run_search(space, data, SerialEvaluator(objective.with_discarder(IEpoch(epochs=2, top_k=4))), run,
                   search="random", max_evals=6, progress=False, run_options={"epochs": 6})


# --------------------------------------------------------------------------- resume, Ray, timeout (cheap objective)
class CappedReporter:
    """A cheap objective that trains like train() under a discarder: it stops at the rule's rungs.

    Its loss is a function of the learning rate; ``calls`` keeps (eval_id, epochs) of every call made
    in this process; call number ``interrupt_at`` raises KeyboardInterrupt, as Ctrl-C would.
    """

    def __init__(self, n_valid, discarder=None, sleep=0.0, interrupt_at=None):
        self.n_valid, self.discarder, self.sleep, self.interrupt_at = n_valid, discarder, sleep, interrupt_at
        self.calls = []

    def with_discarder(self, discarder):
        clone = copy.copy(self)
        clone.discarder = discarder
        return clone

    def __call__(self, eval_id, config):
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        start = time.time()
        time.sleep(self.sleep)
        loss = abs(np.log10(config["hp"]["learning_rate"]) + 2.0)
        status, epochs = "done", 9
        for rung in self.discarder.rungs(9) if self.discarder is not None else []:
            if not self.discarder.should_continue(rung, loss):
                status, epochs = "discarded", rung
                break
        self.calls.append((eval_id, epochs))
        rng = np.random.default_rng(eval_id)
        return TrainResult(status, objective=float(loss) - 0.1 * (epochs == 9), epochs=epochs, best_epoch=epochs,
                           model_bytes=b"fake", valid_mean=rng.normal(size=(self.n_valid, 1)),
                           valid_var=np.ones((self.n_valid, 1)), history={"val_loss": [loss] * epochs},
                           start_time=start, end_time=time.time())


def check_phases(run, n_search, top_k, cap):
    cat = Catalog(run)
    frame = cat.to_dataframe().set_index("id")
    full = cat.full_trainings()
    search_ids = [i for i in frame.index if i not in full]
    assert len(search_ids) == n_search and set(frame.loc[search_ids, "epochs"]) == {cap}
    assert len(full) == top_k and set(frame.loc[list(full), "epochs"]) == {9}
    best = frame.loc[search_ids, "objective"].sort_values(kind="stable").index[:top_k]
    assert sorted(full.values()) == sorted(best)
    return cat, full


def test_resume_in_the_search_phase_and_in_the_full_trainings(tmp_path, setup):
    space, data = setup
    run = tmp_path / "run"

    def search(objective):
        return run_search(space, data, SerialEvaluator(objective), run, search="random", max_evals=8,
                          progress=False)

    # Ctrl-C during the 4th search-phase training
    first = CappedReporter(len(data.y_valid), IEpoch(epochs=1, top_k=3), interrupt_at=3)
    assert search(first).interrupted
    with Catalog(run) as cat:
        assert cat.n_finished == 3 and cat.full_trainings() == {} and cat.ids("running") == [4]
    # resumed: the interrupted one runs again under its id, then the rest, then the full trainings;
    # Ctrl-C during the second full training
    second = CappedReporter(len(data.y_valid), IEpoch(epochs=1, top_k=3), interrupt_at=6)
    assert search(second).interrupted
    assert [epochs for _, epochs in second.calls] == [1] * 5 + [9]
    assert second.calls[0][0] == 4  # the interrupted entry, not a new one
    with Catalog(run) as cat:
        full = cat.full_trainings()
        assert len(full) == 2 and cat.ids("running") == [max(full)]
    # resumed in the full trainings: nothing of the search phase is trained again
    third = CappedReporter(len(data.y_valid), IEpoch(epochs=1, top_k=3))
    summary = search(third)
    assert third.calls == [(max(full), 9), (max(full) + 1, 9)]
    assert summary.n_done == 3 and summary.n_discarded == 8
    check_phases(run, n_search=8, top_k=3, cap=1)


def test_ray_workers_run_both_phases(tmp_path, setup, ray_local):
    from autodeuq.evaluator.ray import RayEvaluator

    space, data = setup
    objective = CappedReporter(len(data.y_valid), IEpoch(epochs=3, top_k=4), sleep=0.05)
    with RayEvaluator(objective, workers=2, num_cpus=2) as evaluator:
        summary = run_search(space, data, evaluator, tmp_path / "run", search="random", max_evals=10,
                             progress=False)
        assert isinstance(evaluator.discarder, IEpoch)  # the search's rule again after the full trainings
    assert summary.n_discarded == 10 and summary.n_done == 4 and summary.epochs == 10 * 3 + 4 * 9
    check_phases(tmp_path / "run", n_search=10, top_k=4, cap=3)


def test_timeout_leaves_the_full_trainings_their_share(tmp_path, setup):
    space, data = setup
    objective = CappedReporter(len(data.y_valid), IEpoch(epochs=1, top_k=2), sleep=0.05)
    summary = run_search(space, data, SerialEvaluator(objective), tmp_path / "run", search="random",
                         max_evals=1000, timeout=2.0, progress=False)
    cat = Catalog(tmp_path / "run")
    full = cat.full_trainings()
    # the search phase stopped at half the limit, far from its budget; the 2 full trainings ran after it
    assert summary.stopped_by == "timeout" and 2 < cat.n_finished - len(full) < 1000
    assert len(full) == 2 and all(cat.entry(i)["status"] == "done" for i in full)
    assert max(full) > max(i for i in cat.ids(None) if i not in full)


def test_cli_iepoch_options(tmp_path, capsys):
    from autodeuq.cli import main

    code = main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--search", "random", "--max-evals", "4",
                 "--epochs", "3", "--early-discarding", "iepoch", "--iepoch-top-k", "2", "--run-dir",
                 str(tmp_path / "r"), "--no-progress"])
    assert code == 0
    cat = Catalog(tmp_path / "r")
    assert cat.meta["search"]["early_discarding"] == {"policy": "iepoch", "epochs": 1, "top_k": 2}
    assert len(cat.full_trainings()) == 2 and cat.n_finished == 6
    capsys.readouterr()
    for bad, option in ((["--iepoch-epochs", "3"], "--iepoch-epochs"), (["--iepoch-top-k", "0"], "--iepoch-top-k")):
        assert main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--epochs", "3",
                     "--early-discarding", "iepoch", *bad, "--run-dir", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{option} must" in err[0]
    assert not (tmp_path / "bad").exists()
