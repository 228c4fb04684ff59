"""Classification math: the categorical mixture and its entropies, temperature scaling, selection on
log loss, the classification metrics and their figures. Pure numpy, float64, hand-computed or
brute-force references."""
import doctest
import importlib
import itertools

import numpy as np
import pandas as pd
import pytest
import sklearn
from scipy.special import log_softmax
from sklearn import metrics as skm

from autodeuq.classification_metrics import ECE_BINS, LOG_LOSS_FLOOR, classification_metrics
from autodeuq.classification_plots import (
    plot_confusion,
    plot_decision_2d,
    plot_reliability,
    plot_uncertainty_correct_wrong,
)
from autodeuq.ensemble.categorical import (
    TEMPERATURE_BOUNDS,
    CategoricalPrediction,
    apply_temperature,
    cross_fitted_temperature,
    fit_temperature,
    pooled_log_loss,
)
from autodeuq.ensemble.selection import IMPROVEMENT_RTOL, select_categorical, select_categorical_bagged
from autodeuq.errors import ParameterError

from numerics import assert_same_math

SKLEARN_MULTICLASS_BRIER = tuple(int(p) for p in sklearn.__version__.split(".")[:2]) >= (1, 7)

LN2 = np.log(2.0)


@pytest.mark.parametrize("name", ["autodeuq.ensemble.categorical", "autodeuq.classification_metrics"])
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=True)
    assert attempted > 0 and failed == 0


# --- the mixture -------------------------------------------------------------------------------

# 2 members, 2 rows, 3 classes, weights 1/4 and 3/4. Row 0: the members are sure of different
# classes (no aleatoric entropy, all of it epistemic). Row 1: they agree (no epistemic part).
MEMBERS = np.array([
    [[1.0, 0.0, 0.0], [0.5, 0.25, 0.25]],
    [[0.0, 1.0, 0.0], [0.5, 0.25, 0.25]],
])
WEIGHTS = np.array([0.25, 0.75])


def hand_mixture(classes=("cat", "dog", "eel")):
    return CategoricalPrediction(MEMBERS, WEIGHTS, np.asarray(classes, dtype=object))


def test_proba_and_label_by_hand():
    value = hand_mixture()
    assert_same_math(value.proba, np.array([[0.25, 0.75, 0.0], [0.5, 0.25, 0.25]]))
    assert value.label.tolist() == ["dog", "cat"]


def test_entropies_by_hand():
    value = hand_mixture()
    h_row0 = -(0.25 * np.log(0.25) + 0.75 * np.log(0.75))  # 0 log 0 = 0 for the third class
    h_row1 = 1.5 * LN2  # -(1/2 log 1/2 + 2 * 1/4 log 1/4)
    assert_same_math(value.total_entropy, np.array([h_row0, h_row1]))
    assert_same_math(value.aleatoric_entropy, np.array([0.0, h_row1]))
    assert_same_math(value.epistemic_mi, np.array([h_row0, 0.0]))
    assert np.all(value.epistemic_mi >= 0)
    assert abs(value.epistemic_mi[1]) <= 1e-15  # members agree: no epistemic part
    assert_same_math(value.total_entropy, value.aleatoric_entropy + value.epistemic_mi)


def test_variance_by_hand():
    # Row 0: class 0 is 1 with weight 1/4 and 0 with weight 3/4: variance w (1 - w) = 3/16, as class 1's.
    assert_same_math(hand_mixture().variance, np.array([[3 / 16, 3 / 16, 0.0], [0.0, 0.0, 0.0]]))


def test_entropy_identity_and_mi_bound_on_random_mixtures():
    rng = np.random.default_rng(1)
    members = rng.dirichlet(np.full(4, 0.3), size=(5, 50))
    value = CategoricalPrediction(members, rng.dirichlet(np.ones(5)), [0, 1, 2, 3])
    assert np.all(value.epistemic_mi >= 0)
    assert np.all(value.total_entropy <= np.log(4) + 1e-12)
    assert_same_math(value.total_entropy, value.aleatoric_entropy + value.epistemic_mi)
    # MI is the weighted KL divergence of each member from the mixture
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(members > 0, members * (np.log(members) - np.log(value.proba)), 0.0).sum(axis=-1)
    assert_same_math(value.epistemic_mi, value.weights @ kl)


