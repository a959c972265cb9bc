"""`make study`'s partitions measured one at a time: wall time, peak RSS and the seconds of every step (a benchmark).

    python benchmarks/study.py --warehouse DIR [--logs DIR] [--partition M@C ...]   # run each, record
    python benchmarks/study.py --from-log M@C=FILE ...                              # record logs made by hand

Each partition of the embedded ``study`` suite (or each ``--partition``) runs as its own
``resdyn run --model M --checkpoint C --preset paper --resume`` under ``/usr/bin/time -v`` (one command
each, so time(1) reports each partition's wall time and peak RSS; ``make study`` runs the same partitions
at the same settings in one command). Each log is kept under ``--logs``; the numbers are parsed from it
(``run_log.parse_run_log``) and written to benchmarks/results/study.json, with each model's and the whole
study's totals. A partition already complete at these settings is skipped by ``--resume`` and timed as such:
record a fresh warehouse's runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_log import parse_run_log  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS = REPOSITORY / "benchmarks" / "results" / "study.json"
COMMAND = "resdyn run --model M --checkpoint C --preset paper --resume"


def study_partitions() -> list[str]:
    from resdyn.models.registration import Request, partitions_of
    from resdyn.models.registry import ModelRegistry

    return partitions_of(Request(suite="study"), ModelRegistry())


def run_partition(key: str, warehouse: Path, log_file: Path) -> str:
    model, checkpoint = key.split("@", 1)
    resdyn = str(Path(sys.executable).with_name("resdyn"))
    command = ["/usr/bin/time", "-v", resdyn, "run", "--model", model, "--checkpoint", checkpoint, "--preset", "paper",
               "--resume", "--warehouse", str(warehouse)]
    print(f"{key}: {' '.join(command[2:])} (log: {log_file})", flush=True)
    # one stream: the CLI's lines and time(1)'s report (on stderr) in order
    log = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ).stdout
    log_file.write_text(log)
    return log


def record(logs: dict[str, str], conditions: str) -> dict:
    """One row per partition (its steps of at least a second as columns, in seconds), one per model, the total."""
    partitions = []
    for key, log in logs.items():
        numbers = parse_run_log(log)
        stages = numbers.pop("stages")
        partitions.append({"partition": key, **{name: numbers[name] for name in
                           ("wall_minutes", "max_rss_gib", "exit_status", "checks_passed")},
                           **{f"{stage} s": seconds for stage, seconds in stages.items()}})
    models = []
    for model in dict.fromkeys(row["partition"].split("@")[0] for row in partitions):
        rows = [row for row in partitions if row["partition"].startswith(model + "@")]
        models.append({"model": model, "partitions": len(rows),
                       "wall_minutes": round(sum(row["wall_minutes"] for row in rows), 1),
                       "max_rss_gib": max(row["max_rss_gib"] for row in rows)})
    return {"command": COMMAND + " (one partition at a time, under /usr/bin/time -v)", "conditions": conditions,
            "total_wall_minutes": round(sum(row["wall_minutes"] for row in partitions), 1),
            "max_rss_gib": max(row["max_rss_gib"] for row in partitions),
            "models": models, "partitions": partitions}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", type=Path, help="the warehouse the partitions run into (a fresh one)")
    parser.add_argument("--logs", type=Path, default=REPOSITORY / "benchmarks" / ".study-logs")
    parser.add_argument("--partition", action="append", help="model@checkpoint (repeatable; default: the study suite)")
    parser.add_argument("--from-log", action="append", metavar="M@C=FILE",
                        help="record this log of the same command instead of running it (repeatable)")
    parser.add_argument("--conditions", default="", help="the code version and what else ran (recorded as said)")
    arguments = parser.parse_args()
    if arguments.from_log:
        logs = {key: Path(file).read_text() for key, file in (item.split("=", 1) for item in arguments.from_log)}
    elif arguments.warehouse is None:
        parser.error("give --warehouse (to run the partitions) or --from-log M@C=FILE")
    else:
        arguments.logs.mkdir(parents=True, exist_ok=True)
        logs = {key: run_partition(key, arguments.warehouse, arguments.logs / f"{key}.log")
                for key in arguments.partition or study_partitions()}
    results = record(logs, arguments.conditions)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0 if all(row["exit_status"] == 0 for row in results["partitions"]) else 1


if __name__ == "__main__":
    sys.exit(main())
