"""Figures: data in, PNG file out (matplotlib, Agg backend), or the Figure itself for a notebook. No other I/O."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

# Agg everywhere (workers, the CLI, the UI), except in a Jupyter kernel, which names its inline backend in
# MPLBACKEND: there a returned Figure is shown inline
if "inline" not in os.environ.get("MPLBACKEND", ""):
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from .files import atomic_path


def _save(figure, directory: Path | None, name: str):
    """Write ``figure`` to ``directory/name.png`` (atomically) and return the path; with ``directory`` None,
    return the figure itself (a notebook shows it), released from pyplot so that it is not shown twice."""
    if directory is None:
        figure.tight_layout()
        plt.close(figure)
        return figure
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    figure.tight_layout()
    try:  # a reader (the UI) sees the previous figure or this one, never half of it
        with atomic_path(path) as temporary:
            figure.savefig(temporary, dpi=110, bbox_inches="tight", format="png")
    finally:
        plt.close(figure)
    return path


def training_loss_figure(losses: list[float], directory: Path, *, title: str) -> Path:
    figure, axis = plt.subplots(figsize=(5, 3))
    axis.plot(np.arange(len(losses)), losses, lw=1)
    axis.set_xlabel("step")
    axis.set_ylabel("cross-entropy (nats/byte)")
    axis.set_title(title)
    return _save(figure, directory, "training_loss")


def jacobian_heatmaps(means: dict[tuple[int, str], np.ndarray], directory: Path, *, title: str) -> Path:
    """Mean Jacobian minus identity per (layer, sublayer): where each sublayer writes."""
    keys = sorted(means)
    columns = 2
    rows = (len(keys) + 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(6, 2.8 * rows), squeeze=False)
    for axis, key in zip(axes.ravel(), keys):
        matrix = means[key] - np.eye(means[key].shape[0])
        limit = np.abs(matrix).max() or 1.0
        axis.imshow(matrix, cmap="RdBu_r", vmin=-limit, vmax=limit)
        axis.set_title(f"layer {key[0]} {key[1]}: E[J] - I", fontsize=8)
        axis.set_xticks([])
        axis.set_yticks([])
    figure.suptitle(title)
    return _save(figure, directory, "mean_jacobians")


def eigenvalue_clouds(eigenvalues: dict[int, np.ndarray], directory: Path, *, title: str) -> Path:
    """Eigenvalues of every sublayer's mean Jacobian in the complex plane, unit circle drawn."""
    depths = sorted(eigenvalues)
    columns = min(4, len(depths))
    rows = (len(depths) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(2.6 * columns, 2.6 * rows), squeeze=False)
    circle = np.exp(1j * np.linspace(0, 2 * np.pi, 256))
    for axis in axes.ravel()[len(depths):]:
        axis.axis("off")
    for axis, depth in zip(axes.ravel(), depths):
        values = eigenvalues[depth]
        axis.plot(circle.real, circle.imag, color="0.6", lw=0.8)
        axis.scatter(values.real, values.imag, s=5, alpha=0.7)
        axis.set_aspect("equal")
        axis.set_title(f"depth {depth} ({'attn' if depth % 2 == 0 else 'mlp'})", fontsize=8)
        axis.tick_params(labelsize=6)
    figure.suptitle(title)
    return _save(figure, directory, "eigenvalue_clouds")


def metrics_by_depth(curves: dict[str, dict[str, tuple[list, list]]], directory: Path | None, *, title: str,
                     name: str = "metrics_by_depth", log_y: tuple[str, ...] = (),
                     x_label: str = "depth (2 layer + [mlp])"):
    """One panel per metric: value vs depth, one line per checkpoint. curves[metric][label] = (x, y)."""
    metrics = list(curves)
    columns = min(3, len(metrics))
    rows = (len(metrics) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 2.8 * rows), squeeze=False)
    for axis in axes.ravel()[len(metrics):]:
        axis.axis("off")
    for axis, metric in zip(axes.ravel(), metrics):
        for label, (x, y) in sorted(curves[metric].items()):
            axis.plot(x, y, marker="o", ms=3, lw=1, label=label)
        axis.set_title(metric, fontsize=9)
        axis.set_xlabel(x_label, fontsize=8)
        if metric in log_y:
            axis.set_yscale("log")
        axis.legend(fontsize=6)
    figure.suptitle(title)
    return _save(figure, directory, name)


