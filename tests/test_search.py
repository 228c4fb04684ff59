"""Searchers: ask/tell contract, aging evolution, Bayesian optimization, surrogates, resume."""
from __future__ import annotations

import math
import subprocess
import sys
import warnings

import numpy as np
import pytest

from autodeuq.search import SEARCHERS, create
from autodeuq.search.acquisition import ei, kappa_schedule, lcb, pi
from autodeuq.search.age import AgingEvolution, mutate_hp
from autodeuq.search.base import config_key
from autodeuq.search.bo import BayesianOptimization, VectorBO, scale_costs
from autodeuq.search.surrogate import (
    SURROGATES,
    ExtraTreesSurrogate,
    GaussianProcessSurrogate,
    RandomForestSurrogate,
    candidate_predictions,
    make_surrogate,
)
from autodeuq.space import load_space

FAST_BO = {"n_candidates": 1000}


@pytest.fixture(scope="module")
def space():
    return load_space("toy")


def planted_objective(space, seed=123):
    """Squared distance to a planted configuration, in the [0, 1] encoding."""
    target = space.encode(space.sample(np.random.default_rng(seed)))[0]
    return lambda config: float(((space.encode(config)[0] - target) ** 2).sum())


def n_changes(parent, child):
    arch = sum(a != b for a, b in zip(parent["arch"], child["arch"]))
    hp = sum(parent["hp"][k] != child["hp"][k] for k in parent["hp"])
    return arch + hp


def run(searcher, objective, budget, batch=4):
    history = []
    while len(history) < budget:
        configs = searcher.ask(batch)
        results = [(c, objective(c)) for c in configs]
        searcher.tell(results)
        history.extend(results)
    return history


# ------------------------------------------------------------------ factory
def test_factory_names_and_unknown_name(space):
    assert set(SEARCHERS) == {"random", "age", "bo", "agebo"}
    for name in SEARCHERS:
        searcher = create(name, space, seed=0)
        assert searcher.name == name
    assert create("AgEBO", "toy", seed=0).space == space
    with pytest.raises(ValueError, match="agebo"):
        create("hyperband", space)


def test_ablations_by_name_with_default_or_given_fixed_halves(space):
    from autodeuq.search import DEFAULT_FIXED_HP, default_fixed_arch
    from autodeuq.space import SpaceError

    arch = default_fixed_arch(space)
    assert [space.decode_dense(a) for a in arch if a] == [space.decode_dense(arch[0])] * space.num_cells
    assert space.decode_dense(arch[0]).units == 64 and space.decode_dense(arch[0]).activation == "tanh"
    assert sum(arch) == arch[0] * space.num_cells  # no skip connection
    bo = create("bo-fixed-arch", space, seed=0, **FAST_BO)
    assert bo.fixed_arch == arch and all(c["arch"] == arch for c in bo.ask(3))
    age = create("age-fixed-hp", space, seed=0, fixed_hp={"batch_size": 8})
    assert age.fixed_hp == {**DEFAULT_FIXED_HP, "batch_size": 8}
    assert all(c["hp"] == age.fixed_hp for c in age.ask(3))
    with pytest.raises(SpaceError, match="batch_size"):
        create("age-fixed-hp", space, fixed_hp={"batch_size": 8.5})
    with pytest.raises(SpaceError, match="'lr'"):
        create("age-fixed-hp", space, fixed_hp={"lr": 0.1})
    with pytest.raises(SpaceError, match="integers"):
        create("bo-fixed-arch", space, fixed_arch=[True] * len(space.arch_dims))


def test_search_package_does_not_import_tensorflow():
    code = "import sys, autodeuq.search; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", sorted(SEARCHERS))
def test_searchers_return_valid_configs(space, name):
    options = FAST_BO if name in ("bo", "agebo") else {}
    if name in ("age", "agebo"):
        options = {**options, "population_size": 6, "sample_size": 3}
    searcher = create(name, space, seed=1, **options)
    objective = planted_objective(space)
    history = run(searcher, objective, budget=16)  # past n_initial and a full population
    for config in [c for c, _ in history] + searcher.ask(5):
        space.validate(config)


