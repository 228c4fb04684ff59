"""Figures: the 1-D uncertainty plot, the calibration curve and the search trace (PNG files).

Each function writes its figure to ``path`` (atomically, never through a link: see
:func:`autodeuq.fileio.atomic_write`) and returns the path, or returns the PNG bytes when
``path`` is None, so a caller can render every figure before it writes any.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_uncertainty_1d(x_grid, prediction, path, *, x_train=None, y_train=None, y_true=None,
                        target: int = 0, title: str = "Ensemble prediction") -> Path | bytes:
    """Mean with aleatoric and epistemic +-2 std bands over a 1-D grid (like thesis Fig. 6.2).

    ``prediction`` is an :class:`~autodeuq.ensemble.UncertaintyPrediction`.
    """
    plt = _pyplot()
    x = np.asarray(x_grid, dtype=float).reshape(len(x_grid), -1)[:, 0]
    order = np.argsort(x)
    x = x[order]
    mean = prediction.mean[order, target]
    ale = np.sqrt(prediction.aleatoric[order, target])
    epi = np.sqrt(prediction.epistemic[order, target])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for ax, std, color, label in ((axes[0], ale, "tab:orange", "aleatoric"), (axes[1], epi, "tab:green", "epistemic")):
        ax.fill_between(x, mean - 2 * std, mean + 2 * std, color=color, alpha=0.3, label=f"mean +- 2 {label} std")
        if x_train is not None:
            ax.scatter(np.ravel(x_train), np.asarray(y_train)[:, target], s=4, color="black", alpha=0.4,
                       label="training data")
        if y_true is not None:
            ax.plot(x, np.asarray(y_true)[order, target], color="gray", lw=1, ls="--", label="truth")
        ax.plot(x, mean, color="tab:blue", lw=1.5, label="ensemble mean")
        ax.set_title(f"{title}: {label} uncertainty")
        ax.set_xlabel("x")
        ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel("y")
    fig.tight_layout()
    return _save(fig, path)


def plot_calibration(expected, observed, path, target_names=None) -> Path | bytes:
    """Observed vs expected coverage of central intervals, one line per target."""
    plt = _pyplot()
    observed = np.atleast_2d(np.asarray(observed))
    if observed.shape[0] == len(expected) and observed.shape[1] != len(expected):
        observed = observed.T
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], color="gray", ls="--", lw=1, label="perfect calibration")
    for j, obs in enumerate(observed):
        name = target_names[j] if target_names else f"target {j}"
        ax.plot(expected, obs, lw=1.5, label=name)
    ax.set_xlabel("expected coverage of central interval")
    ax.set_ylabel("observed coverage")
    ax.set_title("Calibration")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_search_trace(objectives, path, failed=None, units: str = "standardized") -> Path | bytes:
    """Validation NLL of each evaluation in order, and the best so far.

    ``units`` names the scale of ``objectives`` on the axis label: ``"standardized"`` for the
    catalog's ``objective``, ``"original units"`` for its ``valid_nll``.
    """
    plt = _pyplot()
    y = np.asarray(objectives, dtype=float)
    idx = np.arange(1, len(y) + 1)
    finite = np.isfinite(y)
    best = np.minimum.accumulate(np.where(finite, y, np.inf))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(idx[finite], y[finite], s=10, alpha=0.6, label="evaluation")
    shown = np.isfinite(best)
    ax.step(idx[shown], best[shown], where="post", color="tab:red", label="best so far")
    if finite.any():
        lo, hi = np.nanmin(y[finite]), np.nanpercentile(y[finite], 90)
        ax.set_ylim(lo - 0.1 * (hi - lo + 1e-9), hi + 0.1 * (hi - lo + 1e-9))
    n_failed = int((~finite).sum()) if failed is None else failed
    ax.set_xlabel("evaluation")
    ax.set_ylabel(f"validation NLL ({units})")
    ax.set_title(f"Search trace ({n_failed} failed)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def _save(fig, path) -> Path | bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110)
    finally:
        plt.close(fig)
    if path is None:
        return buf.getvalue()
    from autodeuq.fileio import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, buf.getvalue())
