"""Functional topology: correlation graphs and signed Leiden communities per boundary."""

import contextlib

import dagster as dg
import numpy as np
import pyarrow as pa

from resdyn import topology
from resdyn.dagster_project.asset_layer import (
    ANALYSIS,
    TableHandle,
    conform,
    default_workers,
    figure,
    interrupts,
    matrix_rows,
    partition_asset,
    record_batch,
    rows_table,
    table_output,
)
from resdyn.figures import community_distributions
from resdyn.naming import sublayer_depth

from .common import StageProgress, n_layers, partition

PARALLEL_MIN_UNITS = 512  # smaller graphs scan faster than worker processes start


def activation_matrices(activations):
    """((layer, boundary), observations x d float32) of the activations partition, one at a time."""
    for data in activations.row_groups(["layer", "boundary", "values"]):
        yield (data.column("layer")[0].as_py(), data.column("boundary")[0].as_py()), matrix_rows(data.column("values"))


def _whole_graphs(row_groups):
    """Consecutive row groups of one (layer, boundary) joined: Parquet caps a row group's length, so a graph
    with more edges than that spans several."""
    parts, key = [], None
    for group in row_groups:
        if group.num_rows == 0:
            continue
        group_key = (group.column("layer")[0].as_py(), group.column("boundary")[0].as_py())
        if parts and group_key != key:
            yield pa.concat_tables(parts)
            parts = []
        parts.append(group)
        key = group_key
    if parts:
        yield pa.concat_tables(parts)


def edges_by_boundary(graph_edges, activations, model_checkpoints):
    """((layer, boundary), SignedEdges) of every graph, one graph (row group) at a time, in activation order.

    A graph without edges (a threshold no pair exceeds) writes no row to graph_edges, yet it is a result:
    it is yielded with no edges, its units and order taken from the activations and model_checkpoints."""
    graphs = _whole_graphs(graph_edges.row_groups(["layer", "boundary", "n_units", "source", "target", "weight"]))
    pending = next(graphs, None)
    n_units = None
    for keys in activations.row_groups(["layer", "boundary"]):
        key = (keys.column("layer")[0].as_py(), keys.column("boundary")[0].as_py())
        if pending is not None and (pending.column("layer")[0].as_py(), pending.column("boundary")[0].as_py()) == key:
            source, target, weight = (pending.column(c).to_numpy() for c in ("source", "target", "weight"))
            yield key, topology.SignedEdges(int(pending.column("n_units")[0].as_py()), source, target, weight)
            pending = next(graphs, None)
            continue
        if n_units is None:
            n_units = int(model_checkpoints.first("d_model"))
        empty = np.zeros(0, np.int32)
        yield key, topology.SignedEdges(n_units, empty, empty.copy(), np.zeros(0))
    if pending is not None:
        raise ValueError(f"graph_edges of {graph_edges.model}@{graph_edges.checkpoint} holds a graph that its activations do not: rerun "
                         "graph_edges (`resdyn run --select key:graph_edges`)")


@partition_asset(ANALYSIS, code_version="2", group_name="topology",
                 settings=("graph_construction", "graph_k", "graph_threshold"),
          description="Signed correlation graph of residual units per layer and boundary (kNN by |r| by default).")
def graph_edges(context, settings, activations: TableHandle, model_checkpoints: TableHandle):
    k = neighbours(settings, model_checkpoints.first("d_model"))
    progress = StageProgress(context, "correlation graphs", 2 * n_layers(model_checkpoints))
    yield dg.Output(_graph_edges(settings, activations, k, progress),
                    metadata={"construction": settings.graph_construction, "k": k})


