"""Stage 6: depth as time: cumulative-product ranks and Schur surgery."""

import dagster as dg
import numpy as np
import pyarrow as pa

from dagster_project.resources import WarehouseResource
from resdyn import spectra
from resdyn.depth import SCHUR_ORDERING, SURGERY_BLOCK_RULE, SchurDecomposition, cumulative_products, eigenvalue_drift
from resdyn.figures import metrics_by_depth

from .common import PARTITIONS, figure, partition, read_mean_jacobians, table_metadata
from .jacobians import jacobians
from .spectra import depth_curves

SURGERY_ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)


def product_rows(jacobians_in_depth_order: list[np.ndarray]) -> list[dict]:
    rows = []
    for step in cumulative_products(jacobians_in_depth_order):
        s = step.singular_values_normalised
        rows.append({
            "depth": step.depth, "effective_rank": spectra.effective_rank(s),
            "participation_ratio": spectra.participation_ratio(s), "stable_rank": spectra.stable_rank(s),
            "numerical_rank": spectra.numerical_rank(s), "log_sigma_max": step.log_sigma_max,
            "cumulative_singular_values": [float(v) for v in np.exp(step.log_singular_values)],
        })
    return rows


@dg.asset(partitions_def=PARTITIONS, code_version="1", group_name="depth", deps=[jacobians],
          description="Ranks of the composed Jacobian J_depth ... J_0 (rescaled float64 product) at every depth.")
def cumulative_rank(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    table = pa.Table.from_pylist(product_rows(list(read_mean_jacobians(store, model, checkpoint).values())))
    path = store.write("cumulative_rank", model, checkpoint, table)
    curves = depth_curves(store, "cumulative_rank", model, ["effective_rank", "participation_ratio", "stable_rank"])
    png = metrics_by_depth(curves, store.artefact_directory("figures", model, checkpoint),
                           title=f"{model}: cumulative Jacobian rank", name="cumulative_rank",
                           log_y=("effective_rank", "participation_ratio", "stable_rank"))
    return dg.MaterializeResult(metadata={**table_metadata(table, path), **figure(png)})


@dg.asset(partitions_def=PARTITIONS, code_version="1", group_name="depth", deps=[jacobians],
          description="Ranks of the cumulative product of Schur-operated Jacobians J(alpha): spectrum kept, "
                      "non-normal part scaled by alpha (alpha = 1 is cumulative_rank).")
def schur_surgery(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    ordered = list(read_mean_jacobians(store, model, checkpoint).values())
    decompositions = [SchurDecomposition.of(matrix) for matrix in ordered]
    reference = [np.linalg.eigvals(matrix) for matrix in ordered]
    rows = []
    for alpha in SURGERY_ALPHAS:
        operated = [decomposition.operated(alpha) for decomposition in decompositions]
        drift = [eigenvalue_drift(eigenvalues, matrix) for eigenvalues, matrix in zip(reference, operated)]
        for row in product_rows(operated):
            row.pop("cumulative_singular_values")
            rows.append({"alpha": alpha, **row, "max_eigenvalue_drift": max(drift[: row["depth"] + 1]),
                         "block_rule": SURGERY_BLOCK_RULE, "schur_ordering": SCHUR_ORDERING})
    table = pa.Table.from_pylist(rows)
    path = store.write("schur_surgery", model, checkpoint, table)
    curves = {"effective_rank": {}}
    for alpha in SURGERY_ALPHAS:
        selected = [r for r in rows if r["alpha"] == alpha]
        curves["effective_rank"][f"alpha={alpha}"] = ([r["depth"] for r in selected],
                                                      [r["effective_rank"] for r in selected])
    png = metrics_by_depth(curves, store.artefact_directory("figures", model, checkpoint),
                           title=f"{context.partition_key}: Schur surgery", name="schur_surgery",
                           log_y=("effective_rank",))
    return dg.MaterializeResult(metadata={**table_metadata(table, path), **figure(png)})
