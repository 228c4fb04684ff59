"""Asynchronous Bayesian optimization (Egele 2024, ch. 2-3).

:class:`VectorBO` is the core: it works on points of [0, 1]^d drawn by a candidate sampler, so the
same code serves the joint space (:class:`BayesianOptimization`), the training hyperparameters
alone (``fixed_arch=...`` here, and the BO half of AgEBO) and plain box problems.

One suggestion, once ``n_initial`` suggestions have been random:

1. costs are cleaned: failures count as the worst observed cost; with the constant liar, points
   still pending (asked, not told) are added with the lie (worst, best or mean observed cost);
2. costs are scaled: ``y' = log((y - min) / (max - min) + eps)`` with ``eps = 1e-3`` (the
   original's min-max-then-log: the log spreads the good end, where the search works, and
   squashes outliers such as diverged trainings);
3. the surrogate is fitted (once per ask) and ``n_candidates`` random candidates are scored by the
   acquisition; the lowest score wins. Candidates are drawn from the prior as encodings of
   configurations (:meth:`~autodeuq.search.space.SearchSpace.sample_vectors`): the surrogate scores the
   very points it is told about once they are evaluated.

With ``random_interleave=p``, each suggestion after the initial ones is drawn at random instead,
with probability p (the interleaved random configurations of SMAC, Hutter et al. 2011): a search
whose first observations all lie on one plateau keeps sampling the whole prior, where a surrogate
fitted to differences within the noise would stay on one corner of it.

Several suggestions from one ask: ``multi_point="cl"`` tells each chosen point the lie before
choosing the next (tree surrogates absorb the lie in their leaves without refitting, see
:func:`~autodeuq.search.surrogate.candidate_predictions`); ``multi_point="qucb"`` keeps one fit and
draws the LCB weight of each further point from an exponential law of mean kappa.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from autodeuq.search import ACQUISITIONS
from autodeuq.search.base import Config, Searcher

MULTI_POINT = ("cl", "qucb")
LIARS = ("max", "min", "mean")
COST_SCALINGS = ("minmax-log", "minmax", "none")
LOG_EPS = 1e-3

CandidateSampler = Callable[[np.random.Generator, int], np.ndarray]


def scale_costs(y, reference, method="minmax-log"):
    """Scale costs ``y`` by the min and max of ``reference`` (see the module docstring)."""
    y = np.asarray(y, dtype=float)
    if method == "none":
        return y.copy()
    lo, hi = float(np.min(reference)), float(np.max(reference))
    if not hi > lo:
        return np.zeros_like(y)
    z = (y - lo) / (hi - lo)
    return np.log(z + LOG_EPS) if method == "minmax-log" else z


class VectorBO:
    """Asynchronous Bayesian optimization over vectors in [0, 1]^d.

    Parameters
    ----------
    sample_candidates : callable ``(rng, n) -> ndarray (n, d)``
        Draws points from the prior, in the [0, 1] encoding; used for the random initial points
        and for the candidates of the acquisition. Each point should be the encoding of the
        configuration it decodes to (integer and categorical variables on their grid), as the
        observations are.
    surrogate : str or object
        A name of :data:`~autodeuq.search.SURROGATES` (``"et"``, ``"rf"``, ``"gp"``...) or
        an object with ``fit`` and ``predict(X, return_std=True)``.
    acq : {"lcb", "ei", "pi"}
    kappa : float
        LCB exploration weight ``kappa_0``.
    kappa_period, kappa_decay : int, float or None
        Periodic exponential decay of kappa (:func:`~autodeuq.search.acquisition.kappa_schedule`);
        ``kappa_decay=None`` keeps kappa constant.
    xi : float
        Improvement margin of EI and PI, in scaled-cost units.
    n_initial : int
        Number of random suggestions before the surrogate is used.
    n_candidates : int
        Random candidates scored per ask.
    multi_point : {"cl", "qucb"}
        Constant liar, or qUCB (LCB only).
    liar : {"max", "min", "mean"}
        The constant liar's lie: the worst, best or mean observed cost.
    cost_scaling : {"minmax-log", "minmax", "none"}
    random_interleave : float
        Probability, in [0, 1], that a suggestion after the ``n_initial`` random ones is drawn at
        random rather than by the acquisition.

    Attributes
    ----------
    X : ndarray (n_observations, d)
    y : ndarray (n_observations,)
        Observed costs, NaN for failures.
    last_timing : dict
        Seconds spent in the last :meth:`suggest`: ``fit``, ``acquisition`` and ``total``.
    """

    def __init__(
        self,
        sample_candidates: CandidateSampler,
        surrogate: Any = "et",
        acq: str = "lcb",
        kappa: float = 1.96,
        kappa_period: int = 25,
        kappa_decay: float | None = 0.1,
        xi: float = 0.001,
        n_initial: int = 10,
        n_candidates: int = 10_000,
        multi_point: str = "cl",
        liar: str = "max",
        cost_scaling: str = "minmax-log",
        random_interleave: float = 0.0,
    ):
        for value, allowed, what in (
            (acq, ACQUISITIONS, "acq"), (multi_point, MULTI_POINT, "multi_point"),
            (liar, LIARS, "liar"), (cost_scaling, COST_SCALINGS, "cost_scaling"),
        ):
            if value not in allowed:
                raise ValueError(f"{what}={value!r}; choose one of {list(allowed)}")
        if multi_point == "qucb" and acq != "lcb":
            raise ValueError("multi_point='qucb' draws LCB weights: it needs acq='lcb'")
        if n_initial < 0 or n_candidates < 1 or kappa < 0 or kappa_period < 1:
            raise ValueError("need n_initial >= 0, n_candidates >= 1, kappa >= 0 and kappa_period >= 1")
        if not 0.0 <= random_interleave <= 1.0:
            raise ValueError(f"random_interleave={random_interleave!r}; need a probability in [0, 1]")
        from autodeuq.search.surrogate import make_surrogate  # scikit-learn: when a BO is built, not at import

        make_surrogate(surrogate)  # fail now, not at the first fit, on an unknown name
        self.sample_candidates = sample_candidates
        self.surrogate = surrogate
        self.acq = acq
        self.kappa = kappa
        self.kappa_period = kappa_period
        self.kappa_decay = kappa_decay
        self.xi = xi
        self.n_initial = n_initial
        self.n_candidates = n_candidates
        self.multi_point = multi_point
        self.liar = liar
        self.cost_scaling = cost_scaling
        self.random_interleave = float(random_interleave)
        self._X: list[np.ndarray] = []
        self._y: list[float] = []
        self.last_timing: dict[str, float] = {}

    @property
    def X(self) -> np.ndarray:
        return np.array(self._X, dtype=float)

    @property
    def y(self) -> np.ndarray:
        return np.array(self._y, dtype=float)

    def observe(self, X, y) -> None:
        """Record observations: rows of ``X`` with costs ``y`` (NaN or None for a failure)."""
        X = np.array(X, dtype=float, ndmin=2)  # a copy: the caller may reuse its array
        y = np.array([np.nan if v is None else v for v in np.atleast_1d(y)], dtype=float)
        if len(X) != len(y):
            raise ValueError(f"observe: {len(X)} points for {len(y)} costs")
        y[~np.isfinite(y)] = np.nan
        self._X.extend(X)
        self._y.extend(y.tolist())

    def kappa_at(self, t: int) -> float:
        from autodeuq.search import acquisition

        return acquisition.kappa_schedule(
            self.kappa, t, self.n_initial, self.kappa_period, self.kappa_decay,
        )

    def suggest(self, n: int, rng: np.random.Generator, pending=None) -> np.ndarray:
        """``n`` new points, shape (n, d), given the points ``pending`` (asked, not told)."""
        start = time.perf_counter()
        pending = np.empty((0, 0)) if pending is None else np.atleast_2d(np.asarray(pending, dtype=float))
        n_pending = len(pending) if pending.size else 0
        t0 = len(self._y) + n_pending  # index of this batch's first suggestion
        n_random = n if not self._y else int(np.clip(self.n_initial - t0, 0, n))
        if self.random_interleave and n > n_random:
            n_random += int(np.sum(rng.random(n - n_random) < self.random_interleave))
        points = [self.sample_candidates(rng, n_random)] if n_random else []
        self.last_timing = {"fit": 0.0, "acquisition": 0.0}
        if n > n_random:
            busy = ([pending] if n_pending else []) + points  # told the lie under constant liar
            busy = np.vstack(busy) if busy else None
            points.append(self._suggest_model(n - n_random, rng, busy, t0 + n_random, n_pending + n_random))
        self.last_timing["total"] = time.perf_counter() - start
        return np.vstack(points)

    def training_set(self, busy=None):
        """What the surrogate is fitted on: ``(X, scaled costs, scaled lie)``.

        Failures get the worst observed cost; under the constant liar the rows of ``busy``
        (points asked and not told) are appended with the lie.
        """
        X, y = self.X, self.y
        finite = y[np.isfinite(y)]
        worst = finite.max() if finite.size else 0.0
        y = np.where(np.isfinite(y), y, worst)  # failures count as the worst observed cost
        lie = {"max": y.max(), "min": y.min(), "mean": y.mean()}[self.liar]
        scaled_lie = float(scale_costs([lie], y, self.cost_scaling)[0])
        scaled = scale_costs(y, y, self.cost_scaling)
        if self.multi_point == "cl" and busy is not None:
            X = np.vstack([X, busy])
            scaled = np.concatenate([scaled, np.full(len(busy), scaled_lie)])
        return X, scaled, scaled_lie

    def _suggest_model(self, n, rng, busy, t_first, n_busy):
        X, y, lie = self.training_set(busy)
        tic = time.perf_counter()
        from autodeuq.search.surrogate import candidate_predictions, make_surrogate

        model = make_surrogate(self.surrogate, seed=int(rng.integers(2**31 - 1)))
        model.fit(X, y)
        self.last_timing["fit"] = time.perf_counter() - tic
        tic = time.perf_counter()
        candidates = self.sample_candidates(rng, max(self.n_candidates, n))
        if self.multi_point == "cl":
            preds = candidate_predictions(model, X, y, candidates)
        else:
            preds = _Fixed(*model.predict(candidates, return_std=True))
        best = float(np.min(y))
        chosen: list[int] = []
        for j in range(n):
            kappa = self.kappa_at(t_first + j)
            if self.multi_point == "qucb" and (j > 0 or n_busy > 0):
                kappa = float(rng.exponential(kappa)) if kappa > 0 else 0.0
            score = self._score(preds.mu, preds.sigma, kappa, best)
            score[chosen] = np.inf
            index = int(np.argmin(score))
            chosen.append(index)
            if self.multi_point == "cl" and j < n - 1:
                preds.add(index, lie)
        self.last_timing["acquisition"] = time.perf_counter() - tic
        return candidates[chosen]

    def _score(self, mu, sigma, kappa, best):
        if self.acq == "lcb":
            return ACQUISITIONS["lcb"](mu, sigma, kappa)
        return ACQUISITIONS[self.acq](mu, sigma, best, self.xi)


class _Fixed:
    def __init__(self, mu, sigma):
        self.mu = np.asarray(mu, dtype=float).ravel()
        self.sigma = np.asarray(sigma, dtype=float).ravel()


class BayesianOptimization(Searcher):
    """Bayesian optimization over the joint space, or over training hyperparameters only.

    Parameters
    ----------
    space : SearchSpace or str
    seed : int or None
    fixed_arch : list of int, optional
        Optimize only the training hyperparameters, always with this architecture (the thesis
        ablation "BO over training hyperparameters with a fixed architecture").
    **options
        Options of :class:`VectorBO`: ``surrogate``, ``acq``, ``kappa``, ``kappa_period``,
        ``kappa_decay``, ``xi``, ``n_initial``, ``n_candidates``, ``multi_point``, ``liar``,
        ``cost_scaling``.

    Examples
    --------
    >>> bo = BayesianOptimization("toy", seed=0)
    >>> configs = bo.ask(4)
    >>> bo.tell([(c, 1.0) for c in configs])
    """

    name = "bo"
    takes_surrogate = True

    def __init__(self, space, seed: int | None = None, fixed_arch=None, **options):
        super().__init__(space, seed)
        self.fixed_arch = None
        if fixed_arch is not None:
            self.fixed_arch = [int(a) for a in fixed_arch]
            self.space.validate(self.space.join(self.fixed_arch, self.space.sample_hp(np.random.default_rng(0))))
        self.bo = VectorBO(self._sample_candidates, **options)

    def _sample_candidates(self, rng, n):
        # Candidates are encodings of configurations (the space's samplers draw legal values and
        # encode them), so the surrogate scores exactly the points it is later told about.
        if self.fixed_arch is not None:
            return self.space.sample_hp_vectors(rng, n)
        return self.space.sample_vectors(rng, n)

    def _encode(self, configs) -> np.ndarray:
        if self.fixed_arch is not None:
            return self.space.encode_hp([c["hp"] for c in configs])
        return self.space.encode(configs)

    def _decode(self, vectors) -> list[Config]:
        if self.fixed_arch is not None:
            return [self.space.join(self.fixed_arch, hp) for hp in self.space.decode_hp(vectors)]
        return self.space.decode(vectors)

    def _ask(self, n, rng):
        pending = self.pending
        vectors = self.bo.suggest(n, rng, self._encode(pending) if pending else None)
        return self._decode(vectors)

    def _tell(self, results):
        configs = [c for c, _ in results]
        self.bo.observe(self._encode(configs), [obj for _, obj in results])
