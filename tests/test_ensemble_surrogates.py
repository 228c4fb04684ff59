"""Ensemble surrogates of BO (Lakshminarayanan et al. 2017; Khazi et al. 2023): uncertainty, ranking loss
and use inside BO."""
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autodeuq.search.bo import VectorBO, scale_costs
from autodeuq.search.ensemble_surrogates import (
    DeepEnsembleSurrogate,
    RankingEnsembleSurrogate,
    weighted_listmle_loss,
)
from autodeuq.search.surrogate import SURROGATES, make_surrogate


def _one_d_data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, (n, 1))
    return x, np.sin(6.0 * x[:, 0])


INSIDE = np.linspace(0.1, 0.9, 50)[:, None]
FAR = np.concatenate([np.linspace(-3.0, -2.0, 25), np.linspace(3.0, 4.0, 25)])[:, None]


@pytest.mark.parametrize("std", ["total", "epistemic"])
def test_deep_ensemble_uncertainty_grows_away_from_data(std):
    X, y = _one_d_data()
    model = DeepEnsembleSurrogate(epochs=300, std=std, random_state=0).fit(X, y)
    mu, sigma_in = model.predict(INSIDE, return_std=True)
    _, sigma_far = model.predict(FAR, return_std=True)
    assert np.all(np.isfinite(mu)) and np.all(sigma_in > 0)
    assert np.median(sigma_far) > 2.0 * np.median(sigma_in)
    # the fit follows the data inside the training range
    assert np.sqrt(np.mean((mu - np.sin(6.0 * INSIDE[:, 0])) ** 2)) < 0.5


def test_deep_ensemble_is_the_mixture_of_its_members():
    X, y = _one_d_data()
    model = DeepEnsembleSurrogate(n_members=3, epochs=50, random_state=1).fit(X, y)
    means, variances = model.predict_members(INSIDE)
    assert means.shape == variances.shape == (3, len(INSIDE), 1)
    # the mixture of the members' (float32) outputs, in float64 as the surrogate takes it: only
    # float64 rounding differs, whatever CPU sums float32 arrays in what order
    means, variances = means.astype(np.float64), variances.astype(np.float64)
    mu, sigma = model.predict(INSIDE, return_std=True)
    np.testing.assert_allclose(mu, means.mean(axis=0)[:, 0], rtol=1e-12, atol=1e-12 * np.abs(mu).max())
    total = variances.mean(axis=0)[:, 0] + means.var(axis=0)[:, 0]
    np.testing.assert_allclose(sigma**2, total, rtol=1e-10)
    model.set_params(std="epistemic")
    _, sigma_epi = model.predict(INSIDE, return_std=True)
    np.testing.assert_allclose(sigma_epi**2, means.var(axis=0)[:, 0], rtol=1e-10)


def test_deep_ensemble_refit_is_reproducible_and_reinitialized():
    X, y = _one_d_data()
    a = DeepEnsembleSurrogate(n_members=2, epochs=30, random_state=3).fit(X, y).predict(INSIDE)
    model = DeepEnsembleSurrogate(n_members=2, epochs=30, random_state=3)
    model.fit(X, -y)
    b = model.fit(X, y).predict(INSIDE)  # a refit starts again from scratch
    np.testing.assert_array_equal(a, b)


def _weights_digests():
    """SHA-256 of the trained weights of both surrogates on one small problem."""
    import hashlib

    X = np.random.default_rng(0).random((13, 3))
    y = np.sin(3.0 * X.sum(axis=1))
    models = (DeepEnsembleSurrogate(epochs=200, random_state=4),
              RankingEnsembleSurrogate(epochs=50, random_state=4))
    return [hashlib.sha256(b"".join(w.tobytes() for w in m.fit(X, y).params_)).hexdigest() for m in models]