def test_prediction_sets_by_hand():
    value = CategoricalPrediction([[[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.25, 0.5, 0.25]]], [1.0], ["a", "b", "c"])
    as_lists = [s.tolist() for s in value.prediction_set(0.5)]
    assert as_lists == [["a"], ["c"], ["b"]]
    # 0.75 is reached exactly on the third row; of the tied "a" and "c", the one listed first joins
    assert [s.tolist() for s in value.prediction_set(0.75)] == [["a", "b"], ["c"], ["b", "a"]]
    assert [s.tolist() for s in value.prediction_set(0.85)] == [["a", "b", "c"], ["c", "a"], ["b", "a", "c"]]


@pytest.mark.parametrize("level", [0, 1, 1.5, -0.1, "0.9", None, True])
def test_prediction_set_refuses_a_level_outside_0_1(level):
    with pytest.raises(ParameterError, match="level must be a probability"):
        hand_mixture().prediction_set(level)


def test_to_frame_columns_and_round_trip():
    value = hand_mixture(classes=[True, False, 7])
    frame = value.to_frame("y", index=["r1", "r2"], set_level=0.9)
    assert frame.columns.tolist() == ["y_pred", "y_p_True", "y_p_False", "y_p_7", "y_entropy", "y_aleatoric_entropy",
                                      "y_epistemic_mi", "y_set"]
    assert frame.index.tolist() == ["r1", "r2"]
    assert frame["y_pred"].tolist() == [False, True]
    assert_same_math(frame[["y_p_True", "y_p_False", "y_p_7"]].to_numpy(dtype=float), value.proba)
    assert_same_math(frame["y_entropy"].to_numpy(), value.total_entropy)
    assert_same_math(frame["y_aleatoric_entropy"].to_numpy(), value.aleatoric_entropy)
    assert_same_math(frame["y_epistemic_mi"].to_numpy(), value.epistemic_mi)
    assert frame["y_set"].tolist() == ["False|True", "True|False|7"]
    assert "y_set" not in value.to_frame("y").columns


@pytest.mark.parametrize("classes", [("a|b", "c", 'q"'), ("x", "|", ""), ("new\nline", "a,b|c", " sp ")])
def test_a_set_of_labels_holding_the_separator_or_quotes_splits_back_unambiguously(tmp_path, classes):
    import csv

    value = hand_mixture(classes=classes)
    sets = [s.tolist() for s in value.prediction_set(0.99)]
    column = value.to_frame("y", set_level=0.99)["y_set"]
    # The documented recipe: the cell is one CSV record whose delimiter is "|".
    assert [next(csv.reader([text], delimiter="|")) for text in column] == sets
    # Through the CSV file predict writes, and back.
    column.to_frame().to_csv(tmp_path / "p.csv", index=False)
    read = pd.read_csv(tmp_path / "p.csv", dtype=str, keep_default_na=False)["y_set"]
    assert [next(csv.reader([text], delimiter="|")) for text in read] == sets

    from autodeuq.ensemble.categorical import join_prediction_set, split_prediction_set

    assert [split_prediction_set(text) for text in column] == sets
    assert [join_prediction_set(s) for s in sets] == column.tolist()
    # Plain labels are written as before: joined by "|".
    assert join_prediction_set(["cat", "dog", 7]) == "cat|dog|7" and split_prediction_set("cat|dog") == ["cat", "dog"]


