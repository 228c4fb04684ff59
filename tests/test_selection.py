import itertools

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from autodeuq.ensemble import select
from autodeuq.ensemble.selection import IMPROVEMENT_RTOL, _GaussianState, _MixtureState


def random_catalog(seed, n_models=6, n_points=20, n_targets=2, offset=0.0):
    """Noisy models of mixed quality, most of them over-confident, so mixing them pays."""
    rng = np.random.default_rng(seed)
    y = offset + rng.normal(size=(n_points, n_targets))
    scale = rng.uniform(0.3, 0.8, size=(n_models, 1, 1))
    means = y + scale * rng.normal(size=(n_models, n_points, n_targets))
    confidence = rng.uniform(0.2, 1.5, size=(n_models, 1, 1))
    variances = scale**2 * confidence * rng.uniform(0.7, 1.3, size=means.shape)
    return means, variances, y


# --- straightforward, non-incremental reference ---------------------------------------


def reference_score(means, variances, y, counts, objective):
    """NLL averaged over points and targets of the ensemble with these selection counts."""
    members = np.flatnonzero(counts)
    weights = counts[members] / counts.sum()
    mu, s2 = means[members], variances[members]
    if objective == "mixture":
        log_terms = np.log(weights)[:, None, None] + stats.norm.logpdf(y, mu, np.sqrt(s2))
        return -np.mean(logsumexp(log_terms, axis=0))
    w = weights[:, None, None]
    mean = np.sum(w * mu, axis=0)
    var = np.sum(w * s2, axis=0) + np.sum(w * (mu - mean) ** 2, axis=0)
    return -np.mean(stats.norm.logpdf(y, mean, np.sqrt(var)))


def reference_usable(means, variances, y):
    ok = []
    for i in range(len(means)):
        if not (
            np.all(np.isfinite(means[i]))
            and np.all(np.isfinite(variances[i]))
            and np.all(variances[i] > 0)
        ):
            continue
        single = reference_score(means, variances, y, unit(len(means), i), "mixture")
        if np.isfinite(single):
            ok.append(i)
    return ok


def unit(n, i):
    counts = np.zeros(n, dtype=int)
    counts[i] = 1
    return counts


def reference_greedy(means, variances, y, size, objective, replace, max_selections=None,
                     stop="size", groups=None):
    n = len(means)
    max_selections = 10 * size if max_selections is None else max_selections
    usable = reference_usable(means, variances, y)
    singles = [reference_score(means, variances, y, unit(n, i), objective) for i in usable]
    counts = np.zeros(n, dtype=int)
    first = usable[int(np.argmin(singles))]
    counts[first] = 1
    order = [first]
    score = reference_score(means, variances, y, counts, objective)

    def joinable(i):
        return counts[i] == 0 and (groups is None or all(groups[i] != groups[j] for j in order))

    def best_of(pool):
        scores = [reference_score(means, variances, y, counts + unit(n, i), objective) for i in pool]
        k = int(np.argmin(scores))  # ties: the first, i.e. the lower index
        return pool[k], scores[k]

    while len(order) < size:
        pool = [i for i in usable if joinable(i) or (replace and counts[i])]
        if not pool:
            break
        best, best_score = best_of(pool)
        improves = best_score < score - IMPROVEMENT_RTOL * max(1.0, abs(score))
        if not improves or counts.sum() >= max_selections:
            new = [i for i in usable if joinable(i)]
            if stop == "improvement" or not new:
                break
            best, best_score = best_of(new)
        counts[best] += 1
        score = best_score
        if best not in order:
            order.append(best)
    return np.array(order), counts[order] / counts.sum()


# --- greedy against the reference ------------------------------------------------------


