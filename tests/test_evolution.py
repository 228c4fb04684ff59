"""Aging evolution at the budget users run: its population and tournament follow the number of
evaluations, and each mutated child's entry names its parent (results.csv, the leaderboard,
metrics.json, the summary line)."""
import time

import numpy as np
import pandas as pd
import pytest

from autodeuq.catalog import Catalog
from autodeuq.cli import main
from autodeuq.errors import ParameterError
from autodeuq.options import SearchConfig, configure
from autodeuq.report import search_counts
from autodeuq.result import TrainResult
from autodeuq.search import create, evolution_options, evolution_searchers
from autodeuq.search.age import population_for_budget
from autodeuq.search.base import config_key
from autodeuq.space import load_space


def test_population_and_tournament_follow_the_budget():
    assert [population_for_budget(n) for n in (20, 100, 200, 500, 5000)] == [
        (10, 3), (20, 7), (40, 13), (100, 33), (100, 33)]
    # 100 evaluations: the population fills after 20, so evolution proposes the other 80
    assert evolution_options("agebo", max_evals=100) == {"population_size": 20, "sample_size": 7}
    assert evolution_options("age", 30, 4) == {"population_size": 30, "sample_size": 4}
    assert evolution_options("age", 30) == {"population_size": 30, "sample_size": 10}  # S follows the P given
    assert evolution_options("random") == evolution_options("bo") == {}
    assert set(evolution_searchers()) == {"age", "agebo", "age-fixed-hp"}


@pytest.mark.parametrize("kwargs, words", [
    ({"search": "random", "population_size": 20}, "population_size must be \"auto\" with search 'random': only "
                                                  "aging evolution"),
    ({"search": "bo", "tournament_size": 3}, "tournament_size must be \"auto\" with search 'bo'"),
    ({"search": "agebo", "population_size": 5, "tournament_size": 6}, r"tournament_size must be at most the "
                                                                     r"population size \(5\)"),
])
def test_bad_evolution_settings_are_refused(kwargs, words):
    with pytest.raises(ParameterError, match=words):
        evolution_options(**kwargs)
    with pytest.raises(ParameterError, match=words):  # the same, checked with the other options
        configure(SearchConfig, **kwargs)


def test_a_population_below_two_is_refused_by_the_table():
    with pytest.raises(ParameterError, match="population_size must be \"auto\" or an integer >= 2"):
        configure(SearchConfig, search="age", population_size=1)


@pytest.mark.parametrize("name", ["age", "agebo"])
def test_a_mutated_child_names_its_parent(name):
    space = load_space("toy")
    options = {"n_candidates": 500} if name == "agebo" else {}
    searcher = create(name, space, seed=0, population_size=4, sample_size=2, **options)
    first = searcher.ask(4)
    assert all(searcher.parent_of(c) is None for c in first)  # random while the population fills
    searcher.tell([(c, float(k)) for k, c in enumerate(first)])
    children = searcher.ask(6)
    keys = {config_key(c) for c in first}
    for child in children:
        parent = searcher.parent_of(child)
        assert config_key(parent) in keys
        changed = sum(a != b for a, b in zip(child["arch"], parent["arch"]))
        if name == "agebo":  # the architecture mutated once; the hyperparameters are the BO's
            assert changed == 1
        else:  # one variable of the joint configuration changed
            assert changed + sum(child["hp"][k] != parent["hp"][k] for k in parent["hp"]) == 1


def fake_training(self, eval_id, config):
    """A training in no time: the cost depends on the architecture and the learning rate."""
    start = time.time()
    cost = 0.05 * float(np.sum(config["arch"])) + abs(np.log10(config["hp"]["learning_rate"]) + 2.0)
    n = len(self.dataset.y_valid)
    return TrainResult("done", objective=cost, epochs=2, best_epoch=1, n_params=10, model_bytes=b"fake",
                       valid_mean=np.zeros((n, 1)), valid_var=np.ones((n, 1)),
                       history={"loss": [cost], "val_loss": [cost]}, start_time=start, end_time=time.time())


def test_a_100_evaluation_search_with_the_defaults_evolves(tmp_path, monkeypatch, capsys):
    from autodeuq.evaluator import TrainingObjective

    monkeypatch.setattr(TrainingObjective, "__call__", fake_training)
    run = tmp_path / "run"
    assert main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "100",
                 "--run-dir", str(run), "--no-progress"]) == 0
    out = capsys.readouterr().out
    frame = pd.read_csv(run / "results.csv")
    children = frame[frame["parent"].notna()]
    # one evaluation at a time: the population (P = 20) is full after 20 results, every later one mutates
    assert len(frame) == 100 and len(children) == 80
    assert (children["parent"] < children["id"]).all() and children["parent"].isin(frame["id"]).all()
    with Catalog(run) as catalog:
        assert search_counts(catalog) == {"evaluations": 100, "running": 0, "done": 100, "discarded": 0,
                                          "failed": 0, "mutated": 80}
        assert catalog.meta["search"]["options"]["population_size"] == 20
        for _, child in children.iterrows():  # the architecture of each child is its parent's, mutated once
            mine, theirs = catalog.config(int(child["id"]))["arch"], catalog.config(int(child["parent"]))["arch"]
            assert sum(a != b for a, b in zip(mine, theirs)) == 1
    assert "80 mutated from earlier ones" in out
    assert main(["catalog", "--run-dir", str(run), "--top", "100"]) == 0
    board = capsys.readouterr().out.splitlines()
    header = next(line.split() for line in board if line.startswith("rank"))
    assert header[:5] == ["rank", "id", "valid_nll", "status", "parent"]
    rows = [line.split() for line in board if line.split()[:1] and line.split()[0].isdigit()]
    parents = {int(r[1]): r[4] for r in rows}
    assert sum(p != "-" for p in parents.values()) == 80
    assert all(parents[int(i)] == str(int(p)) for i, p in zip(children["id"], children["parent"]))


def test_cli_population_options_reach_the_searcher_and_are_refused_for_others(tmp_path, monkeypatch, capsys):
    from autodeuq.evaluator import TrainingObjective

    monkeypatch.setattr(TrainingObjective, "__call__", fake_training)
    run = tmp_path / "run"
    assert main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--max-evals", "12", "--run-dir",
                 str(run), "--no-progress", "--population-size", "5", "--tournament-size", "2"]) == 0
    with Catalog(run) as catalog:
        assert {k: catalog.meta["search"]["options"][k] for k in ("population_size", "sample_size")} == {
            "population_size": 5, "sample_size": 2}
        assert (catalog.to_dataframe()["parent"].notna()).sum() == 7
    capsys.readouterr()
    code = main(["search", "--dataset", "toy-sine", "--evaluator", "serial", "--search", "random",
                 "--population-size", "5", "--run-dir", str(tmp_path / "other")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("autodeuq: error: --population-size must be \"auto\" with search 'random'")
    assert not (tmp_path / "other").exists()
