import json

import numpy as np
import pytest
from scipy import stats

from autodeuq import metrics


def random_mixture(rng, M=3, n=40, T=2):
    means = rng.normal(scale=2.0, size=(M, n, T))
    variances = rng.uniform(0.2, 2.0, size=(M, n, T))
    weights = rng.dirichlet(np.ones(M))
    y = rng.normal(scale=2.0, size=(n, T))
    return means, variances, weights, y


def sample_mixture(rng, means, variances, weights, size):
    """``size`` draws per (point, target) from the mixture, shape (size, n, T)."""
    component = rng.choice(len(weights), p=weights, size=(size,) + means.shape[1:])
    mu = np.take_along_axis(means, component, axis=0)
    sd = np.sqrt(np.take_along_axis(variances, component, axis=0))
    return mu + sd * rng.normal(size=mu.shape)


def test_gaussian_nll_rmse_mae_values():
    mean = np.array([[0.0, 1.0], [2.0, 1.0]])
    var = np.array([[1.0, 4.0], [1.0, 4.0]])
    y = np.array([[1.0, 1.0], [2.0, 3.0]])
    expected_nll = [
        np.mean([0.5 * np.log(2 * np.pi) + 0.5, 0.5 * np.log(2 * np.pi)]),
        np.mean([0.5 * np.log(8 * np.pi), 0.5 * np.log(8 * np.pi) + 0.5]),
    ]
    np.testing.assert_allclose(metrics.gaussian_nll(y, mean, var), expected_nll)
    np.testing.assert_allclose(metrics.rmse(y, mean), [np.sqrt(0.5), np.sqrt(2.0)])
    np.testing.assert_allclose(metrics.mae(y, mean), [0.5, 1.0])


def test_moments_decomposition_equals_mixture_variance():
    rng = np.random.default_rng(0)
    means, variances, weights, _ = random_mixture(rng)
    mean, aleatoric, epistemic = metrics.mixture_moments(means, variances, weights)
    w = weights[:, None, None]
    np.testing.assert_allclose(mean, np.sum(w * means, axis=0))
    analytic_var = np.sum(w * (variances + means**2), axis=0) - mean**2
    np.testing.assert_allclose(aleatoric + epistemic, analytic_var, rtol=1e-12)
    assert np.all(epistemic >= 0)

    samples = sample_mixture(rng, means[:, :3], variances[:, :3], weights, 200_000)
    np.testing.assert_allclose(samples.mean(axis=0), mean[:3], atol=0.03)
    np.testing.assert_allclose(samples.var(axis=0), (aleatoric + epistemic)[:3], rtol=0.03)


def test_moments_respect_weights():
    means = np.array([[[0.0]], [[10.0]], [[-7.0]]])
    variances = np.array([[[1.0]], [[3.0]], [[100.0]]])
    mean, aleatoric, epistemic = metrics.mixture_moments(means, variances, [0.25, 0.75, 0.0])
    assert mean[0, 0] == pytest.approx(7.5)
    assert aleatoric[0, 0] == pytest.approx(0.25 * 1 + 0.75 * 3)
    assert epistemic[0, 0] == pytest.approx(0.25 * 7.5**2 + 0.75 * 2.5**2)


def test_mixture_nll_equals_direct_loop():
    rng = np.random.default_rng(1)
    means, variances, weights, y = random_mixture(rng, M=4, n=15, T=2)
    M, n, T = means.shape
    expected = np.zeros(T)
    for t in range(T):
        for p in range(n):
            density = sum(
                weights[m] * stats.norm.pdf(y[p, t], means[m, p, t], np.sqrt(variances[m, p, t]))
                for m in range(M)
            )
            expected[t] -= np.log(density) / n
    np.testing.assert_allclose(metrics.mixture_nll(means, variances, weights, y), expected)


def test_mixture_nll_single_component_equals_gaussian_nll():
    rng = np.random.default_rng(2)
    means, variances, _, y = random_mixture(rng, M=1)
    np.testing.assert_allclose(
        metrics.mixture_nll(means, variances, [1.0], y),
        metrics.gaussian_nll(y, means[0], variances[0]),
    )
    # duplicated components are the same distribution
    np.testing.assert_allclose(
        metrics.mixture_nll(
            np.repeat(means, 3, 0), np.repeat(variances, 3, 0), [0.2, 0.5, 0.3], y
        ),
        metrics.gaussian_nll(y, means[0], variances[0]),
    )


