"""Per-sample spread: the same metrics on per-sample Jacobians, with bootstrap intervals.

Spectra of E[J] are not E[spectra]: this table says how far single samples scatter around the
mean-Jacobian values in ``layer_metrics``. Each per-sample matrix is analysed in a worker process
(the factorizations dominate at large d).
"""

from __future__ import annotations

import numpy as np

from resdyn import spectra
from resdyn.naming import sublayer_depth
from resdyn.stages.result import StageResult
from resdyn.stages.spectral import PARALLEL_MIN_WIDTH
from resdyn.stages.workers import metrics_of_matrix

NUMERIC_METRICS = ("spectral_radius", "sigma_max", "numerical_abscissa", "log10_condition", "henrici", "henrici_rel_j",
                   "henrici_rel_j_minus_i", "asymmetry_index", "rotation_share", "mean_absolute_argument",
                   "update_size", "frac_complex", "frac_expanding", "self_alignment", "self_alignment_signed",
                   "effective_rank", "participation_ratio", "stable_rank")


def layer_metrics_per_sample(settings, tools, sample_jacobians, layer_metrics, transient_dynamics) -> StageResult:
    """Per sublayer and metric: the mean and spread over the per-sample Jacobians, a 95% percentile-bootstrap
    interval (``settings.seed``), beside the mean Jacobian's value."""
    keys = [(group.column("layer")[0].as_py(), group.column("sublayer")[0].as_py(), len(group))
            for group in sample_jacobians.row_groups(["layer", "sublayer"])]
    width = keys[0][2] if keys else 0
    of_mean = {(r["layer"], r["sublayer"]): r for r in layer_metrics.read().to_pylist()}
    for row in transient_dynamics.read(["layer", "sublayer", "numerical_abscissa"]).to_pylist():
        of_mean[(row["layer"], row["sublayer"])]["numerical_abscissa"] = row["numerical_abscissa"]
    grouped: dict[tuple[int, str], list[dict]] = {}
    metrics = tools.map(metrics_of_matrix, [sample_jacobians.reference(index) for index in range(len(keys))],
                        parallel=width >= PARALLEL_MIN_WIDTH)
    progress = tools.progress("per-sample metrics", len(keys))
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
    return StageResult(tables={"layer_metrics_per_sample": rows})


__all__ = ["NUMERIC_METRICS", "layer_metrics_per_sample"]
