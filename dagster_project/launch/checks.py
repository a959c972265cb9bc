"""Asset checks: finite values, row counts, and an independent finite-difference probe."""


import dagster as dg
import numpy as np

from resdyn.dagster_project.asset_layer.resources import AnalysisSettings, WarehouseResource
from resdyn.dagster_project.store.arrow_tables import matrix_rows
from resdyn.depth import SCHUR_ORDERING
from resdyn.models.registry import split_partition_key

PROBE_TOLERANCE = 1e-6  # float64 central differences with h = 1e-5 are good to ~1e-9


def _result(context, *, passed: bool, metadata: dict) -> dg.AssetCheckResult:
    """A check result that names its partition: Dagster keeps check results per asset, not per partition,
    so the key goes into the metadata and the description the UI shows."""
    key = context.partition_key
    return dg.AssetCheckResult(passed=passed, metadata={"partition": dg.MetadataValue.text(key), **metadata},
                               description=f"partition {key}: {'passed' if passed else 'FAILED'}")


def _n_layers_and_width(store, model, checkpoint) -> tuple[int, int]:
    row = store.read("model_checkpoints", model, checkpoint).to_pylist()[0]
    return row["n_layers"], row["d_model"]


@dg.asset_check(asset="jacobians", description="Every mean and variance entry is finite.")
def jacobians_are_finite(context, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    model, checkpoint = split_partition_key(context.partition_key)
    bad = rows_with_variance = 0
    for group in warehouse.open(run_id=context.run.run_id).row_groups("jacobians", model, checkpoint, columns=["values", "variance"]):
        bad += int((~np.isfinite(matrix_rows(group.column("values")))).sum())
        variance = group.column("variance")
        if variance.null_count == 0:
            bad += int((~np.isfinite(matrix_rows(variance))).sum())
            rows_with_variance += len(group)
    return _result(context, passed=bad == 0, metadata={"non_finite_entries": bad,
                                                          "rows_with_variance": rows_with_variance})


@dg.asset_check(asset="jacobians", description="Rows = layers x 2 sublayers x d_model.")
def jacobians_row_count(context, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    model, checkpoint = split_partition_key(context.partition_key)
    store = warehouse.open(run_id=context.run.run_id)
    n_layers, d = _n_layers_and_width(store, model, checkpoint)
    rows = store.read("jacobians", model, checkpoint, columns=["row"]).num_rows
    return _result(context, passed=rows == n_layers * 2 * d, metadata={"rows": rows, "expected": n_layers * 2 * d})


@dg.asset_check(asset="jacobians", additional_deps=["finite_difference_probe"],
                description="The stored E[J] times random unit vectors v matches the mean central difference "
                            "(f(x + h v) - f(x - h v)) / 2h over the same samples, recorded in the same pass over "
                            "the model: forward passes only, no autodiff.")
def jacobians_match_finite_differences(context, warehouse: WarehouseResource,
                                       settings: AnalysisSettings) -> dg.AssetCheckResult:
    from resdyn.jacobians.probe import probe_error

    model, checkpoint = split_partition_key(context.partition_key)
    store = warehouse.open(run_id=context.run.run_id)
    probe = {}
    for group in store.row_groups("finite_difference_probe", model, checkpoint,
                                  columns=["layer", "sublayer", "direction", "finite_difference"]):
        key = (group.column("layer")[0].as_py(), group.column("sublayer")[0].as_py())
        probe[key] = (matrix_rows(group.column("direction")), matrix_rows(group.column("finite_difference")))
    errors = {key: probe_error(mean, *probe[key]) for key, mean in store.matrix_table("jacobians", model, checkpoint).matrices()}
    worst = max(errors.values())
    tolerance = PROBE_TOLERANCE if settings.dtype == "float64" else 1e-2
    worst_key = max(errors, key=errors.get)
    return _result(context, passed=worst < tolerance, metadata={
        "worst_relative_error": worst, "worst_sublayer": f"{worst_key[0]}/{worst_key[1]}", "tolerance": tolerance})


@dg.asset_check(asset="activations", description="All activations finite; rows = layers x 2 boundaries x observations.")
def activations_are_finite_and_complete(context, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    model, checkpoint = split_partition_key(context.partition_key)
    store = warehouse.open(run_id=context.run.run_id)
    n_layers, _ = _n_layers_and_width(store, model, checkpoint)
    observations = store.read("samples", model, checkpoint, columns=["position"]).num_rows
    rows, finite = 0, True
    for group in store.row_groups("activations", model, checkpoint, columns=["values"]):
        rows += len(group)
        finite = finite and bool(np.isfinite(matrix_rows(group.column("values"))).all())
    return _result(context, passed=finite and rows == n_layers * 2 * observations,
                               metadata={"rows": rows, "expected": n_layers * 2 * observations, "finite": finite})


@dg.asset_check(asset="layer_metrics", description="One row per sublayer; every metric finite except an "
                                                   "infinite condition number of a singular Jacobian.")
def layer_metrics_complete(context, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    model, checkpoint = split_partition_key(context.partition_key)
    store = warehouse.open(run_id=context.run.run_id)
    n_layers, _ = _n_layers_and_width(store, model, checkpoint)
    rows = store.read("layer_metrics", model, checkpoint).to_pylist()
    bad = [(r["depth"], k) for r in rows for k, v in r.items()
           if isinstance(v, float) and not np.isfinite(v) and k not in ("condition_number", "log10_condition")]
    return _result(context, passed=len(rows) == 2 * n_layers and not bad,
                               metadata={"rows": len(rows), "non_finite": str(bad[:10])})


@dg.asset_check(asset="schur_surgery", additional_deps=["cumulative_rank"],
                description="alpha = 1 (the Jacobians rebuilt from their Schur forms) reproduces cumulative_rank "
                            "(the stored Jacobians) under every Schur ordering; no eigenvalue of a Schur block moved.")
def surgery_identity_reproduces_cumulative_rank(context, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    model, checkpoint = split_partition_key(context.partition_key)
    store = warehouse.open(run_id=context.run.run_id)
    plain = {r["depth"]: r["effective_rank"] for r in store.read(
        "cumulative_rank", model, checkpoint, columns=["depth", "effective_rank"]).to_pylist()}
    surgery = store.read("schur_surgery", model, checkpoint).to_pylist()
    orderings = sorted({r["schur_ordering"] for r in surgery})
    identity = {(r["schur_ordering"], r["depth"]): r["effective_rank"] for r in surgery if r["alpha"] == 1.0}
    complete = SCHUR_ORDERING in orderings and set(identity) == {(o, d) for o in orderings for d in plain}
    worst = max((abs(rank - plain[d]) / plain[d] for (_, d), rank in identity.items() if d in plain), default=np.inf)
    drift = max(r["max_eigenvalue_drift"] for r in surgery)
    return _result(context, passed=complete and worst < 1e-8 and drift < 1e-8,
                               metadata={"worst_relative_difference": worst, "max_eigenvalue_drift": drift,
                                         "orderings": ", ".join(orderings)})


ALL_CHECKS = [jacobians_are_finite, jacobians_row_count, jacobians_match_finite_differences,
              activations_are_finite_and_complete, layer_metrics_complete, surgery_identity_reproduces_cumulative_rank]
