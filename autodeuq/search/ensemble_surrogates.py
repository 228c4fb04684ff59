"""Ensembles of small networks as Bayesian-optimization surrogates (Lakshminarayanan et al. 2017; Khazi et al. 2023).

Two surrogates with the scikit-learn regressor API (``fit(X, y)``, ``predict(X, return_std=True)``),
named ``"deep-ensemble"`` and ``"ranking-ensemble"`` in :data:`~autodeuq.search.SURROGATES`:

* :class:`DeepEnsembleSurrogate`: M MLPs ending in the project's
  :class:`~autodeuq.nn.layers.GaussianHead`, trained on standardized costs with the beta-NLL of
  Seitzer et al. (ICLR 2022): the Gaussian NLL of :func:`autodeuq.nn.train.gaussian_nll` with each
  row weighted by its (constant) predicted variance to the power beta; the prediction is the
  mixture moments of :func:`autodeuq.metrics.mixture_moments` (equal weights).
* :class:`RankingEnsembleSurrogate`: the non-meta-learned Deep Ranking Ensemble (Khazi, Pineda
  Arango & Grabocka, ICLR 2023): M scorers trained with :func:`weighted_listmle_loss`; on a
  candidate set, the mean and standard deviation across scorers of each candidate's rank.

Refits must stay cheap (BO refits at every ask), so the M members are one *stacked* MLP (weights
of shape ``(M, fan_in, fan_out)``, one batched matmul per layer) and all epochs of all members run
in one compiled ``tf.function`` (a ``tf.range`` loop with a hand-written Adam whose state is loop
state, so re-initializing at each fit costs no retracing). The function is traced once per
process and network depth; the deep ensemble's is also XLA-compiled, once per power-of-two
padded data size (see :func:`_trainer`). TensorFlow is imported on the first fit, never at import.

The refit times of both ensembles, first and later fits, are in benchmarks/results/surrogates.md.
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

_ADAM_BETA1, _ADAM_BETA2, _ADAM_EPS = 0.9, 0.999, 1e-7  # Keras' Adam defaults
_TRAINERS: dict = {}  # (loss kind, number of layers) -> compiled trainer


# ------------------------------------------------------------------ stacked MLP
def _init_params(rng: np.random.Generator, n_members: int, sizes) -> list[np.ndarray]:
    """Glorot-uniform weights and zero biases of ``n_members`` MLPs with layer sizes ``sizes``.

    Returns ``[W1, b1, W2, b2, ...]`` with ``W`` of shape ``(M, fan_in, fan_out)`` and ``b`` of
    shape ``(M, 1, fan_out)`` (float32).
    """
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        params.append(rng.uniform(-limit, limit, (n_members, fan_in, fan_out)).astype(np.float32))
        params.append(np.zeros((n_members, 1, fan_out), dtype=np.float32))
    return params


def _forward_numpy(params, X) -> np.ndarray:
    """Raw outputs of the stacked MLP (ReLU hidden layers, linear last), shape ``(M, n, out)``."""
    X = np.asarray(X, dtype=np.float32)
    n_layers = len(params) // 2
    outputs = []
    for m in range(len(params[0])):  # 2-D matmuls: numpy's broadcast batched matmul skips BLAS
        h = X
        for k in range(n_layers):
            h = h @ params[2 * k][m] + params[2 * k + 1][m]
            if k < n_layers - 1:
                np.maximum(h, 0.0, out=h)
        outputs.append(h)
    return np.stack(outputs)


def _forward_tf(tf, params, X):
    h = X[None]
    n_layers = len(params) // 2
    for k in range(n_layers):
        h = tf.matmul(h, params[2 * k]) + params[2 * k + 1]  # batch axes broadcast: (1 or M, n, .)
        if k < n_layers - 1:
            h = tf.nn.relu(h)
    return h


def _trainer(kind: str, n_layers: int):
    """The compiled trainer ``(params, X, target, mask, epochs, lr, beta) -> (params, final loss)``.

    ``kind="nll"``: ``target`` is ``(n,)`` standardized costs, each member's output goes through
    :class:`~autodeuq.nn.layers.GaussianHead` and the beta-NLL (the rows of
    :func:`autodeuq.nn.train.gaussian_nll` times ``stop_gradient(var) ** beta``; ``beta=0`` is the
    plain NLL); rows with ``mask == 0`` are padding (their outputs are cut from the gradient).
    This trainer is XLA-compiled (about 5x faster per epoch on CPU), and XLA compiles once per
    input shape, so :func:`_fit_stacked` pads ``n`` up to a power of two: a few compilations per
    search, not one per ask.
    ``kind="listmle"``: ``target`` is ``(n,)`` costs, each member's single output is a score and
    the loss is :func:`weighted_listmle_loss` (``mask`` and ``beta`` unused). Not XLA-compiled:
    XLA's cumulative log-sum-exp is slower than TensorFlow's kernel here, and no padding means no
    recompilation.

    The loss minimized is the sum over members, so each member follows its own loss's gradient.
    """
    key = (kind, n_layers)
    if key in _TRAINERS:
        return _TRAINERS[key]
    import tensorflow as tf

    if kind == "nll":
        from autodeuq.metrics import LOG_2PI
        from autodeuq.nn.layers import GaussianHead

        head = GaussianHead(1)

        def member_losses(raw, target, mask, beta):  # raw (M, n, 2)
            n_members = tf.shape(raw)[0]
            out = head(tf.reshape(raw, [-1, 2]))
            keep = tf.reshape(tf.tile(mask[None, :], [n_members, 1]), [-1, 1]) > 0
            out = tf.where(keep, out, tf.stop_gradient(out))
            y = tf.reshape(tf.tile(target[None, :], [n_members, 1]), [-1, 1])
            mean, var = out[:, :1], out[:, 1:]
            # The plain NLL scales a row's mean gradient by 1 / var, so a member can "explain" a
            # point it does not fit (in BO: the incumbent, far below the rest after the min-max-log
            # cost scaling) by a large variance and stay there; the constant weight var**beta
            # makes that 1 / var**(1 - beta) and keeps each row's optimal variance.
            rows = 0.5 * (LOG_2PI + tf.math.log(var)) + tf.square(y - mean) / (2.0 * var)
            weighted = rows * tf.pow(tf.stop_gradient(var), beta)
            # averaged over all M * n rows: times M, the sum of the member means
            return tf.reduce_mean(weighted) * tf.cast(n_members, tf.float32)
    else:

        def member_losses(raw, target, mask, beta):  # raw (M, n, 1)
            return tf.reduce_sum(weighted_listmle_loss(raw[..., 0], target))

    spec = [tf.TensorSpec([None, None, None], tf.float32)] * (2 * n_layers)

    @tf.function(jit_compile=(kind == "nll"), input_signature=[
        spec, tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.float32),
        tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.float32),
        tf.TensorSpec([], tf.float32),
    ])
    def train(params, X, target, mask, epochs, lr, beta):
        m = [tf.zeros_like(p) for p in params]
        v = [tf.zeros_like(p) for p in params]
        loss = tf.constant(0.0)
        for step in tf.range(1, epochs + 1):
            with tf.GradientTape() as tape:
                tape.watch(params)
                loss = member_losses(_forward_tf(tf, params, X), target, mask, beta)
            grads = tape.gradient(loss, params)
            t = tf.cast(step, tf.float32)
            rate = lr * tf.sqrt(1.0 - _ADAM_BETA2**t) / (1.0 - _ADAM_BETA1**t)
            m = [_ADAM_BETA1 * mi + (1.0 - _ADAM_BETA1) * g for mi, g in zip(m, grads)]
            v = [_ADAM_BETA2 * vi + (1.0 - _ADAM_BETA2) * tf.square(g) for vi, g in zip(v, grads)]
            params = [p - rate * mi / (tf.sqrt(vi) + _ADAM_EPS) for p, mi, vi in zip(params, m, v)]
        return params, loss

    _TRAINERS[key] = train
    return train


def _padded_size(n: int) -> int:
    return max(32, 1 << (int(n) - 1).bit_length())


def _fit_stacked(kind, rng, n_members, sizes, X, target, epochs, learning_rate, beta=0.0):
    """Train ``n_members`` freshly initialized MLPs; returns their stacked weights."""
    import tensorflow as tf

    params = _init_params(rng, n_members, sizes)
    train = _trainer(kind, len(params) // 2)
    n = len(X)
    mask = np.ones(n)
    if kind == "nll":
        pad = _padded_size(n) - n
        X = np.vstack([X, np.zeros((pad, X.shape[1]))])
        target = np.concatenate([target, np.zeros(pad)])
        mask = np.concatenate([mask, np.zeros(pad)])
    params, loss = train(
        [tf.constant(p) for p in params], tf.constant(X, tf.float32), tf.constant(target, tf.float32),
        tf.constant(mask, tf.float32), tf.constant(int(epochs), tf.int32),
        tf.constant(float(learning_rate), tf.float32), tf.constant(float(beta), tf.float32),
    )
    return [p.numpy() for p in params], float(loss)


def _check_Xy(X, y):
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float).ravel()
    if X.ndim != 2 or len(X) != len(y) or len(y) == 0:
        raise ValueError(f"fit needs X of shape (n, d) and y of shape (n,), got {X.shape} and {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("fit needs finite costs (BO replaces failures by the worst cost)")
    return X, y


# ------------------------------------------------------------------ deep ensemble
class DeepEnsembleSurrogate(RegressorMixin, BaseEstimator):
    """Deep ensemble of Gaussian MLPs (Lakshminarayanan et al. 2017) as a BO surrogate.

    Each of the ``n_members`` MLPs (ReLU hidden layers) ends in a Dense(2) and the project's
    :class:`~autodeuq.nn.layers.GaussianHead` (mean, softplus variance) and is trained on
    standardized costs, full batch, with Adam, by the beta-NLL of Seitzer et al., "On the Pitfalls
    of Heteroscedastic Uncertainty Estimation with Probabilistic Neural Networks" (ICLR 2022): the
    Gaussian NLL of :func:`autodeuq.nn.train.gaussian_nll` with each row weighted by its predicted
    variance to the power ``nll_beta``, the weight held constant in the gradient. ``nll_beta=0``
    is the plain NLL, under which a member can leave a point unfitted and give it a large variance
    instead; BO's incumbent, far below the other costs after the min-max-log scaling, is such a
    point, and EI, scored against ``min(y)``, then finds no candidate predicted to improve on it.
    The optimal variance of a row is the same for any ``nll_beta``. All members are re-initialized
    at each ``fit``. The prediction is the equal-weight mixture
    (:func:`autodeuq.metrics.mixture_moments`) in the original cost units.

    Parameters
    ----------
    n_members : int
        Ensemble size M.
    hidden : tuple of int
        Hidden layer widths.
    epochs : int
        Full-batch Adam steps per fit.
    learning_rate : float
    std : {"total", "epistemic"}
        The standard deviation ``predict(..., return_std=True)`` returns: of the whole mixture
        (aleatoric + epistemic) or of the members' means only.
    nll_beta : float
        The beta of the beta-NLL, >= 0 (0.5, the value Seitzer et al. recommend; 0 for the plain
        Gaussian NLL).
    random_state : int or None

    Attributes
    ----------
    params_ : list of ndarray
        Stacked weights ``[W1, b1, ...]``, ``W`` of shape ``(M, fan_in, fan_out)``.
    y_mean_, y_std_ : float
        Standardization of the costs.

    Examples
    --------
    >>> X = np.random.default_rng(0).random((30, 2)); y = X.sum(axis=1)
    >>> mu, sigma = DeepEnsembleSurrogate(epochs=200, random_state=0).fit(X, y).predict(X, return_std=True)
    """

    def __init__(self, n_members=5, hidden=(32, 32), epochs=1000, learning_rate=0.02, std="total",
                 nll_beta=0.5, random_state=None):
        self.n_members = n_members
        self.hidden = hidden
        self.epochs = epochs
        self.learning_rate = learning_rate
        self.std = std
        self.nll_beta = nll_beta
        self.random_state = random_state

    def fit(self, X, y):
        if self.std not in ("total", "epistemic"):
            raise ValueError(f"std={self.std!r}; choose 'total' or 'epistemic'")
        if not (np.isfinite(self.nll_beta) and self.nll_beta >= 0):
            raise ValueError(f"nll_beta={self.nll_beta!r}; need a finite value >= 0")
        X, y = _check_Xy(X, y)
        self.y_mean_ = float(y.mean())
        spread = float(y.std())
        self.y_std_ = spread if spread > 0 else 1.0
        rng = np.random.default_rng(self.random_state)
        sizes = [X.shape[1], *[int(h) for h in self.hidden], 2]
        self.params_, _ = _fit_stacked(
            "nll", rng, int(self.n_members), sizes, X, (y - self.y_mean_) / self.y_std_,
            self.epochs, self.learning_rate, beta=self.nll_beta,
        )
        self.n_features_in_ = X.shape[1]
        return self

    def predict_members(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Each member's mean and variance in cost units, each of shape ``(M, n, 1)``."""
        from autodeuq.nn.layers import GaussianHead
        from autodeuq.nn.model import split_output

        raw = _forward_numpy(self.params_, np.asarray(X, dtype=float))
        n_members, n = raw.shape[:2]
        mean, var = split_output(np.asarray(GaussianHead(1)(raw.reshape(-1, 2))))
        mean = mean.reshape(n_members, n, 1).astype(float) * self.y_std_ + self.y_mean_
        var = var.reshape(n_members, n, 1).astype(float) * self.y_std_**2
        return mean, var

    def predict(self, X, return_std=False):
        from autodeuq.metrics import mixture_moments

        means, variances = self.predict_members(X)
        weights = np.full(len(means), 1.0 / len(means))
        mean, aleatoric, epistemic = mixture_moments(means, variances, weights)
        mu = mean[:, 0]
        if not return_std:
            return mu
        var = epistemic[:, 0] if self.std == "epistemic" else aleatoric[:, 0] + epistemic[:, 0]
        return mu, np.sqrt(var)


