"""The value a prediction returns: its mixture, moments, central intervals and prediction table."""
import dataclasses
import pickle

import numpy as np
import pytest

from autodeuq import metrics
from autodeuq.ensemble import UncertaintyPrediction
from autodeuq.ensemble.mixture import Moments, interval_levels
from autodeuq.errors import AutoDEUQError, ParameterError

LEVELS = (0.9, 0.5, 0.975, 0.90)  # 0.90 names the columns of 0.9: written once


@pytest.fixture()
def mixture():
    """Three members, seven rows, two targets; unequal weights and a bimodal row."""
    rng = np.random.default_rng(0)
    means = rng.normal(size=(3, 7, 2))
    means[:, 0, 0] = [-4.0, 0.0, 4.0]
    variances = rng.uniform(0.1, 2.0, size=(3, 7, 2))
    return means, variances, np.array([0.5, 0.3, 0.2])


def test_the_value_holds_its_mixture_and_its_moments(mixture):
    value = UncertaintyPrediction.from_mixture(*mixture)
    for held, given in zip((value.means, value.variances, value.weights), mixture):
        np.testing.assert_array_equal(held, given)
    moments = value.moments()
    assert isinstance(moments, Moments) and moments._fields == ("mean", "aleatoric", "epistemic")
    for got, expected in zip(moments, metrics.mixture_moments(*mixture)):
        np.testing.assert_array_equal(got, expected)
    mean, aleatoric, epistemic = moments
    np.testing.assert_array_equal(value.total, aleatoric + epistemic)
    np.testing.assert_array_equal(value.std, np.sqrt(aleatoric + epistemic))


@pytest.mark.parametrize("level", [0.5, 0.9, 0.975, 1 - 1e-9])
def test_interval_is_the_central_interval_of_the_mixture(mixture, level):
    lower, upper = UncertaintyPrediction.from_mixture(*mixture).interval(level)
    expected = metrics.central_interval(*mixture, level)
    np.testing.assert_array_equal(lower, expected[0])
    np.testing.assert_array_equal(upper, expected[1])
    assert lower.shape == upper.shape == (7, 2) and np.all(lower < upper)


@pytest.mark.parametrize("level", [0, 1, 1.5, -0.1, True, "0.9", float("nan")])
def test_a_bad_level_is_a_parameter_error(mixture, level):
    with pytest.raises(ParameterError, match="^level must be a probability"):
        UncertaintyPrediction.from_mixture(*mixture).interval(level)


def test_interval_levels_keep_the_suffix_rule_of_the_predict_columns():
    assert interval_levels(LEVELS) == [(0.9, "90"), (0.5, "50"), (0.975, "97_5")]
    assert interval_levels(None) == interval_levels(()) == []
    assert interval_levels([0.999, 0.12345]) == [(0.999, "99_9"), (0.12345, "12_345")]


def test_to_frame_columns_and_values(mixture):
    value = UncertaintyPrediction.from_mixture(*mixture)
    frame = value.to_frame(["a", "b"], levels=LEVELS)
    suffixes = ("90", "50", "97_5")
    expected = [f"{t}_{c}" for t in "ab" for c in ("mean", "std", "aleatoric_std", "epistemic_std",
                                                  *(f"{side}_{s}" for s in suffixes for side in ("lower", "upper")))]
    assert list(frame.columns) == expected and len(frame) == 7
    for j, t in enumerate("ab"):
        np.testing.assert_array_equal(frame[f"{t}_mean"], value.mean[:, j])
        np.testing.assert_array_equal(frame[f"{t}_std"], value.std[:, j])
        np.testing.assert_array_equal(frame[f"{t}_aleatoric_std"], np.sqrt(value.aleatoric[:, j]))
        np.testing.assert_array_equal(frame[f"{t}_epistemic_std"], np.sqrt(value.epistemic[:, j]))
        for level, suffix in zip((0.9, 0.5, 0.975), suffixes):
            lower, upper = metrics.central_interval(*mixture, level)
            np.testing.assert_array_equal(frame[f"{t}_lower_{suffix}"], lower[:, j])
            np.testing.assert_array_equal(frame[f"{t}_upper_{suffix}"], upper[:, j])
    assert list(value.to_frame(["a", "b"]).columns) == ["a_mean", "a_std", "a_aleatoric_std", "a_epistemic_std",
                                                        "b_mean", "b_std", "b_aleatoric_std", "b_epistemic_std"]
    with pytest.raises(ParameterError, match="target_names must name the prediction's 2 target"):
        value.to_frame(["a"])
    with pytest.raises(ParameterError, match="^level must be a probability"):
        value.to_frame(["a", "b"], levels=[90])


def test_a_value_made_of_its_moments_alone_has_no_interval(mixture):
    mean, aleatoric, epistemic = metrics.mixture_moments(*mixture)
    value = UncertaintyPrediction(mean, aleatoric, epistemic, aleatoric + epistemic, np.sqrt(aleatoric + epistemic))
    assert value.means is value.variances is value.weights is None
    np.testing.assert_array_equal(value.moments().epistemic, epistemic)
    assert list(value.to_frame(["a", "b"]).columns)[:4] == ["a_mean", "a_std", "a_aleatoric_std", "a_epistemic_std"]
    with pytest.raises(AutoDEUQError, match="moments only"):
        value.interval(0.9)
    with pytest.raises(AutoDEUQError, match="moments only"):
        value.to_frame(["a", "b"], levels=[0.9])


def test_the_fields_stay_the_five_moments(mixture):
    # AutoDEUQRegressor.predict_uncertainty reshapes every field with dataclasses.replace.
    value = UncertaintyPrediction.from_mixture(*mixture)
    assert [f.name for f in dataclasses.fields(value)] == ["mean", "aleatoric", "epistemic", "total", "std"]
    first = dataclasses.replace(value, **{f.name: getattr(value, f.name)[:, 0] for f in dataclasses.fields(value)})
    np.testing.assert_array_equal(first.std, value.std[:, 0])
    assert first.means is None  # a reshaped value keeps the moments only
    assert list(first.to_frame(["a"]).columns) == ["a_mean", "a_std", "a_aleatoric_std", "a_epistemic_std"]
    copy = pickle.loads(pickle.dumps(value))
    np.testing.assert_array_equal(copy.interval(0.9)[0], value.interval(0.9)[0])
