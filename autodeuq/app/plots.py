"""Figures (PNG files): the 1-D uncertainty plot; for any number of features, predicted against
observed values with the aleatoric and epistemic parts as error bars, the absolute error against
the predicted standard deviation, and the calibration curve; the search trace.

Each function writes its figure to ``path`` (atomically, never through a link: see
:func:`autodeuq.core.fileio.atomic_write`) and returns the path, or returns the PNG bytes when
``path`` is None, so a caller can render every figure before it writes any.
"""
from __future__ import annotations

import functools
import io
import warnings
from pathlib import Path

import numpy as np


def _quiet_glyphs(plot):
    """``plot`` without matplotlib's warning for each character its font lacks.

    A class label or a column name in emoji or CJK characters is drawn as boxes by the default
    font (DejaVu Sans), and matplotlib warns once per character and per rendering: 24 lines for
    one run's figures. The figure is the same without them.
    """
    @functools.wraps(plot)
    def quiet(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
            return plot(*args, **kwargs)

    return quiet


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@_quiet_glyphs
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


@_quiet_glyphs
def plot_calibration(expected, observed, path, target_names=None, data: str | None = None,
                     n_rows: int | None = None) -> Path | bytes:
    """Observed vs expected coverage of central intervals, one line per target.

    ``data`` names the rows the curve was computed on (e.g. ``"test"``) and ``n_rows`` counts
    them; both go into the title.
    """
    plt = _pyplot()
    observed = np.atleast_2d(np.asarray(observed))
    if observed.shape[0] == len(expected) and observed.shape[1] != len(expected):
        observed = observed.T
    fig, ax = plt.subplots(figsize=(4.8, 4.8))
    ax.plot([0, 1], [0, 1], color="gray", ls="--", lw=1, label="perfect calibration")
    for j, obs in enumerate(observed):
        name = target_names[j] if target_names else f"target {j}"
        ax.plot(expected, obs, lw=1.5, label=name)
    ax.set_xlabel("expected coverage of central interval")
    ax.set_ylabel("observed coverage")
    ax.set_title("Calibration" + _on_rows(data, n_rows))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def _on_rows(data, n_rows) -> str:
    if data is None:
        return ""
    return f" on {data} data" + ("" if n_rows is None else f" ({n_rows} rows)")


@_quiet_glyphs
def plot_predicted_vs_observed(y_true, prediction, path, target_names=None, data: str | None = None
                               ) -> Path | bytes:
    """Predicted mean against observed value, with +-2 std error bars: aleatoric on the left,
    epistemic on the right (one row of panels per target).

    ``prediction`` is an :class:`~autodeuq.ensemble.UncertaintyPrediction` for the rows of
    ``y_true`` (shape (n, n_targets)); ``data`` names those rows in the titles. Every row is a
    point; beyond :data:`MAX_ERROR_BARS` rows the bars are drawn on that many of them, spread
    evenly over the rows sorted by predicted mean (a bar on each of 1,252 rows made a solid
    blob), and the legend says so.
    """
    plt = _pyplot()
    y_true = np.asarray(y_true, dtype=float).reshape(len(y_true), -1)
    n_targets = y_true.shape[1]
    fig, axes = plt.subplots(n_targets, 2, figsize=(11, 4.6 * n_targets), squeeze=False)
    for t in range(n_targets):
        name = target_names[t] if target_names else f"target {t}"
        obs, mean = y_true[:, t], prediction.mean[:, t]
        lo = float(min(obs.min(), mean.min()))
        hi = float(max(obs.max(), mean.max()))
        for ax, std, color, label in ((axes[t, 0], prediction.aleatoric_std[:, t], "tab:orange", "aleatoric"),
                                      (axes[t, 1], prediction.epistemic_std[:, t], "tab:green", "epistemic")):
            ax.plot([lo, hi], [lo, hi], color="gray", ls="--", lw=1, label="predicted = observed")
            barred = _evenly_spread(np.argsort(mean, kind="stable"), MAX_ERROR_BARS)
            if len(barred) < len(obs):
                ax.plot(obs, mean, "o", ms=3, color=color, alpha=0.3, label=f"mean (all {len(obs)} rows)")
            ax.errorbar(obs[barred], mean[barred], yerr=2 * std[barred], fmt="o", ms=3, color=color, ecolor=color,
                        elinewidth=0.8, alpha=0.6,
                        label=f"mean +- 2 {label} std" + ("" if len(barred) == len(obs) else
                                                          f" ({len(barred)} of {len(obs)} rows)"))
            thinned = ("" if len(barred) == len(obs) else
                       f"\nbars on {len(barred)} rows, evenly spread over the predictions")
            ax.set_xlabel(f"observed {name}")
            ax.set_ylabel(f"predicted {name}")
            ax.set_title(f"{name}: {label} uncertainty{_on_rows(data, len(obs))}{thinned}", fontsize=10)
            ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


MAX_ERROR_BARS = 200
"""Error bars drawn at most per panel of :func:`plot_predicted_vs_observed`."""


def _evenly_spread(order: np.ndarray, most: int) -> np.ndarray:
    """At most ``most`` entries of ``order``, evenly spaced along it (the first and last included)."""
    if len(order) <= most:
        return order
    return order[np.unique(np.linspace(0, len(order) - 1, most).round().astype(int))]


@_quiet_glyphs
def plot_error_vs_std(y_true, prediction, path, target_names=None, data: str | None = None) -> Path | bytes:
    """Absolute error of the predicted mean against the predicted total std, one panel per target.

    Does the uncertainty rank the errors? The title gives Spearman's rank correlation; the lines
    ``|error| = std`` and ``|error| = 2 std`` bound about 68 % and 95 % of the points of a
    calibrated Gaussian prediction, and the red markers give the mean absolute error in each
    tenth of the rows sorted by std (about 0.8 std for a calibrated Gaussian).
    """
    from scipy.stats import spearmanr

    plt = _pyplot()
    y_true = np.asarray(y_true, dtype=float).reshape(len(y_true), -1)
    n_targets = y_true.shape[1]
    fig, axes = plt.subplots(1, n_targets, figsize=(7.8 * n_targets, 4.8), squeeze=False)
    for t, ax in enumerate(axes[0]):
        name = target_names[t] if target_names else f"target {t}"
        std, error = prediction.std[:, t], np.abs(y_true[:, t] - prediction.mean[:, t])
        ax.scatter(std, error, s=8, alpha=0.5, color="tab:blue", label="row")
        top = float(std.max()) * 1.05 if len(std) else 1.0
        for k, style in ((1, "--"), (2, ":")):
            ax.plot([0, top], [0, k * top], color="gray", ls=style, lw=1, label=f"|error| = {k} std")
        if len(std) >= 10:
            order = np.argsort(std)
            bins = np.array_split(order, 10)
            ax.plot([std[b].mean() for b in bins], [error[b].mean() for b in bins], "D-", color="tab:red", ms=4,
                    lw=1, label="mean |error| per std decile")
        rho = spearmanr(std, error).statistic if len(std) > 2 and np.ptp(std) > 0 else float("nan")
        ax.set_xlabel(f"predicted std of {name}")
        ax.set_ylabel(f"|observed - predicted mean| of {name}")
        ax.set_title(f"{name}: error vs uncertainty{_on_rows(data, len(std))}\nSpearman rank correlation "
                     f"{rho:.2f}", fontsize=10)
        # Beside the axes: inside, it covered the rows of largest error, the ones a reader looks for.
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


@_quiet_glyphs
def plot_search_trace(objectives, path, failed=None, units: str = "standardized", status=None,
                      members=()) -> Path | bytes:
    """Validation NLL of each evaluation in order, and the best so far.

    Every evaluation is on the axes: the y range covers the best NLL up to the 90th percentile
    (all of them below 10 evaluations), and an NLL above it is drawn on the top edge as an upward
    triangle; failed evaluations (no
    NLL) are red crosses on the top edge. ``status`` (one ``"done"``, ``"discarded"`` or
    ``"failed"`` per evaluation) draws early-discarded ones hollow; ``members`` are the
    1-based positions of the ensemble's members, drawn as stars. ``units`` names the scale of
    ``objectives`` on the axis label: ``"standardized"`` for the catalog's ``objective``,
    ``"original units"`` for its ``valid_nll``.
    """
    plt = _pyplot()
    y = np.asarray(objectives, dtype=float)
    idx = np.arange(1, len(y) + 1)
    status = np.asarray(["done" if np.isfinite(v) else "failed" for v in y] if status is None else status)
    finite = np.isfinite(y)
    best = np.minimum.accumulate(np.where(finite, y, np.inf))
    fig, ax = plt.subplots(figsize=(9.5, 4.4))
    if finite.any():
        # a few evaluations are all shown as they are; beyond that, the worst tenth is clipped
        top = 90 if finite.sum() >= 10 else 100
        lo, hi = float(np.min(y[finite])), float(np.percentile(y[finite], top))
        pad = 0.08 * (hi - lo) if hi > lo else 1.0
        lo, hi = lo - pad, hi + pad
    else:
        lo, hi = 0.0, 1.0
    inside = finite & (y <= hi)
    above = finite & (y > hi)
    for mask, marker, face, label in (
            (inside & (status != "discarded"), "o", "tab:blue", "evaluation"),
            (inside & (status == "discarded"), "o", "none", "discarded early"),
            (above & (status != "discarded"), "^", "tab:blue", "NLL above the axis (clipped)"),
            (above & (status == "discarded"), "^", "none", "discarded early, NLL above the axis (clipped)")):
        if mask.any():
            ax.scatter(idx[mask], np.minimum(y[mask], hi), s=14, marker=marker, facecolors=face,
                       edgecolors="tab:blue", alpha=0.7, label=f"{label} ({int(mask.sum())})", clip_on=False)
    n_failed = int((~finite).sum()) if failed is None else failed
    if (~finite).any():
        ax.scatter(idx[~finite], np.full(int((~finite).sum()), hi), s=24, marker="x", color="tab:red",
                   label=f"failed ({int((~finite).sum())})", clip_on=False)
    chosen = np.asarray([m for m in members if 1 <= m <= len(y) and finite[m - 1]], dtype=int)
    if chosen.size:
        ax.scatter(chosen, np.minimum(y[chosen - 1], hi), s=110, marker="*", color="gold", edgecolors="black",
                   linewidths=0.6, zorder=5, label=f"ensemble member ({chosen.size})", clip_on=False)
    shown = np.isfinite(best)
    ax.step(idx[shown], best[shown], where="post", color="tab:red", label="best so far")
    ax.set_ylim(lo, hi)
    ax.set_xlim(0, len(y) + 1)
    ax.set_xlabel("evaluation")
    ax.set_ylabel(f"validation NLL ({units})")
    n_discarded = int((status == "discarded").sum())
    ax.set_title(f"Search trace: {len(y)} evaluations, {n_failed} failed, {n_discarded} discarded early")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
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
    from autodeuq.core.fileio import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, buf.getvalue())