@pytest.mark.parametrize("stop", ["size", "improvement"])
@pytest.mark.parametrize("objective", ["mixture", "gaussian"])
@pytest.mark.parametrize("method", ["greedy", "greedy-noreplace"])
def test_greedy_matches_reference(method, objective, stop):
    repeated = False
    for seed in range(12):
        means, variances, y = random_catalog(seed)
        for size in (1, 2, 3, 5):
            indices, weights = select(means, variances, y, size, method, objective, stop=stop)
            ref_indices, ref_weights = reference_greedy(
                means, variances, y, size, objective, replace=(method == "greedy"), stop=stop
            )
            np.testing.assert_array_equal(indices, ref_indices)
            np.testing.assert_allclose(weights, ref_weights)
            repeated |= len(set(np.round(weights, 12))) > 1
    # make sure the catalogs exercise repeated selections
    assert repeated == (method == "greedy")


@pytest.mark.parametrize("stop", ["size", "improvement"])
@pytest.mark.parametrize("objective", ["mixture", "gaussian"])
def test_greedy_matches_reference_on_a_larger_catalog(objective, stop):
    means, variances, y = random_catalog(100, n_models=40, n_points=30, n_targets=1)
    for max_selections in (None, 3):
        indices, weights = select(
            means, variances, y, 5, "greedy", objective, max_selections=max_selections, stop=stop
        )
        ref = reference_greedy(means, variances, y, 5, objective, True, max_selections, stop=stop)
        np.testing.assert_array_equal(indices, ref[0])
        np.testing.assert_allclose(weights, ref[1])


def test_gaussian_objective_is_accurate_for_large_means():
    # E[mu^2] - E[mu]^2 would lose all precision at this offset without centring
    means, variances, y = random_catalog(3, offset=1e7)
    variances *= 1e-2
    for seed_size in (2, 4):
        indices, weights = select(means, variances, y, seed_size, "greedy", "gaussian")
        ref = reference_greedy(means, variances, y, seed_size, "gaussian", True)
        np.testing.assert_array_equal(indices, ref[0])
        np.testing.assert_allclose(weights, ref[1])


def test_greedy_result_matches_brute_force_over_count_vectors():
    # Size 2, two selections: the answer is the best single model plus the best addition,
    # found by enumerating every count vector with total 2 that contains the best model.
    for seed in range(5):
        means, variances, y = random_catalog(seed, n_models=6)
        for objective in ("mixture", "gaussian"):
            singles = [
                reference_score(means, variances, y, unit(6, i), objective) for i in range(6)
            ]
            first = int(np.argmin(singles))
            candidates = [np.bincount([first, i], minlength=6) for i in range(6)]
            scores = [reference_score(means, variances, y, c, objective) for c in candidates]
            best = candidates[int(np.argmin(scores))]
            indices, weights = select(
                means, variances, y, 2, "greedy", objective, max_selections=2, stop="improvement"
            )
            counts = np.zeros(6)
            if min(scores) < singles[first]:
                counts[indices] = weights * 2
                np.testing.assert_allclose(counts, best)
            else:
                np.testing.assert_array_equal(indices, [first])


@pytest.mark.parametrize("objective", ["mixture", "gaussian"])
def test_state_candidate_scores_equal_direct_scores(objective):
    means, variances, y = random_catalog(7, n_models=6)
    logpdf = stats.norm.logpdf(y, means, np.sqrt(variances))
    if objective == "mixture":
        state = _MixtureState(logpdf)
    else:
        state = _GaussianState(means - y, (means - y) ** 2, variances)
    counts = np.zeros(6, dtype=int)
    for member in (3, 1, 3, 5):
        state.add(member)
        counts[member] += 1
        direct = [
            reference_score(means, variances, y, counts + unit(6, i), objective) for i in range(6)
        ]
        np.testing.assert_allclose(state.candidate_scores(), direct, rtol=1e-12)


# --- top-k and without replacement -----------------------------------------------------


@pytest.mark.parametrize("objective", ["mixture", "gaussian"])
def test_topk_is_the_best_individual_models(objective):
    for seed in range(5):
        means, variances, y = random_catalog(seed)
        singles = [reference_score(means, variances, y, unit(6, i), "mixture") for i in range(6)]
        for size in (1, 3, 6, 10):
            indices, weights = select(means, variances, y, size, "topk", objective)
            np.testing.assert_array_equal(indices, np.argsort(singles, kind="stable")[:size])
            np.testing.assert_allclose(weights, 1.0 / min(size, 6))


