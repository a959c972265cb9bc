"""Stage 9: does each sublayer amplify or suppress the boundary units where it starts?"""

import dagster as dg
import numpy as np
import pyarrow as pa

from dagster_project.resources import AnalysisSettings, WarehouseResource
from resdyn import coupling
from resdyn.figures import coupling_by_depth
from resdyn.models.adapters import sublayer_depth

from .common import PARTITIONS, figure, partition, read_mean_jacobians, table_metadata
from .jacobians import jacobians
from .spectra import checkpoints_of

STARTING_BOUNDARY = {"attn": "pre_attn", "mlp": "pre_mlp"}


@dg.asset(partitions_def=PARTITIONS, code_version="1", group_name="coupling", deps=[jacobians],
          description="Per-unit amplification from each sublayer's mean Jacobian (column, J - I column, row, diagonal).")
def unit_amplification(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    rows = []
    for (layer, sublayer), jacobian in read_mean_jacobians(store, model, checkpoint).items():
        measures = coupling.unit_amplification(jacobian)
        rows += [{"layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer), "unit": unit,
                  **{name: float(values[unit]) for name, values in measures.items()}}
                 for unit in range(len(measures["diagonal"]))]
    table = pa.Table.from_pylist(rows)
    path = store.write("unit_amplification", model, checkpoint, table)
    return dg.MaterializeResult(metadata=table_metadata(table, path))


@dg.asset(partitions_def=PARTITIONS, code_version="1", group_name="coupling",
          deps=[unit_amplification, "communities", "layer_metrics"],
          description="Boundary vs interior amplification per sublayer: Mann-Whitney U, rank-biserial effect, "
                      "degree-stratified permutation p, BH q within the model checkpoint, operator type.")
def coupling_tests(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                   settings: AnalysisSettings) -> dg.MaterializeResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    amplification = store.read("unit_amplification", model, checkpoint).to_pylist()
    communities = store.read("communities", model, checkpoint).to_pylist()
    operator = {(r["layer"], r["sublayer"]): r["operator_type"]
                for r in store.read("layer_metrics", model, checkpoint).to_pylist()}
    by_boundary: dict[tuple[int, str], dict[int, dict]] = {}
    for row in communities:
        by_boundary.setdefault((row["layer"], row["boundary"]), {})[row["unit"]] = row
    by_sublayer: dict[tuple[int, str], list[dict]] = {}
    for row in amplification:
        by_sublayer.setdefault((row["layer"], row["sublayer"]), []).append(row)
    rows = []
    for (layer, sublayer), units in sorted(by_sublayer.items(), key=lambda item: sublayer_depth(*item[0])):
        boundary = STARTING_BOUNDARY[sublayer]
        membership = by_boundary[(layer, boundary)]
        units = sorted(units, key=lambda r: r["unit"])
        is_boundary = np.array([membership[r["unit"]]["is_boundary"] for r in units])
        degree = np.array([membership[r["unit"]]["degree"] for r in units])
        values = np.array([r["log_column_norm"] for r in units])
        result = coupling.coupling_test(values, is_boundary, degree, n_permutations=settings.n_permutations,
                                        seed=settings.seed + sublayer_depth(layer, sublayer))
        rows.append({"layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer), "boundary": boundary,
                     "n_boundary": result.n_boundary, "n_interior": result.n_interior, "u_statistic": result.u_statistic,
                     "effect": result.effect, "p_value": result.p_value, "p_permutation": result.p_permutation,
                     "direction": result.direction, "operator_type": operator[(layer, sublayer)],
                     "amplification_measure": "log_column_norm"})
    q = coupling.false_discovery([r["p_value"] for r in rows])
    q_by = coupling.false_discovery([r["p_value"] for r in rows], "by")
    q_permutation = coupling.false_discovery([r["p_permutation"] for r in rows])
    for row, value, value_by, value_permutation in zip(rows, q, q_by, q_permutation):
        row.update(q_value=float(value), q_value_by=float(value_by), q_value_permutation=float(value_permutation),
                   significant=bool(value < coupling.SIGNIFICANCE))
    table = pa.Table.from_pylist(rows)
    path = store.write("coupling_tests", model, checkpoint, table)
    series = {}
    for other in checkpoints_of(store, "coupling_tests", model):
        other_rows = sorted(store.read("coupling_tests", model, other).to_pylist(), key=lambda r: r["depth"])
        series[other] = ([r["depth"] for r in other_rows], [r["effect"] for r in other_rows],
                         [r["significant"] for r in other_rows])
    png = coupling_by_depth(series, store.artefact_directory("figures", model, checkpoint),
                            title=f"{model}: boundary-unit coupling")
    return dg.MaterializeResult(metadata={**table_metadata(table, path), **figure(png),
                                          "significant_sublayers": int(sum(r["significant"] for r in rows))})
