"""The table ``resdyn run`` ends with: per partition its status, checks passed, seconds and peak memory.

Peak memory is the largest ``peak_rss_mb`` the partition's steps reported with their tables (each step's process's
peak resident memory so far, :func:`~resdyn.dagster_project.asset_layer.metadata.peak_rss_mb`), "-" where no step
reported one (a failed partition, a selection of steps that write no table).
"""

from __future__ import annotations

COLUMNS = ("partition", "status", "checks", "seconds", "peak MB")


def peak_memory_mb(steps: dict) -> float | None:
    """The largest peak resident memory (MB) any of ``steps`` (a partition's step summary) reported, or None."""
    peaks = [float(step["peak_rss_mb"]) for step in steps.values() if step.get("peak_rss_mb") is not None]
    return max(peaks) if peaks else None


def summary_rows(summary: dict, keys: list[str], stopped: int = 0) -> list[tuple[str, ...]]:
    """One row per partition of the launch (``summary``: per reported partition what the run loop recorded): those
    it did not report are "stopped" (the one a signal stopped) or "not run" (after it)."""
    rows, stop_said = [], False
    for key in keys:
        entry = summary.get(key)
        if entry is None:
            if not stopped:
                continue
            rows.append((key, "not run" if stop_said else "stopped", "-", "-", "-"))
            stop_said = True
            continue
        peak = entry.get("peak_rss_mb")
        checks = f"{entry['n_checks'] - len(entry['failing_checks'])}/{entry['n_checks']}" if "n_checks" in entry else "-"
        rows.append((key, "ok" if entry["success"] else "FAILED", checks, f"{entry['seconds']:.1f}",
                     f"{peak:.0f}" if peak is not None else "-"))
    return rows


def summary_table(summary: dict, keys: list[str], stopped: int = 0) -> str:
    """The table as aligned plain text (the same in a terminal, a log file and a pipe); "" with no row."""
    rows = summary_rows(summary, keys, stopped)
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
    numeric = {3, 4}  # right-aligned

    def line(row) -> str:
        return "  ".join(cell.rjust(width) if i in numeric else cell.ljust(width)
                         for i, (cell, width) in enumerate(zip(row, widths))).rstrip()

    return "\n".join([line(COLUMNS), line(["-" * width for width in widths]), *map(line, rows)])
