"""benchmarks/projection_replay.py: the decision of early_discarding="auto" replayed on a search's trainings."""
import pandas as pd

from benchmarks.projection_replay import finished_trainings, replay


def test_trainings_are_taken_in_the_order_they_ended_from_the_first_submission():
    frame = pd.DataFrame({"submit_time": [100.0, 100.0, 103.0, 104.0], "end_time": [105.0, 102.0, None, 0.0],
                          "wall_time": [5.0, 2.0, None, None], "status": ["done", "discarded", "running", "failed"]})
    assert finished_trainings(frame) == [(2.0, 2.0, "discarded"), (5.0, 5.0, "done")]


def test_a_search_whose_trainings_grow_longer_passes_the_budget_later():
    # two workers: 4 trainings of 1 s, then 30 s each; the elapsed time as two workers would see it
    seconds = [1.0] * 4 + [30.0] * 20
    ended, trainings = 0.0, []
    for s in seconds:
        ended += s / 2
        trainings.append((ended, s, "done"))
    found = replay(trainings, max_evals=100, budget_s=600.0, workers=2)
    assert found["first"] == {"policy": "none", "projected_s": 50.0, "budget_s": 600.0, "after_trainings": 4}
    # off after 5-7 trainings (median 1 s: 17 + 95 / 2 = 64.5 s, then 79 s, 93.5 s); after 8 the
    # median is 15.5 s: 62 + 15.5 x 92 / 2 = 775 s
    assert found["switch"] == {"policy": "sha", "projected_s": 775.0, "budget_s": 600.0, "after_trainings": 8,
                               "elapsed_s": 62.0}
    assert found["largest_s"] == 93.5
    cheap = replay([(t / 10, s / 10, "done") for t, s, _ in trainings], 100, 600.0, 2)
    assert cheap["switch"] is None and cheap["first"]["policy"] == "none" and cheap["largest_s"] < 600
    costly = replay(trainings, 100, 10.0, 2)
    assert costly["first"]["policy"] == "sha" and costly["switch"]["after_trainings"] == 4
