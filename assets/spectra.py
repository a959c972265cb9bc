"""Stages 5-6: spectral geometry of every mean sublayer Jacobian, and depth as time.

One pass per partition, each factorization computed once: per sublayer (in parallel processes)
the real Schur form, the singular values and one SVD of J - I (resdyn.spectra.analyse_sublayer);
then, in depth order, the cumulative products of the Jacobians and of their Schur-operated
versions J(alpha) = Z T(alpha) Z^T, reusing each Schur form (resdyn.depth).
"""

import dagster as dg
import numpy as np
import pyarrow as pa

from resdyn import spectra
from resdyn.dagster_project import interrupts
from resdyn.dagster_project.arrow_tables import record_batch
from resdyn.dagster_project.parallel import default_workers, ordered_parallel_map
from resdyn.dagster_project.resources import AnalysisSettings, WarehouseResource
from resdyn.dagster_project.runs import partition_run
from resdyn.dagster_project.schema import spec
from resdyn.dagster_project.steps import ANALYSIS_STEP, STEP_RETRIES
from resdyn.depth import (
    SCHUR_ORDERING,
    SURGERY_BLOCK_RULE,
    CumulativeProduct,
    block_eigenvalue_drift,
    operated_schur_form,
)
from resdyn.figures import eigenvalue_clouds, metrics_by_depth
from resdyn.naming import sublayer_depth

from .common import PARTITIONS, figure, partition, written_metadata
from .spectral_worker import analyse_row_group, read_matrix

DEPTH_CURVES = ("henrici_rel_j_minus_i", "frac_complex", "self_alignment", "effective_rank",
                "log10_condition", "spectral_radius")
SURGERY_ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
PARALLEL_MIN_WIDTH = 256  # below this a process pool costs more than it saves
TABLES = ("eigenvalues", "singular_values", "layer_metrics", "cumulative_rank", "schur_surgery")


def depth_curves(store, table: str, model: str, metrics, x_column: str = "depth", filter_=None) -> dict:
    """curves[metric][checkpoint] = (x, y) over the published checkpoints of ``model`` and this run's own."""
    curves: dict[str, dict[str, tuple[list, list]]] = {metric: {} for metric in metrics}
    checkpoints = set(store.checkpoints_of(table, model))
    for checkpoint in sorted(checkpoints | {c for m, c in _this_partition(store) if m == model}):
        if not store.has(table, model, checkpoint):
            continue
        rows = sorted(store.read(table, model, checkpoint).to_pylist(), key=lambda r: r[x_column])
        rows = [r for r in rows if filter_ is None or filter_(r)]
        for metric in metrics:
            curves[metric][checkpoint] = ([r[x_column] for r in rows], [r[metric] for r in rows])
    return curves


def _this_partition(store) -> list[tuple[str, str]]:
    """The partitions this run has staged tables for (so a figure includes the checkpoint being made)."""
    if store.run_id is None:
        return []
    return [(path.parent.name.split("=", 1)[1], path.name.split("=", 1)[1])
            for path in (store.root / "_staging" / store.run_id).glob("model=*/checkpoint=*")]


def sublayers_in_depth_order(store, model: str, checkpoint: str) -> list[tuple[int, int, str]]:
    """(row group, layer, sublayer) of the jacobians partition, by depth."""
    keys = []
    for index, group in enumerate(store.row_groups("jacobians", model, checkpoint, columns=["layer", "sublayer"])):
        keys.append((index, group.column("layer")[0].as_py(), group.column("sublayer")[0].as_py()))
    return sorted(keys, key=lambda key: sublayer_depth(key[1], key[2]))


def jacobians_in_depth_order(store, settings, model: str, checkpoint: str) -> tuple[str, list, int, int]:
    """(file, [(row group, layer, sublayer)] by depth, width d, worker processes) of a jacobians partition:
    what every per-sublayer analysis starts from (one process below PARALLEL_MIN_WIDTH)."""
    path = str(store.table_path("jacobians", model, checkpoint))
    order = sublayers_in_depth_order(store, model, checkpoint)
    width = len(read_matrix(path, order[0][0]))
    workers = (settings.workers or default_workers()) if width >= PARALLEL_MIN_WIDTH else 1
    return path, order, width, workers


def _rank_columns(step) -> dict:
    s = step.singular_values_normalised
    return {"depth": step.depth, "effective_rank": spectra.effective_rank(s),
            "participation_ratio": spectra.participation_ratio(s), "stable_rank": spectra.stable_rank(s),
            "numerical_rank": spectra.numerical_rank(s), "log_sigma_max": step.log_sigma_max}


@dg.multi_asset(
    partitions_def=PARTITIONS, can_subset=False, op_tags=ANALYSIS_STEP, retry_policy=STEP_RETRIES,
    specs=[
        dg.AssetSpec("eigenvalues", code_version="2", deps=["jacobians"], group_name="spectra",
                     description="Every eigenvalue of every mean Jacobian (read off its real Schur form)."),
        dg.AssetSpec("singular_values", code_version="2", deps=["jacobians"], group_name="spectra",
                     description="Every singular value of every mean Jacobian."),
        dg.AssetSpec("layer_metrics", code_version="3", deps=["jacobians"], group_name="spectra",
                     description="One row per sublayer: conditioning, non-normality, rotation, alignment, ranks, "
                                 "operator type (resdyn.spectra)."),
        dg.AssetSpec("cumulative_rank", code_version="2", deps=["jacobians"], group_name="depth",
                     description="Ranks of the composed Jacobian J_depth ... J_0 (rescaled float64 product) at every depth."),
        dg.AssetSpec("schur_surgery", code_version="2", deps=["jacobians"], group_name="depth",
                     description="Ranks of the cumulative product of Schur-operated Jacobians J(alpha): spectrum kept, "
                                 "non-normal part scaled by alpha (alpha = 1 reproduces cumulative_rank)."),
    ],
)
def spectral_analysis(context: dg.AssetExecutionContext, warehouse: WarehouseResource, settings: AnalysisSettings):
    with partition_run(context, warehouse, settings) as store:
        yield from _analyse(context, settings, store)


