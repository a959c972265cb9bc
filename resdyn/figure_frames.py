"""The data of each figure, from polars frames of the tables: one function per figure, shared by the assets
(which draw into the run's figure directory) and the notebook API (which draws inline), so a notebook
figure is the UI's figure.

Each ``*_figure`` function takes frames and returns what :mod:`resdyn.figures` draws; ``directory`` is
where the PNG goes, or None for a matplotlib Figure.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from resdyn import figures
from resdyn.depth import SCHUR_ORDERING

DEPTH_CURVES = ("henrici_rel_j_minus_i", "frac_complex", "self_alignment", "effective_rank",
                "log10_condition", "spectral_radius")
RANK_CURVES = ("effective_rank", "participation_ratio", "stable_rank")


def depth_curves(frames: dict[str, pl.DataFrame], metrics, x_column: str = "depth") -> dict:
    """curves[metric][checkpoint] = (x, y), each checkpoint's rows sorted by ``x_column``."""
    curves: dict[str, dict[str, tuple[list, list]]] = {metric: {} for metric in metrics}
    for checkpoint, frame in sorted(frames.items()):
        ordered = frame.sort(x_column)
        for metric in metrics:
            curves[metric][checkpoint] = (ordered[x_column].to_list(), ordered[metric].to_list())
    return curves


def metrics_figure(model: str, layer_metrics: dict[str, pl.DataFrame], directory: Path | None):
    """Metrics vs depth, one line per checkpoint of ``model`` (``layer_metrics`` by checkpoint)."""
    return figures.metrics_by_depth(depth_curves(layer_metrics, DEPTH_CURVES), directory,
                                    title=f"{model}: metrics vs depth")


def cumulative_rank_figure(model: str, cumulative_rank: dict[str, pl.DataFrame], directory: Path | None):
    """Ranks of the cumulative Jacobian vs depth, one line per checkpoint (log scale)."""
    return figures.metrics_by_depth(depth_curves(cumulative_rank, RANK_CURVES), directory,
                                    title=f"{model}: cumulative Jacobian rank", name="cumulative_rank", log_y=RANK_CURVES)


def schur_surgery_figure(partition: str, schur_surgery: pl.DataFrame, directory: Path | None):
    """Effective rank of the cumulative product of J(alpha) vs depth, one line per alpha (LAPACK's Schur ordering)."""
    curves = {"effective_rank": {}}
    schur_surgery = schur_surgery.filter(pl.col("schur_ordering") == SCHUR_ORDERING)
    for (alpha,), rows in schur_surgery.sort("alpha", "depth").group_by("alpha", maintain_order=True):
        curves["effective_rank"][f"alpha={alpha}"] = (rows["depth"].to_list(), rows["effective_rank"].to_list())
    return figures.metrics_by_depth(curves, directory, title=f"{partition}: Schur surgery", name="schur_surgery",
                                    log_y=("effective_rank",))


def eigenvalue_figure(partition: str, eigenvalues: pl.DataFrame, directory: Path | None):
    """Every mean Jacobian's eigenvalues in the complex plane, one panel per depth."""
    clouds = {}
    for (depth,), rows in eigenvalues.sort("depth", "idx").group_by("depth", maintain_order=True):
        clouds[depth] = rows["re"].to_numpy() + 1j * rows["im"].to_numpy()
    return figures.eigenvalue_clouds(clouds, directory, title=partition)


def coupling_figure(model: str, coupling_tests: dict[str, pl.DataFrame], directory: Path | None):
    """Boundary-unit coupling effect vs depth, one line per checkpoint; FDR-significant sublayers filled."""
    series = {}
    for checkpoint, frame in sorted(coupling_tests.items()):
        ordered = frame.sort("depth")
        series[checkpoint] = (ordered["depth"].to_list(), ordered["effect"].to_list(),
                              ordered["significant"].to_list())
    return figures.coupling_by_depth(series, directory, title=f"{model}: boundary-unit coupling")


def relative_depth(frame: pl.DataFrame, by: str = "depth") -> pl.DataFrame:
    """``frame`` with ``relative_depth`` = by / max(by) within each (model, checkpoint), in [0, 1]."""
    return frame.with_columns(
        (pl.col(by) / pl.col(by).max().over("model", "checkpoint").clip(lower_bound=1)).alias("relative_depth"))


def partition_curves(frame: pl.DataFrame, quantities, x: str = "relative_depth") -> dict:
    """curves[quantity][model@checkpoint] = (x, values), one curve per partition in the frame's row order."""
    curves: dict[str, dict[str, tuple[list, list]]] = {quantity: {} for quantity in quantities}
    for (model, checkpoint), rows in frame.group_by("model", "checkpoint", maintain_order=True):
        for quantity in quantities:
            curves[quantity][f"{model}@{checkpoint}"] = (rows[x].to_list(), rows[quantity].to_list())
    return curves


def compare_figure(metric: str, frame: pl.DataFrame, directory: Path | None, *, x: str = "relative_depth"):
    """``metric`` against ``x``, one line per partition (``frame``: model, checkpoint, x, metric)."""
    return figures.metrics_by_depth(partition_curves(frame.sort(x), [metric], x), directory, title=f"{metric} by {x.replace('_', ' ')}",
                                    name=f"compare_{metric}", x_label=x.replace("_", " "))
