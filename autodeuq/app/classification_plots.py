"""Figures (PNG files) of class-probability predictions: the reliability diagram, the confusion
matrix, the uncertainty of right and wrong rows, and for a 2-D example the entropies over the
plane.

As in :mod:`autodeuq.app.plots`, each function writes its figure to ``path`` (atomically) and returns
the path, or returns the PNG bytes when ``path`` is None. Unlike there, ``path`` comes first.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from autodeuq.app.plots import _pyplot, _quiet_glyphs, _save
from autodeuq.classification_metrics import ECE_BINS, check_proba, classification_metrics, reliability_bins
from autodeuq.ensemble.categorical import check_codes

__all__ = ["plot_reliability", "plot_confusion", "plot_uncertainty_correct_wrong", "plot_decision_2d"]


@_quiet_glyphs
def plot_reliability(path, proba, y_codes, bins: int = ECE_BINS, data: str | None = None) -> Path | bytes:
    """Reliability diagram: accuracy against top-class confidence in equal-width bins (Guo et al. 2017).

    The bars give each bin's accuracy, the diagonal what a calibrated model reaches; the lower
    panel counts the rows per bin. The title gives the number of rows (and ``data``, naming
    them, e.g. ``"test"``) and the expected calibration error.
    """
    plt = _pyplot()
    edges, counts, confidence, accuracy = reliability_bins(proba, y_codes, bins)
    ece = classification_metrics(proba, y_codes, bins=bins)["ece"]
    width = edges[1] - edges[0]
    fig, (ax, ax_count) = plt.subplots(2, 1, figsize=(5.2, 6.2), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    filled = counts > 0
    ax.plot([0, 1], [0, 1], color="gray", ls="--", lw=1, label="perfect calibration")
    ax.bar(edges[:-1][filled], accuracy[filled], width=width, align="edge", color="tab:blue", alpha=0.7,
           edgecolor="black", lw=0.5, label="accuracy of the bin")
    ax.plot(confidence[filled], accuracy[filled], "o", color="tab:red", ms=4, label="at the bin's mean confidence")
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    on = f" on {data} data" if data else ""
    ax.set_title(f"Reliability{on} ({int(counts.sum())} rows)\nECE {ece:.3f} over {bins} bins", fontsize=10)
    ax.legend(loc="upper left", fontsize=8)
    ax_count.bar(edges[:-1], counts, width=width, align="edge", color="gray", edgecolor="black", lw=0.5)
    ax_count.set_xlim(0, 1)
    ax_count.set_xlabel("confidence (probability of the predicted class)")
    ax_count.set_ylabel("rows")
    fig.tight_layout()
    return _save(fig, path)


@_quiet_glyphs
def plot_confusion(path, proba, y_codes, classes, data: str | None = None) -> Path | bytes:
    """Confusion matrix of the most probable class against the observed one.

    Each cell gives its row count; its colour is the fraction of its observed class (row), so
    that rare classes show as clearly as common ones. The title gives the rows and the accuracy.
    """
    plt = _pyplot()
    proba = check_proba(proba)
    n_rows, n_classes = proba.shape
    codes = check_codes(y_codes, n_rows, n_classes)
    names = [str(c) for c in classes]
    if len(names) != n_classes:
        raise ValueError(f"classes must name the {n_classes} classes, got {len(names)}")
    matrix = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(matrix, (codes, np.argmax(proba, axis=1)), 1)
    totals = matrix.sum(axis=1, keepdims=True)
    share = np.divide(matrix, totals, out=np.zeros(matrix.shape), where=totals > 0)
    side = 1.6 + 0.55 * n_classes
    fig, ax = plt.subplots(figsize=(side + 1.2, side))
    image = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, label="fraction of the observed class")
    if n_classes <= 30:  # beyond, the counts no longer fit in their cells
        for (i, j), count in np.ndenumerate(matrix):
            ax.text(j, i, str(count), ha="center", va="center", fontsize=8,
                    color="white" if share[i, j] > 0.5 else "black")
    slanted = n_classes > 4  # longer rows of names overlap unless slanted
    ax.set_xticks(range(n_classes), names, rotation=45 if slanted else 0, ha="right" if slanted else "center")
    ax.set_yticks(range(n_classes), names)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("observed class")
    on = f" on {data} data" if data else ""
    ax.set_title(f"Confusion matrix{on} ({n_rows} rows)\naccuracy {np.trace(matrix) / n_rows:.3f}", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


@_quiet_glyphs
def plot_uncertainty_correct_wrong(path, uncertainties: dict, correct, data: str | None = None) -> Path | bytes:
    """Histograms of each uncertainty for the rows classified right and wrong, one panel each.

    A useful uncertainty puts the wrong rows to the right of the right ones. Each panel shares
    its bins between the two groups and shows densities, so that a few wrong rows compare with
    many right ones; the legend counts the rows and gives each group's median, and the title
    the AUROC of the uncertainty for flagging the wrong rows (none if either group is empty).
    """
    from sklearn.metrics import roc_auc_score

    plt = _pyplot()
    correct = np.asarray(correct, dtype=bool).reshape(-1)
    if not uncertainties:
        raise ValueError("plot_uncertainty_correct_wrong needs at least one uncertainty")
    fig, axes = plt.subplots(1, len(uncertainties), figsize=(4.8 * len(uncertainties), 4.0), squeeze=False)
    for ax, (name, values) in zip(axes[0], uncertainties.items()):
        values = np.asarray(values, dtype=float).reshape(-1)
        if values.shape != correct.shape:
            raise ValueError(f"uncertainty {name!r} has {values.size} values for {correct.size} rows")
        edges = np.histogram_bin_edges(values, bins=30)
        for group, color, label in ((correct, "tab:blue", "right"), (~correct, "tab:red", "wrong")):
            if group.any():
                ax.hist(values[group], bins=edges, density=True, alpha=0.5, color=color,
                        label=f"{label} ({int(group.sum())} rows, median {np.median(values[group]):.3g})")
        mixed = 0 < correct.sum() < correct.size
        auroc = f"AUROC for wrong rows {roc_auc_score(~correct, values):.3f}" if mixed else "no AUROC: one group only"
        ax.set_xlabel(name)
        ax.set_ylabel("density")
        ax.set_title(f"{name}\n{auroc}", fontsize=10)
        ax.legend(fontsize=8)
    on = f" on {data} data" if data else ""
    fig.suptitle(f"Uncertainty of right and wrong predictions{on} ({correct.size} rows)", fontsize=11)
    fig.tight_layout()
    return _save(fig, path)


@_quiet_glyphs
def plot_decision_2d(path, xx, yy, total, aleatoric, epistemic, x_train, labels,
                     title: str = "Ensemble classifier") -> Path | bytes:
    """Total, aleatoric and epistemic entropy over a 2-D plane, with the training points.

    For a 2-D toy problem: the aleatoric entropy should be high along the boundaries between
    classes (where the data themselves are mixed), the epistemic part high away from the data
    (where the members extrapolate differently), and the total is their sum. All three panels
    share one colour scale, so that they can be compared.

    Parameters
    ----------
    path : str, Path or None
    xx, yy : ndarray of shape (g1, g2)
        The grid, as from :func:`numpy.meshgrid`.
    total, aleatoric, epistemic : array_like of g1 * g2 values
        The entropies (nats) at the grid's points, in the order of ``xx.ravel()`` or shaped like ``xx``.
    x_train : array_like of shape (n, 2)
    labels : array_like of shape (n,)
        The training points' classes, of any type; one colour each.
    title : str
    """
    plt = _pyplot()
    xx, yy = np.asarray(xx, dtype=float), np.asarray(yy, dtype=float)
    if xx.ndim != 2 or yy.shape != xx.shape:
        raise ValueError(f"xx and yy must be one 2-D grid, got shapes {xx.shape} and {yy.shape}")
    surfaces = [np.asarray(a, dtype=float).reshape(xx.shape) for a in (total, aleatoric, epistemic)]
    x_train = np.asarray(x_train, dtype=float).reshape(-1, 2)
    labels = np.asarray(labels)
    top = max(float(np.nanmax(surfaces[0])), 1e-12)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), sharex=True, sharey=True)
    levels = np.linspace(0.0, top, 21)
    names = ("total entropy", "aleatoric entropy", "epistemic (mutual information)")
    for ax, surface, name in zip(axes, surfaces, names):
        filled = ax.contourf(xx, yy, np.clip(surface, 0.0, top), levels=levels, cmap="viridis")
        for k, label in enumerate(np.unique(labels)):
            at = labels == label
            ax.scatter(x_train[at, 0], x_train[at, 1], s=8, color=f"C{k % 10}", edgecolors="white", linewidths=0.3,
                       label=str(label))
        ax.set_title(f"{title}: {name}", fontsize=10)
        ax.set_xlabel("x1")
    axes[0].set_ylabel("x2")
    axes[0].legend(title="training class", fontsize=7, loc="upper left")
    fig.colorbar(filled, ax=list(axes), label="nats", shrink=0.9, format="%.2f")
    return _save(fig, path)