def _analyse(context, settings, store):
    model, checkpoint = partition(context)
    path, order, width, workers = jacobians_in_depth_order(store, settings, model, checkpoint)
    measured = CumulativeProduct()
    chains = {alpha: CumulativeProduct() for alpha in SURGERY_ALPHAS}
    drift = {alpha: 0.0 for alpha in SURGERY_ALPHAS}
    metric_rows, rank_rows, surgery_rows, clouds = [], [], [], {}
    writers = {name: store.open_writer(name, model, checkpoint, width=width)
               for name in ("eigenvalues", "singular_values", "cumulative_rank")}
    with writers["eigenvalues"], writers["singular_values"], writers["cumulative_rank"]:
        results = ordered_parallel_map(analyse_row_group, [(path, index) for index, _, _ in order], workers=workers)
        for (index, layer, sublayer), result in zip(order, results):
            depth = sublayer_depth(layer, sublayer)
            context.log.info(f"{context.partition_key}: spectra of depth {depth} ({layer}/{sublayer}) done")
            interrupts.check(f"spectral_analysis of {context.partition_key}")
            key = {"layer": layer, "sublayer": sublayer, "depth": depth}
            eigenvalues = result.eigenvalues
            clouds[depth] = eigenvalues
            writers["eigenvalues"].write(record_batch(spec("eigenvalues"), width, {
                **key, "idx": np.arange(len(eigenvalues), dtype=np.int32), "re": eigenvalues.real.copy(),
                "im": eigenvalues.imag.copy(), "modulus": np.abs(eigenvalues)}))
            writers["singular_values"].write(record_batch(spec("singular_values"), width, {
                **key, "idx": np.arange(len(result.singular_values), dtype=np.int32), "sigma": result.singular_values}))
            metric_rows.append({**key, **result.metrics})
            step = measured.push(read_matrix(path, index))
            singular = np.exp(step.log_singular_values)
            writers["cumulative_rank"].write(record_batch(spec("cumulative_rank"), width, {
                **{name: np.asarray([value]) for name, value in _rank_columns(step).items()},
                "cumulative_singular_values": pa.ListArray.from_arrays(pa.array([0, len(singular)], pa.int32()),
                                                                       pa.array(singular))}))
            rank_rows.append(_rank_columns(step))
            for alpha in SURGERY_ALPHAS:
                operated = operated_schur_form(result.schur_form, alpha)
                drift[alpha] = max(drift[alpha], block_eigenvalue_drift(result.schur_form, operated))
                jacobian = result.schur_basis @ operated @ result.schur_basis.T
                surgery_rows.append({"alpha": alpha, **_rank_columns(chains[alpha].push(jacobian)),
                                     "max_eigenvalue_drift": drift[alpha], "block_rule": SURGERY_BLOCK_RULE,
                                     "schur_ordering": SCHUR_ORDERING})
            del result
    small_tables = {
        "layer_metrics": pa.Table.from_pylist(metric_rows, schema=spec("layer_metrics").schema()),
        "schur_surgery": pa.Table.from_pylist(surgery_rows, schema=spec("schur_surgery").schema()),
    }
    written = {name: writer.result for name, writer in writers.items()}
    for name, table in small_tables.items():
        written[name] = store.write(name, model, checkpoint, table)
    figures_directory = store.artefact_directory("figures", model, checkpoint)
    extra = {name: {} for name in TABLES}
    extra["eigenvalues"] = figure(eigenvalue_clouds(clouds, figures_directory, title=context.partition_key))
    curves = depth_curves(store, "layer_metrics", model, DEPTH_CURVES)
    extra["layer_metrics"] = figure(metrics_by_depth(curves, figures_directory, title=f"{model}: metrics vs depth"))
    types = [row["operator_type"] for row in metric_rows]
    extra["layer_metrics"]["operator_types"] = dg.MetadataValue.json({t: types.count(t) for t in sorted(set(types))})
    curves = depth_curves(store, "cumulative_rank", model, ["effective_rank", "participation_ratio", "stable_rank"])
    extra["cumulative_rank"] = figure(metrics_by_depth(
        curves, figures_directory, title=f"{model}: cumulative Jacobian rank", name="cumulative_rank",
        log_y=("effective_rank", "participation_ratio", "stable_rank")))
    surgery = {"effective_rank": {f"alpha={alpha}": ([r["depth"] for r in surgery_rows if r["alpha"] == alpha],
                                                     [r["effective_rank"] for r in surgery_rows if r["alpha"] == alpha])
                                  for alpha in SURGERY_ALPHAS}}
    extra["schur_surgery"] = figure(metrics_by_depth(surgery, figures_directory, title=f"{context.partition_key}: "
                                                     "Schur surgery", name="schur_surgery", log_y=("effective_rank",)))
    extra["layer_metrics"]["workers"] = workers
    small_tables["cumulative_rank"] = pa.Table.from_pylist(rank_rows)
    for name in TABLES:
        head = small_tables.get(name)
        yield dg.MaterializeResult(asset_key=name, metadata={**written_metadata(written[name], head), **extra[name]},
                                   data_version=dg.DataVersion(written[name].content_hash))
