"""The object-store operations a warehouse on S3 rests on, against a real S3 server (SeaweedFS, started by the
``s3_server`` fixture): exclusive creation, conditional replacement and deletion, leases that exactly one of many
racing writers holds, uploads that a killed writer leaves invisible, Parquet read back in ranges through pyarrow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resdyn.dagster_project.store.errors import PartitionBusyError
from resdyn.dagster_project.store.object_leases import (
    acquire_object_lease,
    holder_record,
    lease_key,
    release_object_lease,
)
from resdyn.dagster_project.store.object_store import ObjectStore

from ..cli_helpers import environment, run_cli_in_process

RACERS = 8


def _race(location, environment) -> list[tuple[str, str]]:
    """``RACERS`` writers, each with its own client (its own connections), released at once by a barrier to take
    the partition's lease; the server alone decides between their requests (threads suffice: each waits on I/O)."""
    stores = [ObjectStore(location) for _ in range(RACERS)]
    barrier, outcomes = threading.Barrier(RACERS), []

    def racer(index: int) -> None:
        barrier.wait()
        try:
            acquire_object_lease(stores[index], "m", "c", holder_record(f"run-{index}", single_process=True),
                                 is_live=lambda lease: lease.get("run_id") != "dead-run")
            outcomes.append((f"run-{index}", "held"))
        except PartitionBusyError:
            outcomes.append((f"run-{index}", "refused"))

    threads = [threading.Thread(target=racer, args=(index,)) for index in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(outcomes) == RACERS, outcomes
    return outcomes


def test_of_writers_racing_for_a_free_partition_exactly_one_holds_its_lease(s3_warehouse, s3_environment):
    outcomes = _race(s3_warehouse, s3_environment)
    held = [run for run, outcome in outcomes if outcome == "held"]
    assert len(held) == 1, outcomes
    store = ObjectStore(s3_warehouse)
    assert json.loads(store.get(lease_key("m", "c")).data)["run_id"] == held[0]


def test_of_writers_racing_for_a_dead_runs_lease_exactly_one_takes_it_over(s3_warehouse, s3_environment):
    store = ObjectStore(s3_warehouse)
    store.put(lease_key("m", "c"), json.dumps({"run_id": "dead-run", "pid": 1, "host": "elsewhere"}).encode())
    outcomes = _race(s3_warehouse, s3_environment)
    held = [run for run, outcome in outcomes if outcome == "held"]
    assert len(held) == 1, outcomes
    assert json.loads(store.get(lease_key("m", "c")).data)["run_id"] == held[0]


def test_a_release_never_removes_a_lease_another_run_took_over(s3_warehouse, s3_environment):
    store = ObjectStore(s3_warehouse)
    first = acquire_object_lease(store, "m", "c", holder_record("first", single_process=True))
    # a second run judges the first gone (as it would a dead process) and takes the lease over
    second = acquire_object_lease(store, "m", "c", holder_record("second", single_process=True),
                                  is_live=lambda lease: False)
    assert second.etag != first.etag
    assert not release_object_lease(store, first)
    assert json.loads(store.get(lease_key("m", "c")).data)["run_id"] == "second"
    assert release_object_lease(store, second)
    assert store.get(lease_key("m", "c")) is None


def test_a_live_holder_is_named_in_the_refusal(s3_warehouse, s3_environment):
    store = ObjectStore(s3_warehouse)
    acquire_object_lease(store, "m", "c", holder_record("holder", single_process=True))
    with pytest.raises(PartitionBusyError, match="run holder"):
        acquire_object_lease(store, "m", "c", holder_record("second", single_process=True),
                             is_live=lambda lease: True)


def test_conditional_writes_are_honoured_and_a_stale_etag_changes_nothing(s3_warehouse, s3_environment):
    store = ObjectStore(s3_warehouse)
    store.require_conditional_writes()
    first = store.create("x.json", b"one")
    assert first is not None and store.create("x.json", b"two") is None
    second = store.replace("x.json", b"three", first)
    assert second is not None and store.replace("x.json", b"four", first) is None
    assert not store.delete("x.json", etag=first)
    assert store.get("x.json").data == b"three"
    assert [item.relative for item in store.list()] == ["x.json"]


def test_an_upload_killed_midway_leaves_no_object_and_its_parts_are_swept(s3_warehouse, s3_environment, tmp_path):
    from datetime import timedelta

    big = tmp_path / "big.bin"
    big.write_bytes(np.random.default_rng().bytes(48 << 20))  # 6 parts of boto3's 8 MiB
    store = ObjectStore(s3_warehouse)
    code = ("from resdyn.dagster_project.store.object_store import ObjectStore; "
            "from resdyn.dagster_project.configuration.locations import parse_location; "
            f"ObjectStore(parse_location({str(s3_warehouse)!r})).upload({str(big)!r}, 'tables/big.parquet')")
    writer = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **s3_environment})
    client, bucket = store.client, s3_warehouse.bucket
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # an event, not a clock: the upload has begun on the server
        begun = client.list_multipart_uploads(Bucket=bucket, Prefix=s3_warehouse.prefix).get("Uploads", [])
        if begun or writer.poll() is not None:
            break
        time.sleep(0.05)
    assert begun, "the writer finished (or failed) before its multipart upload could be seen"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert store.info("tables/big.parquet") is None  # nothing visible: not a prefix of the file, not an empty one
    assert store.abort_stale_uploads(older_than=timedelta(0)) >= 1
    assert not client.list_multipart_uploads(Bucket=bucket, Prefix=s3_warehouse.prefix).get("Uploads")


def test_parquet_uploaded_reads_back_equal_in_row_groups_through_pyarrow(s3_warehouse, s3_environment, tmp_path):
    rng = np.random.default_rng()
    table = pa.table({"index": np.arange(3000), "value": rng.standard_normal(3000)})
    local = tmp_path / "t.parquet"
    pq.write_table(table, local, row_group_size=1000)
    store = ObjectStore(s3_warehouse)
    import hashlib

    assert store.upload(local, "t/model=m/checkpoint=c/run.parquet") == hashlib.sha256(local.read_bytes()).hexdigest()
    remote = pq.ParquetFile(store.arrow_path("t/model=m/checkpoint=c/run.parquet"), filesystem=store.filesystem())
    assert remote.num_row_groups == 3
    assert remote.read_row_group(1).equals(table.slice(1000, 1000))
    assert remote.read().equals(table)


def test_an_object_store_warehouse_is_refused_by_name_and_never_becomes_a_local_folder(tmp_path, s3_warehouse):
    """Where a folder is still needed (a report without --output FILE: it is drawn on this machine), an s3://
    warehouse is a one-line refusal naming the fix, before the store is asked anything (it was a local folder named
    `s3:` holding the whole study)."""
    completed = run_cli_in_process("report", "--warehouse", str(s3_warehouse), env=environment(), cwd=tmp_path)
    assert completed.returncode == 2
    assert "object-store warehouse" in completed.stderr and "--output FILE" in completed.stderr, completed.stderr
    assert not (tmp_path / "s3:").exists()
