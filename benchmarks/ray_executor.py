"""Six tiny partitions in-process against the Ray executor on a local cluster, side by side in one run
(a benchmark, not a test).

    python benchmarks/ray_executor.py [--partitions 6] [--samples 32]

Six random-init tiny-suite-shaped models (Llama config of the tiny suite: d_model 64, 4 layers),
saved to a temp directory, run through ``resdyn run`` twice into fresh warehouses: with the
in-process executor, then with ``--executor ray`` on a Ray cluster of a head and one worker node on
127.0.0.1 with one CPU each (two Ray worker processes on this 2-core machine; resdyn.dagster_project.launch.ray_local),
two partitions at a time (``--parallel-runs 2``). Reports wall times and their ratio, and checks
both warehouses hold the same row counts. Writes benchmarks/results/ray_executor.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))


def save_models(directory: Path, count: int) -> list[Path]:
    import torch
    from transformers import AutoModelForCausalLM

    from resdyn.models.byte_tokenizer import build_byte_tokenizer
    from resdyn.models.tiny_configs import tiny_config

    paths = []
    for seed in range(count):
        torch.manual_seed(seed)
        path = directory / f"bench-{seed}"
        AutoModelForCausalLM.from_config(tiny_config("llama")).save_pretrained(path)
        build_byte_tokenizer().save_pretrained(path)
        paths.append(path)
    return paths


def timed_run(arguments: list[str], environment: dict) -> tuple[float, str]:
    started = time.perf_counter()
    completed = subprocess.run([sys.executable, "-m", "resdyn", "run", *arguments], cwd=REPOSITORY, env=environment,
                               capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"resdyn run failed ({completed.returncode}):\n{completed.stdout[-3000:]}{completed.stderr[-3000:]}")
    return seconds, completed.stdout


def row_counts(root: Path) -> dict:
    from resdyn.dagster_project.store.warehouse import Warehouse

    store = Warehouse(root)
    return {table: store.query(f"SELECT count(*) AS n FROM {table}").to_pylist()[0]["n"]
            for table in ("jacobians", "layer_metrics", "communities", "coupling_tests", "transient_growth")}


def main() -> None:
    from resdyn.dagster_project.launch.ray_local import LocalCluster

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--samples", type=int, default=32)
    arguments = parser.parse_args()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RESDYN_") or "WIKITEXT" in k}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        models = save_models(scratch / "models", arguments.partitions)
        common = [a for m in models for a in ("--model", str(m))] + ["--samples", str(arguments.samples),
                                                                      "--log-level", "WARNING"]
        home = scratch / "dagster_home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        environment = {**environment, "DAGSTER_HOME": str(home)}
        in_process, _ = timed_run([*common, "--warehouse", str(scratch / "local")], environment)
        print(f"in-process: {in_process:.1f} s", flush=True)
        started = time.perf_counter()
        with LocalCluster(scratch / "ray-logs", workers=1, num_cpus=1, environment=environment) as cluster:
            cluster_start = time.perf_counter() - started
            on_ray, _ = timed_run([*common, "--warehouse", str(scratch / "ray"), "--executor", "ray",
                                   "--ray-address", cluster.address, "--parallel-runs", "2"], environment)
        print(f"ray: {on_ray:.1f} s (cluster start {cluster_start:.1f} s)", flush=True)
        local_counts, ray_counts = row_counts(scratch / "local"), row_counts(scratch / "ray")
    result = {"partitions": arguments.partitions, "samples": arguments.samples, "cores": os.cpu_count(),
              "ray_worker_processes": 2, "parallel_runs": 2,
              "in_process_seconds": round(in_process, 1), "ray_seconds": round(on_ray, 1),
              "ray_cluster_start_seconds": round(cluster_start, 1),
              "ray_vs_in_process": round(on_ray / in_process, 2), "same_row_counts": local_counts == ray_counts,
              "row_counts": local_counts}
    output = REPOSITORY / "benchmarks" / "results" / "ray_executor.json"
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
