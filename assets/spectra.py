"""Spectral geometry of every mean sublayer Jacobian, and depth as time.

One pass per partition, each factorization computed once: per sublayer (in parallel processes)
the real Schur form, the singular values and one SVD of J - I (resdyn.spectra.analyse_sublayer;
the Schur form is stored, in ``schur_forms``, for the transient stage);
then, in depth order, the cumulative products of the Jacobians and of their Schur-operated
versions J(alpha) = Z T(alpha) Z^T, and of N + alpha (J - N) for the polar normal part N, reusing each
Schur form (resdyn.depth, resdyn.normal_part).
"""


import dagster as dg
import numpy as np
import polars as pl
import pyarrow as pa

from resdyn.dagster_project.asset_layer import (
    ANALYSIS,
    ChainWorkers,
    MatrixTable,
    default_workers,
    figure,
    figure_frames,
    fixed_size_lists,
    ordered_parallel_map,
    partition_asset,
    preview,
    record_batch,
    rows_table,
    table_output,
    written_output,
)
from resdyn.depth import SCHUR_ORDERINGS, CumulativeProduct, SchurSurgery, rank_summary
from resdyn.figures import eigenvalue_clouds
from resdyn.naming import sublayer_depth
from resdyn.threads import threads_per_part

from .common import StageProgress, partition
from .spectral_worker import analyse_matrix

SURGERY_ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
PARALLEL_MIN_WIDTH = 256  # below this a process pool costs more than it saves
TABLES = ("eigenvalues", "singular_values", "schur_forms", "layer_metrics", "cumulative_rank", "schur_surgery")


def sublayers_in_depth_order(matrices: MatrixTable) -> list[tuple[int, int, str]]:
    """(row group, layer, sublayer) of a matrix table's partition (one matrix a row group), by depth."""
    return sorted(((index, layer, sublayer) for index, (layer, sublayer) in matrices.keys()),
                  key=lambda key: sublayer_depth(key[1], key[2]))


def jacobians_in_depth_order(jacobians: MatrixTable, settings) -> tuple[list, int, int]:
    """([(row group, layer, sublayer)] by depth, width d, worker processes) of a jacobians partition: what every
    per-sublayer analysis starts from (one process below PARALLEL_MIN_WIDTH)."""
    order = sublayers_in_depth_order(jacobians)
    width = jacobians.width
    workers = (settings.workers or default_workers()) if width >= PARALLEL_MIN_WIDTH else 1
    return order, width, workers


@partition_asset(ANALYSIS, settings=("workers",), tables=[
        dg.AssetSpec("eigenvalues", code_version="2", group_name="spectra",
                     description="Every eigenvalue of every mean Jacobian (read off its real Schur form)."),
        dg.AssetSpec("singular_values", code_version="2", group_name="spectra",
                     description="Every singular value of every mean Jacobian."),
        dg.AssetSpec("schur_forms", code_version="1", group_name="spectra",
                     description="The real Schur form T of every mean Jacobian, factored once here and read by "
                                 "transient_analysis (resdyn.spectra.real_schur_form)."),
        dg.AssetSpec("layer_metrics", code_version="6", group_name="spectra",
                     description="One row per sublayer: conditioning, non-normality, rotation, alignment, ranks, "
                                 "operator type (resdyn.spectra)."),
        dg.AssetSpec("cumulative_rank", code_version="2", group_name="depth",
                     description="Ranks of the composed Jacobian J_depth ... J_0 (rescaled float64 product) at every depth."),
        dg.AssetSpec("schur_surgery", code_version="4", group_name="depth",
                     description="Ranks of the cumulative product of Schur-operated Jacobians J(alpha): spectrum kept, "
                                 "non-normal part scaled by alpha (alpha = 1 reproduces cumulative_rank), under three "
                                 "Schur orderings and beside them J(alpha) = N + alpha (J - N) for the polar normal "
                                 "part N (polar-normal, no ordering; resdyn/normal_part.py)."),
])
def spectral_analysis(context, settings, outputs, jacobians: MatrixTable):
    yield from _analyse(context, settings, outputs, jacobians)


def _surgery_chains(workers: int, where: str) -> ChainWorkers:
    """The Schur surgery's chains through depth, one SchurSurgery per normal part (SCHUR_ORDERINGS), each in a
    worker process of its own when the stage has workers. The products of one normal part share nothing with
    another's, and carried in the stage's own process they were 0.96 s of single-threaded work per SmolLM2
    sublayer while the Schur forms took 0.17 s in the pool: the stage waited on that process. A step's rows, the
    chains' concatenated (:func:`_surgery_rows`), are in the order of one SchurSurgery(SURGERY_ALPHAS)
    (SCHUR_ORDERINGS, then alphas). Each chain does the same operations either way; the numbers are the same where
    the BLAS thread count is (one thread on a 2-core machine, here and in the workers; another count may move the
    last digits, as the thread count of any BLAS product does)."""
    return ChainWorkers([(SchurSurgery, (SURGERY_ALPHAS, (ordering,))) for ordering in SCHUR_ORDERINGS],
                        threads=threads_per_part(workers + len(SCHUR_ORDERINGS)), where=where,
                        in_processes=workers > 1)