def community_distributions(sizes: dict[int, list[int]], participation: dict[int, np.ndarray], directory: Path, *,
                            title: str) -> Path:
    """Community sizes (left) and participation coefficients (right) per boundary depth, with the primary
    boundary threshold of each graph (its 75th percentile of participation) and the absolute P = 0.3."""
    from .topology import BOUNDARY_PARTICIPATION, BOUNDARY_QUANTILE

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
    depths = sorted(sizes)
    left.boxplot([sizes[d] for d in depths], positions=depths, widths=0.6)
    left.set_xlabel("boundary depth (2 layer + [pre_mlp])")
    left.set_ylabel("community size (units)")
    right.violinplot([participation[d] for d in depths], positions=depths, widths=0.8, showmedians=True)
    right.plot(depths, [np.quantile(participation[d], BOUNDARY_QUANTILE) for d in depths], color="black", lw=0.8,
               marker="_", label=f"boundary: above the {BOUNDARY_QUANTILE:.0%} quantile")
    right.axhline(BOUNDARY_PARTICIPATION, color="red", lw=0.8, ls="--", label="absolute rule P > 0.3")
    if len(depths) > 16:  # label every few depths so the ticks stay legible
        step = int(np.ceil(len(depths) / 12))
        for axis in (left, right):
            axis.set_xticks(depths[::step], [str(d) for d in depths[::step]])
    right.set_xlabel("boundary depth")
    right.set_ylabel("participation coefficient")
    right.legend(fontsize=7)
    figure.suptitle(title)
    return _save(figure, directory, "communities")


def coupling_by_depth(series: dict[str, tuple[list, list, list]], directory: Path, *, title: str) -> Path:
    """Rank-biserial effect vs depth per checkpoint; FDR-significant sublayers filled; undefined tests (effect
    None) leave gaps in the line and are marked with an x on the zero line."""
    figure, axis = plt.subplots(figsize=(6, 3.2))
    for label, (depths, effects, significant) in sorted(series.items()):
        effects = np.asarray([np.nan if e is None else e for e in effects], dtype=np.float64)
        line, = axis.plot(depths, effects, lw=1, label=label)
        undefined = np.isnan(effects)
        if undefined.any():
            axis.scatter(np.asarray(depths)[undefined], np.zeros(int(undefined.sum())), marker="x",
                         color=line.get_color(), s=20, zorder=3)
        marked = np.asarray([bool(s) for s in significant]) & ~undefined
        axis.scatter(np.asarray(depths)[marked], np.asarray(effects)[marked], color=line.get_color(), s=30, zorder=3)
        axis.scatter(np.asarray(depths)[~marked & ~undefined], effects[~marked & ~undefined], facecolors="none",
                     edgecolors=line.get_color(), s=30, zorder=3)
    axis.axhline(0, color="0.5", lw=0.8)
    axis.set_xlabel("depth (2 layer + [mlp])")
    axis.set_ylabel("boundary effect (rank-biserial)\n> 0 amplified, < 0 suppressed")
    axis.legend(fontsize=7, title="filled: q < 0.05; x: undefined", title_fontsize=7)
    axis.set_title(title)
    return _save(figure, directory, "coupling_by_depth")


def pseudospectra_contours(panels: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
                           growth: dict[int, tuple[float, float]], directory: Path, *, title: str,
                           epsilons=(1e-3, 1e-2, 1e-1)) -> Path:
    """Left panels: log10 sigma_min(zI - J) contours at the eps levels over a grid, eigenvalues as dots, one
    panel per chosen sublayer (label -> (real grid, imaginary grid, sigma_min, eigenvalues)). Right: the
    largest and median growth beyond the spectrum, ||product|| / prod rho, against the window length."""
    figure, axes = plt.subplots(1, len(panels) + 1, figsize=(4 * (len(panels) + 1), 3.6), squeeze=False)
    levels = np.log10(sorted(epsilons))
    for axis, (label, (real, imaginary, sigma, eigenvalues)) in zip(axes[0], panels.items()):
        contour = axis.contour(real, imaginary, np.log10(np.maximum(sigma, 1e-300)), levels=levels,
                               cmap="viridis")
        axis.clabel(contour, fmt=lambda level: f"1e{level:.0f}", fontsize=6)
        axis.scatter(eigenvalues.real, eigenvalues.imag, s=4, color="black")
        axis.set_aspect("equal")
        axis.set_title(label, fontsize=8)
        axis.tick_params(labelsize=6)
    axis = axes[0][-1]
    windows = sorted(growth)
    axis.plot(windows, [growth[w][0] for w in windows], marker="o", label="largest")
    axis.plot(windows, [growth[w][1] for w in windows], marker="s", label="median")
    axis.axhline(1.0, color="0.6", lw=0.8)
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("window k (sublayer maps)")
    axis.set_ylabel("||J_{l+k-1}...J_l|| / prod rho")
    axis.legend(fontsize=7)
    axis.set_title("growth beyond the spectrum", fontsize=8)
    figure.suptitle(title)
    return _save(figure, directory, "pseudospectra")


def study_lines(series: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]], directory: Path, *, name: str,
                title: str, x_label: str = "relative depth", log_y: tuple[str, ...] = ()) -> Path:
    """Across partitions: one panel per quantity, one line per model@checkpoint.
    series[quantity][label] = (x, y)."""
    quantities = list(series)
    figure, axes = plt.subplots(1, len(quantities), figsize=(5 * len(quantities), 3.4), squeeze=False)
    for axis, quantity in zip(axes[0], quantities):
        for label, (x, y) in sorted(series[quantity].items()):
            axis.plot(x, y, marker="o", ms=2.5, lw=1, label=label)
        axis.set_title(quantity, fontsize=9)
        axis.set_xlabel(x_label, fontsize=8)
        if quantity in log_y:
            axis.set_yscale("log")
        axis.legend(fontsize=5.5, ncol=2)
    figure.suptitle(title)
    return _save(figure, directory, name)