def test_labels_of_emoji_and_cjk_draw_without_a_warning_per_missing_glyph():
    import warnings

    from autodeuq.plots import plot_predicted_vs_observed

    classes = ["猫 cat", "犬 dog", "🦜 parrot"]
    value = hand_mixture(classes=classes)
    codes = np.array([0, 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert plot_confusion(None, value.proba, codes, classes)[:4] == b"\x89PNG"
        plot_uncertainty_correct_wrong(None, {"総エントロピー": value.total_entropy}, [True, False])
        plot_decision_2d(None, *np.meshgrid(np.linspace(0, 1, 3), np.linspace(0, 1, 3)), np.ones(9), np.ones(9),
                         np.zeros(9), np.array([[0.1, 0.2], [0.5, 0.5]]), np.array(classes[:2]), title="ペット")
        from autodeuq.ensemble.mixture import UncertaintyPrediction

        prediction = UncertaintyPrediction.from_mixture([[[0.0], [1.0]], [[2.0], [1.5]]], np.ones((2, 2, 1)),
                                                        [0.5, 0.5])
        plot_predicted_vs_observed(np.zeros((2, 1)), prediction, None, target_names=["価格 💴"])
    glyphs = [str(w.message) for w in caught if "missing from" in str(w.message)]
    assert glyphs == []


def test_to_frame_refuses_classes_that_print_alike():
    with pytest.raises(ValueError, match="distinct column names"):
        CategoricalPrediction(MEMBERS, WEIGHTS, np.array([1, "1", 2], dtype=object)).to_frame("y")


@pytest.mark.parametrize("members, weights, classes, match", [
    (MEMBERS[0], WEIGHTS, [0, 1, 2], "members must have shape"),
    (MEMBERS * 2, WEIGHTS, [0, 1, 2], "sum to 1"),
    (np.log(MEMBERS + 0.1), WEIGHTS, [0, 1, 2], "non-negative"),
    (MEMBERS, [0.5, 0.6], [0, 1, 2], "weights must be non-negative and sum to 1"),
    (MEMBERS, WEIGHTS, [0, 1], "one label per class"),
])
def test_prediction_refuses_bad_input(members, weights, classes, match):
    with pytest.raises(ValueError, match=match):
        CategoricalPrediction(members, weights, classes)


def test_float32_softmax_outputs_are_renormalized():
    members = np.array([[[0.1, 0.2, 0.7000001]]], dtype=np.float32)
    value = CategoricalPrediction(members, [1.0], [0, 1, 2])
    assert value.members.dtype == np.float64
    assert abs(value.proba.sum() - 1.0) <= 1e-15


# --- temperature -------------------------------------------------------------------------------


def overconfident_catalog(seed=0, n=2000, n_classes=4, sharpness=3.0):
    """Labels drawn from softmax(z); the models' logits are ``sharpness * z`` plus a little noise."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, n_classes))
    truth = np.exp(log_softmax(logits, axis=1))
    y = (truth.cumsum(axis=1) < rng.uniform(size=(n, 1))).sum(axis=1)
    members = sharpness * logits + rng.normal(scale=0.2, size=(3, n, n_classes))
    return members, y


def mixture_log_loss(log_proba, weights, y, temperature):
    """Reference: -mean log sum_m w_m softmax(l_m / T)[y], straight from the definition."""
    proba = np.exp(log_proba / temperature)
    proba /= proba.sum(axis=-1, keepdims=True)
    mixture = np.tensordot(weights, proba, axes=1)
    return -np.mean(np.log(mixture[np.arange(len(y)), y]))


def test_temperature_one_leaves_probabilities_unchanged():
    proba = np.random.default_rng(0).dirichlet(np.ones(5), size=(2, 7))
    assert_same_math(apply_temperature(np.log(proba), 1.0), proba)
    # logits differ from log-probabilities by a constant per row: the same result
    assert_same_math(apply_temperature(np.log(proba) + 3.0, 1.0), proba)


def test_temperature_keeps_zero_probabilities_at_zero():
    with np.errstate(divide="ignore"):
        tempered = apply_temperature(np.log([[0.5, 0.5, 0.0]]), 3.0)
    assert tempered.tolist() == [[0.5, 0.5, 0.0]]


@pytest.mark.parametrize("temperature", [0, -1.0, np.inf, np.nan, True, "2"])
def test_apply_temperature_refuses_a_bad_temperature(temperature):
    with pytest.raises(ParameterError, match="temperature must be a positive finite number"):
        apply_temperature(np.zeros((1, 2)), temperature)


def test_overconfident_ensemble_gets_a_temperature_above_one_and_a_lower_log_loss():
    members, y = overconfident_catalog()
    weights = np.array([0.5, 0.3, 0.2])
    temperature = fit_temperature(members, weights, y)
    assert 2.0 < temperature < 4.0  # about the sharpness 3 the models were given
    before = mixture_log_loss(members, weights, y, 1.0)
    after = mixture_log_loss(members, weights, y, temperature)
    assert after < before - 0.1
    assert_same_math(np.float64(pooled_log_loss([(members, weights, y)], temperature)), np.float64(after))
    # a minimum: a step either way in log T raises the loss
    for factor in (0.99, 1.01):
        assert mixture_log_loss(members, weights, y, temperature * factor) > after


def test_underconfident_model_gets_a_temperature_below_one():
    members, y = overconfident_catalog(sharpness=0.4)
    assert fit_temperature(members[:1], [1.0], y) < 1.0


def test_temperature_stays_within_its_bounds():
    # a model always wrong with certainty is best flattened as far as the bounds allow
    log_proba = np.log([[[0.99, 0.01]] * 4])
    temperature = fit_temperature(log_proba, [1.0], [1, 1, 1, 1])
    assert TEMPERATURE_BOUNDS[1] * 0.999 <= temperature <= TEMPERATURE_BOUNDS[1]


def test_temperature_refuses_an_impossible_observation():
    with np.errstate(divide="ignore"):
        log_proba = np.log([[[1.0, 0.0]], [[1.0, 0.0]]])
    with pytest.raises(ValueError, match="probability of 0"):
        fit_temperature(log_proba, [0.5, 0.5], [1])


def test_temperature_refuses_bad_codes():
    with pytest.raises(ValueError, match=r"class codes in \[0, 2\)"):
        fit_temperature(np.zeros((1, 2, 2)), [1.0], [0, 2])
    with pytest.raises(ValueError, match="shape"):
        fit_temperature(np.zeros((1, 2, 2)), [1.0], [0])


def test_cross_fitted_temperature_holds_out_each_fold_once():
    members, y = overconfident_catalog(n=600)
    seen = []

    def select_rows(rows):
        seen.append(rows)
        return select_categorical(apply_temperature(members[:, rows], 1.0), y[rows], size=2)

    temperature, chunks = cross_fitted_temperature(select_rows, members, y, folds=3, seed=1)
    assert len(chunks) == len(seen) == 3
    held = [np.setdiff1d(np.arange(600), rows) for rows in seen]
    assert np.array_equal(np.sort(np.concatenate(held)), np.arange(600))  # every row held out exactly once
    for (log_proba, weights, codes), rows_out, rows_in in zip(chunks, held, seen):
        indices, chosen_weights = select_rows(rows_in)
        assert_same_math(log_proba, members[indices][:, rows_out])
        assert_same_math(weights, chosen_weights)
        assert np.array_equal(codes, y[rows_out])
    assert temperature > 1.5
    fitted = pooled_log_loss(chunks, temperature)
    assert fitted < pooled_log_loss(chunks) - 0.1
    for factor in (0.99, 1.01):  # the pooled loss is least at the temperature returned
        assert pooled_log_loss(chunks, temperature * factor) > fitted


def test_cross_fitted_temperature_refuses_bad_folds():
    with pytest.raises(ValueError, match="2 <= folds <= 3"):
        cross_fitted_temperature(lambda rows: ([0], [1.0]), np.zeros((1, 3, 2)), [0, 1, 0], folds=4)


# --- selection on log loss ---------------------------------------------------------------------


def random_classifiers(seed, n_models=4, n_points=12, n_classes=3):
    """Noisy, over-confident classifiers of mixed quality, so that mixing them pays."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n_points)
    signal = 2.0 * np.eye(n_classes)[y]
    logits = rng.uniform(0.5, 3.0, size=(n_models, 1, 1)) * (signal + rng.normal(size=(n_models, n_points,
                                                                                      n_classes)))
    return np.exp(log_softmax(logits, axis=-1)), y


def log_loss_of(probas, y, counts):
    """Reference: the log loss of the mixture with weights counts / sum(counts), from the definition."""
    weights = counts / counts.sum()
    mixture = np.tensordot(weights, probas, axes=1)
    return -np.mean(np.log(mixture[np.arange(len(y)), y]))


def brute_force_greedy(probas, y, size, replace):
    """Caruana's rule (stop="size"), each step scoring every multiset one addition away, from scratch."""
    n_models = len(probas)
    singles = np.array([log_loss_of(probas, y, np.eye(n_models)[i]) for i in range(n_models)])
    counts = np.zeros(n_models)
    counts[np.argmin(singles)] = 1
    score, selections, order = singles.min(), 1, [int(np.argmin(singles))]
    while len(order) < size:
        candidates = np.array([log_loss_of(probas, y, counts + np.eye(n_models)[i]) for i in range(n_models)])
        allowed = np.ones(n_models, bool) if replace else counts == 0
        best = int(np.argmin(np.where(allowed, candidates, np.inf)))
        if not candidates[best] < score - IMPROVEMENT_RTOL * max(1.0, abs(score)) or selections >= 10 * size:
            best = int(np.argmin(np.where(counts == 0, candidates, np.inf)))
        counts[best] += 1
        score, selections = candidates[best], selections + 1
        if counts[best] == 1:
            order.append(best)
    return order, counts[order] / counts.sum(), score


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("selector", ["greedy", "greedy-noreplace"])
def test_greedy_on_log_loss_matches_brute_force_steps(seed, selector):
    probas, y = random_classifiers(seed)
    order, weights, score = brute_force_greedy(probas, y, 3, replace=(selector == "greedy"))
    chosen = select_categorical(probas, y, size=3, selector=selector)
    assert chosen.indices.tolist() == order
    assert_same_math(chosen.weights, weights)
    assert_same_math(np.float64(log_loss_of(probas, y, np.bincount(chosen.indices, chosen.weights, len(probas)))),
                     np.float64(score))


def test_first_step_is_the_best_single_model_by_sklearn_log_loss():
    probas, y = random_classifiers(3)
    singles = [skm.log_loss(y, p, labels=[0, 1, 2]) for p in probas]
    assert select_categorical(probas, y, size=1).indices.tolist() == [int(np.argmin(singles))]


def test_size_two_greedy_without_replacement_is_the_best_pair_holding_the_best_model():
    probas, y = random_classifiers(5, n_models=5)
    chosen = select_categorical(probas, y, size=2, selector="greedy-noreplace")
    first = chosen.indices[0]
    pairs = {j: log_loss_of(probas, y, np.eye(5)[first] + np.eye(5)[j]) for j in range(5) if j != first}
    assert chosen.indices[1] == min(pairs, key=pairs.get)


def test_a_pool_selects_among_the_models_of_lowest_log_loss():
    probas, y = random_classifiers(4, n_models=8)
    singles = np.array([skm.log_loss(y, p, labels=[0, 1, 2]) for p in probas])
    best = np.sort(np.argsort(singles, kind="stable")[:4])  # half of 8
    pooled = select_categorical(probas, y, size=3, pool=0.5)
    within = select_categorical(probas[best], y, size=3)
    assert pooled.indices.tolist() == best[within.indices].tolist()
    assert_same_math(pooled.weights, within.weights)


def test_topk_ranks_models_by_their_own_log_loss():
    probas, y = random_classifiers(2, n_models=6)
    singles = np.array([skm.log_loss(y, p, labels=[0, 1, 2]) for p in probas])
    chosen = select_categorical(probas, y, size=3, selector="topk")
    assert chosen.indices.tolist() == np.argsort(singles, kind="stable")[:3].tolist()
    assert_same_math(chosen.weights, np.full(3, 1 / 3))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("selector", ["greedy", "greedy-noreplace"])
def test_ensemble_log_loss_never_exceeds_the_best_single_model(seed, selector):
    # with stop="improvement" every step lowers the loss; stop="size" may add a worse model to fill the ensemble
    probas, y = random_classifiers(seed, n_models=6, n_points=30)
    chosen = select_categorical(probas, y, size=4, selector=selector, stop="improvement")
    best_single = min(log_loss_of(probas, y, np.eye(6)[i]) for i in range(6))
    ensemble = log_loss_of(probas, y, np.bincount(chosen.indices, chosen.weights, 6))
    assert ensemble <= best_single + 1e-12


def test_two_greedy_selections_are_the_best_multiset_of_two_holding_the_best_model():
    # every multiset of two selections from 4 models, enumerated: greedy's is the best one that
    # starts from the best single model, and with stop="improvement" it is no worse than that model
    probas, y = random_classifiers(7)
    scores = {pair: log_loss_of(probas, y, np.bincount(pair, minlength=4).astype(float))
              for pair in itertools.combinations_with_replacement(range(4), 2)}
    first = min(((i,) for i in range(4)), key=lambda one: log_loss_of(probas, y, np.eye(4)[one[0]]))[0]
    best_pair = min((pair for pair in scores if first in pair), key=scores.get)
    chosen = select_categorical(probas, y, size=4, stop="improvement", max_selections=2)
    multiset = tuple(sorted(np.repeat(chosen.indices, np.rint(chosen.weights * 2).astype(int)).tolist()))
    if len(multiset) == 2:
        assert multiset == best_pair
    else:  # no second selection improved: the best single model beats every pair holding it
        assert multiset == (first,) and scores[best_pair] >= log_loss_of(probas, y, np.eye(4)[first]) * (1 - 1e-12)


def test_unusable_classifiers_are_never_selected():
    probas, y = random_classifiers(0, n_models=6)
    probas[0, 0] = np.nan
    probas[1, 0] = probas[1, 0] * 1.01  # a row that does not sum to 1
    probas[2] = np.eye(3)[(y + 1) % 3]  # sure of a wrong class: probability 0 at every true class
    probas[3, 0, 0] += 2.0  # a probability above 1 (and a bad sum)
    chosen = select_categorical(probas, y, size=5)
    assert set(chosen.indices.tolist()) == {4, 5}
    assert "only 2 usable model(s)" in chosen.reason
    with pytest.raises(ValueError, match="no usable model"):
        select_categorical(probas[:4], y, size=2)


def test_select_categorical_refuses_bad_input():
    probas, y = random_classifiers(0)
    with pytest.raises(ValueError, match="class codes"):
        select_categorical(probas, y + 3)
    with pytest.raises(ValueError, match="probas must have shape"):
        select_categorical(probas[0], y)
    with pytest.raises(ParameterError, match="selector"):
        select_categorical(probas, y, selector="best")


def test_groups_keep_members_apart():
    probas, y = random_classifiers(4, n_models=6)
    chosen = select_categorical(probas, y, size=3, groups=["a", "a", "b", "b", "c", "c"])
    assert len({"aabbcc"[i] for i in chosen.indices}) == len(chosen.indices) == 3


def test_bagged_selection_on_log_loss():
    probas, y = random_classifiers(1, n_models=6, n_points=40)
    chosen = select_categorical_bagged(probas, y, size=3, bags=5, seed=2)
    assert 1 <= len(chosen.indices) <= 3 and abs(chosen.weights.sum() - 1.0) <= 1e-12
    again = select_categorical_bagged(probas, y, size=3, bags=5, seed=2)
    assert np.array_equal(chosen.indices, again.indices) and np.array_equal(chosen.weights, again.weights)
    # one bag of all rows is the plain selection
    whole = select_categorical_bagged(probas, y, size=3, bags=1, fraction=1.0)
    plain = select_categorical(probas, y, size=3)
    assert sorted(whole.indices.tolist()) == sorted(plain.indices.tolist())
    assert_same_math(np.sort(whole.weights), np.sort(plain.weights))


# --- metrics ---------------------------------------------------------------------------------


def random_predictions(seed, n=200, n_classes=4):
    rng = np.random.default_rng(seed)
    proba = rng.dirichlet(np.ones(n_classes), size=n)
    y = (proba.cumsum(axis=1) < rng.uniform(size=(n, 1))).sum(axis=1)  # drawn from proba: calibrated
    return proba, y


def test_metrics_by_hand():
    proba = np.array([[0.8, 0.2, 0.0], [0.4, 0.6, 0.0], [0.7, 0.3, 0.0], [0.1, 0.1, 0.8]])
    y = np.array([0, 1, 1, 2])
    scores = classification_metrics(proba, y, bins=2)
    assert scores["log_loss"] == pytest.approx(-(np.log(0.8) + np.log(0.6) + np.log(0.3) + np.log(0.8)) / 4, rel=1e-12)
    assert scores["accuracy"] == 0.75
    assert scores["balanced_accuracy"] == pytest.approx((1 + 0.5 + 1) / 3, rel=1e-12)  # class 1: one of two right
    assert scores["brier"] == pytest.approx((0.08 + 0.32 + 0.98 + 0.06) / 4, rel=1e-12)
    # every confidence (0.8, 0.6, 0.7, 0.8) falls in (0.5, 1]: accuracy 3/4 against mean confidence 0.725
    assert scores["ece"] == pytest.approx(0.025, rel=1e-12)
    assert scores["ece_bins"] == 2 and scores["n_rows"] == 4


def test_metrics_agree_with_sklearn():
    proba, y = random_predictions(0)
    scores = classification_metrics(proba, y)
    labels = list(range(4))
    predicted = proba.argmax(axis=1)
    assert scores["log_loss"] == pytest.approx(skm.log_loss(y, proba, labels=labels), rel=1e-12)
    # The multiclass Brier score: the mean over rows of the squared distance to the one-hot label
    # (scikit-learn's brier_score_loss takes more than two classes from its version 1.7 on).
    onehot = np.eye(4)[y]
    assert scores["brier"] == pytest.approx(np.mean(np.sum((proba - onehot) ** 2, axis=1)), rel=1e-12)
    if SKLEARN_MULTICLASS_BRIER:
        assert scores["brier"] == pytest.approx(skm.brier_score_loss(y, proba, labels=labels), rel=1e-12)
    assert scores["accuracy"] == pytest.approx(skm.accuracy_score(y, predicted), rel=1e-12)
    assert scores["balanced_accuracy"] == pytest.approx(skm.balanced_accuracy_score(y, predicted), rel=1e-12)
    assert all(isinstance(v, (int, float)) for v in scores.values())


def test_ece_against_a_loop_over_bins():
    proba, y = random_predictions(1, n=300)
    confidence, correct = proba.max(axis=1), proba.argmax(axis=1) == y
    expected = 0.0
    for b in range(10):
        inside = (confidence > b / 10) & (confidence <= (b + 1) / 10)
        if inside.any():
            expected += inside.mean() * abs(correct[inside].mean() - confidence[inside].mean())
    assert classification_metrics(proba, y, bins=10)["ece"] == pytest.approx(expected, rel=1e-12)
    assert classification_metrics(proba, y)["ece_bins"] == ECE_BINS == 15


def test_ece_is_small_for_calibrated_and_large_for_overconfident_predictions():
    proba, y = random_predictions(2, n=5000)
    assert classification_metrics(proba, y)["ece"] < 0.03
    sharpened = apply_temperature(np.log(proba), 0.3)
    assert classification_metrics(sharpened, y)["ece"] > 0.1


def test_log_loss_floors_an_impossible_observation():
    scores = classification_metrics([[1.0, 0.0], [0.5, 0.5]], [1, 0])
    assert scores["log_loss"] == pytest.approx((-np.log(LOG_LOSS_FLOOR) + LN2) / 2, rel=1e-12)


def test_balanced_accuracy_averages_over_the_observed_classes_only():
    proba = np.array([[0.9, 0.1, 0.0], [0.1, 0.9, 0.0], [0.2, 0.1, 0.7]])  # class 2 predicted, never observed
    scores = classification_metrics(proba, [0, 1, 1])
    assert scores["balanced_accuracy"] == pytest.approx((1 + 0.5) / 2, rel=1e-12)
    with pytest.warns(UserWarning, match="y_pred contains classes not in y_true"):
        assert scores["balanced_accuracy"] == pytest.approx(skm.balanced_accuracy_score([0, 1, 1], [0, 1, 2]))


def test_auroc_of_the_uncertainties_for_misclassified_rows():
    proba, y = random_predictions(3)
    value = CategoricalPrediction(proba[None], [1.0], [0, 1, 2, 3])
    wrong = proba.argmax(axis=1) != y
    noise = np.random.default_rng(0).normal(size=len(y))
    scores = classification_metrics(proba, y, {"entropy": value.total_entropy, "noise": noise})
    assert scores["auroc_misclassified_entropy"] == pytest.approx(skm.roc_auc_score(wrong, value.total_entropy))
    assert scores["auroc_misclassified_entropy"] > 0.6  # entropy flags wrong rows better than chance
    assert scores["auroc_misclassified_noise"] == pytest.approx(skm.roc_auc_score(wrong, noise))
    assert classification_metrics([[0.9, 0.1]], [0], {"u": [0.3]})["auroc_misclassified_u"] is None  # all right
    assert classification_metrics([[0.9, 0.1]] * 2, [1, 1], {"u": [0.3, 0.1]})["auroc_misclassified_u"] is None


@pytest.mark.parametrize("proba, y, uncertainties, match", [
    ([0.5, 0.5], [0], None, "proba must have shape"),
    ([[0.5, np.nan]], [0], None, "finite, non-negative"),
    ([[0.5, 0.5]], [2], None, "class codes"),
    ([[0.5, 0.5]], [0], {"u": [1.0, 2.0]}, "uncertainty 'u' must hold 1 finite"),
])
def test_metrics_refuse_bad_input(proba, y, uncertainties, match):
    with pytest.raises(ValueError, match=match):
        classification_metrics(proba, y, uncertainties)


# --- figures -------------------------------------------------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    data = path.read_bytes()
    assert len(data) > 1000 and data.startswith(PNG_MAGIC)


def test_plot_reliability_writes_a_png(tmp_path):
    proba, y = random_predictions(4)
    assert_png(plot_reliability(tmp_path / "reliability.png", proba, y, bins=10, data="test"))
    assert plot_reliability(None, proba, y).startswith(PNG_MAGIC)  # bytes, as autodeuq.plots gives


def test_plot_confusion_writes_a_png(tmp_path):
    proba, y = random_predictions(5)
    assert_png(plot_confusion(tmp_path / "confusion.png", proba, y, ["a", "b", True, 3]))
    with pytest.raises(ValueError, match="classes must name the 4 classes"):
        plot_confusion(None, proba, y, ["a", "b"])


def test_plot_uncertainty_correct_wrong_writes_a_png(tmp_path):
    proba, y = random_predictions(6)
    value = CategoricalPrediction(proba[None], [1.0], [0, 1, 2, 3])
    correct = proba.argmax(axis=1) == y
    uncertainties = {"total entropy": value.total_entropy, "1 - confidence": 1 - proba.max(axis=1)}
    assert_png(plot_uncertainty_correct_wrong(tmp_path / "right_wrong.png", uncertainties, correct, data="test"))
    # every row right: one group, no AUROC, still a figure
    assert_png(plot_uncertainty_correct_wrong(tmp_path / "all_right.png", uncertainties, np.ones_like(correct)))


def test_plot_decision_2d_writes_a_png(tmp_path):
    # three classes at three centres; members are softmax regressions that agree near the data
    # and extrapolate differently away from it
    rng = np.random.default_rng(0)
    centres = np.array([[-2.0, 0.0], [2.0, 0.0], [0.0, 2.5]])
    labels = np.repeat(np.array(["red", "green", "blue"]), 20)
    x_train = np.repeat(centres, 20, axis=0) + rng.normal(scale=0.7, size=(60, 2))
    xx, yy = np.meshgrid(np.linspace(-6, 6, 30), np.linspace(-5, 7, 30))
    grid = np.column_stack([xx.ravel(), yy.ravel()])
    slopes = centres[None] + rng.normal(scale=0.6, size=(4, 3, 2))
    logits = np.einsum("gd,mkd->mgk", grid, slopes) - 0.5 * np.sum(slopes**2, axis=-1)[:, None, :]
    value = CategoricalPrediction.from_log_proba(logits, np.full(4, 0.25), ["red", "green", "blue"])
    path = plot_decision_2d(tmp_path / "plane.png", xx, yy, value.total_entropy, value.aleatoric_entropy,
                            value.epistemic_mi, x_train, labels)
    assert_png(path)
    with pytest.raises(ValueError, match="one 2-D grid"):
        plot_decision_2d(None, xx, yy[:, :3], value.total_entropy, value.aleatoric_entropy, value.epistemic_mi,
                         x_train, labels)