def test_mixture_nll_is_stable_far_in_the_tails():
    # densities underflow to 0 here; logsumexp must still give the exact answer
    means = np.array([[[0.0]], [[1.0]]])
    variances = np.full((2, 1, 1), 1e-4)
    y = np.array([[100.0]])
    nll = metrics.mixture_nll(means, variances, [0.5, 0.5], y)
    single = metrics.gaussian_nll(y, means[1], variances[1]) - np.log(0.5)
    assert np.isfinite(nll).all()
    np.testing.assert_allclose(nll, single, rtol=1e-12)


def test_zero_weight_component_is_ignored():
    rng = np.random.default_rng(3)
    means, variances, weights, y = random_mixture(rng, M=3)
    weights = np.array([0.4, 0.6, 0.0])
    changed = means.copy()
    changed[2] += 50.0
    for fn in (metrics.mixture_nll, metrics.mixture_crps):
        np.testing.assert_allclose(
            fn(means, variances, weights, y), fn(changed, variances, weights, y)
        )


def test_crps_single_gaussian_closed_form():
    rng = np.random.default_rng(4)
    means, variances, _, y = random_mixture(rng, M=1)
    s = np.sqrt(variances[0])
    z = (y - means[0]) / s
    expected = s * (z * (2 * stats.norm.cdf(z) - 1) + 2 * stats.norm.pdf(z) - 1 / np.sqrt(np.pi))
    np.testing.assert_allclose(
        metrics.mixture_crps(means, variances, [1.0], y), expected.mean(axis=0)
    )


def test_crps_matches_monte_carlo():
    rng = np.random.default_rng(5)
    means, variances, weights, y = random_mixture(rng, M=3, n=4, T=2)
    draws = sample_mixture(rng, means, variances, weights, 200_000)
    # E|X - y| - 0.5 E|X - X'|, with X' an independent second half of the draws
    first, second = draws[:100_000], draws[100_000:]
    mc = np.abs(draws - y).mean(axis=0) - 0.5 * np.abs(first - second).mean(axis=0)
    np.testing.assert_allclose(
        metrics.mixture_crps(means, variances, weights, y), mc.mean(axis=0), rtol=0.02
    )


def test_coverage_of_calibrated_gaussian_is_nominal():
    rng = np.random.default_rng(6)
    n = 20_000
    mean = rng.normal(size=(1, n, 2))
    var = rng.uniform(0.5, 3.0, size=(1, n, 2))
    y = mean[0] + np.sqrt(var[0]) * rng.normal(size=(n, 2))
    for level in (0.5, 0.9, 0.95):
        np.testing.assert_allclose(metrics.coverage(mean, var, [1.0], y, level), level, atol=0.012)
    assert np.all(metrics.miscalibration_area(mean, var, [1.0], y) < 0.01)


def test_coverage_of_calibrated_mixture_is_nominal():
    rng = np.random.default_rng(7)
    means, variances, weights, _ = random_mixture(rng, M=3, n=10_000, T=1)
    y = sample_mixture(rng, means, variances, weights, 1)[0]
    for level in (0.5, 0.9, 0.95):
        np.testing.assert_allclose(
            metrics.coverage(means, variances, weights, y, level), level, atol=0.015
        )
    assert metrics.miscalibration_area(means, variances, weights, y)[0] < 0.012


def test_overconfident_model_is_miscalibrated():
    rng = np.random.default_rng(8)
    y = rng.normal(size=(5000, 1))
    means, variances = np.zeros((1, 5000, 1)), np.full((1, 5000, 1), 0.25)
    expected, observed = metrics.calibration_curve(means, variances, [1.0], y)
    assert expected.shape == (99,) and observed.shape == (99, 1)
    assert np.all(np.diff(observed[:, 0]) >= 0)
    # the observed coverage of a central N(0, 0.25) interval under N(0, 1) data
    truth = 2 * stats.norm.cdf(0.5 * stats.norm.ppf((1 + expected) / 2)) - 1
    np.testing.assert_allclose(observed[:, 0], truth, atol=0.02)
    area = metrics.miscalibration_area(means, variances, [1.0], y)
    np.testing.assert_allclose(area, np.mean(np.abs(truth - expected)), atol=0.01)


