"""Does each sublayer amplify or suppress the boundary units where it starts?"""

import dagster as dg
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from resdyn import community_coupling as community_level
from resdyn import coupling
from resdyn.dagster_project.asset_layer import (
    ANALYSIS,
    MatrixTable,
    TableHandle,
    default_workers,
    figure,
    figure_frames,
    ordered_parallel_map,
    partition_asset,
    rows_table,
    table_output,
)
from resdyn.naming import sublayer_depth

from .common import StageProgress, n_layers, partition
from .topology import edges_by_boundary

STARTING_BOUNDARY = {"attn": "pre_attn", "mlp": "pre_mlp"}
# permutations x units of one test above which the tests run in worker processes: the paper's 20,000 x 576 took
# 0.24 s a test, the default 1,000 x 576 about 12 ms, less than a worker takes to start
PARALLEL_MIN_DRAWS = 2**22


@partition_asset(ANALYSIS, code_version="2", group_name="coupling",
          description="Per-unit amplification from each sublayer's mean Jacobian (column, J - I column, row, diagonal).")
def unit_amplification(context, jacobians: MatrixTable, model_checkpoints: TableHandle):
    progress = StageProgress(context, "unit amplification", 2 * n_layers(model_checkpoints))
    yield dg.Output(_unit_amplification(jacobians, progress))


def _unit_amplification(jacobians, progress=None):
    """One record batch per sublayer, one mean Jacobian in memory at a time."""
    for (layer, sublayer), jacobian in jacobians.matrices():
        measures = coupling.unit_amplification(jacobian)
        d = len(jacobian)
        yield pa.record_batch({"layer": np.full(d, layer, np.int32), "sublayer": pa.repeat(pa.scalar(sublayer), d),
                               "depth": np.full(d, sublayer_depth(layer, sublayer), np.int32),
                               "unit": np.arange(d, dtype=np.int32), **measures})
        if progress is not None:  # the batch above has been written
            progress.done(f"{layer}/{sublayer}")


def _grouped(table: pa.Table, keys: tuple[str, str]) -> dict[tuple, pa.Table]:
    """Rows of ``table`` per distinct (key0, key1), each sorted by unit."""
    groups = {}
    for row in table.select(list(keys)).group_by(list(keys)).aggregate([]).to_pylist():
        first, second = row[keys[0]], row[keys[1]]
        mask = pc.and_(pc.equal(table.column(keys[0]), first), pc.equal(table.column(keys[1]), second))
        groups[(first, second)] = table.filter(mask).sort_by("unit")
    return groups


@partition_asset(ANALYSIS, group_name="coupling", code_version="5",
                 settings=("n_permutations", "seed", "workers"),
          description="Boundary vs interior amplification per sublayer: Mann-Whitney U, rank-biserial effect, "
                      "degree-stratified permutation p, BH q within the model checkpoint, operator type.")
def coupling_tests(context, settings, outputs, unit_amplification: TableHandle, communities: TableHandle,
                   layer_metrics: TableHandle):
    yield _coupling_tests(context, settings, outputs, unit_amplification, communities, layer_metrics)


def _coupling_tests(context, settings, outputs, unit_amplification, communities, layer_metrics) -> dg.Output:
    model, checkpoint = partition(context)
    amplification = _grouped(unit_amplification.read(["layer", "sublayer", "unit", "log_column_norm"]),
                             ("layer", "sublayer"))
    communities = _grouped(communities.read(["layer", "boundary", "unit", "is_boundary", "degree"]),
                           ("layer", "boundary"))
    operator = {(r["layer"], r["sublayer"]): r["operator_type"]
                for r in layer_metrics.read(["layer", "sublayer", "operator_type"]).to_pylist()}
    rows, progress = [], StageProgress(context, "coupling tests", len(amplification))
    sublayers = sorted(amplification, key=lambda key: sublayer_depth(*key))
    tasks = []
    for layer, sublayer in sublayers:
        units, membership = amplification[(layer, sublayer)], communities[(layer, STARTING_BOUNDARY[sublayer])]
        if not np.array_equal(membership.column("unit").to_numpy(), units.column("unit").to_numpy()):
            raise ValueError(f"{context.partition_key}: communities and unit_amplification of layer {layer} disagree on "
                             "their units; rematerialize the partition")
        tasks.append((units.column("log_column_norm").to_numpy(),
                      membership.column("is_boundary").to_numpy(zero_copy_only=False),
                      membership.column("degree").to_numpy(), settings.n_permutations,
                      settings.seed + sublayer_depth(layer, sublayer)))
    units_tested = max((len(task[0]) for task in tasks), default=0)
    workers = (settings.workers or default_workers()) if settings.n_permutations * units_tested >= PARALLEL_MIN_DRAWS else 1
    for (layer, sublayer), result in zip(sublayers, ordered_parallel_map(coupling.coupling_test_of, tasks,
                                                                         workers=workers)):
        progress.done(f"{layer}/{sublayer}")
        defined = result.defined
        rows.append({"layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer),
                     "boundary": STARTING_BOUNDARY[sublayer],
                     "n_boundary": result.n_boundary, "n_interior": result.n_interior,
                     "stratum_boundary": list(result.stratum_boundary), "stratum_interior": list(result.stratum_interior),
                     "u_statistic": result.u_statistic if defined else None, "effect": result.effect if defined else None,
                     "p_value": result.p_value, "p_permutation": result.p_permutation,
                     "direction": result.direction, "reason": result.reason or None,
                     "operator_type": operator[(layer, sublayer)], "amplification_measure": "log_column_norm"})
    decisions = coupling.family_decisions([r["p_value"] for r in rows], [r["reason"] is None for r in rows],
                                          decided_on=[r["p_permutation"] for r in rows])
    for row, decision in zip(rows, decisions):
        row.update(q_value=decision["q_value"], q_value_by=decision["q_value_by"],
                   q_value_permutation=decision["q_value_decided"], significant=decision["significant"])
    table = rows_table("coupling_tests", rows)
    frames = {checkpoint: pl.from_arrow(table)}  # across checkpoints: the coupling_by_checkpoint asset
    png = figure_frames.coupling_figure(model, frames, outputs.figures)
    return table_output(table, metadata={**figure(png),
                                         "significant_sublayers": int(sum(bool(r["significant"]) for r in rows)),
                                         "undefined_tests": int(sum(r["reason"] is not None for r in rows))})


