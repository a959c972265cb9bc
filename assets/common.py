"""What every asset module shares: partition parsing, the checkpoint, samples, matrices, metadata."""


import base64
import logging
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa

from dagster_project.arrow_tables import matrix_rows
from dagster_project.partitions import model_checkpoint_partitions
from dagster_project.resources import AnalysisSettings, WarehouseResource
from dagster_project.warehouse import Warehouse
from resdyn.corpus import Sample
from resdyn.models.registry import split_partition_key
from resdyn.naming import sublayer_depth

log = logging.getLogger(__name__)

PARTITIONS = model_checkpoint_partitions


def partition(context) -> tuple[str, str]:
    return split_partition_key(context.partition_key)


def checkpoint_source(warehouse: WarehouseResource, model: str, checkpoint: str) -> tuple[str, str | None]:
    """(path or hub id, revision) of a partition's weights; tiny-suite checkpoints are local dirs."""
    spec, revision = warehouse.registry().resolve(f"{model}@{checkpoint}")
    if spec.is_tiny:
        return str(warehouse.open().models_directory / model / checkpoint), None
    if Path(spec.source).expanduser().is_dir():
        return spec.source, None
    return spec.source, revision


def open_layerwise(warehouse: WarehouseResource, settings: AnalysisSettings, model: str, checkpoint: str):
    """The partition's checkpoint, opened for layer-by-layer reading (no weights read yet)."""
    from resdyn.models.layerwise import LayerwiseModel

    source, revision = checkpoint_source(warehouse, model, checkpoint)
    return LayerwiseModel(source, revision, dtype=settings.dtype, device=settings.device)


def read_samples(store: Warehouse, model: str, checkpoint: str) -> list[Sample]:
    """The partition's samples with their analysed positions, from the ``samples`` table."""
    data = store.read("samples", model, checkpoint)
    sample_ids = data.column("sample_id").to_numpy()
    positions = data.column("position").to_numpy()
    tokens = data.column("token_ids").combine_chunks()
    windows = tokens.flatten().to_numpy().reshape(len(data), -1) if len(data) else np.zeros((0, 0), np.int64)
    samples = []
    for sample_id in np.unique(sample_ids):
        rows = np.flatnonzero(sample_ids == sample_id)
        samples.append(Sample(int(sample_id), tuple(windows[rows[0]].tolist()), tuple(sorted(positions[rows].tolist()))))
    return samples


def preview(table: pa.Table, rows: int = 5, max_list: int = 4) -> dg.MetadataValue:
    """A markdown preview; long list columns are cut to their first few entries."""
    head = table.slice(0, rows).to_pylist()
    columns = table.column_names

    def cell(value):
        if isinstance(value, list):
            shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in value[:max_list])
            return f"[{shown}{', ...' if len(value) > max_list else ''}] ({len(value)})"
        return f"{value:.6g}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row[c]) for c in columns) + " |" for row in head]
    return dg.MetadataValue.md("\n".join(lines))


def figure(path: Path) -> dict:
    """Metadata that shows a PNG inline in the Dagster UI and links its file."""
    encoded = base64.b64encode(Path(path).read_bytes()).decode()
    return {
        f"figure_{Path(path).stem}": dg.MetadataValue.md(f"![{Path(path).stem}](data:image/png;base64,{encoded})"),
        f"figure_{Path(path).stem}_path": dg.MetadataValue.path(str(path)),
    }


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (MB): per step, the running maximum."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def written_metadata(written, first_rows: pa.Table | None = None) -> dict:
    """Row count, file, a preview of what a writer published, and the process's peak memory so far."""
    metadata = {"dagster/row_count": dg.MetadataValue.int(written.rows), "path": dg.MetadataValue.path(str(written.path)),
                "peak_rss_mb": peak_rss_mb()}
    if first_rows is not None:
        metadata["preview"] = preview(first_rows)
    return metadata


def table_metadata(table: pa.Table, written) -> dict:
    return written_metadata(written, table)


def row_groups(data: pa.Table, columns: tuple[str, ...]) -> dict[tuple, np.ndarray]:
    """Row indices of ``data`` per distinct value of ``columns``, in first-appearance order."""
    keys = zip(*(data.column(name).to_pylist() for name in columns))
    grouped: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        grouped.setdefault(key, []).append(i)
    return {key: np.asarray(indices) for key, indices in grouped.items()}


def iter_matrices(store: Warehouse, table: str, model: str, checkpoint: str,
                  group: tuple[str, ...] = ("layer", "sublayer")) -> Iterator[tuple[tuple, np.ndarray]]:
    """((group values), float64 rows in row order) of a matrix table, one row group (one matrix) at a time."""
    for data in store.row_groups(table, model, checkpoint, columns=[*group, "row", "values"]):
        key = tuple(data.column(name)[0].as_py() for name in group)
        values = matrix_rows(data.column("values"))
        rows = data.column("row").to_numpy()
        if not np.array_equal(rows, np.arange(len(rows))):
            values = values[np.argsort(rows)]
        yield key, np.asarray(values, dtype=np.float64)
        del data, values  # before the next row group is read: one matrix in memory at a time


def read_matrices(store: Warehouse, table: str, model: str, checkpoint: str,
                  group: tuple[str, ...] = ("layer", "sublayer")) -> dict[tuple, np.ndarray]:
    """Every matrix of a matrix table at once (small models; large ones use :func:`iter_matrices`)."""
    return dict(iter_matrices(store, table, model, checkpoint, group))


def read_mean_jacobians(store: Warehouse, model: str, checkpoint: str) -> dict[tuple[int, str], np.ndarray]:
    """The partition's mean Jacobians keyed (layer, sublayer), in depth order."""
    matrices = read_matrices(store, "jacobians", model, checkpoint)
    return {key: matrices[key] for key in sorted(matrices, key=lambda key: sublayer_depth(*key))}
