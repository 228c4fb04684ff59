"""benchmarks/search_replay.py: a recorded search's trainings replayed reproduce their records."""
from benchmarks.search_replay import main, replay


def test_a_replay_reproduces_every_recorded_training(tmp_path, capsys):
    from autodeuq.data import toy_sine
    from autodeuq.evaluator import SerialEvaluator, TrainingObjective
    from autodeuq.runner import run_search
    from autodeuq.space import load_space

    space, data = load_space("toy"), toy_sine(seed=0)
    run_search(space, data, SerialEvaluator(TrainingObjective(space, data, seed=3, epochs=3)), tmp_path / "run",
               search="random", max_evals=3, progress=False, run_options={"epochs": 3}, seed=3)
    result = replay(tmp_path / "run")
    assert result["trainings"] == 3 and result["reproduced"] == 3
    assert result["cpu_s"] > 0 and result["fixed_ms"] > 0
    assert main([str(tmp_path / "run"), "--limit", "1"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("| run | 1 | 1 |")