def test_ask_rejects_bad_n(space):
    with pytest.raises(ValueError):
        create("random", space).ask(0)


def test_pending_tracks_asked_not_told(space):
    searcher = create("random", space, seed=0)
    configs = searcher.ask(3)
    assert sorted(map(config_key, searcher.pending)) == sorted(map(config_key, configs))
    searcher.tell([(configs[1], 1.0)])
    assert sorted(map(config_key, searcher.pending)) == sorted(map(config_key, [configs[0], configs[2]]))
    told_back = {"arch": np.array(configs[0]["arch"]), "hp": {**configs[0]["hp"]}}
    told_back["hp"]["batch_size"] = np.int64(told_back["hp"]["batch_size"])
    searcher.tell([(told_back, None)])
    assert searcher.pending == [configs[2]]


def test_same_seed_same_asks(space):
    objective = planted_objective(space)
    for name in SEARCHERS:
        options = FAST_BO if name in ("bo", "agebo") else {}
        a = run(create(name, space, seed=7, **options), objective, 16)
        b = run(create(name, space, seed=7, **options), objective, 16)
        assert a == b, name


# ------------------------------------------------------------ aging evolution
def planted_population(space, searcher, size, best_index=2):
    rng = np.random.default_rng(5)
    configs = [space.sample(rng) for _ in range(size)]
    costs = [10.0 + i for i in range(size)]
    costs[best_index] = 1.0
    searcher.tell(list(zip(configs, costs)))
    return configs[best_index]


def test_age_child_is_the_best_member_with_one_variable_changed(space):
    age = AgingEvolution(space, seed=0, population_size=6, sample_size=6)
    parent = planted_population(space, age, 6)
    children = age.ask(200)
    assert all(n_changes(parent, child) == 1 for child in children)
    arch_mutations = sum(c["arch"] != parent["arch"] for c in children)
    n_arch, n_hp = len(space.arch_dims), len(space.hp_names)
    # one variable chosen uniformly among all arch + hp variables
    assert abs(arch_mutations / 200 - n_arch / (n_arch + n_hp)) < 0.12
    assert 0 < arch_mutations < 200


def test_mutate_hp_changes_exactly_that_hyperparameter(space):
    rng = np.random.default_rng(0)
    hp = space.sample_hp(rng)
    for index, name in enumerate(space.hp_names):
        for _ in range(20):
            child = mutate_hp(space, hp, index, rng)
            assert child[name] != hp[name]
            assert {k: v for k, v in child.items() if k != name} == {k: v for k, v in hp.items() if k != name}
            space.validate(space.join(space.sample_arch(rng), child))


def test_age_failures_never_enter_the_population(space):
    for searcher in (AgingEvolution(space, seed=0, population_size=10),
                     create("agebo", space, seed=0, population_size=10, **FAST_BO)):
        configs = searcher.ask(6)
        searcher.tell([(configs[0], None), (configs[1], math.nan), (configs[2], math.inf),
                       (configs[3], -math.inf), (configs[4], 2.0), (configs[5], 3)])
        assert [y for _, y in searcher.population] == [2.0, 3.0]
        assert [c for c, _ in searcher.population] == configs[4:]


def test_age_population_is_fifo_of_last_results(space):
    age = AgingEvolution(space, seed=0, population_size=4, sample_size=2)
    configs = age.ask(4) + age.ask(3)
    age.tell([(c, float(i)) for i, c in enumerate(configs)])
    assert [y for _, y in age.population] == [3.0, 4.0, 5.0, 6.0]


