"""Stage 7: per-sample spread: the same metrics on per-sample Jacobians, with bootstrap intervals.

Spectra of E[J] are not E[spectra]: this table says how far single samples scatter around the
mean-Jacobian values in ``layer_metrics``.
"""

import dagster as dg
import numpy as np
import pyarrow as pa

from dagster_project.resources import AnalysisSettings, WarehouseResource
from resdyn import spectra
from resdyn.models.adapters import sublayer_depth

from .common import PARTITIONS, partition, read_matrices, table_metadata
from .jacobians import jacobians

NUMERIC_METRICS = ("spectral_radius", "log10_condition", "henrici", "henrici_rel_j", "henrici_rel_j_minus_i",
                   "frac_complex", "frac_expanding", "self_alignment", "self_alignment_signed", "effective_rank",
                   "participation_ratio", "stable_rank")


@dg.asset(partitions_def=PARTITIONS, code_version="1", group_name="spectra", deps=[jacobians, "layer_metrics"],
          description="Per-sample metric means with 95% percentile-bootstrap intervals, beside the mean-Jacobian value.")
def layer_metrics_per_sample(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                             settings: AnalysisSettings) -> dg.MaterializeResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    per_sample = read_matrices(store, "sample_jacobians", model, checkpoint,
                               ("layer", "sublayer", "sample_id", "position"))
    of_mean = {(r["layer"], r["sublayer"]): r for r in store.read("layer_metrics", model, checkpoint).to_pylist()}
    grouped: dict[tuple[int, str], list[dict]] = {}
    for (layer, sublayer, _, _), matrix in sorted(per_sample.items()):
        grouped.setdefault((layer, sublayer), []).append(spectra.sublayer_metrics(matrix))
    rows = []
    for (layer, sublayer), metric_list in sorted(grouped.items(), key=lambda item: sublayer_depth(*item[0])):
        for metric in NUMERIC_METRICS:
            values = np.array([m[metric] for m in metric_list], dtype=np.float64)
            low, high = spectra.bootstrap_interval(values, seed=settings.seed)
            rows.append({"layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer), "metric": metric,
                         "n_samples": len(values), "mean": float(np.mean(values[np.isfinite(values)])),
                         "std": float(np.std(values[np.isfinite(values)])), "ci_low": low, "ci_high": high,
                         "value_of_mean_jacobian": float(of_mean[(layer, sublayer)][metric])})
    table = pa.Table.from_pylist(rows)
    path = store.write("layer_metrics_per_sample", model, checkpoint, table)
    return dg.MaterializeResult(metadata=table_metadata(table, path))
