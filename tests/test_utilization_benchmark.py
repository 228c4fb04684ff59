"""benchmarks/utilization.py: the steady state and its losses, from each evaluation's times."""
import numpy as np
import pytest

from benchmarks.utilization import analyse, busy_within


def test_one_slot_three_evaluations():
    # (submitted, started, ended): 0.1 s of dispatch each, the driver refills 0.1 s after an end.
    times = np.array([[0.0, 0.1, 1.1], [1.2, 1.3, 2.3], [2.4, 2.5, 3.5]])
    found = analyse(times, slots=1)
    # From the first result (1.1) to the last submission (2.4): busy 1.3-2.3 of 1.3 s.
    assert found["window"] == pytest.approx(1.3)
    assert found["steady"] == pytest.approx(1.0 / 1.3)
    assert found["refill_ms"] == pytest.approx(100.0)
    assert found["dispatch_ms"] == pytest.approx(100.0) and found["first_dispatch_ms"] == pytest.approx(100.0)
    assert found["drain"] == 0.0


def test_the_drain_is_the_idle_time_of_the_last_wave():
    # Two slots; the last two evaluations end 1 s apart: one slot idles 1 s at the end.
    times = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.5], [1.0, 1.0, 2.0], [1.5, 1.5, 3.0]])
    found = analyse(times, slots=2)
    assert found["drain"] == pytest.approx(1.0)
    assert found["steady"] == pytest.approx(1.0)  # from 1.0 to 1.5 both slots are busy


def test_busy_time_is_clipped_to_the_window():
    assert busy_within(np.array([0.0, 2.0]), np.array([3.0, 5.0]), 1.0, 4.0) == pytest.approx(2.0 + 2.0)