def test_age_fixed_hp_evolves_architecture_only(space):
    fixed = {"learning_rate": 0.001, "batch_size": 8, "optimizer": "adam",
             "patience_reduce_lr": 15, "patience_early_stopping": 25}
    age = AgingEvolution(space, seed=0, population_size=5, sample_size=5, fixed_hp=fixed)
    configs = age.ask(5)
    assert all(c["hp"] == fixed for c in configs)
    age.tell([(c, float(i)) for i, c in enumerate(configs)])
    children = age.ask(30)
    assert all(c["hp"] == fixed for c in children)
    assert all(sum(a != b for a, b in zip(configs[0]["arch"], c["arch"])) == 1 for c in children)
    with pytest.raises(ValueError):
        AgingEvolution(space, fixed_hp={**fixed, "batch_size": 10_000})


# ---------------------------------------------------------- acquisition
def test_acquisition_functions():
    mu, sigma = np.array([0.0, 1.0, 0.5]), np.array([1.0, 0.0, 0.0])
    np.testing.assert_allclose(lcb(mu, sigma, 2.0), [-2.0, 1.0, 0.5])
    # sigma = 0: EI is the plain improvement, PI is 0 or 1
    np.testing.assert_allclose(ei(mu, sigma, best=0.8)[1:], [0.0, -0.3])
    np.testing.assert_allclose(pi(mu, sigma, best=0.8)[1:], [0.0, -1.0])
    # sigma = 1, mu = best: EI = phi(0), PI = 1/2
    np.testing.assert_allclose(ei([0.0], [1.0], best=0.0), [-1 / math.sqrt(2 * math.pi)])
    np.testing.assert_allclose(pi([0.0], [1.0], best=0.0), [-0.5])
    assert ei([0.0], [1.0], best=0.0, xi=0.5)[0] > ei([0.0], [1.0], best=0.0)[0]


def test_kappa_schedule():
    assert kappa_schedule(1.96, 3, n_initial=10) == 1.96
    assert kappa_schedule(1.96, 10, n_initial=10) == pytest.approx(1.96)
    assert kappa_schedule(1.96, 12, n_initial=10) == pytest.approx(1.96 * math.exp(-0.2))
    assert kappa_schedule(1.96, 10 + 25, n_initial=10) == pytest.approx(1.96)
    assert kappa_schedule(1.96, 40, n_initial=10, decay=None) == 1.96
    np.testing.assert_allclose(kappa_schedule(1.0, np.arange(10, 13), 10, decay=0.5), np.exp(-0.5 * np.arange(3)))


# -------------------------------------------------------------- surrogates
def brute_force_tree_moments(forest, X, y, Q):
    """Per tree: mean and variance of the training targets in each query's leaf."""
    means, variances = [], []
    for tree in forest.estimators_:
        train_leaves = tree.apply(X.astype(np.float32))
        query_leaves = tree.apply(Q.astype(np.float32))
        means.append([y[train_leaves == leaf].mean() for leaf in query_leaves])
        variances.append([y[train_leaves == leaf].var() for leaf in query_leaves])
    return np.array(means), np.array(variances)