# ------------------------------------------------------------------ ranking ensemble
def weighted_listmle_loss(scores, costs):
    """Position-weighted ListMLE of DRE: the loss of ranking items by ``scores`` (high = good).

    With the items sorted by true cost, best first (``pi(1)`` the lowest cost), ``s_j`` the score
    of the ``j``-th best item and ``n`` items::

        L = sum_{j=1}^{n} w_j * (log sum_{k=j}^{n} exp(s_k) - s_j),   w_j = 1 / log(j + 1)

    (natural log): the negative log-likelihood of the true order under the Plackett-Luce model of
    the scores, with the top positions weighted more. Ties in ``costs`` keep their input order.

    Parameters
    ----------
    scores : array_like or tf.Tensor, shape (..., n)
        Scores of the ``n`` items; leading axes are independent lists (e.g. ensemble members).
    costs : array_like or tf.Tensor, shape (n,)
        True costs (lower is better).

    Returns
    -------
    tf.Tensor of shape (...)
        One loss per list (``float(...)`` for a single list).

    Examples
    --------
    >>> round(float(weighted_listmle_loss([0.0, 0.0], [1.0, 2.0])), 6)  # w_1 * log 2 = 1
    1.0
    """
    import tensorflow as tf

    scores = tf.convert_to_tensor(scores, dtype=tf.float32)
    costs = tf.convert_to_tensor(costs, dtype=tf.float32)
    order = tf.argsort(costs, stable=True)
    s = tf.gather(scores, order, axis=-1)
    n = tf.shape(s)[-1]
    positions = tf.cast(tf.range(1, n + 1), tf.float32)
    weights = 1.0 / tf.math.log(positions + 1.0)
    tail = tf.math.cumulative_logsumexp(s, axis=-1, reverse=True)
    return tf.reduce_sum(weights * (tail - s), axis=-1)


