"""Conformal intervals and sets (autodeuq.ensemble.conformal): numpy only, no training.

The coverage tests draw many independent exchangeable problems and check the split-conformal
guarantee: for ``n`` held-out rows with continuous scores, the coverage of a new row, over the
draw of both, is exactly ``p = k / (n + 1)`` with ``k = ceil((n + 1) L)``, which lies in
``[L, L + 1 / (n + 1)]`` (Lei et al. 2018, theorem 2.2; Vovk et al. 2005).

Monte-Carlo tolerance: one draw's coverage ``C`` (of ``m`` new rows) has variance
``Var E[C | held-out] + E Var[C | held-out]``; the first is the variance of a Beta(k, n + 1 - k)
variable, ``p (1 - p) / (n + 2)``, the second at most ``p (1 - p) / m``. The mean of ``R``
independent draws therefore has a standard deviation of at most
``sqrt(p (1 - p) (1 / (n + 2) + 1 / m) / R)``; the tests allow 4.5 of them (a chance of about
7e-6 of a false failure, and the draws are seeded, so a result is the same on every machine).
"""
import math
import warnings

import numpy as np
import pytest

from autodeuq.ensemble import conformal
from autodeuq.ensemble.conformal import ConformalLevelWarning

R, N, M = 2000, 50, 100  # draws, held-out rows per draw, new rows per draw


def tolerance(p: float) -> float:
    return 4.5 * math.sqrt(p * (1 - p) * (1 / (N + 2) + 1 / M) / R)


def exact_coverage(level: float, n: int = N) -> float:
    return math.ceil((n + 1) * level - 1e-9) / (n + 1)


def heteroscedastic(rng, n):
    """Two targets with noise std 0.2 + |x|; the 'ensemble' predicts target 0's std half as large
    as it is and target 1's twice as large, with a bias on target 1's mean."""
    x = rng.uniform(-1, 1, size=(n, 1))
    noise = 0.2 + np.abs(x)
    truth = np.hstack([np.sin(3 * x), x ** 2])
    y = truth + noise * rng.standard_normal((n, 2))
    mean = truth + np.array([0.0, 0.3]) * noise
    std = noise * np.array([0.5, 2.0])
    return y, mean, std


@pytest.mark.parametrize("level", [0.5, 0.9, 0.95])
def test_regression_coverage_over_many_draws_is_within_its_guarantee(level):
    rng = np.random.default_rng(20260)
    covered = np.empty((R, 2))
    gaussian = np.empty((R, 2))
    z = {0.5: 0.6745, 0.9: 1.6449, 0.95: 1.96}[level]
    for r in range(R):
        table = conformal.fit_regression(*heteroscedastic(rng, N))
        y, mean, std = heteroscedastic(rng, M)
        covered[r] = conformal.coverage(table, mean, std, y, level)
        gaussian[r] = np.mean(np.abs(y - mean) <= z * std, axis=0)
    p, tol = exact_coverage(level), tolerance(exact_coverage(level))
    assert level <= p <= level + 1 / (N + 1)
    for t in range(2):
        assert abs(covered[:, t].mean() - p) <= tol, (t, covered[:, t].mean(), p, tol)
        assert level - tol <= covered[:, t].mean() <= level + 1 / (N + 1) + tol
    # the mis-scaled std's own Gaussian intervals miss the level by far, both ways
    assert gaussian[:, 0].mean() < level - 0.15 and (level == 0.5 or gaussian[:, 1].mean() > level + 0.04)


@pytest.mark.parametrize("level", [0.5, 0.9, 0.95])
def test_classification_set_coverage_over_many_draws_is_within_its_guarantee(level):
    rng = np.random.default_rng(77)

    def draw(n):
        logits = rng.normal(scale=1.5, size=(n, 3))
        truth = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        codes = (rng.uniform(size=(n, 1)) > np.cumsum(truth, axis=1)).sum(axis=1)
        sharp = np.exp(2.5 * logits)  # an over-confident model of those probabilities
        return codes, sharp / sharp.sum(axis=1, keepdims=True)

    lac, nonempty, size = np.empty(R), np.empty(R), np.empty(R)
    for r in range(R):
        table = conformal.fit_classification(*draw(N))
        codes, probas = draw(M)
        raw = conformal.prediction_sets(table, probas, level, nonempty=False, warn=False)
        lac[r] = raw[np.arange(M), codes].mean()
        nonempty[r], size[r] = conformal.set_coverage(table, probas, codes, level)
    p, tol = exact_coverage(level), tolerance(exact_coverage(level))
    assert abs(lac.mean() - p) <= tol, (lac.mean(), p, tol)
    assert level - tol <= lac.mean() <= level + 1 / (N + 1) + tol
    # the most probable class added to every set: coverage only rises, the guarantee's lower bound holds
    assert nonempty.mean() >= lac.mean() and nonempty.mean() >= level - tol
    assert 1 <= size.mean() <= 3


