"""Per-sample spread: the same metrics on per-sample Jacobians, with bootstrap intervals.

Spectra of E[J] are not E[spectra]: this table says how far single samples scatter around the
mean-Jacobian values in ``layer_metrics``. Each per-sample matrix is analysed in a worker process
(the factorizations dominate at large d).
"""

import numpy as np
import pyarrow as pa

from resdyn import spectra
from resdyn.dagster_project.asset_layer import (
    ANALYSIS,
    MatrixTable,
    TableHandle,
    default_workers,
    ordered_parallel_map,
    partition_asset,
    rows_table,
    table_output,
)
from resdyn.naming import sublayer_depth

from .common import StageProgress
from .spectra import PARALLEL_MIN_WIDTH
from .spectral_worker import metrics_of_matrix

NUMERIC_METRICS = ("spectral_radius", "sigma_max", "numerical_abscissa", "log10_condition", "henrici", "henrici_rel_j", "henrici_rel_j_minus_i",
                   "asymmetry_index", "rotation_share", "mean_absolute_argument", "update_size", "frac_complex", "frac_expanding", "self_alignment", "self_alignment_signed", "effective_rank",
                   "participation_ratio", "stable_rank")


@partition_asset(ANALYSIS, code_version="6", group_name="spectra", settings=("seed", "workers"),
          description="Per-sample metric means with 95% percentile-bootstrap intervals, beside the mean-Jacobian value.")
def layer_metrics_per_sample(context, settings, sample_jacobians: MatrixTable, layer_metrics: TableHandle,
                             transient_dynamics: TableHandle):
    yield table_output(_per_sample(context, settings, sample_jacobians, layer_metrics, transient_dynamics))


def _per_sample(context, settings, sample_jacobians, layer_metrics, transient_dynamics) -> pa.Table:
    keys = [(group.column("layer")[0].as_py(), group.column("sublayer")[0].as_py(), len(group))
            for group in sample_jacobians.row_groups(["layer", "sublayer"])]
    width = keys[0][2] if keys else 0
    workers = (settings.workers or default_workers()) if width >= PARALLEL_MIN_WIDTH else 1
    of_mean = {(r["layer"], r["sublayer"]): r for r in layer_metrics.read().to_pylist()}
    for row in transient_dynamics.read(["layer", "sublayer", "numerical_abscissa"]).to_pylist():
        of_mean[(row["layer"], row["sublayer"])]["numerical_abscissa"] = row["numerical_abscissa"]
    grouped: dict[tuple[int, str], list[dict]] = {}
    metrics = ordered_parallel_map(metrics_of_matrix, [sample_jacobians.reference(index) for index in range(len(keys))],
                                   workers=workers)
    progress = StageProgress(context, "per-sample metrics", len(keys))
    for (layer, sublayer, _), result in zip(keys, metrics):
        grouped.setdefault((layer, sublayer), []).append(result)
        progress.done(f"a sample of {layer}/{sublayer}")
    rows = []
    for (layer, sublayer), metric_list in sorted(grouped.items(), key=lambda item: sublayer_depth(*item[0])):
        for metric in NUMERIC_METRICS:
            values = np.array([m[metric] for m in metric_list], dtype=np.float64)
            low, high = spectra.bootstrap_interval(values, seed=settings.seed)
            finite = values[np.isfinite(values)]
            rows.append({"layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer), "metric": metric,
                         "n_samples": len(values), "mean": float(np.mean(finite)) if len(finite) else float("nan"),
                         "std": float(np.std(finite)) if len(finite) else float("nan"), "ci_low": low, "ci_high": high,
                         "value_of_mean_jacobian": float(of_mean[(layer, sublayer)][metric])})
    return rows_table("layer_metrics_per_sample", rows)
