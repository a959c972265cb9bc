"""What every asset module shares: partition parsing, the checkpoint, samples, matrices, metadata."""


import base64
import logging
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa

from resdyn.corpus import Sample
from resdyn.dagster_project.arrow_tables import matrix_rows
from resdyn.dagster_project.partitions import model_checkpoint_partitions
from resdyn.dagster_project.resources import AnalysisSettings, WarehouseResource
from resdyn.dagster_project.warehouse import Warehouse
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
    if spec.is_gguf:  # imported (or initialised) by model_checkpoints
        from resdyn.models.registry import INIT_REVISION
        from resdyn.models.sources import gguf_checkpoint_label, store_directory

        label = checkpoint if revision == INIT_REVISION else gguf_checkpoint_label(spec)
        directory = store_directory(warehouse.open().models_directory, spec, label)
        if not (directory / "config.json").is_file():
            raise FileNotFoundError(f"{model}@{checkpoint} has not been imported into {directory} yet: materialize "
                                    "its model_checkpoints asset first (resdyn run does)")
        return str(directory), None
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


INLINE_MARKDOWN_LIMIT = 1000  # Dagster shows markdown metadata inline only below this many characters
MAX_CELL = 60  # characters of one preview cell (a long string would otherwise keep the preview over the limit)


def preview(table: pa.Table, rows: int = 5, max_list: int = 4, max_columns: int = 6) -> dg.MetadataValue:
    """A markdown preview that the UI shows inline and that fits the page: long list columns are cut to
    their first entries, at most ``max_columns`` columns, then rows and columns are dropped until it is
    shorter than INLINE_MARKDOWN_LIMIT characters (the rest: ``resdyn sql``)."""
    head = table.slice(0, rows).to_pylist()
    columns = table.column_names

    def cell(value):
        if isinstance(value, list):
            shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in value[:max_list])
            return f"[{shown}{', ...' if len(value) > max_list else ''}] ({len(value)})"
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        return text if len(text) <= MAX_CELL else text[:MAX_CELL - 3] + "..."

    def markdown(n_rows: int, n_columns: int) -> str:
        shown = columns[:n_columns]
        lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
        lines += ["| " + " | ".join(cell(row[c]) for c in shown) + " |" for row in head[:n_rows]]
        if n_rows < min(len(head), table.num_rows) or n_columns < len(columns):
            lines.append(f"\n*{n_rows} of {table.num_rows} rows, {n_columns} of {len(columns)} columns*")
        return "\n".join(lines)

    n_rows, n_columns = len(head), min(len(columns), max_columns)
    text = markdown(n_rows, n_columns)
    while len(text) >= INLINE_MARKDOWN_LIMIT and (n_rows > 1 or n_columns > 1):
        if n_rows > 1:
            n_rows -= 1
        else:
            n_columns -= 1
        text = markdown(n_rows, n_columns)
    return dg.MetadataValue.md(text)


INLINE_FIGURE_WIDTH = 480  # px: fits the asset sidebar and the event table of a 1280 px window


def figure(path: Path) -> dict:
    """Metadata that shows a PNG in the Dagster UI: inline, and embedded behind "[Show Markdown]".

    Dagster renders markdown inline only under 1,000 characters, so the inline copy is a short link
    to a thumbnail that ``resdyn ui`` serves (dagster_project/ui.py); the link opens the full figure.
    The embedded copy (base64 of the thumbnail) works under a plain ``dagster dev`` too.
    """
    from PIL import Image

    from resdyn.dagster_project.ui import artefact_url

    path = Path(path)
    thumbnail = path.with_name(f"{path.stem}.inline.png")
    with Image.open(path) as image:
        image.thumbnail((INLINE_FIGURE_WIDTH, INLINE_FIGURE_WIDTH * 4))
        image.save(thumbnail.with_suffix(".tmp"), format="PNG")
    thumbnail.with_suffix(".tmp").replace(thumbnail)
    encoded = base64.b64encode(thumbnail.read_bytes()).decode()
    metadata = {}
    small, full = artefact_url(thumbnail), artefact_url(path)
    if small and full:
        metadata[f"figure_{path.stem}"] = dg.MetadataValue.md(f"[![{path.stem}]({small})]({full})")
    metadata[f"figure_{path.stem}_embedded"] = dg.MetadataValue.md(f"![{path.stem}](data:image/png;base64,{encoded})")
    metadata[f"figure_{path.stem}_path"] = dg.MetadataValue.path(str(path))
    return metadata


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
