"""The successive-halving replay of benchmarks/sha_replay.py: rung decisions in the order they were reached."""
import math

import numpy as np

from autodeuq.discard import SuccessiveHalving
from benchmarks.sha_replay import rank_correlations, running_best, stopping_epochs


def training(start, loss, epochs=10):
    """A recorded training of one second per epoch whose loss stays ``loss``."""
    return {"start_time": start, "end_time": start + epochs, "best": running_best([loss] * epochs)}


def test_running_best_counts_a_missing_or_diverged_loss_as_infinite():
    np.testing.assert_array_equal(running_best([None, 2.0, math.nan, 1.0, 3.0]), [math.inf, 2.0, 2.0, 1.0, 1.0])


def test_a_rung_compares_a_training_with_the_losses_recorded_before_it_reached_the_rung():
    # Reduction 2: at each rung the best half continue. C reaches epoch 1 last, behind two lower
    # losses, and stops there; A and B, each in the best half when they arrive, run to their end.
    late = [training(0.0, 1.0), training(0.5, 0.5), training(2.0, 2.0)]
    assert stopping_epochs(late, SuccessiveHalving(1, 2)) == [10, 10, 1]
    # The same losses with C first: the first record of a rung always continues, and A and B are
    # then within the best half of what the rung holds when they arrive.
    early = [training(0.0, 1.0), training(0.5, 0.5), training(-5.0, 2.0)]
    assert stopping_epochs(early, SuccessiveHalving(1, 2)) == [10, 10, 10]


def test_a_training_that_ends_before_a_rung_is_not_recorded_there():
    # B stops on its own after 2 epochs, before the rung at epoch 3: the rung then holds A alone.
    entries = [training(0.0, 1.0), training(0.0, 0.1, epochs=2), training(1.0, 2.0)]
    assert stopping_epochs(entries, SuccessiveHalving(3, 2)) == [10, 2, 3]


def test_rank_correlations_compare_the_best_loss_by_each_epoch_with_the_final_one():
    # Three trainings whose epoch-1 order is the reverse of their final order, and whose order
    # settles from epoch 3 on: -1 at epoch 1, +1 from epoch 3 (the rank epochs are 1, 3, 9, 27).
    curves = [[3.0, 0.9, 0.1], [2.0, 0.5, 0.2], [1.0, 0.4, 0.3]]
    entries = [{"best": running_best(c), "objective": c[-1]} for c in curves]
    assert rank_correlations(entries) == [-1.0, 1.0, 1.0, 1.0]