def _surgery_rows(chains: ChainWorkers) -> list[dict]:
    """The oldest depth's schur_surgery rows."""
    return [row for rows in chains.receive() for row in rows]


def _analyse(context, settings, outputs, jacobians):
    model, checkpoint = partition(context)
    order, width, workers = jacobians_in_depth_order(jacobians, settings)
    measured = CumulativeProduct()
    metric_rows, rank_rows, surgery_rows, clouds = [], [], [], {}
    writers = {name: outputs.writer(name, width=width)
               for name in ("eigenvalues", "singular_values", "schur_forms", "cumulative_rank")}
    progress = StageProgress(context, "spectra", len(order))
    with writers["eigenvalues"], writers["singular_values"], writers["schur_forms"], writers["cumulative_rank"], \
            _surgery_chains(workers, f"the Schur surgery of {context.partition_key}") as surgery:
        results = ordered_parallel_map(analyse_matrix, [jacobians.reference(index) for index, _, _ in order],
                                       workers=workers)
        for (index, layer, sublayer), result in zip(order, results):
            depth = sublayer_depth(layer, sublayer)
            surgery.send(result.schur_form, result.schur_basis)  # the chains step while this process writes
            progress.done(f"depth {depth}, {layer}/{sublayer}")
            key = {"layer": layer, "sublayer": sublayer, "depth": depth}
            eigenvalues = result.eigenvalues
            clouds[depth] = eigenvalues
            writers["eigenvalues"].write(record_batch("eigenvalues", width, {
                **key, "idx": np.arange(len(eigenvalues), dtype=np.int32), "re": eigenvalues.real.copy(),
                "im": eigenvalues.imag.copy(), "modulus": np.abs(eigenvalues)}))
            writers["singular_values"].write(record_batch("singular_values", width, {
                **key, "idx": np.arange(len(result.singular_values), dtype=np.int32), "sigma": result.singular_values}))
            writers["schur_forms"].write(record_batch("schur_forms", width, {
                **key, "row": np.arange(width, dtype=np.int32), "values": fixed_size_lists(result.schur_form)}))
            metric_rows.append({**key, **result.metrics})
            step = measured.push(jacobians.matrix(index))
            singular = np.exp(step.log_singular_values)
            writers["cumulative_rank"].write(record_batch("cumulative_rank", width, {
                **{name: np.asarray([value]) for name, value in rank_summary(step).items()},
                "cumulative_singular_values": pa.ListArray.from_arrays(pa.array([0, len(singular)], pa.int32()),
                                                                       pa.array(singular))}))
            rank_rows.append(rank_summary(step))
            if surgery.outstanding > 1:  # the depth before: one step ahead, no chain waits for this process
                surgery_rows += _surgery_rows(surgery)
            del result
        while surgery.outstanding:
            surgery_rows += _surgery_rows(surgery)
    tables = {
        "layer_metrics": rows_table("layer_metrics", metric_rows),
        "schur_surgery": rows_table("schur_surgery", surgery_rows),
        **{name: writer.result for name, writer in writers.items()},
    }
    figures_directory = outputs.figures
    extra = {name: {} for name in TABLES}
    extra["eigenvalues"] = figure(eigenvalue_clouds(clouds, figures_directory, title=context.partition_key))
    # this checkpoint's own curves; the comparison across checkpoints is the metrics_by_checkpoint asset
    metrics = {checkpoint: pl.from_arrow(tables["layer_metrics"])}
    extra["layer_metrics"] = figure(figure_frames.metrics_figure(model, metrics, figures_directory))
    types = [row["operator_type"] for row in metric_rows]
    extra["layer_metrics"]["operator_types"] = dg.MetadataValue.json({t: types.count(t) for t in sorted(set(types))})
    conditions = [row["eigenvector_condition_number"] for row in metric_rows]
    if conditions:
        extra["layer_metrics"]["largest_eigenvector_condition_number"] = dg.MetadataValue.float(float(max(conditions)))
    ranks = pa.Table.from_pylist(rank_rows)
    extra["cumulative_rank"] = figure(figure_frames.cumulative_rank_figure(
        model, {checkpoint: pl.from_arrow(ranks)}, figures_directory))
    extra["cumulative_rank"]["preview"] = preview(ranks)
    extra["schur_surgery"] = figure(figure_frames.schur_surgery_figure(
        context.partition_key, pl.from_arrow(tables["schur_surgery"]), figures_directory))
    extra["layer_metrics"]["workers"] = workers
    for name in TABLES:
        table = tables[name]
        yield (table_output(table, name, extra[name]) if isinstance(table, pa.Table) else
               written_output(table, name, extra[name]))