def test_mixture_quantile_inverts_cdf_and_agrees_with_coverage():
    rng = np.random.default_rng(9)
    means, variances, weights, y = random_mixture(rng, M=3, n=200, T=2)
    q = np.array([0.025, 0.3, 0.5, 0.975])
    quantiles = metrics.mixture_quantile(means, variances, weights, q)
    assert quantiles.shape == (4, 200, 2)
    np.testing.assert_allclose(
        metrics.mixture_cdf(means, variances, weights, quantiles),
        np.broadcast_to(q[:, None, None], quantiles.shape),
        atol=1e-12,
    )
    for level in (0.5, 0.9):
        lower, upper = metrics.central_interval(means, variances, weights, level)
        inside = np.mean((y >= lower) & (y <= upper), axis=0)
        np.testing.assert_array_equal(
            inside, metrics.coverage(means, variances, weights, y, level)
        )


def test_mixture_quantile_single_component_is_exact():
    means, variances = np.array([[[1.0, -2.0]]]), np.array([[[4.0, 0.25]]])
    np.testing.assert_array_equal(
        metrics.mixture_quantile(means, variances, [1.0], 0.975),
        stats.norm.ppf(0.975, loc=means[0], scale=np.sqrt(variances[0])),
    )
    with pytest.raises(ValueError, match="q"):
        metrics.mixture_quantile(means, variances, [1.0], 1.0)


def test_sharpness():
    np.testing.assert_allclose(metrics.sharpness([[4.0, 1.0], [16.0, 9.0]]), [3.0, 2.0])


def test_evaluate_is_consistent_and_json_serializable():
    rng = np.random.default_rng(10)
    means, variances, weights, y = random_mixture(rng, M=3, n=50, T=2)
    scores = metrics.evaluate(means, variances, weights, y)
    assert set(scores) == {
        "nll", "nll_gaussian", "rmse", "mae", "crps", "coverage_50", "coverage_90",
        "coverage_95", "coverage_gaussian_50", "coverage_gaussian_90", "coverage_gaussian_95",
        "miscalibration_area", "sharpness",
    }  # fmt: skip
    json.dumps(scores)
    for value in scores.values():
        assert set(value) == {"per_target", "mean"}
        assert len(value["per_target"]) == 2
        assert all(type(v) is float for v in value["per_target"])
        assert type(value["mean"]) is float
        assert value["mean"] == pytest.approx(np.mean(value["per_target"]))
    mean, aleatoric, epistemic = metrics.mixture_moments(means, variances, weights)
    np.testing.assert_allclose(
        scores["nll"]["per_target"], metrics.mixture_nll(means, variances, weights, y)
    )
    np.testing.assert_allclose(
        scores["nll_gaussian"]["per_target"],
        metrics.gaussian_nll(y, mean, aleatoric + epistemic),
    )
    np.testing.assert_allclose(scores["rmse"]["per_target"], metrics.rmse(y, mean))
    np.testing.assert_allclose(
        scores["coverage_90"]["per_target"],
        metrics.coverage(means, variances, weights, y, 0.9),
    )
    np.testing.assert_allclose(
        scores["sharpness"]["per_target"], metrics.sharpness(aleatoric + epistemic)
    )


def test_invalid_mixture_arguments():
    means, variances, y = np.zeros((2, 3, 1)), np.ones((2, 3, 1)), np.zeros((3, 1))
    with pytest.raises(ValueError, match="weights"):
        metrics.mixture_nll(means, variances, [0.5, 0.6], y)
    with pytest.raises(ValueError, match="weights"):
        metrics.mixture_nll(means, variances, [1.0], y)
    with pytest.raises(ValueError, match="variances"):
        metrics.mixture_nll(means, variances[:, :2], [0.5, 0.5], y)
    with pytest.raises(ValueError, match="y"):
        metrics.mixture_nll(means, variances, [0.5, 0.5], y[:2])
    with pytest.raises(ValueError, match="means"):
        metrics.mixture_moments(means[0], variances[0], [1.0])
    # the rules ensemble selection applies too (one validator for both)
    with pytest.raises(ValueError, match="y must be finite"):
        metrics.mixture_nll(means, variances, [0.5, 0.5], np.full((3, 1), np.nan))
    with pytest.raises(ValueError, match="at least one model and one point"):
        metrics.mixture_nll(means[:, :0], variances[:, :0], [0.5, 0.5], y[:0])