def test_noreplace_members_are_distinct_with_uniform_weights():
    means, variances, y = random_catalog(11, n_models=30)
    indices, weights = select(means, variances, y, 8, "greedy-noreplace")
    assert len(set(indices.tolist())) == len(indices) <= 8
    np.testing.assert_allclose(weights, 1.0 / len(indices))
    # brute force: the first two members are the best single model, then the best pair
    singles = [reference_score(means, variances, y, unit(30, i), "mixture") for i in range(30)]
    pairs = {
        (a, b): reference_score(means, variances, y, unit(30, a) + unit(30, b), "mixture")
        for a, b in itertools.combinations(range(30), 2)
    }
    first = int(np.argmin(singles))
    best_pair = min((p for p in pairs if first in p), key=pairs.get)
    assert len(indices) > 1
    assert set(indices[:2].tolist()) == set(best_pair)


# --- robustness ------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["greedy", "greedy-noreplace", "topk"])
@pytest.mark.parametrize("objective", ["mixture", "gaussian"])
def test_non_finite_models_are_never_selected(method, objective):
    means, variances, y = random_catalog(4, n_models=10)
    # models 0-4 would be perfect if they were valid
    means[:5] = y
    variances[:5] = 0.01
    means[0, 3, 1] = np.nan
    means[1, 0, 0] = np.inf
    variances[2, 5, 0] = np.inf
    variances[3, 2, 1] = 0.0
    variances[4, 7, 0] = -1.0
    indices, weights = select(means, variances, y, 5, method, objective)
    assert not set(indices.tolist()) & {0, 1, 2, 3, 4}
    assert np.all(np.isfinite(weights)) and weights.sum() == pytest.approx(1.0)


def test_fewer_usable_models_than_size():
    means, variances, y = random_catalog(5, n_models=4)
    variances[1] = np.nan
    indices, weights = select(means, variances, y, 10, "topk")
    np.testing.assert_array_equal(np.sort(indices), [0, 2, 3])
    for method in ("greedy", "greedy-noreplace"):
        indices, weights = select(means, variances, y, 10, method)
        assert 1 <= len(indices) <= 3 and 1 not in indices
        assert weights.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("method", ["greedy", "greedy-noreplace", "topk"])
@pytest.mark.parametrize("objective", ["mixture", "gaussian"])
def test_ties_go_to_the_lower_index(method, objective):
    means, variances, y = random_catalog(2, n_models=6)
    # models 1 and 4 are identical and the best; so are 2 and 5
    means[1] = means[4] = y + 0.01
    variances[1] = variances[4] = 0.5
    means[5], variances[5] = means[2], variances[2]
    indices, _ = select(means, variances, y, 6, method, objective, stop="improvement")
    order = indices.tolist()
    assert order[0] == 1
    if 2 in order and 5 in order:
        assert order.index(2) < order.index(5)
    if method == "greedy":
        # adding 4 is always the same as adding 1 once more, and 1 wins the tie
        assert 4 not in order
    if method == "topk":
        assert order[:2] == [1, 4]


def collapsing_catalog():
    """One sharp, well-calibrated model and four poor ones: no addition improves the mixture."""
    rng = np.random.default_rng(11)
    y = rng.normal(size=(40, 1))
    means = np.stack([y + 0.05 * rng.normal(size=y.shape)] + [y + rng.normal(2.0, 1.0, size=y.shape) for _ in range(4)])
    variances = np.full(means.shape, 0.05**2)
    variances[1:] = 0.3
    return means, variances, y


