"""Rerun only what changed, on one SmolLM2-135M partition at the demo's settings (a benchmark, not a test).

    RESDYN_WIKITEXT_DIR=../shared/data/wikitext-2-raw python benchmarks/reruns.py [--checkpoint trained]

Into a fresh warehouse, in this process (the in-process executor, so that the code-version bump below reaches the
steps): (full) the whole partition; (a) the transient stage's code version bumped by one, as an edit of
assets/transient.py would declare it; (b) ``--permutations`` halved. Each a plain ``resdyn run`` of the partition
(.run_loop.run_partitions). Recorded per run: wall seconds, the asset steps it ran with their seconds, and whether the
measurement tables' files are byte for byte the same with unchanged modification times. Writes
benchmarks/results/reruns.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results") / "reruns.json"
MEASUREMENT_TABLES = ("activations", "jacobians", "sample_jacobians", "jacobian_folds", "finite_difference_probe")


def file_states(root: Path, model: str, checkpoint: str) -> dict:
    from resdyn.dagster_project.store.warehouse import Warehouse

    entries = Warehouse(root).manifest(model, checkpoint)["tables"]
    return {table: [entries[table]["file"], entries[table]["sha256"], os.stat(root / entries[table]["file"]).st_mtime_ns]
            for table in MEASUREMENT_TABLES}


def timed_run(config, key: str) -> dict:
    """One plain run of ``key`` under ``config``: its seconds, the asset steps it ran, and its plan as it says it."""
    from resdyn.dagster_project.launch.rerun_plan import plan_partitions
    from resdyn.dagster_project.launch.run_loop import run_partitions
    from resdyn.dagster_project.store import open_warehouse
    from resdyn.dagster_project.store.table_identity import declarations, stage_of_tables

    plan = plan_partitions(open_warehouse(config.warehouse), [key], config, set(stage_of_tables()))[0]
    started = time.perf_counter()
    outcome = run_partitions(config, [key])
    seconds = time.perf_counter() - started
    steps = outcome.summary.get(key, {}).get("steps", {})
    return {"seconds": round(seconds, 1), "failed": outcome.failed,
            "stages_run": {name: step["seconds"] for name, step in steps.items() if name in declarations()},
            "plan": plan.lines()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default="trained")
    parser.add_argument("--directory", type=Path, default=REPOSITORY / "benchmarks" / ".reruns")
    arguments = parser.parse_args()
    from resdyn.dagster_project.configuration.config import StudyConfig
    from resdyn.dagster_project.launch.study_definitions import prepare
    from resdyn.dagster_project.store import table_identity

    model, key = "smollm2-135m", f"smollm2-135m@{arguments.checkpoint}"
    root = arguments.directory / "warehouse"
    shutil.rmtree(arguments.directory, ignore_errors=True)
    root.mkdir(parents=True)
    settings = {"warehouse": str(root), "executor": "in_process"}
    from resdyn.dagster_project.launch.run_loop import run_request
    from resdyn.models.registration import Request

    # the partition registered and made whole, as `resdyn run --model smollm2-135m --checkpoint C` does
    started = time.perf_counter()
    outcome = run_request(Request(models=(model,), checkpoints=(arguments.checkpoint,)), settings)
    record = {"full": {"seconds": round(time.perf_counter() - started, 1), "failed": outcome.failed,
                       "stages_run": {name: step["seconds"] for name, step in outcome.summary[key]["steps"].items()
                                      if name in table_identity.declarations()}}}
    kept = file_states(root, model, arguments.checkpoint)
    config = prepare(StudyConfig.resolve(settings))
    before = table_identity.declarations()["transient_analysis"]
    table_identity.declare(dataclasses.replace(before, tables={table: str(int(version) + 1)
                                                                for table, version in before.tables.items()}))
    record["code_version_bumped"] = timed_run(config, key)
    record["code_version_bumped"]["measurement_files_unchanged"] = file_states(root, model, arguments.checkpoint) == kept
    halved = prepare(StudyConfig.resolve({**settings, "n_permutations": config.settings["n_permutations"] // 2}))
    record["permutations_halved"] = timed_run(halved, key)
    record["permutations_halved"]["measurement_files_unchanged"] = file_states(root, model,
                                                                                arguments.checkpoint) == kept
    for case in ("code_version_bumped", "permutations_halved"):
        record[case]["over_full"] = round(record[case]["seconds"] / record["full"]["seconds"], 4)
    record.update({"model": key, "settings": "the demo's (n = 128, T = 64; every setting at its default)",
                   "executor": "in_process", "machine": f"{os.cpu_count()} cores, {platform.machine()}",
                   "corpus": os.environ.get("RESDYN_WIKITEXT_DIR", "(datasets or the fallback)")})
    RESULTS.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
