"""Stage 6b: every measure's interval from the samples themselves (block jackknife over fold means).

Each fold k is carried through depth by one worker: per sublayer the leave-one-fold-out mean
J_(-k) = (n J - n_k J_k) / (n - n_k) (``jacobian_folds``, resdyn.sampling) gets the spectral stage's
analysis (Schur form with its basis, SVD, every layer_metrics measure but the alignment ones), and the
products of the J_(-k) and of their alpha = 0 Schur surgery (LAPACK's ordering) their ranks. One row per
(quantity, depth): the full-sample value (from layer_metrics, cumulative_rank, schur_surgery), the
jackknife standard error, the 95% t interval and the K replicates, from which any statistic over
sublayers gets its own interval (resdyn/claims.py).
"""

import dagster as dg
import numpy as np
import pyarrow as pa

from resdyn import sampling
from resdyn.dagster_project import interrupts
from resdyn.dagster_project.metadata import preview
from resdyn.dagster_project.parallel import default_workers, ordered_parallel_map
from resdyn.dagster_project.resources import AnalysisSettings, WarehouseResource
from resdyn.dagster_project.steps import ANALYSIS_STEP, STEP_RETRIES
from resdyn.dagster_project.store.io_manager import table_output
from resdyn.dagster_project.store.runs import partition_run
from resdyn.dagster_project.store.schema import spec
from resdyn.depth import SCHUR_ORDERING
from resdyn.naming import sublayer_depth

from .common import PARTITIONS, StageProgress, iter_matrices, partition
from .spectra import PARALLEL_MIN_WIDTH, sublayers_in_depth_order
from .spectral_worker import fold_through_depth, read_matrix

RANKS = ("effective_rank", "participation_ratio", "stable_rank")
# The samples' interval of the surgery is under LAPACK's ordering only: the two reordered ones cost 2 dtrexc passes
# and 2 more product chains per fold (at d = 576 they were 60% of this stage); their readings carry no interval.


def cumulative_quantity(rank: str) -> str:
    return f"cumulative_{rank}"


def surgery_quantity(ordering: str, rank: str) -> str:
    return f"surgery_alpha0_{ordering}_{rank}"


@dg.asset(partitions_def=PARTITIONS, code_version="1", group_name="spectra",
          deps=["jacobians", "jacobian_folds", "layer_metrics", "cumulative_rank", "schur_surgery", "sample_jacobians"],
          op_tags=ANALYSIS_STEP, retry_policy=STEP_RETRIES,
          description="Sampling intervals of every layer_metrics measure, the cumulative ranks and the alpha = 0 "
                      "surgery: block jackknife over the fold means (resdyn/sampling.py).")
def sampling_intervals(context: dg.AssetExecutionContext, warehouse: WarehouseResource, settings: AnalysisSettings):
    with partition_run(context, warehouse, settings) as store:
        table = _intervals(context, settings, store)
        ratios = [r for r, q in zip(table.column("value").to_pylist(), table.column("quantity").to_pylist())
                  if q == "noise_to_signal" and r is not None and np.isfinite(r)]
        yield table_output(table, metadata={
            "preview": preview(table.drop_columns(["replicates"])), "rows": table.num_rows,
            "median_noise_to_signal": float(np.median(ratios)) if ratios else float("nan")})


def _fold_index(store, model: str, checkpoint: str) -> tuple[dict, dict]:
    """(layer, sublayer) -> [fold row groups by fold], and -> [observations per fold]."""
    groups, counts = {}, {}
    for index, group in enumerate(store.row_groups("jacobian_folds", model, checkpoint,
                                                   columns=["layer", "sublayer", "fold", "n_observations"])):
        key = (group.column("layer")[0].as_py(), group.column("sublayer")[0].as_py())
        fold = group.column("fold")[0].as_py()
        groups.setdefault(key, {})[fold] = index
        counts.setdefault(key, {})[fold] = group.column("n_observations")[0].as_py()
    return ({key: [folds[k] for k in sorted(folds)] for key, folds in groups.items()},
            {key: [folds[k] for k in sorted(folds)] for key, folds in counts.items()})


def _row(layer, sublayer, quantity, value, replicates) -> dict:
    interval = sampling.jackknife(value, replicates)
    return {"layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer), "quantity": quantity,
            "value": interval.value, "standard_error": interval.standard_error, "ci_low": interval.low,
            "ci_high": interval.high, "n_folds": interval.n_folds, "replicates": [float(r) for r in replicates]}


