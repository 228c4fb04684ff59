"""benchmarks/search_costs.py: the fixed parts of a search's trainings, from its catalog."""
import pytest

from benchmarks.search_costs import catalog_costs, fixed_parts, main, worker_gaps


def test_the_trace_is_the_first_epoch_less_a_later_one():
    parts = fixed_parts({"setup": 0.2, "first_epoch": 0.5, "other_epochs": 0.9, "finish": 0.1}, 10)
    assert parts == pytest.approx({"setup": 0.2, "trace": 0.4, "finish": 0.1, "fixed": 0.7, "training": 1.7})
    # one epoch: all of it counts as the trace
    assert fixed_parts({"setup": 0.2, "first_epoch": 0.5, "other_epochs": 0.0, "finish": 0.1}, 1)["trace"] == 0.5


def test_gaps_are_counted_between_trainings_of_the_same_worker():
    trainings = [("a", 0.0, 1.0), ("b", 0.5, 2.0), ("a", 1.25, 3.0), ("b", 2.5, 4.0), ("a", 3.0, 5.0)]
    assert sorted(worker_gaps(trainings)) == [0.0, 0.25, 0.5]


def test_a_search_catalog_gives_medians_of_its_trainings(tmp_path, capsys):
    from autodeuq.data import toy_sine
    from autodeuq.evaluator import SerialEvaluator, TrainingObjective
    from autodeuq.runner import run_search
    from autodeuq.space import load_space

    space, data = load_space("toy"), toy_sine(seed=0)
    run_search(space, data, SerialEvaluator(TrainingObjective(space, data, seed=0, epochs=3)), tmp_path / "run",
               search="random", max_evals=3, progress=False, run_options={"epochs": 3})
    costs = catalog_costs(tmp_path / "run")
    assert costs["trainings"] == 3 and costs["gap"] >= 0
    assert costs["setup"] > 0 and costs["finish"] > 0 and 0 < costs["share"] <= 1
    assert costs["fixed"] <= costs["training"] + 1e-9  # each training's fixed part is part of it
    assert main([str(tmp_path / "run")]) == 0
    row = capsys.readouterr().out.strip().splitlines()[-1]
    assert row.startswith("| run | 3 | ") and row.count("|") == 10
