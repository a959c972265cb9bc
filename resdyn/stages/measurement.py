"""One pass over the model: activations, mean Jacobians, per-sample subsample, finite-difference probe.

The checkpoint is read one decoder layer at a time (resdyn.models.layerwise) and every table is
streamed as each layer finishes, so memory stays at one layer plus the residual stream
of the samples plus one layer's results, whatever the model's size.
"""

from __future__ import annotations

import time
from contextlib import ExitStack

import numpy as np

from resdyn.arrow_matrices import fixed_size_lists, nullable_lists
from resdyn.corpus import Sample
from resdyn.figures import jacobian_heatmaps
from resdyn.naming import SUBLAYERS, sublayer_depth
from resdyn.stages.result import Figure, Preview, StageResult

TABLES = ("activations", "jacobians", "sample_jacobians", "finite_difference_probe", "jacobian_folds")
THUMBNAIL = 96  # the mean-Jacobian figure shows block means of at most this many rows and columns


def read_samples(samples) -> list[Sample]:
    """The partition's samples with their analysed positions, from its ``samples`` table."""
    data = samples.read()
    sample_ids = data.column("sample_id").to_numpy()
    positions = data.column("position").to_numpy()
    tokens = data.column("token_ids").combine_chunks()
    windows = tokens.flatten().to_numpy().reshape(len(data), -1) if len(data) else np.zeros((0, 0), np.int64)
    drawn = []
    for sample_id in np.unique(sample_ids):
        rows = np.flatnonzero(sample_ids == sample_id)
        drawn.append(Sample(int(sample_id), tuple(windows[rows[0]].tolist()), tuple(sorted(positions[rows].tolist()))))
    return drawn


def open_layerwise(checkpoint, settings):
    """The partition's checkpoint (its ``weights()``: source, revision), opened for layer-by-layer reading (no
    weights read yet)."""
    from resdyn.models.layerwise import LayerwiseModel

    source, revision = checkpoint.weights()
    return LayerwiseModel(source, revision, dtype=settings.dtype, device=settings.device)


def _thumbnail(matrix: np.ndarray) -> np.ndarray:
    d = matrix.shape[0]
    if d <= THUMBNAIL:
        return matrix
    block = -(-d // THUMBNAIL)
    padded = np.zeros((block * THUMBNAIL, block * THUMBNAIL))
    padded[:d, :d] = matrix - np.eye(d)
    return padded.reshape(THUMBNAIL, block, THUMBNAIL, block).mean(axis=(1, 3)) + np.eye(THUMBNAIL)


def _activation_columns(measurement, boundary: str) -> dict:
    index = np.asarray(measurement.observation_index, dtype=np.int32).reshape(-1, 2)
    return {"layer": measurement.layer, "boundary": boundary, "depth": sublayer_depth(measurement.layer, boundary),
            "sample_id": index[:, 0], "position": index[:, 1],
            "values": fixed_size_lists(measurement.activations[boundary], np.float32)}


def _matrix_columns(layer: int, sublayer: str, matrix: np.ndarray, **extra) -> dict:
    return {"layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer),
            "row": np.arange(matrix.shape[0], dtype=np.int32), "values": fixed_size_lists(matrix), **extra}




def measurements(settings, tools, checkpoint, samples) -> StageResult:
    """Every table of the measurement pass, streamed layer by layer (``settings``: backend, batch size, device,
    dtype, folds and their largest width, per-sample subsample, the probe's seed)."""
    from resdyn.jacobians import make_backend
    from resdyn.jacobians.engine import MeasurementOptions, measure_layer_major
    from resdyn.jacobians.probe import PROBE_STEP

    sample_list = read_samples(samples)
    layerwise = open_layerwise(checkpoint, settings)
    width = layerwise.d_model
    backend = make_backend(settings.backend)
    started = time.perf_counter()

    def progress(layer, n_layers, batch, n_batches):
        tools.check("measurements")
        if batch == n_batches or batch % 8 == 0:  # every batch of every layer is one item of the stage
            tools.report("jacobian batches", layer * n_batches + batch, n_layers * n_batches,
                         f"layer {layer + 1}/{n_layers}, batch {batch}/{n_batches}", time.perf_counter() - started)

    thumbnails, backends, seconds = {}, {}, {}
    streams = {table: tools.stream(table, width) for table in TABLES}
    with ExitStack() as stack:
        for stream in streams.values():
            stack.enter_context(stream)

        def write_sample_jacobian(layer, sublayer, sample_id, position, matrix):  # as each is computed
            streams["sample_jacobians"].write(_matrix_columns(layer, sublayer, matrix, sample_id=sample_id,
                                                              position=position))

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
                columns = _activation_columns(measurement, boundary)
                streams["activations"].write(columns)
            for sublayer in SUBLAYERS:
                mean = measurement.means[sublayer]
                columns = _matrix_columns(layer, sublayer, mean,
                                          variance=nullable_lists(measurement.variances[sublayer], width),
                                          n_observations=measurement.counts[sublayer],
                                          backend=measurement.backends[sublayer])
                streams["jacobians"].write(columns)
                directions, differences = measurement.probe_directions, measurement.probe_differences[sublayer]
                streams["finite_difference_probe"].write({
                    "layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer),
                    "direction_index": np.arange(len(directions), dtype=np.int32),
                    "direction": fixed_size_lists(directions), "finite_difference": fixed_size_lists(differences),
                    "step": PROBE_STEP, "n_observations": len(measurement.observation_index)})
                for fold, (fold_mean, count) in enumerate(zip(measurement.fold_means.get(sublayer, []),
                                                              measurement.fold_counts.get(sublayer, []))):
                    streams["jacobian_folds"].write(_matrix_columns(layer, sublayer, fold_mean, fold=fold,
                                                                    n_observations=count))
                thumbnails[(layer, sublayer)] = _thumbnail(mean)
                backends[f"{layer}/{sublayer}"] = measurement.backends[sublayer]
            del measurement, mean, columns  # one layer's results in memory at a time
    png = jacobian_heatmaps(thumbnails, tools.figures, title=tools.label)
    ledger = layerwise.ledger
    metadata = {table: {"preview": Preview()} if table in ("activations", "jacobians") else {} for table in TABLES}
    metadata["jacobians"].update({
        "figure": Figure(png), "backend": backend.name, "backend_by_sublayer": backends,
        "n_observations": int(len(sample_list) * len(sample_list[0].positions)), "d_model": width,
        "device": str(layerwise.device), "seconds": round(time.perf_counter() - started, 2),
        "peak_layers_in_memory": ledger.peak_layers, "largest_layer_mb": round(ledger.largest_layer_bytes / 2**20, 1),
        "seconds_by_part": {part: round(value, 3) for part, value in seconds.items()},
        "mean_jacobians_vs_forward": round(seconds.get("mean_jacobians", 0.0) / max(seconds.get("forward", 0.0), 1e-9), 3),
    })
    return StageResult(tables=dict(streams), metadata=metadata)


__all__ = ["TABLES", "measurements", "open_layerwise", "read_samples"]