@partition_asset(ANALYSIS, group_name="coupling", code_version="2",
                 settings=("n_permutations", "seed"),
          description="Community position (mean participation) vs community gain ||J P_C||_F / ||P_C||_F per sublayer: "
                      "Spearman rho, permutation p (J, its symmetric part, J - I), BH q within the model checkpoint.")
def community_coupling(context, settings, communities: TableHandle, graph_edges: TableHandle,
                       activations: TableHandle, model_checkpoints: TableHandle, jacobians: MatrixTable,
                       layer_metrics: TableHandle):
    yield _community_coupling(context, settings, communities, graph_edges, activations, model_checkpoints, jacobians,
                              layer_metrics)


def _community_coupling(context, settings, communities, graph_edges, activations, model_checkpoints, jacobians,
                        layer_metrics) -> dg.Output:
    """One row per sublayer; one graph, then one mean Jacobian, in memory at a time."""
    membership = {key: table.column("community").to_numpy() for key, table in _grouped(
        communities.read(["layer", "boundary", "unit", "community"]), ("layer", "boundary")).items()}
    operator = {(r["layer"], r["sublayer"]): r["operator_type"]
                for r in layer_metrics.read(["layer", "sublayer", "operator_type"]).to_pylist()}
    # the graphs the communities were found on (empty ones included), reduced to each community's position
    positions = {key: community_level.community_position(edges, membership[key])
                 for key, edges in edges_by_boundary(graph_edges, activations, model_checkpoints) if key in membership}
    rows, progress = [], StageProgress(context, "community coupling", 2 * n_layers(model_checkpoints))
    for (layer, sublayer), jacobian in jacobians.matrices():
        boundary, depth = STARTING_BOUNDARY[sublayer], sublayer_depth(layer, sublayer)
        if (layer, boundary) not in positions or len(membership[(layer, boundary)]) != len(jacobian):
            raise ValueError(f"{context.partition_key}: communities or graph_edges of {layer}/{boundary} do not match "
                             f"the {sublayer} Jacobian of layer {layer}; rematerialize the partition")
        position = positions[(layer, boundary)]
        gains = community_level.community_log_gains(jacobian, membership[(layer, boundary)])
        tests = {name: community_level.community_coupling_test(
            position.mean_participation, gains[name], position.size, n_permutations=settings.n_permutations,
            seed=settings.seed + depth) for name in community_level.GAIN_OPERATORS}
        primary = tests["jacobian"]
        reasons = [primary.reason] if primary.reason else [f"{name}: {test.reason}" for name, test in tests.items()
                                                            if test.reason]
        rows.append({"layer": layer, "sublayer": sublayer, "depth": depth, "boundary": boundary,
                     "n_communities": primary.n_communities,
                     "community_sizes": sorted(position.size.tolist(), reverse=True),
                     "position_measure": community_level.POSITION_MEASURE,
                     **{f"rho{suffix}": test.rho if test.defined else None for suffix, test in
                        (("", primary), ("_symmetric", tests["symmetric"]), ("_update", tests["update"]))},
                     "p_permutation": primary.p_permutation, "p_symmetric": tests["symmetric"].p_permutation,
                     "p_update": tests["update"].p_permutation, "operator_type": operator[(layer, sublayer)],
                     "reason": "; ".join(reasons) or None, "defined": primary.defined})
        progress.done(f"{layer}/{sublayer}")
    rows.sort(key=lambda row: row["depth"])
    decisions = coupling.family_decisions([r["p_permutation"] for r in rows], [r.pop("defined") for r in rows])
    for row, decision in zip(rows, decisions):
        row.update(q_value=decision["q_value"], significant=decision["significant"])
    table = rows_table("community_coupling", rows)
    return table_output(table, metadata={"significant_sublayers": int(sum(bool(r["significant"]) for r in rows)),
                                         "undefined_tests": int(sum(r["q_value"] is None for r in rows))})