@pytest.mark.slow
def test_surrogate_training_does_not_depend_on_the_thread_count():
    # Hundreds of full-batch Adam steps amplify any rounding difference (see the BO test below):
    # a reduction order that changed with the thread pools would give other weights, and another
    # search, on a machine with another core count. Here: this process's pools (0 = one thread
    # per core) against a process with one thread (two if this one has one).
    import tensorflow as tf

    threads = 2 if tf.config.threading.get_intra_op_parallelism_threads() == 1 else 1
    code = (
        "import sys, tensorflow as tf\n"
        f"tf.config.threading.set_intra_op_parallelism_threads({threads})\n"
        f"tf.config.threading.set_inter_op_parallelism_threads({threads})\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "from test_ensemble_surrogates import _weights_digests\n"
        "print(*_weights_digests())\n"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    assert other.returncode == 0, other.stderr[-2000:]
    assert other.stdout.split() == _weights_digests()


def test_ranking_ensemble_uncertainty_grows_away_from_data():
    X, y = _one_d_data()
    model = RankingEnsembleSurrogate(epochs=200, acquisition="lcb", random_state=0).fit(X, y)
    # ranks are relative to the whole set: a few far points, so that how the scorers place them
    # shifts the inside ranks little
    far = np.array([-3.0, -2.5, -2.0, 3.0, 3.5, 4.0])[:, None]
    candidates = np.vstack([INSIDE, far])
    mu, sigma = model.predict(candidates, return_std=True)
    assert mu.min() >= 0.0 and mu.max() < 1.0
    inside, far = sigma[: len(INSIDE)], sigma[len(INSIDE):]
    assert np.median(far) > 3.0 * np.median(inside)
    # inside the data, good points (low sin) rank before bad ones
    truth = np.sin(6.0 * INSIDE[:, 0])
    assert np.corrcoef(mu[: len(INSIDE)], truth)[0, 1] > 0.8


def test_ranking_ensemble_ei_space_is_anchored_at_the_incumbent():
    X, y = _one_d_data()
    model = RankingEnsembleSurrogate(n_members=4, epochs=50, random_state=0).fit(X, y)
    candidates = np.linspace(-1.0, 2.0, 200)[:, None]
    mu_ei = model.predict(candidates)
    ranks = model.predict_ranks(candidates)
    assert ranks.shape == (4, 200)
    model.set_params(acquisition="lcb")
    mu_lcb, sigma = model.predict(candidates, return_std=True)
    np.testing.assert_allclose(mu_lcb, ranks.mean(axis=0))
    np.testing.assert_allclose(sigma, ranks.std(axis=0))
    shift = mu_ei - mu_lcb
    np.testing.assert_allclose(shift, shift[0])  # same order, shifted
    # the incumbent itself, placed among the candidates, sits exactly at min(y)
    with_incumbent = np.vstack([candidates, model.incumbent_[None]])
    model.set_params(acquisition="ei")
    assert y.min() == model.best_
    inc_rank = model.predict(with_incumbent)[-1]
    assert abs(inc_rank - y.min()) <= 1.0 / len(with_incumbent) + 1e-12


def test_weighted_listmle_matches_hand_computation():
    scores = [1.0, 2.0, 0.5]
    costs = [0.3, 0.1, 0.2]  # true order, best first: item 1 (s=2), item 2 (s=0.5), item 0 (s=1)
    s = [2.0, 0.5, 1.0]
    lse = lambda v: math.log(sum(math.exp(u) for u in v))  # noqa: E731
    expected = (lse(s) - s[0]) / math.log(2.0) + (lse(s[1:]) - s[1]) / math.log(3.0) + 0.0
    assert float(weighted_listmle_loss(scores, costs)) == pytest.approx(expected, rel=1e-6)
    # leading axes are independent lists; a perfectly ordered list with large gaps costs ~0
    batch = np.array([scores, [30.0, 10.0, 20.0]])
    losses = np.asarray(weighted_listmle_loss(batch, [0.1, 0.9, 0.5]))
    assert losses.shape == (2,)
    assert losses[1] < 1e-3 < losses[0]


def test_registered_by_name_and_cloned():
    assert isinstance(make_surrogate("deep-ensemble", seed=1), DeepEnsembleSurrogate)
    assert isinstance(make_surrogate("ranking-ensemble", seed=1), RankingEnsembleSurrogate)
    assert {"deep-ensemble", "ranking-ensemble"} <= set(SURROGATES)
    mine = DeepEnsembleSurrogate(epochs=7)
    copy = make_surrogate(mine)
    assert copy is not mine and copy.epochs == 7


CENTER = np.array([0.23, 0.71, 0.42])


def _planted(X):
    return np.sum((np.atleast_2d(X) - CENTER) ** 2, axis=1)


def _uniform(rng, n):
    return rng.random((n, len(CENTER)))


def test_deep_ensemble_fits_the_incumbent_of_scaled_bo_costs():
    # BO fits its surrogate on log((y - min) / (max - min) + 1e-3): the incumbent sits at
    # log(1e-3) = -6.9, far below the other costs (-3 to 0). Under the plain Gaussian NLL
    # (nll_beta=0) about half of the members leave it unfitted with a large variance, the ensemble
    # misses it by about one standard deviation of y, and EI, scored against min(y), sees no
    # candidate that improves on it: BO with this surrogate did no better than random search
    # (budget 18, 24 seeds: median best cost 0.038 for both).
    errors, members_off = [], 0
    for n in (8, 12, 16):
        for seed in (0, 1):
            X = np.random.default_rng(seed).random((n, len(CENTER)))
            y = scale_costs(_planted(X), _planted(X))
            best = int(np.argmin(y))
            model = DeepEnsembleSurrogate(random_state=seed).fit(X, y)
            means, _ = model.predict_members(X[best:best + 1])
            errors.append(abs(float(model.predict(X[best:best + 1])[0]) - y[best]) / y.std())
            members_off += int(np.sum(np.abs(means[:, 0, 0] - y[best]) > 0.5 * y.std()))
    # nll_beta=0: median error 0.9, 14 of the 30 members off; nll_beta=0.5: 0.01 and none
    assert np.median(errors) < 0.1
    assert members_off <= 2


def test_deep_ensemble_refuses_a_negative_nll_beta():
    X, y = _one_d_data()
    with pytest.raises(ValueError, match="nll_beta"):
        DeepEnsembleSurrogate(nll_beta=-0.5).fit(X, y)


def _best_of_bo(surrogate, seed, budget, acq):
    bo = VectorBO(_uniform, surrogate=surrogate, acq=acq, n_initial=5, n_candidates=500)
    rng = np.random.default_rng(seed)
    for _ in range(budget):
        x = bo.suggest(1, rng)
        bo.observe(x, _planted(x))
    return float(np.min(bo.y))


def _percentiles_among_random_searches(bests, budget, n_searches=20_000):
    """For each best cost, the fraction of random searches of ``budget`` points doing as well."""
    points = np.random.default_rng(12345).random((n_searches * budget, len(CENTER)))
    random_bests = _planted(points).reshape(n_searches, budget).min(axis=1)
    return np.array([np.mean(random_bests <= best) for best in bests])


# BO beats random search, judged over several searches against random search's exact law:
# each BO search's best cost is placed among 20,000 random searches of the same budget (its
# percentile: 0 = better than all of them), and the mean percentile over 4 seeds must be < 0.1.
# A surrogate that carries no information makes BO a random search: its 4 percentiles are then
# uniform on [0, 1] and their sum is < 0.4 with probability 0.4**4 / 4! = 0.1%.
# Numbers measured over 16 seeds on the 2-core dev machine. Budget 18, as before, is too short:
# there even the fixed deep ensemble's percentiles spread over 0.04-0.61 (mean 0.25), so the old
# criterion (3 seeds against 3 random searches, a hard factor 0.5) passed or failed by the luck
# of single seeds. At budget 30 the four surrogates below have mean percentiles 0.02-0.04 (the
# worst seed 0.08-0.25) and 4 seeds pass with probability >= 97.8% (bootstrap over the 16 seeds),
# while BO passes with probability 0.02% when the surrogate's predictions are shuffled among the
# candidates, 1.7% when the deep ensemble's sigma is forced to 0, and 35% with the deep ensemble
# trained by the plain NLL (nll_beta=0: it does beat random search at budget 30, only by less).
# A fit is deterministic on a given machine, but full-batch Adam amplifies rounding differences,
# so another CPU or TensorFlow version runs other searches: hence a criterion on several seeds.
BUDGET, SEEDS, MAX_MEAN_PERCENTILE = 30, (0, 1, 2, 3), 0.1


@pytest.mark.parametrize("surrogate, acq", [
    (DeepEnsembleSurrogate(epochs=300), "lcb"),
    ("deep-ensemble", "ei"),
    (RankingEnsembleSurrogate(epochs=100), "ei"),
    (RankingEnsembleSurrogate(n_members=5, epochs=100, acquisition="lcb"), "lcb"),
])
def test_bo_with_ensemble_surrogate_beats_random_search(surrogate, acq):
    bests = [_best_of_bo(surrogate, seed, BUDGET, acq) for seed in SEEDS]
    percentiles = _percentiles_among_random_searches(bests, BUDGET)
    assert np.mean(percentiles) < MAX_MEAN_PERCENTILE, (bests, percentiles)


class _NoiseSurrogate:
    """Predictions that carry no information about the costs."""

    def __init__(self):
        self.rng = np.random.default_rng(0)

    def fit(self, X, y):
        return self

    def predict(self, X, return_std=False):
        mu, sigma = self.rng.normal(size=len(X)), self.rng.uniform(0.1, 1.0, len(X))
        return (mu, sigma) if return_std else mu


def test_bo_criterion_fails_a_surrogate_without_information():
    # the criterion can fail: BO with noise for a surrogate is a random search
    bests = [_best_of_bo(_NoiseSurrogate(), seed, BUDGET, "ei") for seed in SEEDS]
    percentiles = _percentiles_among_random_searches(bests, BUDGET)
    assert np.mean(percentiles) > 2 * MAX_MEAN_PERCENTILE