@pytest.mark.parametrize("method", ["greedy", "greedy-noreplace"])
def test_stop_at_size_never_collapses_and_improvement_says_why(method):
    means, variances, y = collapsing_catalog()
    early = select(means, variances, y, 3, method, stop="improvement")
    assert early.indices.tolist() == [0]
    assert "stop='improvement'" in early.reason
    full = select(means, variances, y, 3, method)  # default: stop="size"
    assert len(full.indices) == 3 and full.reason is None
    assert full.indices[0] == 0
    # the forced members are the best remaining additions, in order
    ref = reference_greedy(means, variances, y, 3, "mixture", replace=(method == "greedy"), stop="size")
    np.testing.assert_array_equal(full.indices, ref[0])
    np.testing.assert_allclose(full.weights, ref[1])


def test_fewer_usable_models_than_size_is_explained():
    means, variances, y = random_catalog(4, n_models=4)
    means[2] = np.nan
    chosen = select(means, variances, y, 5)
    assert len(chosen.indices) == 3
    assert "only 3 usable model(s) (1 with non-finite" in chosen.reason


@pytest.mark.parametrize("stop", ["size", "improvement"])
@pytest.mark.parametrize("method", ["greedy", "greedy-noreplace"])
def test_groups_give_one_member_per_group_matching_reference(method, stop):
    for seed in range(6):
        means, variances, y = random_catalog(seed, n_models=8)
        groups = np.array(["a", "b", "a", "c", "b", "a", "d", "c"])
        chosen = select(means, variances, y, 3, method, groups=groups, stop=stop)
        labels = groups[chosen.indices]
        assert len(set(labels)) == len(labels)
        ref = reference_greedy(means, variances, y, 3, "mixture", replace=(method == "greedy"), stop=stop,
                               groups=groups)
        np.testing.assert_array_equal(chosen.indices, ref[0])
        np.testing.assert_allclose(chosen.weights, ref[1])
        if stop == "size":
            assert len(chosen.indices) == 3


def test_groups_limit_the_size_and_say_so():
    means, variances, y = random_catalog(3, n_models=6)
    chosen = select(means, variances, y, 5, groups=[0, 1, 0, 1, 0, 1])
    assert len(chosen.indices) == 2
    assert "only 2 group(s)" in chosen.reason


def test_topk_with_groups_takes_the_best_of_each_group():
    means, variances, y = random_catalog(5, n_models=6)
    single = [reference_score(means, variances, y, unit(6, i), "mixture") for i in range(6)]
    groups = np.array([0, 0, 1, 1, 2, 2])
    chosen = select(means, variances, y, 2, "topk", groups=groups)
    best_per_group = {g: min((i for i in range(6) if groups[i] == g), key=lambda i: single[i]) for g in range(3)}
    expected = sorted(best_per_group.values(), key=lambda i: single[i])[:2]
    assert chosen.indices.tolist() == expected


def test_effective_size():
    means, variances, y = random_catalog(1)
    chosen = select(means, variances, y, 3, "greedy-noreplace")
    assert chosen.effective_size == pytest.approx(3.0)
    from autodeuq.ensemble.selection import Selection

    assert Selection(np.array([0, 1]), np.array([0.9, 0.1]), 2).effective_size == pytest.approx(1 / 0.82)


def test_readding_the_only_member_is_no_improvement():
    means, variances, y = random_catalog(8, n_models=1)
    indices, weights = select(means, variances, y, 5)
    np.testing.assert_array_equal(indices, [0])
    np.testing.assert_array_equal(weights, [1.0])


def test_return_types():
    means, variances, y = random_catalog(9)
    for method in ("greedy", "greedy-noreplace", "topk"):
        indices, weights = select(means, variances, y, 3, method)
        assert indices.ndim == 1 and np.issubdtype(indices.dtype, np.integer)
        assert weights.shape == indices.shape and weights.dtype == float
        assert weights.sum() == pytest.approx(1.0)
        assert len(set(indices.tolist())) == len(indices)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"size": 0}, "size"),
        ({"size": -2}, "size"),
        ({"size": 2.5}, "size"),
        ({"selector": "best"}, "selector"),
        ({"score": "crps"}, "score"),
        ({"max_selections": 0}, "max_selections"),
        ({"max_selections": 1.5}, "max_selections"),
        ({"stop": "never"}, "stop"),
        ({"groups": [0, 1]}, "groups"),
        ({"pool": 0}, "pool"),
        ({"pool": 1.5}, "pool"),
        ({"pool": float("nan")}, "pool"),
        ({"pool": True}, "pool"),
        ({"pool": None}, "pool"),
    ],
)
def test_invalid_arguments(kwargs, match):
    means, variances, y = random_catalog(0)
    with pytest.raises(ValueError, match=match):
        select(means, variances, y, **kwargs)


