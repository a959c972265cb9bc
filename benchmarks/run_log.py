"""The numbers of one ``/usr/bin/time -v resdyn run ...`` log: what time(1) reports and the CLI's ``steps:`` line.

Shared by the benchmarks that record whole runs (``acceptance_run.py``, ``study.py``).
"""

from __future__ import annotations

import re


def parse_run_log(log: str, minimum_step_seconds: float = 1.0) -> dict:
    """Wall time and maximum RSS as time(1) reports them, its exit status, the asset checks passed (the CLI's
    ``checks P/T passed``; the last run's when the log holds several) and the seconds of every step of at least
    ``minimum_step_seconds`` (the CLI's ``steps:`` line: each step's own duration from Dagster's events)."""
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", log)
    if wall is None:
        raise ValueError("no /usr/bin/time -v report in the log: run the command under /usr/bin/time -v")
    hours, minutes, seconds = (float(part) if part else 0.0 for part in wall.groups())
    wall_seconds = 3600 * hours + 60 * minutes + seconds
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", log).group(1))
    steps_lines = re.findall(r"steps: (.*)", log)
    steps = {name: float(value) for name, value in re.findall(r"([\w]+) ([\d.]+) s", steps_lines[-1])} if steps_lines else {}
    checks = re.findall(r"checks (\d+)/(\d+) passed", log)
    return {
        "wall_seconds": round(wall_seconds, 1),
        "wall_minutes": round(wall_seconds / 60, 1),
        "max_rss_kb": rss_kb, "max_rss_gib": round(rss_kb / 2**20, 2),
        "exit_status": int(re.search(r"Exit status: (\d+)", log).group(1)),
        "checks_passed": "/".join(checks[-1]) if checks else None,
        "stages": {name: seconds for name, seconds in steps.items() if seconds >= minimum_step_seconds},
    }
