"""Asynchronous successive halving: rung schedule, the top-1/r rule, concurrency, replay."""
import math
import pickle
import threading

import numpy as np
import pytest

from autodeuq.discard import SuccessiveHalving, rung_epochs, rung_schedule


def test_rung_schedule_is_geometric_below_the_budget():
    assert rung_epochs(100) == [1, 3, 9, 27, 81]
    assert rung_epochs(81) == [1, 3, 9, 27]
    assert rung_epochs(10, min_epochs=2, reduction=2) == [2, 4, 8]
    assert rung_epochs(1) == []
    assert SuccessiveHalving(min_epochs=5, reduction=4).rungs(200) == [5, 20, 80]


def test_rungs_counted_in_steps_move_with_the_batch_size():
    # rung m: the steps of m epochs with batches of 16 rows, so epoch ceil(m * b / 16) with batches of b
    assert rung_schedule(100, batch_size=16, reference_batch=16) == {m: [m] for m in rung_epochs(100)}
    assert rung_schedule(100, batch_size=40, reference_batch=16) == {3: [1], 8: [3], 23: [9], 68: [27]}
    assert rung_schedule(30, batch_size=256, reference_batch=16) == {16: [1]}
    # smaller batches than the reference reach several rungs in one epoch; they are asked in order
    assert rung_schedule(10, batch_size=2, reference_batch=16) == {1: [1, 3], 2: [9], 4: [27]}
    sha = SuccessiveHalving(min_epochs=2, reduction=2, reference_batch=10)
    assert sha.schedule(20, batch_size=25) == {5: [2], 10: [4]} and sha.rungs(20, batch_size=25) == [5, 10]
    assert sha.describe() == {"policy": "sha", "min_epochs": 2, "reduction": 2, "reference_batch": 10}
    assert "reference_batch" not in SuccessiveHalving().describe()  # epochs: the rule recorded as before
    with pytest.raises(ValueError, match="batch size"):
        sha.schedule(20)


def test_rung_records_in_steps_are_keyed_by_rung_whatever_the_epoch():
    sha = SuccessiveHalving(reduction=3, reference_batch=8)
    # batch 8 reports rungs 1 and 3 at epochs 1 and 3; batch 24 reports rung 1 at epoch 3
    sha.replay([[0.9, 0.8, 0.7, 0.6], [1.0, 0.5, 0.4, 0.3], [0.2]], batch_sizes=[8, 24, None])
    assert sha.records() == {1: [0.9, 0.4], 3: [0.7]}  # the third failed before reporting anything
    again = pickle.loads(pickle.dumps(sha))
    assert again.reference_batch == 8 and again.records() == sha.records()
    assert not again.should_continue(1, 0.95)  # third record at rung 1, not among the best third
    with pytest.raises(ValueError):
        sha.replay([[0.1]], batch_sizes=[8, 8])


def reference_decision(earlier, loss, r):
    """Top 1/r of the rung's records (own included) continue; nobody is cut below r records."""
    records = sorted(earlier + [loss])
    keep = len(records) // r
    return keep == 0 or loss <= records[keep - 1]


@pytest.mark.parametrize("r", [2, 3, 4])
def test_top_one_over_r_rule_matches_reference(r):
    rng = np.random.default_rng(r)
    sha = SuccessiveHalving(reduction=r)
    earlier = []
    for loss in rng.normal(size=60):
        assert sha.should_continue(3, loss) == reference_decision(earlier, loss, r)
        earlier.append(float(loss))
    decisions = [sha.should_continue(9, x) for x in (5.0, 4.0, 3.0)]
    assert decisions[: r - 1] == [True] * (r - 1)  # fewer than r records: nobody is cut
    assert sha.records()[3] == earlier  # rungs are independent, records in arrival order


def test_non_finite_losses_are_recorded_as_worst():
    sha = SuccessiveHalving(reduction=2)
    assert sha.should_continue(1, 0.1)
    assert not sha.should_continue(1, math.nan)
    assert sha.records()[1] == [0.1, math.inf]


def test_concurrent_trainings_share_one_set_of_records():
    # 8 "trainings" in threads report at the same rungs: every report is counted exactly once and
    # the continuing fraction at a rung is the top 1/r of what each saw
    sha = SuccessiveHalving(reduction=3)
    rng = np.random.default_rng(0)
    losses = rng.uniform(size=(8, 40))
    results = {}

    def training(k):
        results[k] = [sha.should_continue(1, loss) for loss in losses[k]]

    threads = [threading.Thread(target=training, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = sha.records()[1]
    assert sorted(records) == sorted(losses.ravel().tolist())
    # replaying the arrival order through the reference gives the same decisions
    by_value = {}
    earlier = []
    for loss in records:
        by_value[loss] = reference_decision(earlier, loss, 3)
        earlier.append(loss)
    for k in range(8):
        assert results[k] == [by_value[x] for x in losses[k]]
    continuing = np.mean([d for k in range(8) for d in results[k]])
    assert 0.25 < continuing < 0.5  # about a third, more early on


def test_replay_rebuilds_the_records_of_finished_trainings():
    sha = SuccessiveHalving(reduction=3)
    histories = [[0.9, 0.8, 0.85, 0.7], [1.0, math.nan, 0.6], [0.5]]
    sha.replay(histories)
    # best-so-far at rungs 1 and 3 of each history that reached them
    assert sha.records() == {1: [0.9, 1.0, 0.5], 3: [0.8, 0.6]}
    again = pickle.loads(pickle.dumps(sha))
    assert again.records() == sha.records()
    assert again.should_continue(1, 0.4) and not again.should_continue(1, 2.0)


@pytest.mark.parametrize("kwargs", [{"min_epochs": 0}, {"reduction": 1}, {"reduction": 2.5}, {"reference_batch": 0},
                                    {"reference_batch": 1.5}, {"reference_batch": True}])
def test_invalid_parameters(kwargs):
    with pytest.raises(ValueError):
        SuccessiveHalving(**kwargs)
