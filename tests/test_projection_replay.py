"""benchmarks/projection_replay.py: the decision of early_discarding="auto" replayed on a search's trainings."""
import pandas as pd
import pytest

from autodeuq.discard.cost import training_cost
from benchmarks.projection_replay import finished_trainings, replay


def test_trainings_are_taken_in_the_order_they_ended_from_the_first_submission():
    frame = pd.DataFrame({"submit_time": [100.0, 100.0, 103.0, 104.0], "end_time": [105.0, 102.0, None, 0.0],
                          "wall_time": [5.0, 2.0, None, None], "status": ["done", "discarded", "running", "failed"],
                          "epochs": [7, 3, None, 0], "batch_size": [32, 16, 8, 8], "n_params": [100, 200, 300, 400]})
    assert finished_trainings(frame) == [(2.0, 2.0, "discarded", 3, 16, 200), (5.0, 5.0, "done", 7, 32, 100)]


def test_a_search_whose_trainings_grow_longer_passes_the_budget_later():
    # two workers, 1,000 rows in batches of 10: 4 trainings of 20 epochs, then 20 of 400 epochs; the
    # timed seconds (second field) play no part in the decision
    epoch = training_cost(1, 1000, 10, 10_000)
    epochs = [20] * 4 + [400] * 20
    trainings = [(float(k), 99.0, "done", e, 10, 10_000) for k, e in enumerate(epochs)]

    def projected(costs):
        costs = sorted(costs)
        n = len(costs)
        median = costs[n // 2] if n % 2 else (costs[n // 2 - 1] + costs[n // 2]) / 2
        return (sum(costs) + median * (100 - n)) / 2

    found = replay(trainings, max_evals=100, budget_s=100.0, workers=2, rows=1000)
    first = found["first"]
    assert first["policy"] == "none" and first["after_trainings"] == 4
    assert first["projected_s"] == pytest.approx(projected([20 * epoch] * 4), abs=0.05)
    # off after 5-7 trainings (the median stays the short trainings'); after 8 it passes the budget
    switch = found["switch"]
    assert switch["policy"] == "sha" and switch["after_trainings"] == 8 and switch["elapsed_s"] == 7.0
    assert switch["projected_s"] == pytest.approx(projected([20 * epoch] * 4 + [400 * epoch] * 4), abs=0.05)
    assert found["largest_s"] == pytest.approx(projected([20 * epoch] * 4 + [400 * epoch] * 3), rel=1e-9)
    cheap = replay(trainings, 100, 1e6, 2, 1000)
    assert cheap["switch"] is None and cheap["first"]["policy"] == "none" and cheap["largest_s"] < 1e6
    costly = replay(trainings, 100, 1.0, 2, 1000)
    assert costly["first"]["policy"] == "sha" and costly["switch"]["after_trainings"] == 4
