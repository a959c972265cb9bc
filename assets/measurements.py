"""One pass over the model: activations, mean Jacobians, per-sample subsample, finite-difference probe.

The checkpoint is read one decoder layer at a time (resdyn.models.layerwise) and every table is
streamed to Parquet as each layer finishes, so memory stays at one layer plus the residual stream
of the samples plus one layer's results, whatever the model's size.
"""

import time
from contextlib import ExitStack

import dagster as dg
import numpy as np
import pyarrow as pa

from resdyn.dagster_project.asset_layer import (
    MODEL,
    TableHandle,
    figure,
    fixed_size_lists,
    interrupts,
    nullable_lists,
    partition_asset,
    preview,
    record_batch,
    written_output,
)
from resdyn.dagster_project.asset_layer.stage_messages import stage_message
from resdyn.figures import jacobian_heatmaps
from resdyn.naming import SUBLAYERS, sublayer_depth

from .common import open_layerwise, read_samples

TABLES = ("activations", "jacobians", "sample_jacobians", "finite_difference_probe", "jacobian_folds")
THUMBNAIL = 96  # the mean-Jacobian figure shows block means of at most this many rows and columns


def _thumbnail(matrix: np.ndarray) -> np.ndarray:
    d = matrix.shape[0]
    if d <= THUMBNAIL:
        return matrix
    block = -(-d // THUMBNAIL)
    padded = np.zeros((block * THUMBNAIL, block * THUMBNAIL))
    padded[:d, :d] = matrix - np.eye(d)
    return padded.reshape(THUMBNAIL, block, THUMBNAIL, block).mean(axis=(1, 3)) + np.eye(THUMBNAIL)


def _head(batch, rows: int = 5) -> pa.Table:
    """The first rows as a copy (a slice would keep the whole batch's buffers alive)."""
    return pa.Table.from_batches([batch.take(pa.array(np.arange(min(rows, batch.num_rows))))])


def _activation_batch(measurement, boundary: str, width: int):
    index = np.asarray(measurement.observation_index, dtype=np.int32).reshape(-1, 2)
    values = measurement.activations[boundary]
    return record_batch("activations", width, {
        "layer": measurement.layer, "boundary": boundary, "depth": sublayer_depth(measurement.layer, boundary),
        "sample_id": index[:, 0], "position": index[:, 1], "values": fixed_size_lists(values, np.float32)})


def _matrix_batch(table: str, layer: int, sublayer: str, matrix: np.ndarray, width: int, **extra):
    rows = np.arange(matrix.shape[0], dtype=np.int32)
    return record_batch(table, width, {"layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer),
                                             "row": rows, "values": fixed_size_lists(matrix), **extra})


@partition_asset(MODEL, group_name="measurements", settings=(
        "backend", "batch_size", "device", "dtype", "fold_max_width", "folds", "per_sample_subsample", "seed"), tables=[
        dg.AssetSpec("activations", code_version="2",
                     description="Residual stream at the analysed positions, one row per (layer, boundary, sample, position)."),
        dg.AssetSpec("jacobians", code_version="2",
                     description="Mean Jacobian d out_t / d h_t of every sublayer map, one row per matrix row; per-entry "
                                 "variance where the backend streams it (autodiff)."),
        dg.AssetSpec("sample_jacobians", code_version="3",
                     description="Per-sample Jacobians of a subsample (for per-sample metrics)."),
        dg.AssetSpec("jacobian_folds", code_version="1",
                     description="Mean Jacobian of each contiguous block of samples (--folds; empty above "
                                 "--fold-max-width): what the sampling intervals of every measure are made from."),
        dg.AssetSpec("finite_difference_probe", code_version="1",
                     description="Mean central differences (f(x + h v) - f(x - h v)) / 2h along random directions: "
                                 "the independent reference the jacobians check compares E[J] v with."),
    ])
def measurements(context, settings, outputs, checkpoint, samples: TableHandle):
    yield from _measure(context, checkpoint, settings, outputs, samples)


def _measure(context, checkpoint, settings, outputs, samples):
    from resdyn.jacobians import make_backend
    from resdyn.jacobians.engine import MeasurementOptions, measure_layer_major
    from resdyn.jacobians.probe import PROBE_STEP

    sample_list = read_samples(samples)
    layerwise = open_layerwise(checkpoint, settings)
    width = layerwise.d_model
    backend = make_backend(settings.backend)
    started = time.perf_counter()

    def progress(layer, n_layers, batch, n_batches):
        interrupts.check(f"measurements of {context.partition_key}")
        if batch == n_batches or batch % 8 == 0:  # every batch of every layer is one item of the stage
            context.log.info(stage_message(context.partition_key, "jacobian batches", layer * n_batches + batch,
                                           n_layers * n_batches, f"layer {layer + 1}/{n_layers}, batch {batch}/{n_batches}",
                                           time.perf_counter() - started))

    thumbnails, backends, heads, seconds = {}, {}, {}, {}
    with ExitStack() as stack:
        writers = {table: stack.enter_context(outputs.writer(table, width=width))
                   for table in TABLES}

        def write_sample_jacobian(layer, sublayer, sample_id, position, matrix):  # as each is computed
            writers["sample_jacobians"].write(_matrix_batch("sample_jacobians", layer, sublayer, matrix, width,
                                                            sample_id=sample_id, position=position))

        folds = settings.folds if width <= settings.fold_max_width else 0
        options = MeasurementOptions(batch_size=settings.batch_size, folds=folds,
                                     keep_sample_jacobians=settings.per_sample_subsample, probe_directions=2,
                                     probe_seed=settings.seed, sample_jacobian_sink=write_sample_jacobian)
        for measurement in measure_layer_major(layerwise, sample_list, backend=backend, options=options,
                                               progress=progress):
            layer = measurement.layer
            for part, value in measurement.seconds.items():
                seconds[part] = seconds.get(part, 0.0) + value
            for boundary in ("pre_attn", "pre_mlp"):
                activation_batch = _activation_batch(measurement, boundary, width)
                writers["activations"].write(activation_batch)
                heads.setdefault("activations", _head(activation_batch))
            for sublayer in SUBLAYERS:
                mean = measurement.means[sublayer]
                batch = _matrix_batch(
                    "jacobians", layer, sublayer, mean, width,
                    variance=nullable_lists(measurement.variances[sublayer], width),
                    n_observations=measurement.counts[sublayer], backend=measurement.backends[sublayer])
                writers["jacobians"].write(batch)
                heads.setdefault("jacobians", _head(batch))
                directions, differences = measurement.probe_directions, measurement.probe_differences[sublayer]
                writers["finite_difference_probe"].write(record_batch("finite_difference_probe", width, {
                    "layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer),
                    "direction_index": np.arange(len(directions), dtype=np.int32),
                    "direction": fixed_size_lists(directions), "finite_difference": fixed_size_lists(differences),
                    "step": PROBE_STEP, "n_observations": len(measurement.observation_index)}))
                for fold, (fold_mean, count) in enumerate(zip(measurement.fold_means.get(sublayer, []),
                                                              measurement.fold_counts.get(sublayer, []))):
                    writers["jacobian_folds"].write(_matrix_batch(
                        "jacobian_folds", layer, sublayer, fold_mean, width, fold=fold,
                        n_observations=count))
                thumbnails[(layer, sublayer)] = _thumbnail(mean)
                backends[f"{layer}/{sublayer}"] = measurement.backends[sublayer]
            del measurement, mean, batch  # one layer's results in memory at a time
    results = {table: writer.result for table, writer in writers.items()}
    figures_directory = outputs.figures
    png = jacobian_heatmaps(thumbnails, figures_directory, title=context.partition_key)
    ledger = layerwise.ledger
    for table in TABLES:
        metadata = {"preview": preview(heads[table])} if table in heads else {}
        if table == "jacobians":
            metadata.update(figure(png))
            metadata.update({
                "backend": backend.name, "backend_by_sublayer": dg.MetadataValue.json(backends),
                "n_observations": int(len(sample_list) * len(sample_list[0].positions)), "d_model": width,
                "device": str(layerwise.device), "seconds": round(time.perf_counter() - started, 2),
                "peak_layers_in_memory": ledger.peak_layers, "largest_layer_mb": round(ledger.largest_layer_bytes / 2**20, 1),
                "seconds_by_part": dg.MetadataValue.json({part: round(value, 3) for part, value in seconds.items()}),
                "mean_jacobians_vs_forward": round(seconds.get("mean_jacobians", 0.0) / max(seconds.get("forward", 0.0), 1e-9), 3),
            })
        yield written_output(results[table], table, metadata)
