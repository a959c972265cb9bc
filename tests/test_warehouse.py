"""Atomic, idempotent partition writes and clear errors for missing or corrupt partitions."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pyarrow as pa
import pytest

from dagster_project.warehouse import CorruptPartitionError, MissingPartitionError, Warehouse


TABLE = "training_loss"  # any table of dagster_project/schema.py; this one is small


def _table(n, seed):
    rng = np.random.default_rng(seed)
    return pa.table({"step": pa.array(rng.integers(0, 4, n), pa.int32()), "loss": rng.normal(size=n),
                     "training_corpus": pa.repeat(pa.scalar("c"), n)})


def test_rewrite_replaces_exactly_its_partition(tmp_path, fresh_seed):
    store = Warehouse(tmp_path)
    store.write(TABLE, "m", "a", _table(10, fresh_seed))
    store.write(TABLE, "m", "b", _table(7, fresh_seed + 1))
    store.write(TABLE, "m", "a", _table(3, fresh_seed + 2))
    counts = dict((r["checkpoint"], r["n"]) for r in store.query(
        "SELECT checkpoint, count(*) AS n FROM training_loss GROUP BY ALL").to_pylist())
    assert counts == {"a": 3, "b": 7}
    assert store.read(TABLE, "m", "a").column("loss").to_pylist() == _table(3, fresh_seed + 2).column("loss").to_pylist()


def test_a_writer_killed_mid_write_leaves_no_partial_file_visible(tmp_path):
    store = Warehouse(tmp_path)
    store.write(TABLE, "m", "c", _table(5, 0))  # the partition as it was before the crash
    writer = textwrap.dedent(f"""
        import numpy as np, pyarrow as pa, sys
        sys.path.insert(0, {str(os.getcwd())!r})
        from dagster_project.warehouse import Warehouse
        n = 40_000_000
        table = pa.table({{"step": pa.array(np.zeros(n, np.int32)), "loss": np.random.default_rng(0).normal(size=n),
                          "training_corpus": pa.repeat(pa.scalar("c"), n)}})
        print("writing", flush=True)
        Warehouse({str(tmp_path)!r}).write({TABLE!r}, "m", "c", table)
    """)
    process = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "writing"
    directory = store.partition_directory(TABLE, "m", "c")
    deadline = time.time() + 60
    while not list(directory.glob(".*.inprogress")) and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert list(directory.glob(".*.inprogress")), "the writer died before it began writing; nothing was tested"
    visible = store.query("SELECT count(*) AS n FROM training_loss").to_pylist()
    assert visible == [{"n": 5}]  # the old partition, whole; the half-written file is invisible
    store.write(TABLE, "m", "c", _table(2, 1))
    assert not list(directory.glob(".*.inprogress"))  # the next write sweeps the debris
    assert store.read(TABLE, "m", "c").num_rows == 2


def test_missing_and_corrupt_partitions_name_the_fix(tmp_path):
    store = Warehouse(tmp_path)
    with pytest.raises(MissingPartitionError, match="resdyn run --model m --checkpoint c"):
        store.read("jacobians", "m", "c")
    path = store.partition_path("jacobians", "m", "c")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(CorruptPartitionError, match="delete it and rematerialize"):
        store.read("jacobians", "m", "c")