def test_extra_trees_std_is_law_of_total_variance():
    rng = np.random.default_rng(0)
    X = rng.random((40, 3))
    y = np.sin(5 * X[:, 0]) + rng.normal(0, 0.1, 40)
    Q = rng.random((25, 3))
    model = ExtraTreesSurrogate(n_estimators=7, random_state=1).fit(X, y)
    mu, sigma = model.predict(Q, return_std=True)
    means, variances = brute_force_tree_moments(model.forest_, X, y, Q)
    np.testing.assert_allclose(mu, means.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(sigma**2, variances.mean(axis=0) + means.var(axis=0), atol=1e-12)
    np.testing.assert_allclose(model.predict(Q), model.forest_.predict(Q), atol=1e-12)


def test_tree_fantasy_matches_brute_force_with_structure_kept():
    rng = np.random.default_rng(1)
    X, Q = rng.random((40, 2)), rng.random((30, 2))
    y = X.sum(axis=1)
    model = ExtraTreesSurrogate(n_estimators=5, random_state=0).fit(X, y)
    preds = candidate_predictions(model, X, y, Q)
    preds.add(3, 5.0)
    preds.add(7, -1.0)
    X_aug, y_aug = np.vstack([X, Q[3], Q[7]]), np.append(y, [5.0, -1.0])
    means, variances = brute_force_tree_moments(model.forest_, X_aug, y_aug, Q)
    np.testing.assert_allclose(preds.mu, means.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(preds.sigma**2, variances.mean(axis=0) + means.var(axis=0), atol=1e-12)


@pytest.mark.parametrize("name", ["et", "rf", "gp"])
def test_named_surrogates_fit_and_predict(name):
    rng = np.random.default_rng(0)
    X = rng.random((30, 2))
    y = X[:, 0] ** 2
    model = make_surrogate(name, seed=0).fit(X, y)
    mu, sigma = model.predict(X[:5], return_std=True)
    assert mu.shape == sigma.shape == (5,) and np.all(sigma >= 0)
    assert np.abs(mu - y[:5]).max() < 0.3


@pytest.mark.parametrize("surrogate", [
    ExtraTreesSurrogate(n_estimators=5), RandomForestSurrogate(n_estimators=5),
], ids=["et", "rf"])  # the GP passes too, but its checks take about 40 s
def test_surrogates_are_scikit_learn_estimators(surrogate):
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_estimator(surrogate)


def test_make_surrogate_names_objects_and_registry():
    with pytest.raises(ValueError, match="et"):
        make_surrogate("nope")
    with pytest.raises(TypeError):
        make_surrogate(object())
    mine = RandomForestSurrogate(n_estimators=3)
    made = make_surrogate(mine)
    assert isinstance(made, RandomForestSurrogate) and made is not mine and made.n_estimators == 3
    assert isinstance(make_surrogate(GaussianProcessSurrogate()), GaussianProcessSurrogate)

    calls = []

    class Constant:  # not a scikit-learn estimator: refitted per fantasy point under the liar
        def fit(self, X, y):
            calls.append(len(y))
            self.mean = float(np.mean(y))
            return self

        def predict(self, X, return_std=False):
            mu = np.full(len(X), self.mean)
            return (mu, np.ones(len(X))) if return_std else mu

    SURROGATES["constant"] = lambda seed: Constant()
    try:
        bo = VectorBO(lambda rng, n: rng.random((n, 2)), surrogate="constant", n_initial=2, n_candidates=50)
        bo.observe(np.random.default_rng(0).random((3, 2)), [1.0, 2.0, 3.0])
        points = bo.suggest(3, np.random.default_rng(0))
        assert points.shape == (3, 2) and len({tuple(p) for p in points}) == 3
        assert calls == [3, 4, 5]
    finally:
        del SURROGATES["constant"]


# ----------------------------------------------------- Bayesian optimization
def test_bo_failures_count_as_the_worst_cost(space):
    bo = BayesianOptimization(space, seed=0)
    configs = bo.ask(5)
    bo.tell(zip(configs, [1.0, None, 4.0, math.nan, 2.0]))
    X, y, _ = bo.bo.training_set()
    assert len(X) == 5
    assert y[1] == y[3] == y[2] == y.max()
    np.testing.assert_allclose(y, scale_costs([1.0, 4.0, 4.0, 4.0, 2.0], [1.0, 4.0]))
    # AgEBO's hyperparameter BO does the same, while its population ignores failures
    agebo = create("agebo", space, seed=0)
    agebo.tell(zip(configs, [1.0, None, 4.0, math.nan, 2.0]))
    assert np.array_equal(agebo.bo.training_set()[1], y)


def test_cost_scaling_is_minmax_then_log():
    y = np.array([2.0, 4.0, 6.0])
    np.testing.assert_allclose(scale_costs(y, y), np.log(np.array([0.0, 0.5, 1.0]) + 1e-3))
    np.testing.assert_allclose(scale_costs(y, y, "minmax"), [0.0, 0.5, 1.0])
    assert np.all(scale_costs([3.0, 3.0], [3.0, 3.0]) == 0)


@pytest.mark.parametrize("liar,expected", [("max", 4.0), ("min", 1.0), ("mean", 7 / 3)])
def test_constant_liar_tells_pending_points_the_lie(space, liar, expected):
    bo = BayesianOptimization(space, seed=0, liar=liar, **FAST_BO)
    configs = bo.ask(3)
    bo.tell(zip(configs, [1.0, 4.0, 2.0]))
    pending = bo.ask(2)
    X, y, lie = bo.bo.training_set(bo._encode(pending))
    assert len(X) == 5
    assert lie == pytest.approx(scale_costs([expected], [1.0, 4.0])[0])
    np.testing.assert_allclose(y[3:], lie)


@pytest.mark.parametrize("multi_point", ["cl", "qucb"])
def test_multi_point_returns_distinct_points(space, multi_point):
    objective = planted_objective(space)
    bo = BayesianOptimization(space, seed=3, multi_point=multi_point, **FAST_BO)
    run(bo, objective, budget=12)
    first = bo.ask(8)
    second = bo.ask(8)  # with the first batch pending
    keys = {config_key(c) for c in first + second}
    assert len(keys) == 16
    assert len(bo.pending) == 16


def test_gaussian_process_constant_liar_freezes_the_kernel():
    bo = VectorBO(lambda rng, n: rng.random((n, 2)), surrogate="gp", n_initial=2, n_candidates=300)
    X = np.random.default_rng(0).random((10, 2))
    bo.observe(X, (X**2).sum(axis=1))
    points = bo.suggest(3, np.random.default_rng(1))
    assert len({tuple(p) for p in points}) == 3


def test_bo_options_are_checked(space):
    with pytest.raises(ValueError):
        BayesianOptimization(space, acq="ucb")
    with pytest.raises(ValueError):
        BayesianOptimization(space, acq="ei", multi_point="qucb")
    with pytest.raises(ValueError):
        BayesianOptimization(space, surrogate="nope")


@pytest.mark.parametrize("acq", ["ei", "pi"])
def test_bo_with_ei_and_pi(space, acq):
    bo = BayesianOptimization(space, seed=0, acq=acq, **FAST_BO)
    run(bo, planted_objective(space), budget=16)
    for config in bo.ask(3):
        space.validate(config)


def test_bo_fixed_arch_optimizes_hyperparameters_only(space):
    arch = space.sample_arch(np.random.default_rng(9))
    bo = create("bo", space, seed=0, fixed_arch=arch, **FAST_BO)
    history = run(bo, planted_objective(space), budget=16)
    assert all(c["arch"] == arch for c, _ in history)
    assert all(c["arch"] == arch for c in bo.ask(4))
    assert bo.bo.X.shape[1] == len(space.hp_names)
    with pytest.raises(ValueError):
        create("bo", space, fixed_arch=arch[:-1])


def test_bo_beats_random_search_on_a_planted_optimum(space):
    objective = planted_objective(space)

    def median_best(name):
        options = {"n_candidates": 2000} if name == "bo" else {}
        bests = [min(y for _, y in run(create(name, space, seed=s, **options), objective, 60))
                 for s in range(5)]
        return np.median(bests)

    # measured: BO about 0.47, random about 2.0
    assert median_best("bo") < 0.6 * median_best("random")


def test_box_problem_with_the_vector_core():
    bo = VectorBO(lambda rng, n: rng.random((n, 3)), n_candidates=2000)
    rng = np.random.default_rng(0)
    while len(bo.y) < 60:
        X = bo.suggest(4, rng)
        bo.observe(X, ((X - 0.7) ** 2).sum(axis=1))
    assert np.nanmin(bo.y) < 0.02


def test_bo_initial_points_are_random_then_model_based(space):
    bo = VectorBO(space.sample_hp_vectors, n_initial=10, n_candidates=200)
    rng = np.random.default_rng(0)
    bo.suggest(4, rng)
    assert bo.last_timing["fit"] == 0.0
    bo.observe(rng.random((8, 5)), np.arange(8.0))
    bo.suggest(4, rng)  # suggestions 8 and 9 random, 10 and 11 from the model
    assert bo.last_timing["fit"] > 0.0


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0])
def test_random_interleave_draws_that_share_of_suggestions_from_the_prior(p):
    drawn = []  # sizes of the sampler's calls: random suggestions, or the acquisition's candidates

    def sampler(rng, n):
        drawn.append(n)
        return rng.random((n, 2))

    bo = VectorBO(sampler, n_initial=4, n_candidates=50, random_interleave=p)
    rng = np.random.default_rng(0)
    while len(bo.y) < 204:
        X = bo.suggest(2, rng)
        bo.observe(X, ((X - 0.3) ** 2).sum(axis=1))
    random_after_initial = sum(n for n in drawn if n != 50) - 4
    assert drawn[:2] == [2, 2]
    # 200 suggestions after the 4 initial ones; binomial(200, p): within 5 standard deviations
    assert abs(random_after_initial - 200 * p) <= 5 * math.sqrt(200 * p * (1 - p))
    with pytest.raises(ValueError, match="random_interleave"):
        VectorBO(sampler, random_interleave=1.5)