def test_a_level_that_needs_more_rows_is_infinite_and_says_so():
    table = conformal.fit_regression(np.arange(5.0), np.zeros(5), np.ones(5))  # scores 0..4
    assert conformal.quantile(table, 0.8).tolist() == [4.0]  # (5 + 1) 0.8 = 4.8: the 5th of 5
    with pytest.warns(ConformalLevelWarning, match=r"level 0.9 needs at least 9 held-out rows .* has 5: its interval "
                                                   r"is infinite"):
        lower, upper = conformal.interval(table, np.zeros((2, 1)), np.ones((2, 1)), 0.9)
    assert np.all(lower == -np.inf) and np.all(upper == np.inf)
    sets = conformal.fit_classification([0, 1, 2], [[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.3, 0.3, 0.4]])
    with pytest.warns(ConformalLevelWarning):
        assert conformal.prediction_sets(sets, [[0.9, 0.05, 0.05]], 0.9).tolist() == [[True, True, True]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert conformal.coverage(table, np.zeros((3, 1)), np.ones((3, 1)), np.full((3, 1), 1e9), 0.9).tolist() == [1.0]


def test_the_quantile_is_the_ceil_n_plus_1_level_th_smallest_score():
    rng = np.random.default_rng(1)
    for n in (1, 9, 19, 99, 100):
        scores = rng.exponential(size=n)
        table = conformal.fit_regression(scores, np.zeros(n), np.ones(n))
        for level in (0.1, 0.5, 0.8, 0.9, 0.95):
            k = math.ceil((n + 1) * level - 1e-9)
            want = np.sort(scores)[k - 1] if k <= n else np.inf
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConformalLevelWarning)
                assert conformal.quantile(table, level)[0] == want, (n, level)
    # (9 + 1) x 0.9 is 9.000000000000002 in floats: still the 9th score, not infinite
    assert conformal.quantile(conformal.fit_regression(np.arange(9.0), np.zeros(9), np.ones(9)), 0.9)[0] == 8.0


def test_many_held_out_rows_keep_a_bounded_table_and_a_conservative_quantile():
    rng = np.random.default_rng(2)
    n = 3 * conformal.MAX_SCORES + 7
    scores = rng.exponential(size=n)
    table = conformal.fit_regression(scores, np.zeros(n), np.ones(n))
    assert len(table["scores"][0]) == conformal.MAX_SCORES and table["n"] == n
    ordered = np.sort(scores)
    for level in (0.5, 0.9, 0.95, 0.999):
        k = math.ceil((n + 1) * level - 1e-9)
        q = conformal.quantile(table, level)[0]
        assert ordered[k - 1] <= q <= ordered[min(n, k - 1 + math.ceil(n / conformal.MAX_SCORES))]
    conformal.check_conformal(table, 1)


def test_the_interval_does_not_depend_on_a_scale_per_target():
    rng = np.random.default_rng(3)
    y, mean, std = heteroscedastic(rng, 40)
    new_mean, new_std = heteroscedastic(rng, 5)[1:]
    plain = conformal.interval(conformal.fit_regression(y, mean, std), new_mean, new_std, 0.9)
    scale = np.array([3.0, 0.25])
    scaled = conformal.interval(conformal.fit_regression(y, mean, std * scale), new_mean, new_std * scale, 0.9)
    np.testing.assert_allclose(scaled, plain, rtol=1e-12)


def test_bad_inputs_and_tables_are_refused():
    with pytest.raises(ValueError, match="one shape"):
        conformal.fit_regression(np.zeros((3, 2)), np.zeros((3, 1)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="finite"):
        conformal.fit_regression([1.0, np.nan], [0.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="at least one"):
        conformal.fit_regression(np.zeros(0), np.zeros(0), np.zeros(0))
    with pytest.raises(ValueError, match="class codes"):
        conformal.fit_classification([0, 3], [[0.5, 0.5], [0.5, 0.5]])
    good = conformal.fit_regression([1.0, 2.0], [0.0, 0.0], [1.0, 1.0])
    for bad, match in (({**good, "method": "lac"}, "method"), ({**good, "n": 0}, "'n'"),
                       ({**good, "scores": [[2.0, 1.0]]}, "sorted"), ({**good, "scores": [[1.0]]}, "2 sorted"),
                       ({**good, "scores": [[1.0, 2.0]] * 2}, "1 list")):
        with pytest.raises(ValueError, match=match):
            conformal.check_conformal(bad, 1)
    with pytest.raises(ValueError, match="'auto', 'conformal', 'mixture'"):
        conformal.resolve_method("quantile", good)
    assert conformal.resolve_method("auto", None) == "mixture" and conformal.resolve_method("auto", good) == "conformal"
    with pytest.raises(Exception, match="holds no conformal scores"):
        conformal.resolve_method("conformal", None)
