"""`resdyn run` into a warehouse on a real S3 server (SeaweedFS, the ``s3_server`` fixture): the tiny suite it publishes
holds every table equal to the same run on disk, `resdyn sql` and `resdyn check` answer over it, a second writer is
refused while the first holds the partition, and a writer killed mid-run leaves nothing visible and a rerun publishes
the same tables."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from resdyn.dagster_project.store.object_generations import ObjectTables, written_by
from resdyn.dagster_project.store.object_store import ObjectStore
from resdyn.dagster_project.store.object_warehouse import ObjectWarehouse
from resdyn.dagster_project.store.warehouse import Warehouse

from ..cli_helpers import QUICK, REPOSITORY, RESDYN, environment, run_cli, run_cli_in_process


def _same_tables(disk: Warehouse, objects: ObjectWarehouse, model: str, checkpoint: str) -> None:
    """Every table the disk partition publishes is published on S3 with equal data (hash of the data columns, read
    back from each store), and every figure with equal bytes (the sha256 each publication recorded)."""
    on_disk, on_s3 = disk.manifest(model, checkpoint), objects.manifest(model, checkpoint)
    assert sorted(on_s3["tables"]) == sorted(on_disk["tables"])
    assert len(on_disk["tables"]) >= 20
    for table in on_disk["tables"]:
        assert objects.tables.content_hash(table, model, checkpoint) == disk.content_hash(table, model, checkpoint), \
            table
    assert sorted(on_s3.get("figures", {})) == sorted(on_disk.get("figures", {})) and on_s3["figures"]
    assert {name: entry["sha256"] for name, entry in on_s3["figure_files"].items()} == \
        {name: entry["sha256"] for name, entry in on_disk["figure_files"].items()}
    for name, file in on_s3["figures"].items():  # the objects hold what was recorded
        assert objects.store.sha256(file)[0] == on_s3["figure_files"][name]["sha256"], name


def test_the_tiny_suite_run_into_s3_publishes_the_tables_of_the_same_run_on_disk_and_sql_and_check_answer(
        s3_warehouse, tmp_path):
    url = str(s3_warehouse)
    # the suite's three families at their seeded initialisation (the trained steps would train each model twice:
    # minutes each; their weights are all that differs, the path through the store is the same) into S3, and one of
    # them on disk to compare with (each family goes through the store the same way); both runs at once
    settings = ["--checkpoint", "step-000000", "--samples", "6", *QUICK]
    runs = {"s3": ["run", "--suite", "tiny", *settings, "--warehouse", url],
            "disk": ["run", "--model", "tiny-llama", *settings, "--warehouse", str(tmp_path / "disk")]}
    processes = {}
    try:
        for name, arguments in runs.items():
            with open(tmp_path / f"{name}.log", "w") as log:  # a file, not a pipe: neither run waits on a reader
                processes[name] = subprocess.Popen([*RESDYN, *arguments], cwd=REPOSITORY,
                                                   env=environment(XDG_CACHE_HOME=str(tmp_path / f"cache-{name}")),
                                                   stdout=log, stderr=subprocess.STDOUT)
        for name, process in processes.items():
            process.wait(timeout=1800)
            assert process.returncode == 0, f"{name}: {(tmp_path / f'{name}.log').read_text()[-3000:]}"
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
    disk, objects = Warehouse(tmp_path / "disk"), ObjectWarehouse(s3_warehouse)
    assert sorted(disk.partitions()) == [("tiny-llama", "step-000000")]
    assert sorted(objects.partitions()) == [(model, "step-000000") for model in ("tiny-gemma3", "tiny-llama",
                                                                                 "tiny-olmo3")]
    _same_tables(disk, objects, "tiny-llama", "step-000000")
    store, cache = ObjectStore(s3_warehouse), {"XDG_CACHE_HOME": str(tmp_path / "cache-s3")}
    assert not store.list("_staging/") and not store.list("_locks/")  # published, leases freed
    assert not (REPOSITORY / "s3:").exists()  # once, the URL became a local folder of that name
    answer = run_cli_in_process("sql", "SELECT status, count(*) AS n FROM partitions GROUP BY status", "--csv",
                     "--warehouse", url, env=environment(**cache))
    assert answer.returncode == 0 and answer.stdout.replace('"', "").split() == ["status,n", "complete,3"], \
        answer.stdout + answer.stderr
    statuses = run_cli_in_process("sql", "SELECT status FROM runs", "--csv", "--warehouse", url, env=environment(**cache))
    assert statuses.stdout.replace('"', "").split() == ["status", "success", "success", "success"], \
        statuses.stdout + statuses.stderr
    check = run_cli_in_process("check", "--warehouse", url, env=environment(**cache))
    assert check.returncode == 0 and "every published file is readable" in check.stdout, check.stdout + check.stderr


def test_a_second_writer_is_refused_while_a_live_run_holds_the_partition_on_s3(built, s3_warehouse, tmp_path):
    model, _ = built
    holder = ObjectWarehouse(s3_warehouse, run_id="the-first-writer")
    # this test's process holds the lease as a single-process run: alive, so judged live
    holder.acquire_lease("m", "local", single_process=True)
    completed = run_cli_in_process("run", "--model", str(model), "--samples", "6", *QUICK, "--warehouse",
                                   str(s3_warehouse), env=environment(XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert completed.returncode == 1, completed.stdout[-3000:]
    assert "being materialized by run the-first-writer" in completed.stdout + completed.stderr
    assert ObjectTables(ObjectStore(s3_warehouse)).manifest("m", "local")["tables"] == {}  # nothing published
    holder.release_lease("m", "local")
    assert not ObjectStore(s3_warehouse).list("_locks/")


def test_a_writer_killed_mid_run_leaves_nothing_visible_and_a_rerun_publishes_the_disk_tables(
        built, s3_warehouse, tmp_path):
    model, root = built
    url, store = str(s3_warehouse), ObjectStore(s3_warehouse)
    env = environment(XDG_CACHE_HOME=str(tmp_path / "cache"))
    arguments = [*RESDYN, "run", "--model", str(model), "--samples", "6", *QUICK, "--warehouse", url]
    writer = subprocess.Popen(arguments, cwd=REPOSITORY, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        # killed once it has staged a few tables of the partition: mid-run, its lease held, nothing published yet
        while time.monotonic() < deadline and len(store.list("_staging/")) < 3 and writer.poll() is None:
            time.sleep(0.2)
        assert writer.poll() is None, "the run ended before it could be killed"
        os.killpg(writer.pid, signal.SIGKILL)
        writer.wait(timeout=60)
    finally:
        if writer.poll() is None:
            os.killpg(writer.pid, signal.SIGKILL)
    objects = ObjectWarehouse(s3_warehouse)
    assert objects.manifest("m", "local")["tables"] == {}  # a reader sees nothing of it
    assert store.list("_locks/") and store.list("_staging/")  # what it left: its lease and staged entries
    # the rerun's steps each in a process of their own: one step's lease freed by another, figures per process
    rerun = run_cli("run", "--model", str(model), "--samples", "6", *QUICK, "--executor", "multiprocess",
                    "--warehouse", url, env=env, timeout=900)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    _same_tables(Warehouse(root), objects, "m", "local")
    records = {row["status"]: row["run_id"] for row in objects.run_records("m", "local")}
    assert sorted(records) == ["killed", "success"]  # the dead lease's run recorded as such by the rerun
    assert not store.list("_locks/")
    left = objects.unpublished("m", "local")  # the killed run's objects: named by no manifest, its lease gone
    assert left and {written_by(found.relative)[2] for found in left} == {records["killed"]}
    reclaim = run_cli_in_process("check", "--reclaim", "--warehouse", url, env=env)
    assert reclaim.returncode == 0, reclaim.stdout + reclaim.stderr
    assert not objects.unpublished("m", "local")
    _same_tables(Warehouse(root), objects, "m", "local")  # what was published is untouched by the reclaim


def test_a_server_stopped_mid_run_fails_the_run_without_a_visible_trace_and_a_rerun_after_its_restart_publishes(
        built, tmp_path):
    from resdyn.dagster_project.configuration.locations import parse_location
    from resdyn.dagster_project.launch.s3_local import LocalS3Server

    model, root = built
    server = LocalS3Server(tmp_path / "s3")  # a server of this test's own: the shared one keeps serving the others
    server.start()
    try:
        location = parse_location(f"s3://{server.bucket}/restarted")
        env = environment(XDG_CACHE_HOME=str(tmp_path / "cache"), **server.environment())
        writer = subprocess.Popen([*RESDYN, "run", "--model", str(model), "--samples", "6", *QUICK, "--warehouse",
                                   str(location)], cwd=REPOSITORY, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        store = _store_of(server, location)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and len(store.list("_staging/")) < 3 and writer.poll() is None:
            time.sleep(0.2)
        assert writer.poll() is None, "the run ended before the server could be stopped"
        server.stop(grace=2)  # mid-run: the next request of the run finds no server
        output = writer.communicate(timeout=900)[0]
        assert writer.returncode != 0, output[-3000:]
        server.start()  # the same data directory, new ports
        env.update(server.environment())
        store = _store_of(server, location)
        published = store.get("_published/model=m/checkpoint=local.json")
        assert published is None  # nothing of the failed run is visible
        rerun = run_cli("run", "--model", str(model), "--samples", "6", *QUICK, "--warehouse", str(location), env=env,
                        timeout=900)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
        _same_tables(Warehouse(root), ObjectWarehouse(location, store=store), "m", "local")
    finally:
        server.stop(grace=2)


def _store_of(server, location) -> ObjectStore:
    """A client of ``server`` (its own credentials and endpoint, whatever this process's environment says)."""
    import boto3

    session = boto3.session.Session(aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key,
                                    region_name="us-east-1")
    store = ObjectStore(location, session=session)
    store.client = session.client("s3", endpoint_url=server.endpoint)
    return store


def test_a_failed_run_discards_its_own_tables_and_figures_and_nothing_published(s3_warehouse, fresh_seed, tmp_path):
    import numpy as np

    from resdyn.dagster_project.store.schema import rows_table

    rng = np.random.default_rng(fresh_seed)

    def singular_values(n_rows: int):
        return rows_table("singular_values", [{"layer": int(rng.integers(0, 4)), "sublayer": "attn", "depth": 0,
                                               "idx": i, "sigma": float(rng.random())} for i in range(n_rows)])

    published = ObjectWarehouse(s3_warehouse, run_id="the-published-run")
    published.write("singular_values", "m", "c", singular_values(30))
    drawn = b"\x89PNG\r\n\x1a\n" + rng.bytes(64)
    (published.artefact_directory("figures", "m", "c") / "spectrum.png").write_bytes(drawn)
    published.stage_figures("m", "c")
    published.publish("m", "c")
    failed = published.bound("the-failed-run")
    failed.write("singular_values", "m", "c", singular_values(10))
    (failed.artefact_directory("figures", "m", "c") / "spectrum.png").write_bytes(b"\x89PNG\r\n\x1a\n" + rng.bytes(64))
    failed.stage_figures("m", "c")
    store = ObjectStore(s3_warehouse)
    written = {found.relative for found in store.list("") if "the-failed-run" in found.relative}
    assert len(written) == 4  # its table, its figure and their two staged entries
    assert failed.discard_run("m", "c") > 0
    assert not [found for found in store.list("") if "the-failed-run" in found.relative]
    manifest = published.manifest("m", "c")
    assert manifest["tables"]["singular_values"]["rows"] == 30 and manifest["tables"]["singular_values"]["run_id"] == \
        "the-published-run"
    assert published.read("singular_values", "m", "c").num_rows == 30  # its sha256 checked on the read
    assert store.get(manifest["figures"]["spectrum"]).data == drawn
    assert published.damaged_figures(manifest) == []
