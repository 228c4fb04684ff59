import numpy as np
import pytest
from scipy import stats

from autodeuq import metrics
from autodeuq.ensemble.calibration import apply_scale, cross_fitted_scale, fit_scale, pooled_coverage


def stretched_mixture(seed, scale, n=4000):
    """A 3-component mixture per point, and observations drawn from it stretched by ``scale``."""
    rng = np.random.default_rng(seed)
    weights = np.array([0.5, 0.3, 0.2])
    means = rng.normal(size=(3, n, 2))
    variances = rng.uniform(0.2, 1.0, size=(3, n, 2))
    component = rng.choice(3, size=(n, 2), p=weights)
    mu = np.take_along_axis(means, component[None], 0)[0]
    s2 = np.take_along_axis(variances, component[None], 0)[0]
    center = np.tensordot(weights, means, axes=1)
    y = center + np.asarray(scale) * (mu + np.sqrt(s2) * rng.normal(size=(n, 2)) - center)
    return means, variances, weights, y


def test_fit_scale_recovers_the_stretch_of_each_target():
    means, variances, weights, y = stretched_mixture(0, [1.5, 0.7])
    np.testing.assert_allclose(fit_scale([(means, variances, weights, y)]), [1.5, 0.7], rtol=0.05)
    means, variances, weights, y = stretched_mixture(1, [1.0, 1.0])
    np.testing.assert_allclose(fit_scale([(means, variances, weights, y)]), [1.0, 1.0], rtol=0.05)


def test_apply_scale_keeps_the_mean_and_scales_both_variance_parts():
    means, variances, weights, _ = stretched_mixture(2, [1, 1], n=50)
    scale = np.array([2.0, 0.5])
    new_means, new_vars = apply_scale(means, variances, weights, scale)
    before, after = metrics.mixture_moments(means, variances, weights), metrics.mixture_moments(new_means, new_vars,
                                                                                              weights)
    np.testing.assert_allclose(after[0], before[0])
    np.testing.assert_allclose(after[1], before[1] * scale**2)
    np.testing.assert_allclose(after[2], before[2] * scale**2)


def test_scaled_likelihood_matches_the_scaled_mixture():
    # fit_scale's objective uses a change of variables; check it against scoring the stretched mixture directly
    means, variances, weights, y = stretched_mixture(3, [1.3, 1.3], n=300)
    scale = fit_scale([(means, variances, weights, y)])
    stretched = apply_scale(means, variances, weights, scale)
    nll_fitted = metrics.mixture_nll(*stretched, weights, y)
    for factor in (0.9, 1.1):
        other = apply_scale(means, variances, weights, scale * factor)
        assert np.all(nll_fitted < metrics.mixture_nll(*other, weights, y))


def test_coverage_on_observations_at_known_quantiles():
    # observations placed exactly at the quantiles (k + 0.5) / n of N(0, 1), predicted by N(0, 1):
    # the central `level` interval holds exactly the quantiles inside [(1 - level)/2, (1 + level)/2]
    n = 1000
    p = (np.arange(n) + 0.5) / n
    y = stats.norm.ppf(p)[:, None]
    means, variances = np.zeros((1, n, 1)), np.ones((1, n, 1))
    for level in (0.5, 0.9, 0.95):
        expected = np.mean(np.abs(2 * p - 1) <= level)
        assert metrics.coverage(means, variances, [1.0], y, level)[0] == pytest.approx(expected)
        assert pooled_coverage([(means, variances, np.ones(1), y)], level)[0] == pytest.approx(expected)
    # a predictive std half the truth covers the quantiles inside +-z/2
    half = np.mean(np.abs(y[:, 0]) <= 0.5 * stats.norm.ppf(0.95))
    assert metrics.coverage(means, variances / 4, [1.0], y, 0.9)[0] == pytest.approx(half)
    # and scaling it back by 2 restores the nominal coverage
    chunk = (means, variances / 4, np.ones(1), y)
    assert pooled_coverage([chunk], 0.9, scale=np.array([2.0]))[0] == pytest.approx(np.mean(np.abs(2 * p - 1) <= 0.9))


def test_cross_fitting_with_a_fixed_selection_equals_fitting_on_all_rows():
    means, variances, weights, y = stretched_mixture(4, [1.4, 0.8], n=600)
    calls = []

    def select_rows(rows):
        calls.append(rows)
        return np.arange(3), weights

    scale, chunks = cross_fitted_scale(select_rows, means, variances, y, folds=3, seed=0)
    assert len(calls) == 3 and len(chunks) == 3
    held_out = np.sort(np.concatenate([np.setdiff1d(np.arange(600), rows) for rows in calls]))
    np.testing.assert_array_equal(held_out, np.arange(600))  # every row held out exactly once
    np.testing.assert_allclose(scale, fit_scale([(means, variances, weights, y)]), rtol=1e-4)


def test_cross_fitting_refuses_too_many_folds():
    means, variances, weights, y = stretched_mixture(5, [1, 1], n=3)
    with pytest.raises(ValueError, match="folds"):
        cross_fitted_scale(lambda rows: (np.arange(3), weights), means, variances, y, folds=4)
