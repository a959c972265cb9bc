"""Asset checks: finite values, row counts, and an independent finite-difference probe."""


import dagster as dg
import numpy as np

from assets.activations import activations
from assets.common import model_and_samples, partition, read_mean_jacobians
from assets.jacobians import jacobians
from resdyn.jacobians.probe import finite_difference_probe

from .resources import AnalysisSettings, WarehouseResource

PROBE_TOLERANCE = 1e-6  # float64 central differences with h = 1e-5 are good to ~1e-9


def _n_layers_and_width(store, model, checkpoint) -> tuple[int, int]:
    row = store.read("model_checkpoints", model, checkpoint).to_pylist()[0]
    return row["n_layers"], row["d_model"]


@dg.asset_check(asset=jacobians, description="Every mean and variance entry is finite.")
def jacobians_are_finite(context, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    model, checkpoint = partition(context)
    table = warehouse.open().read("jacobians", model, checkpoint)
    values = np.concatenate(table.column("values").to_numpy(zero_copy_only=False))
    rows = [row for row in table.column("variance").to_pylist() if row is not None]  # null: means only
    variance = np.asarray(rows, dtype=np.float64).ravel()
    bad = int((~np.isfinite(values)).sum() + (~np.isfinite(variance)).sum())
    return dg.AssetCheckResult(passed=bad == 0, metadata={"non_finite_entries": bad, "rows_with_variance": len(rows)})


@dg.asset_check(asset=jacobians, description="Rows = layers x 2 sublayers x d_model.")
def jacobians_row_count(context, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    n_layers, d = _n_layers_and_width(store, model, checkpoint)
    rows = store.read("jacobians", model, checkpoint).num_rows
    return dg.AssetCheckResult(passed=rows == n_layers * 2 * d, metadata={"rows": rows, "expected": n_layers * 2 * d})


@dg.asset_check(asset=jacobians, description="The stored E[J] times random unit vectors v matches the mean "
                                             "central difference (f(x + h v) - f(x - h v)) / 2h over the same "
                                             "samples: forward passes only, no autodiff.")
def jacobians_match_finite_differences(context, warehouse: WarehouseResource,
                                       settings: AnalysisSettings) -> dg.AssetCheckResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    loaded, sample_list = model_and_samples(warehouse, settings, model, checkpoint)
    errors = finite_difference_probe(loaded.model, loaded.adapter, sample_list,
                                     read_mean_jacobians(store, model, checkpoint), seed=settings.seed,
                                     batch_size=settings.batch_size)
    worst = max(errors.values())
    tolerance = PROBE_TOLERANCE if settings.dtype == "float64" else 1e-2
    return dg.AssetCheckResult(passed=worst < tolerance, metadata={"worst_relative_error": worst,
                                                                   "tolerance": tolerance})


@dg.asset_check(asset=activations, description="All activations finite; rows = layers x 2 boundaries x observations.")
def activations_are_finite_and_complete(context, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    n_layers, _ = _n_layers_and_width(store, model, checkpoint)
    table = store.read("activations", model, checkpoint)
    observations = store.read("samples", model, checkpoint).num_rows
    values = np.concatenate(table.column("values").to_numpy(zero_copy_only=False))
    passed = bool(np.isfinite(values).all()) and table.num_rows == n_layers * 2 * observations
    return dg.AssetCheckResult(passed=passed, metadata={"rows": table.num_rows,
                                                        "expected": n_layers * 2 * observations})




@dg.asset_check(asset="layer_metrics", description="One row per sublayer; every metric finite except an "
                                                   "infinite condition number of a singular Jacobian.")
def layer_metrics_complete(context, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    n_layers, _ = _n_layers_and_width(store, model, checkpoint)
    rows = store.read("layer_metrics", model, checkpoint).to_pylist()
    bad = [(r["depth"], k) for r in rows for k, v in r.items()
           if isinstance(v, float) and not np.isfinite(v) and k not in ("condition_number", "log10_condition")]
    return dg.AssetCheckResult(passed=len(rows) == 2 * n_layers and not bad,
                               metadata={"rows": len(rows), "non_finite": str(bad[:10])})


@dg.asset_check(asset="schur_surgery", description="alpha = 1 reproduces cumulative_rank; no eigenvalue moved.")
def surgery_identity_reproduces_cumulative_rank(context, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    plain = {r["depth"]: r["effective_rank"] for r in store.read("cumulative_rank", model, checkpoint).to_pylist()}
    surgery = store.read("schur_surgery", model, checkpoint).to_pylist()
    identity = {r["depth"]: r["effective_rank"] for r in surgery if r["alpha"] == 1.0}
    worst = max(abs(identity[d] - plain[d]) / plain[d] for d in plain)
    drift = max(r["max_eigenvalue_drift"] for r in surgery)
    return dg.AssetCheckResult(passed=set(identity) == set(plain) and worst < 1e-8 and drift < 1e-8,
                               metadata={"worst_relative_difference": worst, "max_eigenvalue_drift": drift})


ALL_CHECKS = [jacobians_are_finite, jacobians_row_count, jacobians_match_finite_differences,
              activations_are_finite_and_complete, layer_metrics_complete, surgery_identity_reproduces_cumulative_rank]
