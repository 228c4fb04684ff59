"""benchmarks/uci_tails.py: how much of a split's mean test NLL its worst rows carry."""
import math

import numpy as np
import pytest

from autodeuq import metrics
from benchmarks.uci_tails import split_tails, table, tail_summary


def test_one_far_row_carries_the_mean():
    # 99 rows on the mean and one 10 std off (variance 1): the far row adds 50 nats of the 100 rows' total.
    y = np.zeros(100)
    y[7] = 10.0
    found = tail_summary(y, np.zeros(100), np.ones(100))
    base = 0.5 * math.log(2 * math.pi)
    assert found["rows"] == 100
    assert found["nll"] == pytest.approx(base + 50.0 / 100, rel=1e-12)
    assert found["worst_share"] == pytest.approx((base + 50.0) / 100, rel=1e-12)
    assert found["nll_without_1"] == pytest.approx(base, rel=1e-12)
    assert found["nll_without_3"] == pytest.approx(base, rel=1e-12)
    assert found["median"] == pytest.approx(base, rel=1e-12)
    assert found["beyond_3"] == pytest.approx(0.01)
    assert found["worst_z"] == pytest.approx(10.0)


def test_the_worst_rows_are_those_of_the_largest_nll_not_of_the_largest_error():
    # Row 0 is 4 units off with std 10 (small NLL); row 1 is 1 unit off with std 0.1 (10 std: the worst).
    y, mean, var = [4.0, 1.0, 0.0, 0.0, 0.0], [0.0] * 5, [100.0, 0.01, 1.0, 1.0, 1.0]
    per_row = -metrics.gaussian_logpdf(y, mean, var)
    found = tail_summary(y, mean, var)
    assert np.argmax(per_row) == 1
    assert found["worst_z"] == pytest.approx(10.0)
    assert found["nll_without_1"] == pytest.approx(np.delete(per_row, 1).mean(), rel=1e-12)
    assert found["beyond_3"] == pytest.approx(0.2)


def test_fewer_than_four_rows_is_an_error():
    with pytest.raises(ValueError, match="at least 4 rows"):
        tail_summary([0.0, 1.0, 2.0], [0.0] * 3, [1.0] * 3)


def test_the_table_has_a_row_per_split_and_a_mean_per_dataset():
    rows = [{"dataset": "energy", "split": s, **tail_summary([0.0, 0.0, 0.0, 3.0 * s], [0.0] * 4, [1.0] * 4)}
            for s in (0, 1)]
    text = table(rows).splitlines()
    assert len(text) == 2 + 2 + 1
    assert text[2].startswith("| energy | 0 | 4 | 0.919 |")
    mean_nll = np.mean([r["nll"] for r in rows])
    assert text[-1].startswith(f"| energy | mean of 2 | | {mean_nll:.3f} |")


def test_each_method_reads_the_catalogs_it_searched(tmp_path):
    # The catalog of autodeuq-auto is <dataset>-split<i>-auto; the message names it and the method to run.
    (tmp_path / "kin8nm-split3").mkdir()  # another method's catalog folder: not the one asked for
    expected = r"kin8nm-split3-auto: no catalog \(run benchmarks/uci.py --methods autodeuq-auto"
    with pytest.raises(SystemExit, match=expected):
        split_tails(tmp_path / "data", tmp_path, "kin8nm", 3, method="autodeuq-auto")
