"""Figures: data in, PNG file out (matplotlib, Agg backend). No other I/O."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _save(figure, directory: Path, name: str) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    figure.savefig(path, dpi=110, bbox_inches="tight")
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
