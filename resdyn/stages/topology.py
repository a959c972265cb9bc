"""Functional topology: correlation graphs and signed Leiden communities per boundary (resdyn.topology)."""

from __future__ import annotations

import contextlib

import numpy as np
import pyarrow as pa

from resdyn import topology
from resdyn.arrow_matrices import matrix_rows
from resdyn.figures import community_distributions
from resdyn.naming import sublayer_depth
from resdyn.stages.result import Figure, StageResult

PARALLEL_MIN_UNITS = 512  # smaller graphs scan faster than worker processes start




def n_layers(model_checkpoints) -> int:
    """Decoder layers of the partition's checkpoint (its ``model_checkpoints`` row)."""
    return int(model_checkpoints.first("n_layers"))


def activation_matrices(activations):
    """((layer, boundary), observations x d float32) of the activations, one (layer, boundary) at a time."""
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
        raise ValueError("graph_edges holds a graph that its activations do not: rerun graph_edges "
                         "(`resdyn run --select key:graph_edges`)")


def neighbours(settings, d: int) -> int:
    """Neighbours per unit of the kNN graph: --graph-k, else min(30, max(5, d // 4))."""
    return settings.graph_k or min(30, max(5, d // 4))


def graph_edges(settings, tools, activations, model_checkpoints) -> StageResult:
    """The signed correlation graph of the residual units at every layer and boundary, streamed: one record batch
    of edges per (layer, boundary), one activation matrix in memory at a time."""
    k = neighbours(settings, model_checkpoints.first("d_model"))
    progress = tools.progress("correlation graphs", 2 * n_layers(model_checkpoints))

    def batches():
        for (layer, boundary), matrix in activation_matrices(activations):
            edges = topology.signed_graph(topology.correlation_matrix(matrix), settings.graph_construction,
                                          k=k, threshold=settings.graph_threshold)
            yield {"layer": np.full(len(edges.weight), layer, np.int32), "boundary": boundary, "source": edges.source,
                   "target": edges.target, "weight": edges.weight, "n_units": matrix.shape[1],
                   "construction": settings.graph_construction, "k": k}
            progress.done(f"{layer}/{boundary}")  # the batch above has been written

    return StageResult(tables={"graph_edges": batches()},
                       metadata={"graph_edges": {"construction": settings.graph_construction, "k": k}})


def community_tables(settings, tools, graph_edges, activations, model_checkpoints) -> StageResult:
    """Per graph: the resolution scan, the chosen signed Leiden CPM communities (``settings.leiden_seeds`` seeds from
    ``settings.seed``), each unit's participation and boundary flags."""
    rows, scan_rows, sizes, participations = [], [], {}, {}
    seeds = tuple(range(settings.seed, settings.seed + settings.leiden_seeds))
    leiden_seconds = wall_seconds = 0.0
    pool = None
    with contextlib.ExitStack() as pools:  # one Leiden pool for every graph of the partition
        progress = tools.progress("communities", 2 * n_layers(model_checkpoints))
        for (layer, boundary), edges in edges_by_boundary(graph_edges, activations, model_checkpoints):
            if pool is None and tools.workers > 1 and edges.n_units >= PARALLEL_MIN_UNITS:
                pool = pools.enter_context(topology.LeidenPool(tools.workers))
            scan = topology.scan_gamma(edges, seeds=seeds, pool=pool if edges.n_units >= PARALLEL_MIN_UNITS else None)
            leiden_seconds, wall_seconds = leiden_seconds + scan.leiden_seconds, wall_seconds + scan.wall_seconds
            membership = scan.membership
            participation, share = topology.participation_coefficient(edges, membership)
            depth = sublayer_depth(layer, boundary)
            sizes[depth] = np.bincount(membership).tolist()
            participations[depth] = participation
            rows.append(pa.table({
                "layer": np.full(edges.n_units, layer, np.int32), "boundary": pa.repeat(pa.scalar(boundary), edges.n_units),
                "depth": np.full(edges.n_units, depth, np.int32), "unit": np.arange(edges.n_units, dtype=np.int32),
                "community": membership.astype(np.int32), "participation": participation,
                "is_boundary": topology.boundary_units(participation),
                "is_boundary_absolute": topology.absolute_boundary_units(participation),
                "is_boundary_robust": topology.robust_boundary_units(share, membership),
                "degree": topology.unit_degree(edges).astype(np.int32),
                "gamma": np.full(edges.n_units, scan.gamma), "seed": np.full(edges.n_units, settings.seed, np.int32)}))
            scan_rows += [{"layer": layer, "boundary": boundary, "gamma": r.gamma, "n_communities": r.n_communities,
                           "stability": r.stability, "stability_nmi": r.stability_nmi, "modularity": r.modularity,
                           "nontrivial": r.nontrivial, "chosen": r.gamma == scan.gamma, "n_seeds": r.n_seeds}
                          for r in scan.rows]
            progress.done(f"{layer}/{boundary}")
            tools.log(f"communities of {layer}/{boundary}: gamma {scan.gamma:.4g}, {membership.max() + 1} "
                      f"communities, scan {scan.wall_seconds:.1f} s (Leiden runs {scan.leiden_seconds:.1f} s over "
                      f"{tools.workers if pool else 1} worker(s))")
    table = pa.concat_tables(rows)
    png = community_distributions(sizes, participations, tools.figures, title=tools.label)
    return StageResult(
        tables={"communities": table, "gamma_scan": scan_rows},
        metadata={"communities": {
            "figure": Figure(png),
            "boundary_share": float(np.mean(table.column("is_boundary").to_numpy(zero_copy_only=False))),
            "absolute_boundary_share": float(np.mean(table.column("is_boundary_absolute").to_numpy(zero_copy_only=False))),
            "leiden_seconds": round(leiden_seconds, 2), "scan_wall_seconds": round(wall_seconds, 2)}})


__all__ = ["community_tables", "edges_by_boundary", "graph_edges", "neighbours"]