def outlier_catalog(n_good=8, n_points=200):
    """Good models (std 0.2) of a target plus one wide model (the mean, std 2); two validation
    targets lie 3 above where the good models put them, 15 of their stds."""
    rng = np.random.default_rng(3)
    clean = rng.normal(size=(n_points, 1))
    y = clean.copy()
    y[:2] += 3.0
    means = np.concatenate([clean + rng.normal(scale=0.1, size=(n_good, n_points, 1)),
                            np.zeros((1, n_points, 1))])
    variances = np.concatenate([np.full((n_good, n_points, 1), 0.04), np.full((1, n_points, 1), 4.0)])
    return means, variances, y


def test_the_whole_catalog_lets_a_wide_model_in_for_two_outliers_and_a_pool_keeps_it_out():
    means, variances, y = outlier_catalog()
    wide = len(means) - 1
    single = [reference_score(means, variances, y, unit(len(means), i), "mixture") for i in range(len(means))]
    assert int(np.argmax(single)) == wide  # the worst model on its own
    whole = select(means, variances, y, size=3)
    assert wide in whole.indices
    pooled = select(means, variances, y, size=3, pool=0.5)
    assert wide not in pooled.indices and len(pooled.indices) == 3
    best_half = set(np.argsort(single, kind="stable")[:5].tolist())
    assert set(pooled.indices.tolist()) <= best_half
    # the pool only removes candidates: selection within it is greedy on the pool's models
    kept = np.sort(list(best_half))
    within = select(means[kept], variances[kept], y, size=3)
    np.testing.assert_array_equal(pooled.indices, kept[within.indices])
    np.testing.assert_allclose(pooled.weights, within.weights)


@pytest.mark.parametrize("method", ["greedy", "greedy-noreplace", "topk"])
def test_a_pool_holds_at_least_size_models_and_pool_one_is_the_whole_catalog(method):
    means, variances, y = random_catalog(4, n_models=10)
    whole = select(means, variances, y, size=4, selector=method)
    same = select(means, variances, y, size=4, selector=method, pool=1.0)
    np.testing.assert_array_equal(whole.indices, same.indices)
    np.testing.assert_allclose(whole.weights, same.weights)
    tiny = select(means, variances, y, size=4, selector=method, pool=0.01)  # ceil(0.1) = 1 < size: 4 kept
    singles = [reference_score(means, variances, y, unit(10, i), "mixture") for i in range(10)]
    assert set(tiny.indices.tolist()) == set(np.argsort(singles)[:4].tolist()) and tiny.reason is None


def test_former_keyword_names_are_gone():
    means, variances, y = random_catalog(0)
    with pytest.raises(TypeError, match="objective"):
        select(means, variances, y, 3, objective="gaussian")
    with pytest.raises(TypeError, match="method"):
        select(means, variances, y, 3, method="topk")


def test_invalid_shapes_and_catalogs():
    means, variances, y = random_catalog(0)
    with pytest.raises(ValueError, match="variances"):
        select(means, variances[:, :5], y)
    with pytest.raises(ValueError, match="y"):
        select(means, variances, y[:5])
    with pytest.raises(ValueError, match="means"):
        select(means[..., 0], variances[..., 0], y[:, 0])
    with pytest.raises(ValueError, match="y"):
        select(means, variances, np.where(y > 1, np.nan, y))
    with pytest.raises(ValueError, match="no usable model"):
        select(means, np.zeros_like(variances), y)


