"""What a materialization shows a person in the UI: row count, file, a markdown preview, a figure, peak memory."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import dagster as dg
import pyarrow as pa

from resdyn.dagster_project.store.artefacts import artefact_url, kept_location
from resdyn.files import atomic_path

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


def first_rows(batch: pa.RecordBatch, rows: int = 5) -> pa.Table:
    """The first ``rows`` of ``batch`` as a copy (a slice would keep the whole batch's buffers alive while a stream
    writes on): what a streamed table's preview shows."""
    return pa.Table.from_batches([batch.take(pa.array(range(min(rows, batch.num_rows))))])


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


INLINE_FIGURE_WIDTH = 480  # px: fits the asset sidebar and the event table of a 1280 px window


def draw_thumbnail(data: bytes) -> bytes:
    """The PNG thumbnail of the PNG ``data`` that a figure's metadata shows inline (and ``resdyn ui`` serves)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        image.thumbnail((INLINE_FIGURE_WIDTH, INLINE_FIGURE_WIDTH * 4))
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
    return buffer.getvalue()


def figure(path: Path, label: str | None = None) -> dict:
    """Metadata that shows a PNG in the Dagster UI: inline, and embedded behind "[Show Markdown]".

    Dagster renders markdown inline only under 1,000 characters, so the inline copy is a short link
    to a thumbnail that ``resdyn ui`` serves (dagster_project/interface/ui.py); the link opens the full figure.
    The embedded copy (base64 of the thumbnail) works under a plain ``dagster dev`` too. The metadata keys are
    named after ``label`` (default: the file's stem).
    """
    path = Path(path)
    thumbnail = path.with_name(f"{path.stem}.inline.png")
    with atomic_path(thumbnail) as temporary:
        Path(temporary).write_bytes(draw_thumbnail(path.read_bytes()))
    encoded = base64.b64encode(thumbnail.read_bytes()).decode()
    metadata, label = {}, label or path.stem
    small, full = artefact_url(thumbnail), artefact_url(path)
    if small and full:
        metadata[f"figure_{label}"] = dg.MetadataValue.md(f"[![{label}]({small})]({full})")
    metadata[f"figure_{label}_embedded"] = dg.MetadataValue.md(f"![{label}](data:image/png;base64,{encoded})")
    metadata[f"figure_{label}_path"] = dg.MetadataValue.path(kept_location(path))  # on S3: the figure's object
    return metadata