def study_bars(groups: dict[str, dict[str, float]], directory: Path, *, name: str, title: str, y_label: str) -> Path:
    """Grouped bars across partitions: groups[partition][bar] = value (one colour per bar name)."""
    labels = list(groups)
    bars = sorted({bar for values in groups.values() for bar in values})
    width = 0.8 / max(1, len(bars))
    figure, axis = plt.subplots(figsize=(max(5, 0.7 * len(labels) * max(1, len(bars)) ** 0.5 + 2), 3.4))
    positions = np.arange(len(labels))
    for index, bar in enumerate(bars):
        axis.bar(positions + index * width, [groups[label].get(bar, np.nan) for label in labels], width, label=bar)
    axis.set_xticks(positions + width * (len(bars) - 1) / 2)
    axis.set_xticklabels(labels, rotation=45, ha="right", fontsize=7)
    axis.set_ylabel(y_label, fontsize=8)
    axis.axhline(0, color="0.6", lw=0.6)
    axis.legend(fontsize=7)
    figure.suptitle(title)
    return _save(figure, directory, name)


def claims_panels(checkpoints: dict[str, "CheckpointData"], directory: Path, *, title: str,  # noqa: F821
                  surgery_products: dict[str, dict[float, np.ndarray]] | None = None) -> Path:
    """Four panels, one line per checkpoint against relative depth: symmetry (the asymmetry index of J - I, solid;
    Henrici's dep/||J - I||_F, dotted), rotation (the rotation share, solid; the complex fraction, dotted), the
    cumulative effective rank (log y; dashed: Schur surgery at alpha = 0 where given) and the coupling effect
    (filled: FDR-significant; the marker's shape: operator type)."""
    from .spectra import NEAR_SYMMETRIC_ASYMMETRY, ROTATION_DOMINATED_SHARE

    figure, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    markers = {"near_symmetric": "o", "rotation_dominated": "s", "other": "^"}
    for label, data in checkpoints.items():
        x = data.relative_depth
        line, = axes[0].plot(x, data.measure("asymmetry_index"), lw=1.2, label=f"{label}: asymmetry")
        axes[0].plot(x, data.measure("henrici_rel_j_minus_i"), lw=0.9, ls=":", color=line.get_color(),
                     label=f"{label}: dep / ||J - I||_F")
        axes[1].plot(x, data.measure("rotation_share"), lw=1.2, color=line.get_color(), label=f"{label}: rotation share")
        axes[1].plot(x, data.measure("frac_complex"), lw=0.9, ls=":", color=line.get_color(),
                     label=f"{label}: complex fraction")
        cumulative = data.cumulative["effective_rank"]
        depth_x = np.arange(len(cumulative)) / max(1, len(cumulative) - 1)
        axes[2].plot(depth_x, cumulative, lw=1.2, color=line.get_color(), label=f"{label}, alpha = 1")
        if surgery_products and label in surgery_products and 0.0 in surgery_products[label]:
            ranks = surgery_products[label][0.0]
            axes[2].plot(np.arange(len(ranks)) / max(1, len(ranks) - 1), ranks, lw=1.2, ls="--",
                         color=line.get_color(), label=f"{label}, alpha = 0")
        effect = data.coupling_effect
        axes[3].plot(x, effect, lw=0.8, color=line.get_color(), label=label)
        for kind, marker in markers.items():
            chosen = (data.operator_type == kind) & np.isfinite(effect)
            significant = chosen & data.coupling_significant
            axes[3].scatter(x[significant], effect[significant], marker=marker, color=line.get_color(), s=22)
            axes[3].scatter(x[chosen & ~significant], effect[chosen & ~significant], marker=marker, s=22,
                            facecolors="none", edgecolors=line.get_color())
    axes[0].axhline(NEAR_SYMMETRIC_ASYMMETRY, color="0.6", lw=0.8, ls=":")
    axes[0].set_ylabel("symmetry of J - I (0 = symmetric)")
    axes[1].axhline(ROTATION_DOMINATED_SHARE, color="0.6", lw=0.8, ls=":")
    axes[1].set_ylabel("rotation")
    axes[2].set_yscale("log")
    axes[2].set_ylabel("effective rank of J_l ... J_0")
    axes[3].axhline(0, color="0.6", lw=0.8)
    axes[3].set_ylabel("boundary effect (rank-biserial)\no near-sym., s rotation-dom., ^ other")
    for axis in axes:
        axis.set_xlabel("relative depth")
        axis.legend(fontsize=5)
    figure.suptitle(title)
    figure.tight_layout()
    return _save(figure, directory, "claims")