def test_bagged_selection_sums_the_weights_of_selections_on_row_subsets():
    from autodeuq.ensemble.selection import select_bagged

    means, variances, y = random_catalog(6, n_models=10, n_points=40)
    chosen = select_bagged(means, variances, y, 3, bags=6, fraction=0.5, seed=1, selector="greedy")
    # the same computation by hand
    rng = np.random.default_rng(1)
    totals = np.zeros(10)
    for _ in range(6):
        rows = np.sort(rng.choice(40, size=20, replace=False))
        idx, w = select(means[:, rows], variances[:, rows], y[rows], 3, "greedy")
        totals[idx] += w
    best = np.argsort(-totals, kind="stable")[:3]
    np.testing.assert_array_equal(chosen.indices, best)
    np.testing.assert_allclose(chosen.weights, totals[best] / totals[best].sum())
    assert chosen.reason is None and len(chosen.indices) == 3
    # one bag over all rows is plain selection
    whole = select_bagged(means, variances, y, 3, bags=1, fraction=1.0, selector="greedy-noreplace")
    plain = select(means, variances, y, 3, "greedy-noreplace")
    np.testing.assert_array_equal(np.sort(whole.indices), np.sort(plain.indices))
    np.testing.assert_allclose(np.sort(whole.weights), np.sort(plain.weights))
    with pytest.raises(ValueError, match="fraction"):
        select_bagged(means, variances, y, 3, fraction=0)


# --- mixture weights by EM, bounded below --------------------------------------------------


def simplex_grid(n_members, step, floor):
    """Every weight vector on a grid of ``step`` with each weight >= floor (brute force)."""
    ticks = np.arange(0, 1 + step / 2, step)
    for head in itertools.product(ticks, repeat=n_members - 1):
        w = np.array(head + (1 - sum(head),))
        if np.all(w >= floor - 1e-12):
            yield w


@pytest.mark.parametrize("floor", [0.0, 0.05, 0.2, 0.3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_weights_maximizes_the_mixture_likelihood_over_the_bounded_simplex(seed, floor):
    from autodeuq.ensemble.selection import fit_weights

    means, variances, y = random_catalog(seed, n_models=3, n_points=30)
    weights = fit_weights(means, variances, y, floor)
    assert weights.shape == (3,) and np.isclose(weights.sum(), 1.0) and np.all(weights >= floor - 1e-12)
    best = min(simplex_grid(3, 0.01, floor), key=lambda w: reference_score(means, variances, y, w, "mixture"))
    fitted = reference_score(means, variances, y, weights, "mixture")
    assert fitted <= reference_score(means, variances, y, best, "mixture") + 1e-9
    np.testing.assert_allclose(weights, best, atol=0.011)  # the grid's optimum is within a step


def test_fit_weights_keeps_a_useless_member_at_the_floor():
    from autodeuq.ensemble.selection import fit_weights

    rng = np.random.default_rng(3)
    y = rng.normal(size=(200, 1))
    # two members with independent errors (mixing them pays) and one far off everywhere
    means = np.stack([y + 0.1 * rng.normal(size=y.shape), y + 0.1 * rng.normal(size=y.shape), y + 5.0])
    variances = np.full(means.shape, 0.01)
    free = fit_weights(means, variances, y, 0.0)
    assert free[2] < 1e-6
    bounded = fit_weights(means, variances, y, 0.1)
    assert bounded[2] == pytest.approx(0.1) and np.all(bounded[:2] > 0.1)
    # the free members keep their relative shares of a best fit that has the bound's mass removed
    np.testing.assert_allclose(bounded[:2] / bounded[:2].sum(), free[:2] / free[:2].sum(), rtol=1e-3)
    uniform = fit_weights(means, variances, y, 1 / 3)
    np.testing.assert_allclose(uniform, 1 / 3)


def test_fit_weights_refuses_a_bound_that_no_weights_meet():
    from autodeuq.ensemble.selection import fit_weights

    means, variances, y = random_catalog(0, n_models=3)
    with pytest.raises(ValueError, match="min_weight"):
        fit_weights(means, variances, y, 0.4)
    with pytest.raises(ValueError, match="min_weight"):
        fit_weights(means, variances, y, -0.1)
