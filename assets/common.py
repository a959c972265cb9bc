"""What every asset module shares: partition parsing, model loading, samples, metadata."""


import base64
import logging
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa

from dagster_project.partitions import model_checkpoint_partitions
from dagster_project.resources import AnalysisSettings, WarehouseResource
from dagster_project.warehouse import Warehouse
from resdyn.corpus import Sample
from resdyn.models.adapters import sublayer_depth
from resdyn.models.loading import LoadedModel, load_model
from resdyn.models.registry import split_partition_key

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


def load_partition_model(warehouse: WarehouseResource, settings: AnalysisSettings, model: str,
                         checkpoint: str) -> LoadedModel:
    source, revision = checkpoint_source(warehouse, model, checkpoint)
    return load_model(source, revision, dtype=settings.dtype)


def read_samples(store: Warehouse, model: str, checkpoint: str) -> list[Sample]:
    rows = store.read("samples", model, checkpoint).to_pylist()
    grouped: dict[int, tuple[tuple[int, ...], list[int]]] = {}
    for row in rows:
        grouped.setdefault(row["sample_id"], (tuple(row["token_ids"]), []))[1].append(row["position"])
    return [Sample(sample_id, ids, tuple(sorted(positions))) for sample_id, (ids, positions) in sorted(grouped.items())]


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


def table_metadata(table: pa.Table, path: Path) -> dict:
    return {
        "dagster/row_count": dg.MetadataValue.int(table.num_rows),
        "preview": preview(table),
        "path": dg.MetadataValue.path(str(path)),
    }


def row_groups(data: pa.Table, columns: tuple[str, ...]) -> dict[tuple, np.ndarray]:
    """Row indices of ``data`` per distinct value of ``columns``, in first-appearance order."""
    keys = zip(*(data.column(name).to_pylist() for name in columns))
    grouped: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        grouped.setdefault(key, []).append(i)
    return {key: np.asarray(indices) for key, indices in grouped.items()}


def read_matrices(store: Warehouse, table: str, model: str, checkpoint: str,
                  group: tuple[str, ...] = ("layer", "sublayer")) -> dict[tuple, np.ndarray]:
    """Matrix-per-group tables (jacobians, sample_jacobians) back to float64 arrays, rows in order."""
    data = store.read(table, model, checkpoint)
    rows = np.asarray(data.column("row").to_numpy())
    values = np.stack(data.column("values").to_numpy(zero_copy_only=False)).astype(np.float64)
    return {key: values[indices[np.argsort(rows[indices])]] for key, indices in row_groups(data, group).items()}


def read_mean_jacobians(store: Warehouse, model: str, checkpoint: str) -> dict[tuple[int, str], np.ndarray]:
    """The partition's mean Jacobians keyed (layer, sublayer), in depth order."""
    matrices = read_matrices(store, "jacobians", model, checkpoint)
    return {key: matrices[key] for key in sorted(matrices, key=lambda key: sublayer_depth(*key))}


def model_and_samples(warehouse: WarehouseResource, settings: AnalysisSettings, model: str,
                      checkpoint: str) -> tuple[LoadedModel, list[Sample]]:
    """What every stage that runs the network needs: the loaded checkpoint and its samples."""
    return (load_partition_model(warehouse, settings, model, checkpoint),
            read_samples(warehouse.open(), model, checkpoint))
