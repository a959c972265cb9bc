"""Stage 8: functional topology: correlation graphs and signed Leiden communities per boundary."""

import dagster as dg
import numpy as np
import pyarrow as pa

from dagster_project.resources import AnalysisSettings, WarehouseResource
from resdyn import topology
from resdyn.figures import community_distributions
from resdyn.models.adapters import sublayer_depth

from .activations import activations
from .common import PARTITIONS, figure, partition, row_groups, table_metadata


def _activation_matrices(store, model, checkpoint) -> dict[tuple[int, str], np.ndarray]:
    data = store.read("activations", model, checkpoint)
    values = np.stack(data.column("values").to_numpy(zero_copy_only=False))
    return {key: values[rows] for key, rows in row_groups(data, ("layer", "boundary")).items()}


def edges_by_boundary(store, model, checkpoint) -> dict[tuple[int, str], topology.SignedEdges]:
    data = store.read("graph_edges", model, checkpoint)
    n_units, source, target, weight = (data.column(c).to_numpy() for c in ("n_units", "source", "target", "weight"))
    return {key: topology.SignedEdges(int(n_units[idx[0]]), source[idx], target[idx], weight[idx])
            for key, idx in row_groups(data, ("layer", "boundary")).items()}


@dg.asset(partitions_def=PARTITIONS, code_version="1", group_name="topology", deps=[activations],
          description="Signed correlation graph of residual units per layer and boundary (kNN by |r| by default).")
def graph_edges(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                settings: AnalysisSettings) -> dg.MaterializeResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    columns: dict[str, list] = {k: [] for k in ("layer", "boundary", "source", "target", "weight", "n_units")}
    k_used = 0
    for (layer, boundary), matrix in sorted(_activation_matrices(store, model, checkpoint).items()):
        d = matrix.shape[1]
        k_used = settings.graph_k or min(30, max(5, d // 4))
        edges = topology.signed_graph(topology.correlation_matrix(matrix), settings.graph_construction,
                                      k=k_used, threshold=settings.graph_threshold)
        n = len(edges.weight)
        columns["layer"] += [layer] * n
        columns["boundary"] += [boundary] * n
        columns["source"] += edges.source.tolist()
        columns["target"] += edges.target.tolist()
        columns["weight"] += edges.weight.tolist()
        columns["n_units"] += [d] * n
    table = pa.table({**columns, "construction": [settings.graph_construction] * len(columns["weight"]),
                      "k": pa.array([k_used] * len(columns["weight"]), pa.int32())})
    path = store.write("graph_edges", model, checkpoint, table)
    return dg.MaterializeResult(metadata={**table_metadata(table, path), "construction": settings.graph_construction,
                                          "k": k_used})


@dg.multi_asset(
    partitions_def=PARTITIONS, group_name="topology", can_subset=False,
    specs=[dg.AssetSpec("communities", code_version="1", deps=[graph_edges],
                        description="Signed Leiden CPM community, participation and boundary flag of every unit."),
           dg.AssetSpec("gamma_scan", code_version="1", deps=[graph_edges],
                        description="The resolution scan behind each graph's chosen gamma (stability, modularity).")],
)
def community_tables(context: dg.AssetExecutionContext, warehouse: WarehouseResource, settings: AnalysisSettings):
    model, checkpoint = partition(context)
    store = warehouse.open()
    rows, scan_rows, sizes, participations = [], [], {}, {}
    seeds = tuple(range(settings.seed, settings.seed + settings.leiden_seeds))
    for (layer, boundary), edges in sorted(edges_by_boundary(store, model, checkpoint).items()):
        gamma, scan = topology.scan_gamma(edges, seeds=seeds)
        membership = topology.signed_leiden(edges, gamma, seed=settings.seed)
        participation, share = topology.participation_coefficient(edges, membership)
        is_boundary = topology.boundary_units(participation)
        robust = topology.robust_boundary_units(share, membership)
        degree = topology.unit_degree(edges)
        depth = sublayer_depth(layer, boundary)
        sizes[depth] = np.bincount(membership).tolist()
        participations[depth] = participation
        rows += [{"layer": layer, "boundary": boundary, "depth": depth, "unit": unit, "community": int(membership[unit]),
                  "participation": float(participation[unit]), "is_boundary": bool(is_boundary[unit]),
                  "is_boundary_robust": bool(robust[unit]), "degree": int(degree[unit]), "gamma": gamma,
                  "seed": settings.seed} for unit in range(edges.n_units)]
        scan_rows += [{"layer": layer, "boundary": boundary, "gamma": r.gamma, "n_communities": r.n_communities,
                       "stability": r.stability, "modularity": r.modularity, "nontrivial": r.nontrivial,
                       "chosen": r.gamma == gamma} for r in scan]
    table = pa.Table.from_pylist(rows)
    path = store.write("communities", model, checkpoint, table)
    png = community_distributions(sizes, participations, store.artefact_directory("figures", model, checkpoint),
                                  title=context.partition_key)
    boundary_share = float(np.mean(table.column("is_boundary").to_numpy(zero_copy_only=False)))
    yield dg.MaterializeResult(asset_key="communities", metadata={**table_metadata(table, path), **figure(png),
                                                                  "boundary_share": boundary_share})
    scan_table = pa.Table.from_pylist(scan_rows)
    scan_path = store.write("gamma_scan", model, checkpoint, scan_table)
    yield dg.MaterializeResult(asset_key="gamma_scan", metadata=table_metadata(scan_table, scan_path))