class RankingEnsembleSurrogate(RegressorMixin, BaseEstimator):
    """Deep Ranking Ensemble (DRE, non-meta-learned) as a BO surrogate in rank space.

    ``n_members`` scorers (MLPs with ReLU hidden layers and one output, high score = predicted
    good) are trained on the observed configurations with :func:`weighted_listmle_loss` (one list:
    all observations), each from its own random initialization, re-initialized at each ``fit``.

    ``predict(X)`` treats ``X`` as the candidate set: each scorer ranks the candidates, the rank
    of candidate i under scorer m being ``r_mi = #{j : s_mj > s_mi} / N`` (0 = best, N the number
    of candidates), and the prediction is the mean and standard deviation across scorers of those
    ranks. Lower is better, as for a cost, so the minimizing acquisitions of
    :mod:`autodeuq.search.acquisition` apply unchanged. A prediction is a property of the whole
    set: predict the candidates together, not one by one.

    Rank space and EI: the BO searcher scores EI against ``best = min(y)`` of the costs it fitted.
    With ``acquisition="ei"`` the rank space is anchored at the incumbent (the observation of
    lowest cost): each scorer also places the incumbent among the candidates (``r_m* = #{j : s_mj >
    s_m*} / N``), and the returned mean is ``min(y) + mean_m r_mi - mean_m r_m*``. So "best" in
    rank space is the incumbent's mean rank, expressed as ``min(y)``, and the improvement
    ``best - mu`` is the fraction of the candidate set by which a candidate is predicted to rank
    ahead of the incumbent. With ``acquisition="lcb"`` the plain mean rank in [0, 1) is returned;
    LCB is unchanged by the shift, so both values work with LCB.

    Parameters
    ----------
    n_members : int
        Number of scorers M.
    hidden : tuple of int
        Hidden layer widths of each scorer.
    epochs : int
        Full-batch Adam steps per fit.
    learning_rate : float
    acquisition : {"ei", "lcb"}
        The acquisition the rank space is meant for (see above).
    random_state : int or None

    Attributes
    ----------
    params_ : list of ndarray
        Stacked weights of the scorers.
    incumbent_ : ndarray of shape (d,)
        The observed point of lowest cost.
    best_ : float
        Its cost, ``min(y)``.
    loss_ : float
        Sum over scorers of their final training loss.

    Examples
    --------
    >>> X = np.random.default_rng(0).random((30, 2)); y = X.sum(axis=1)
    >>> model = RankingEnsembleSurrogate(epochs=100, random_state=0).fit(X, y)
    >>> rank_mean, rank_std = model.predict(np.random.default_rng(1).random((500, 2)), return_std=True)
    """

    def __init__(self, n_members=10, hidden=(32, 32, 32, 32), epochs=300, learning_rate=0.005,
                 acquisition="ei", random_state=None):
        self.n_members = n_members
        self.hidden = hidden
        self.epochs = epochs
        self.learning_rate = learning_rate
        self.acquisition = acquisition
        self.random_state = random_state

    def fit(self, X, y):
        if self.acquisition not in ("ei", "lcb"):
            raise ValueError(f"acquisition={self.acquisition!r}; choose 'ei' or 'lcb'")
        X, y = _check_Xy(X, y)
        best = int(np.argmin(y))
        self.incumbent_ = X[best].copy()
        self.best_ = float(y[best])
        rng = np.random.default_rng(self.random_state)
        sizes = [X.shape[1], *[int(h) for h in self.hidden], 1]
        self.params_, self.loss_ = _fit_stacked(
            "listmle", rng, int(self.n_members), sizes, X, y, self.epochs, self.learning_rate,
        )
        self.n_features_in_ = X.shape[1]
        return self

    def scores(self, X) -> np.ndarray:
        """Each scorer's scores of the points ``X`` (high = predicted good), shape ``(M, n)``."""
        return _forward_numpy(self.params_, np.asarray(X, dtype=float))[..., 0]

    def predict_ranks(self, X) -> np.ndarray:
        """Each scorer's rank of each point of ``X`` in ``X``, in [0, 1), 0 = best; ``(M, n)``."""
        scores = self.scores(X)
        return _ranks_among(scores, scores)

    def predict(self, X, return_std=False):
        scores = self.scores(X)
        ranks = _ranks_among(scores, scores)
        mu = ranks.mean(axis=0)
        if self.acquisition == "ei":
            incumbent = _ranks_among(self.scores(self.incumbent_[None]), scores)
            mu = self.best_ + mu - float(incumbent.mean())
        if not return_std:
            return mu
        return mu, ranks.std(axis=0)


def _ranks_among(query_scores, set_scores) -> np.ndarray:
    """``#{j : set_scores[m, j] > query_scores[m, i]} / N`` for every scorer m, shape ``(M, q)``."""
    n = set_scores.shape[1]
    out = np.empty(query_scores.shape, dtype=float)
    for m, (query, ref) in enumerate(zip(query_scores, set_scores)):
        out[m] = n - np.searchsorted(np.sort(ref), query, side="right")
    return out / n


def deep_ensemble(seed: int | None = None) -> DeepEnsembleSurrogate:
    """``"deep-ensemble"``: a :class:`DeepEnsembleSurrogate` with its defaults."""
    return DeepEnsembleSurrogate(random_state=seed)


def ranking_ensemble(seed: int | None = None) -> RankingEnsembleSurrogate:
    """``"ranking-ensemble"``: a :class:`RankingEnsembleSurrogate` with its defaults."""
    return RankingEnsembleSurrogate(random_state=seed)
