"""benchmarks/member_loading.py: a catalog's networks through Keras and read back to their plans."""
from benchmarks.member_loading import main


def test_both_ways_are_timed_on_a_search_catalog(tmp_path, capsys):
    from autodeuq.data import toy_sine
    from autodeuq.evaluator import SerialEvaluator, TrainingObjective
    from autodeuq.runner import run_search
    from autodeuq.space import load_space

    space, data = load_space("toy"), toy_sine(seed=0)
    run_search(space, data, SerialEvaluator(TrainingObjective(space, data, seed=0, epochs=2)), tmp_path / "run",
               search="random", max_evals=2, progress=False, run_options={"epochs": 2})
    # the script stops with a message if the two ways predicted differently
    assert main([str(tmp_path / "run"), "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("2 model files x 1 rounds")
    assert [line.split("wall")[0].split() for line in lines[1:]] == [
        ["float32", "Keras", "model"], ["float64", "Keras", "model"],
        ["float32", "read", "back", "to", "the", "plan"], ["float64", "read", "back", "to", "the", "plan"]]