# ---------------------------------------------------------------- resume
@pytest.mark.parametrize("name", sorted(SEARCHERS))
def test_rebuilding_from_history_continues_identically(space, name):
    options = dict(FAST_BO) if name in ("bo", "agebo") else {}
    if name in ("age", "agebo"):
        options.update(population_size=8, sample_size=4)
    objective = planted_objective(space)

    def with_failures(config):
        value = objective(config)
        return None if value > 2.5 else value

    original = create(name, space, seed=11, **options)
    history = run(original, with_failures, budget=20)
    assert any(y is None for _, y in history)

    rebuilt = create(name, space, seed=11, **options)
    rebuilt.tell(history)
    if hasattr(original, "population"):
        assert rebuilt.population == original.population
    if hasattr(original, "bo"):
        np.testing.assert_array_equal(rebuilt.bo.X, original.bo.X)
    assert rebuilt.ask(4) == original.ask(4)


# ---------------------------------------------------------------- encoding
class RecordingSurrogate:
    """Extra trees that keep every candidate matrix the acquisition asks them to score."""

    def __init__(self):
        self.scored = []
        self._model = ExtraTreesSurrogate(n_estimators=5, random_state=0)

    def fit(self, X, y):
        self._model.fit(X, y)
        return self

    def predict(self, X, return_std=False):
        self.scored.append(np.array(X))
        return self._model.predict(X, return_std=return_std)


