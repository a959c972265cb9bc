"""Spectral geometry of every mean sublayer Jacobian, and depth as time.

One pass per partition, each factorization computed once: per sublayer (in parallel processes)
the real Schur form, the singular values and one SVD of J - I (resdyn.spectra.analyse_sublayer;
the Schur form is kept, in ``schur_forms``, for the transient stage);
then, in depth order, the cumulative products of the Jacobians and of their Schur-operated
versions J(alpha) = Z T(alpha) Z^T, and of N + alpha (J - N) for the polar normal part N, reusing each
Schur form (resdyn.depth, resdyn.normal_part).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from resdyn import figure_frames
from resdyn.depth import SCHUR_ORDERINGS, CumulativeProduct, SchurSurgery, rank_summary
from resdyn.figures import eigenvalue_clouds
from resdyn.naming import sublayer_depth
from resdyn.parallel import ChainWorkers
from resdyn.stages.result import Figure, Preview, StageResult
from resdyn.stages.workers import analyse_matrix
from resdyn.threads import threads_per_part

SURGERY_ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
PARALLEL_MIN_WIDTH = 256  # below this a process pool costs more than it saves
TABLES = ("eigenvalues", "singular_values", "schur_forms", "layer_metrics", "cumulative_rank", "schur_surgery")


def sublayers_in_depth_order(matrices) -> list[tuple[int, int, str]]:
    """(row group, layer, sublayer) of a matrix frame (one matrix a row group), by depth."""
    return sorted(((index, layer, sublayer) for index, (layer, sublayer) in matrices.keys()),
                  key=lambda key: sublayer_depth(key[1], key[2]))


def surgery_chains(workers: int, where: str) -> ChainWorkers:
    """The Schur surgery's chains through depth, one SchurSurgery per normal part (SCHUR_ORDERINGS), each in a
    worker process of its own when the stage has workers. The products of one normal part share nothing with
    another's, and carried in the stage's own process they were 0.96 s of single-threaded work per SmolLM2
    sublayer while the Schur forms took 0.17 s in the pool: the stage waited on that process. A step's rows, the
    chains' concatenated (:func:`surgery_rows`), are in the order of one SchurSurgery(SURGERY_ALPHAS)
    (SCHUR_ORDERINGS, then alphas). Each chain does the same operations either way; the numbers are the same where
    the BLAS thread count is (one thread on a 2-core machine, here and in the workers; another count may move the
    last digits, as the thread count of any BLAS product does)."""
    return ChainWorkers([(SchurSurgery, (SURGERY_ALPHAS, (ordering,))) for ordering in SCHUR_ORDERINGS],
                        threads=threads_per_part(workers + len(SCHUR_ORDERINGS)), where=where,
                        in_processes=workers > 1)


def surgery_rows(chains: ChainWorkers) -> list[dict]:
    """The oldest depth's schur_surgery rows."""
    return [row for rows in chains.receive() for row in rows]


def spectral_analysis(tools, jacobians) -> StageResult:
    """Eigenvalues, singular values, Schur forms and metrics of every mean Jacobian; ranks of their products
    through depth, with and without the non-normal part (Schur surgery)."""
    order = sublayers_in_depth_order(jacobians)
    width = jacobians.width
    workers = tools.workers if width >= PARALLEL_MIN_WIDTH else 1
    measured = CumulativeProduct()
    metric_rows, rank_rows, operated_rows, clouds = [], [], [], {}
    streams = {name: tools.stream(name, width) for name in ("eigenvalues", "singular_values", "schur_forms",
                                                              "cumulative_rank")}
    progress = tools.progress("spectra", len(order))
    with streams["eigenvalues"], streams["singular_values"], streams["schur_forms"], streams["cumulative_rank"], \
            surgery_chains(workers, f"the Schur surgery of {tools.label}") as surgery:
        results = tools.map(analyse_matrix, [jacobians.reference(index) for index, _, _ in order],
                            parallel=workers > 1)
        for (index, layer, sublayer), result in zip(order, results):
            depth = sublayer_depth(layer, sublayer)
            surgery.send(result.schur_form, result.schur_basis)  # the chains step while this process writes
            progress.done(f"depth {depth}, {layer}/{sublayer}")
            key = {"layer": layer, "sublayer": sublayer, "depth": depth}
            eigenvalues = result.eigenvalues
            clouds[depth] = eigenvalues
            streams["eigenvalues"].write({
                **key, "idx": np.arange(len(eigenvalues), dtype=np.int32), "re": eigenvalues.real.copy(),
                "im": eigenvalues.imag.copy(), "modulus": np.abs(eigenvalues)})
            streams["singular_values"].write({
                **key, "idx": np.arange(len(result.singular_values), dtype=np.int32), "sigma": result.singular_values})
            streams["schur_forms"].write({**key, "row": np.arange(width, dtype=np.int32), "values": result.schur_form})
            metric_rows.append({**key, **result.metrics})
            step = measured.push(jacobians.matrix(index))
            ranks = rank_summary(step)
            streams["cumulative_rank"].write({
                **{name: np.asarray([value]) for name, value in ranks.items()},
                "cumulative_singular_values": np.exp(step.log_singular_values)[None, :]})
            rank_rows.append(ranks)
            if surgery.outstanding > 1:  # the depth before: one step ahead, no chain waits for this process
                operated_rows += surgery_rows(surgery)
            del result
        while surgery.outstanding:
            operated_rows += surgery_rows(surgery)
    return StageResult(
        tables={"eigenvalues": streams["eigenvalues"], "singular_values": streams["singular_values"],
                "schur_forms": streams["schur_forms"], "layer_metrics": metric_rows,
                "cumulative_rank": streams["cumulative_rank"], "schur_surgery": operated_rows},
        metadata=_metadata(tools, clouds, metric_rows, rank_rows, operated_rows, workers))


def _metadata(tools, clouds, metric_rows, rank_rows, operated_rows, workers) -> dict[str, dict]:
    """The figures and counts a person sees with each table."""
    directory, model, checkpoint = tools.figures, tools.model, tools.checkpoint
    # this checkpoint's own curves; the comparison across checkpoints is the metrics_by_checkpoint asset
    metrics = {checkpoint: pl.DataFrame(metric_rows, infer_schema_length=None)}
    types = [row["operator_type"] for row in metric_rows]
    conditions = [row["eigenvector_condition_number"] for row in metric_rows]
    ranks = pa.Table.from_pylist(rank_rows)
    return {
        "eigenvalues": {"clouds": Figure(eigenvalue_clouds(clouds, directory, title=tools.label))},
        "layer_metrics": {"figure": Figure(figure_frames.metrics_figure(model, metrics, directory)),
                          "operator_types": {t: types.count(t) for t in sorted(set(types))},
                          **({"largest_eigenvector_condition_number": float(max(conditions))} if conditions else {}),
                          "workers": workers},
        "cumulative_rank": {"figure": Figure(figure_frames.cumulative_rank_figure(
            model, {checkpoint: pl.from_arrow(ranks)}, directory)), "preview": Preview(ranks)},
        "schur_surgery": {"figure": Figure(figure_frames.schur_surgery_figure(
            tools.label, pl.DataFrame(operated_rows, infer_schema_length=None), directory))},
    }


__all__ = ["PARALLEL_MIN_WIDTH", "SURGERY_ALPHAS", "TABLES", "spectral_analysis", "sublayers_in_depth_order",
           "surgery_chains", "surgery_rows"]
