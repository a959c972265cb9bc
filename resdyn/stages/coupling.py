"""Does each sublayer amplify or suppress the boundary units where it starts? (resdyn.coupling,
resdyn.community_coupling)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from resdyn import community_coupling as community_level
from resdyn import coupling, figure_frames
from resdyn.naming import sublayer_depth
from resdyn.stages.result import Figure, StageResult
from resdyn.stages.topology import edges_by_boundary, n_layers

STARTING_BOUNDARY = {"attn": "pre_attn", "mlp": "pre_mlp"}
# permutations x units of one test above which the tests run in worker processes: the paper's 20,000 x 576 took
# 0.24 s a test, the default 1,000 x 576 about 12 ms, less than a worker takes to start
PARALLEL_MIN_DRAWS = 2**22


def unit_amplification(tools, jacobians, model_checkpoints) -> StageResult:
    """Per unit of every sublayer, from its mean Jacobian: column norm, J - I column norm, row norm, diagonal
    (resdyn.coupling.unit_amplification); one batch per sublayer, one Jacobian in memory at a time."""
    progress = tools.progress("unit amplification", 2 * n_layers(model_checkpoints))

    def batches():
        for (layer, sublayer), jacobian in jacobians.matrices():
            d = len(jacobian)
            yield {"layer": np.full(d, layer, np.int32), "sublayer": sublayer,
                   "depth": np.full(d, sublayer_depth(layer, sublayer), np.int32),
                   "unit": np.arange(d, dtype=np.int32), **coupling.unit_amplification(jacobian)}
            progress.done(f"{layer}/{sublayer}")  # the batch above has been written

    return StageResult(tables={"unit_amplification": batches()})


def _grouped(table: pa.Table, keys: tuple[str, str]) -> dict[tuple, pa.Table]:
    """Rows of ``table`` per distinct (key0, key1), each sorted by unit."""
    groups = {}
    for row in table.select(list(keys)).group_by(list(keys)).aggregate([]).to_pylist():
        first, second = row[keys[0]], row[keys[1]]
        mask = pc.and_(pc.equal(table.column(keys[0]), first), pc.equal(table.column(keys[1]), second))
        groups[(first, second)] = table.filter(mask).sort_by("unit")
    return groups


def _operator_types(layer_metrics) -> dict[tuple[int, str], str]:
    return {(r["layer"], r["sublayer"]): r["operator_type"]
            for r in layer_metrics.read(["layer", "sublayer", "operator_type"]).to_pylist()}


def coupling_tests(settings, tools, unit_amplification, communities, layer_metrics) -> StageResult:
    """Per sublayer, boundary against interior units of the boundary where it starts: Mann-Whitney U, rank-biserial
    effect, a degree-stratified permutation p (``settings.n_permutations`` draws seeded by ``settings.seed`` + depth),
    and the checkpoint's family decision (resdyn.coupling.family_decisions: BH q, significance)."""
    amplification = _grouped(unit_amplification.read(["layer", "sublayer", "unit", "log_column_norm"]),
                             ("layer", "sublayer"))
    membership_by_boundary = _grouped(communities.read(["layer", "boundary", "unit", "is_boundary", "degree"]),
                                      ("layer", "boundary"))
    operator = _operator_types(layer_metrics)
    rows, progress = [], tools.progress("coupling tests", len(amplification))
    sublayers = sorted(amplification, key=lambda key: sublayer_depth(*key))
    tasks = []
    for layer, sublayer in sublayers:
        units, membership = amplification[(layer, sublayer)], membership_by_boundary[(layer, STARTING_BOUNDARY[sublayer])]
        if not np.array_equal(membership.column("unit").to_numpy(), units.column("unit").to_numpy()):
            raise ValueError(f"{tools.label}: communities and unit_amplification of layer {layer} disagree on "
                             "their units; rematerialize the partition")
        tasks.append((units.column("log_column_norm").to_numpy(),
                      membership.column("is_boundary").to_numpy(zero_copy_only=False),
                      membership.column("degree").to_numpy(), settings.n_permutations,
                      settings.seed + sublayer_depth(layer, sublayer)))
    units_tested = max((len(task[0]) for task in tasks), default=0)
    parallel = settings.n_permutations * units_tested >= PARALLEL_MIN_DRAWS
    for (layer, sublayer), result in zip(sublayers, tools.map(coupling.coupling_test_of, tasks, parallel=parallel)):
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
    frames = {tools.checkpoint: pl.DataFrame(rows, infer_schema_length=None)}  # across checkpoints: coupling_by_checkpoint
    png = figure_frames.coupling_figure(tools.model, frames, tools.figures)
    return StageResult(tables={"coupling_tests": rows}, metadata={"coupling_tests": {
        "figure": Figure(png), "significant_sublayers": int(sum(bool(r["significant"]) for r in rows)),
        "undefined_tests": int(sum(r["reason"] is not None for r in rows))}})


def community_coupling(settings, tools, communities, graph_edges, activations, model_checkpoints, jacobians,
                       layer_metrics) -> StageResult:
    """Per sublayer, the communities' position (mean participation) against their gain ||J P_C||_F / ||P_C||_F:
    Spearman rho and a permutation p for J, its symmetric part and J - I, and the checkpoint's family decision. One
    graph, then one mean Jacobian, in memory at a time."""
    membership = {key: table.column("community").to_numpy() for key, table in _grouped(
        communities.read(["layer", "boundary", "unit", "community"]), ("layer", "boundary")).items()}
    operator = _operator_types(layer_metrics)
    # the graphs the communities were found on (empty ones included), reduced to each community's position
    positions = {key: community_level.community_position(edges, membership[key])
                 for key, edges in edges_by_boundary(graph_edges, activations, model_checkpoints) if key in membership}
    rows, progress = [], tools.progress("community coupling", 2 * n_layers(model_checkpoints))
    for (layer, sublayer), jacobian in jacobians.matrices():
        boundary, depth = STARTING_BOUNDARY[sublayer], sublayer_depth(layer, sublayer)
        if (layer, boundary) not in positions or len(membership[(layer, boundary)]) != len(jacobian):
            raise ValueError(f"{tools.label}: communities or graph_edges of {layer}/{boundary} do not match "
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
    return StageResult(tables={"community_coupling": rows}, metadata={"community_coupling": {
        "significant_sublayers": int(sum(bool(r["significant"]) for r in rows)),
        "undefined_tests": int(sum(r["q_value"] is None for r in rows))}})


__all__ = ["STARTING_BOUNDARY", "community_coupling", "coupling_tests", "unit_amplification"]