def assert_encodes_its_configuration(space, vectors, hp_only=False):
    """Every row equals the encoding of the configuration it decodes to: exactly for the
    architecture, integer and categorical variables, to float precision for the learning rate."""
    vectors = np.atleast_2d(vectors)
    if hp_only:
        again = space.encode_hp(space.decode_hp(vectors))
        n_arch = 0
    else:
        again = space.encode(space.decode(vectors))
        n_arch = len(space.arch_dims)
    lr = n_arch + space.hp_names.index("learning_rate")
    discrete = [j for j in range(vectors.shape[1]) if j != lr]
    np.testing.assert_array_equal(again[:, discrete], vectors[:, discrete])
    np.testing.assert_allclose(again[:, lr], vectors[:, lr], rtol=0, atol=1e-12)


@pytest.mark.parametrize("variant", ["bo", "bo-fixed-arch", "agebo"])
def test_bo_scores_and_observes_encodings_of_the_configurations_it_runs(space, variant):
    surrogate = RecordingSurrogate()
    options = {"surrogate": surrogate, "n_initial": 4, "n_candidates": 200}
    if variant == "bo-fixed-arch":
        searcher = create("bo", space, seed=0, fixed_arch=space.sample_arch(np.random.default_rng(1)), **options)
    elif variant == "agebo":
        searcher = create("agebo", space, seed=0, population_size=4, sample_size=2, **options)
    else:
        searcher = create("bo", space, seed=0, **options)
    hp_only = variant != "bo"
    suggested = []
    suggest = searcher.bo.suggest
    searcher.bo.suggest = lambda *a, **k: suggested.append(suggest(*a, **k)) or suggested[-1]
    objective = planted_objective(space)
    run(searcher, objective, budget=12)
    searcher.ask(3)  # with nothing pending: the constant liar refits on the candidates
    searcher.ask(2)  # with 3 pending
    assert len(surrogate.scored) >= 3
    for candidates in surrogate.scored:
        assert_encodes_its_configuration(space, candidates, hp_only)
    # what BO proposed is what it was later told, in the same encoding
    told = np.vstack(suggested[:3])
    assert_encodes_its_configuration(space, told, hp_only)
    lr = (0 if hp_only else len(space.arch_dims)) + space.hp_names.index("learning_rate")
    discrete = [j for j in range(told.shape[1]) if j != lr]
    np.testing.assert_array_equal(searcher.bo.X[:, discrete], told[:, discrete])
    np.testing.assert_allclose(searcher.bo.X[:, lr], told[:, lr], rtol=0, atol=1e-12)