def neighbours(settings, d: int) -> int:
    """Neighbours per unit of the kNN graph: --graph-k, else min(30, max(5, d // 4))."""
    return settings.graph_k or min(30, max(5, d // 4))


def _graph_edges(settings, activations, k: int, progress=None):
    """One record batch of edges per (layer, boundary), one activation matrix in memory at a time."""
    for (layer, boundary), matrix in activation_matrices(activations):
        edges = topology.signed_graph(topology.correlation_matrix(matrix), settings.graph_construction,
                                      k=k, threshold=settings.graph_threshold)
        yield record_batch("graph_edges", None, {
            "layer": np.full(len(edges.weight), layer, np.int32), "boundary": boundary, "source": edges.source,
            "target": edges.target, "weight": edges.weight, "n_units": matrix.shape[1],
            "construction": settings.graph_construction, "k": k})
        if progress is not None:  # the batch above has been written
            progress.done(f"{layer}/{boundary}")


@partition_asset(ANALYSIS, group_name="topology", settings=("leiden_seeds", "seed", "workers"), tables=[dg.AssetSpec("communities", code_version="5",
                        description="Signed Leiden CPM community, participation and boundary flags of every unit."),
           dg.AssetSpec("gamma_scan", code_version="5",
                        description="The resolution scan behind each graph's chosen gamma (modularity, stability).")])
def community_tables(context, settings, outputs, graph_edges: TableHandle, activations: TableHandle,
                     model_checkpoints: TableHandle):
    yield from _communities(context, settings, outputs, graph_edges, activations, model_checkpoints)


def _communities(context, settings, outputs, graph_edges, activations, model_checkpoints):
    model, checkpoint = partition(context)
    rows, scan_rows, sizes, participations = [], [], {}, {}
    seeds = tuple(range(settings.seed, settings.seed + settings.leiden_seeds))
    leiden_seconds = wall_seconds = 0.0
    workers, pool = settings.workers or default_workers(), None
    with contextlib.ExitStack() as pools:  # one Leiden pool for every graph of the partition
        progress = StageProgress(context, "communities", 2 * n_layers(model_checkpoints))
        for (layer, boundary), edges in edges_by_boundary(graph_edges, activations, model_checkpoints):
            if pool is None and workers > 1 and edges.n_units >= PARALLEL_MIN_UNITS:
                pool = pools.enter_context(topology.LeidenPool(workers))
            scan = topology.scan_gamma(edges, seeds=seeds, pool=pool if edges.n_units >= PARALLEL_MIN_UNITS else None)
            leiden_seconds, wall_seconds = leiden_seconds + scan.leiden_seconds, wall_seconds + scan.wall_seconds
            membership = scan.membership
            participation, share = topology.participation_coefficient(edges, membership)
            is_boundary = topology.boundary_units(participation)
            absolute = topology.absolute_boundary_units(participation)
            robust = topology.robust_boundary_units(share, membership)
            degree = topology.unit_degree(edges)
            depth = sublayer_depth(layer, boundary)
            sizes[depth] = np.bincount(membership).tolist()
            participations[depth] = participation
            rows.append(pa.table({
                "layer": np.full(edges.n_units, layer, np.int32), "boundary": pa.repeat(pa.scalar(boundary), edges.n_units),
                "depth": np.full(edges.n_units, depth, np.int32), "unit": np.arange(edges.n_units, dtype=np.int32),
                "community": membership.astype(np.int32), "participation": participation, "is_boundary": is_boundary,
                "is_boundary_absolute": absolute, "is_boundary_robust": robust, "degree": degree.astype(np.int32),
                "gamma": np.full(edges.n_units, scan.gamma), "seed": np.full(edges.n_units, settings.seed, np.int32)}))
            scan_rows += [{"layer": layer, "boundary": boundary, "gamma": r.gamma, "n_communities": r.n_communities,
                           "stability": r.stability, "stability_nmi": r.stability_nmi, "modularity": r.modularity,
                           "nontrivial": r.nontrivial, "chosen": r.gamma == scan.gamma, "n_seeds": r.n_seeds}
                          for r in scan.rows]
            interrupts.check(f"community_tables of {context.partition_key}")
            progress.done(f"{layer}/{boundary}")
            context.log.info(f"{context.partition_key}: communities of {layer}/{boundary}: gamma {scan.gamma:.4g}, "
                             f"{membership.max() + 1} communities, scan {scan.wall_seconds:.1f} s "
                             f"(Leiden runs {scan.leiden_seconds:.1f} s over {workers if pool else 1} worker(s))")
    table = conform("communities", pa.concat_tables(rows))
    png = community_distributions(sizes, participations, outputs.figures,
                                  title=context.partition_key)
    boundary_share = float(np.mean(table.column("is_boundary").to_numpy(zero_copy_only=False)))
    absolute_share = float(np.mean(table.column("is_boundary_absolute").to_numpy(zero_copy_only=False)))
    yield table_output(table, "communities", {
        **figure(png), "boundary_share": boundary_share, "absolute_boundary_share": absolute_share,
        "leiden_seconds": round(leiden_seconds, 2), "scan_wall_seconds": round(wall_seconds, 2)})
    yield table_output(rows_table("gamma_scan", scan_rows), "gamma_scan")