def _intervals(context, settings, store) -> pa.Table:
    model, checkpoint = partition(context)
    order = sublayers_in_depth_order(store, model, checkpoint)
    fold_groups, fold_counts = _fold_index(store, model, checkpoint)
    schema = spec("sampling_intervals").schema()
    if not fold_groups:  # folds off (--folds 0, or wider than --fold-max-width): an empty table says so
        context.log.info(f"{context.partition_key}: no fold means (folds off at this width): no sampling intervals")
        return schema.empty_table()
    path = str(store.table_path("jacobians", model, checkpoint))
    folds_path = str(store.table_path("jacobian_folds", model, checkpoint))
    of_mean = {(r["layer"], r["sublayer"]): r for r in store.read("layer_metrics", model, checkpoint).to_pylist()}
    cumulative = {r["depth"]: r for r in store.read("cumulative_rank", model, checkpoint).to_pylist()}
    surgery = {(r["schur_ordering"], r["depth"]): r for r in store.read("schur_surgery", model, checkpoint).to_pylist()
               if r["alpha"] == 0.0}
    n_folds = len(next(iter(fold_groups.values())))
    steps = {fold: [(index, fold_groups[(layer, sublayer)][fold], sum(fold_counts[(layer, sublayer)]),
                     fold_counts[(layer, sublayer)][fold]) for index, layer, sublayer in order] for fold in range(n_folds)}
    d = len(read_matrix(path, order[0][0]))
    workers = min(n_folds, settings.workers or default_workers()) if d >= PARALLEL_MIN_WIDTH else 1
    progress = StageProgress(context, "sampling intervals (folds through depth)", n_folds)
    by_fold = []
    for fold, result in enumerate(ordered_parallel_map(fold_through_depth, [(path, folds_path, fold, steps[fold])
                                                                           for fold in range(n_folds)], workers=workers)):
        by_fold.append(result)
        progress.done(f"fold {fold}")
    n_observations = {(r["layer"], r["sublayer"]): r["n_observations"] for r in store.read(
        "jacobians", model, checkpoint, columns=["layer", "sublayer", "n_observations"]).to_pylist()}
    kept = _kept_sample_noise(store, model, checkpoint, n_observations)
    rows = []
    for position, (index, layer, sublayer) in enumerate(order):
        interrupts.check(f"sampling_intervals of {context.partition_key}")
        fold_results = [by_fold[fold][position] for fold in range(n_folds)]
        for name, value in of_mean[(layer, sublayer)].items():
            if name not in fold_results[0]["metrics"] or isinstance(value, str) or value is None:
                continue  # keys, strings and the alignment metrics (not computed for the folds)
            rows.append(_row(layer, sublayer, name, float(value), [r["metrics"][name] for r in fold_results]))
        leave_one_out = sampling.leave_one_out_means(
            read_matrix(path, index), [read_matrix(folds_path, g) for g in fold_groups[(layer, sublayer)]],
            fold_counts[(layer, sublayer)])
        rows.append(_row(layer, sublayer, "noise_to_signal", sampling.noise_to_signal(read_matrix(path, index),
                                                                                      leave_one_out), []))
        rows.append(_row(layer, sublayer, "noise_to_signal_per_sample", kept.get((layer, sublayer), float("nan")), []))
        depth = sublayer_depth(layer, sublayer)
        for rank in RANKS:
            rows.append(_row(layer, sublayer, cumulative_quantity(rank), cumulative[depth][rank],
                             [r["cumulative"][rank] for r in fold_results]))
            if (SCHUR_ORDERING, depth) in surgery:
                rows.append(_row(layer, sublayer, surgery_quantity(SCHUR_ORDERING, rank),
                                 surgery[(SCHUR_ORDERING, depth)][rank], [r["surgery"][rank] for r in fold_results]))
    return pa.Table.from_pylist(rows, schema=schema)


def _kept_sample_noise(store, model: str, checkpoint: str, n_observations: dict) -> dict:
    """(layer, sublayer) -> resdyn.sampling.per_sample_noise_to_signal from the kept per-sample Jacobians, one
    matrix in memory at a time beside its sublayer's mean."""
    path = str(store.table_path("jacobians", model, checkpoint))
    mean_groups = {(layer, sublayer): index for index, layer, sublayer in sublayers_in_depth_order(store, model, checkpoint)}
    squared: dict[tuple, list[float]] = {}
    current_key, mean = None, None
    for key, matrix in iter_matrices(store, "sample_jacobians", model, checkpoint):
        if key != current_key:
            current_key, mean = key, read_matrix(path, mean_groups[key])
        squared.setdefault(key, []).append(float(np.linalg.norm(matrix - mean) ** 2))
    ratios = {}
    for key, values in squared.items():
        mean = read_matrix(path, mean_groups[key])
        update = float(np.linalg.norm(mean - np.eye(len(mean))))
        ratios[key] = (float(np.sqrt(np.mean(values)) / (np.sqrt(n_observations[key]) * update))
                       if update > 0 else float("nan"))
    return ratios