def test_space_samplers_draw_encodings_from_the_prior(space):
    rng = np.random.default_rng(0)
    n = 33_000
    assert_encodes_its_configuration(space, space.sample_vectors(rng, 500))
    assert_encodes_its_configuration(space, space.snap(rng.random((500, space.dimension))))
    hps = space.decode_hp(space.sample_hp_vectors(rng, n))
    # uniform integers: the end values as likely as the others (11 values)
    patience = np.array([h["patience_reduce_lr"] for h in hps])
    counts = np.bincount(patience - 10, minlength=11)
    assert np.all(np.abs(counts / n - 1 / 11) < 0.012), counts
    optimizer = [h["optimizer"] for h in hps]
    assert abs(optimizer.count("sgd") / n - 1 / 7) < 0.012
    # log-uniform integer batch size on [1, 32] (ConfigSpace's prior: log-uniform on [1, 33) floored)
    batch = np.array([h["batch_size"] for h in hps])
    assert abs(np.mean(batch == 1) - np.log(2) / np.log(33)) < 0.012
    assert abs(np.mean(batch == 32) - np.log(33 / 32) / np.log(33)) < 0.006


def test_one_index_encoding_for_architecture_categoricals_and_linear_integers(space):
    from autodeuq.space import decode_index, encode_index

    for k in (1, 2, 7, 177):
        index = np.arange(k)
        np.testing.assert_array_equal(decode_index(encode_index(index, k), k), index)
    np.testing.assert_array_equal(encode_index(3, 1), 0.0)
    for dim, j in zip(space.arch_dims, range(len(space.arch_dims))):
        arch = [0] * len(space.arch_dims)
        arch[j] = dim - 1
        assert space.encode_arch(arch)[0, j] == 1.0
    patience = space.configspace["patience_reduce_lr"]
    np.testing.assert_array_equal(patience.to_vector(np.arange(10.0, 21.0)), encode_index(np.arange(11), 11))
    hp = {**space.sample_hp(np.random.default_rng(0)), "optimizer": "adam"}
    assert space.encode_hp(hp)[0, space.hp_names.index("optimizer")] == encode_index(3, 7)


def test_surrogate_benchmark_uses_the_space_encoding():
    import importlib.util
    from pathlib import Path

    from autodeuq.space import encode_index

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "surrogates.py"
    spec = importlib.util.spec_from_file_location("surrogates_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    points = bench._mixed_sampler(np.random.default_rng(0), 400)
    levels = encode_index(np.arange(5), 5)
    assert set(np.unique(points[:, 3:])) == set(levels)
    optimum = np.concatenate([bench._MIX_CENTERS[3], [levels[3], levels[1]]])[None]
    assert bench.mixed(optimum)[0] == pytest.approx(0.0)
