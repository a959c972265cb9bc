"""What a materialization shows a person in the UI: row count, file, a markdown preview, peak memory."""

from __future__ import annotations

import dagster as dg
import pyarrow as pa

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
