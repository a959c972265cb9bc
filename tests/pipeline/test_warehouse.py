"""Atomic, idempotent partition writes and clear errors for missing or corrupt partitions."""

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from resdyn.dagster_project.store.warehouse import CorruptPartitionError, MissingPartitionError, Warehouse

TABLE = "training_loss"  # any table of dagster_project/store/schema.py; this one is small


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




def test_missing_and_corrupt_partitions_name_the_fix(tmp_path):
    store = Warehouse(tmp_path)
    with pytest.raises(MissingPartitionError, match="resdyn run --model m --checkpoint c"):
        store.read(TABLE, "m", "c")
    path = store.write(TABLE, "m", "c", _table(4, 0)).path
    path.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(CorruptPartitionError, match="rematerialize the partition"):
        store.read(TABLE, "m", "c")


def test_a_run_bound_writer_stages_until_the_run_publishes(tmp_path, fresh_seed):
    """Tables of a run are invisible until it publishes; readers in the run see them first; the generation
    before the published one is kept for running queries and the one before that is collected."""
    published = Warehouse(tmp_path)
    published.write(TABLE, "m", "c", _table(5, fresh_seed))
    first_file = published.table_path(TABLE, "m", "c")
    runs = [Warehouse(tmp_path, run_id=f"run-{i}", settings_hash="h") for i in range(2)]
    for number, run in enumerate(runs):
        run.write(TABLE, "m", "c", _table(6 + number, fresh_seed + number))
        assert published.read(TABLE, "m", "c").num_rows == 5 + number  # still the published generation
        assert run.read(TABLE, "m", "c").num_rows == 6 + number  # the run reads its own
        run.publish("m", "c")
        assert published.read(TABLE, "m", "c").num_rows == 6 + number
        rows = published.query("SELECT DISTINCT run_id, settings_hash FROM training_loss").to_pylist()
        assert rows == [{"run_id": f"run-{number}", "settings_hash": "h"}]
    files = sorted(path.name for path in published.partition_directory(TABLE, "m", "c").glob("*.parquet"))
    assert files == ["run-0.parquet", "run-1.parquet"] and not first_file.exists()


MATRIX_MEMORY_SCRIPT = """
import sys, tempfile, tracemalloc
import numpy as np, pyarrow as pa
sys.path.insert(0, {repository!r})
from resdyn.dagster_project.store.arrow_tables import fixed_size_lists, nullable_lists, record_batch
from resdyn.dagster_project.store.warehouse import Warehouse

d, n_matrices = 512, 6
rng = np.random.default_rng({seed})
matrices = [rng.normal(size=(d, d)) for _ in range(n_matrices)]
def write(store, matrices):
    with store.open_writer("jacobians", "m", "c", width=d) as writer:
        for i, matrix in enumerate(matrices):
            writer.write(record_batch("jacobians", d, {{
                "layer": i // 2, "sublayer": ("attn", "mlp")[i % 2], "depth": i, "row": np.arange(d, dtype=np.int32),
                "values": fixed_size_lists(matrix), "variance": nullable_lists(None, d), "n_observations": 5,
                "backend": "structured"}}))


write(Warehouse(tempfile.mkdtemp()), [np.zeros((d, d))])  # imports and caches warmed up outside the measurement
store = Warehouse(tempfile.mkdtemp())
pool = pa.default_memory_pool()
arrow_baseline = pool.max_memory()
tracemalloc.start()
baseline = tracemalloc.get_traced_memory()[0]
write(store, matrices)
write_peak = tracemalloc.get_traced_memory()[1] - baseline + pool.max_memory() - arrow_baseline
equal, matrices_read = True, store.matrix_table("jacobians", "m", "c").matrices()
for i in range(n_matrices):  # not zip/enumerate: their reused result tuples would keep the previous matrix alive
    key, matrix = next(matrices_read)
    equal = equal and key == (i // 2, ("attn", "mlp")[i % 2]) and np.array_equal(matrix, matrices[i])
    del matrix
equal = equal and next(matrices_read, None) is None
read_peak = tracemalloc.get_traced_memory()[1] - baseline + pool.max_memory() - arrow_baseline
print(equal, write_peak, read_peak, matrices[0].nbytes)
"""


def test_matrix_table_streams_without_python_lists_within_two_matrices(fresh_seed):
    """A d = 512 jacobians partition written and read back one matrix at a time: numpy (tracemalloc) plus
    Arrow (its memory pool) never hold more than two matrices beyond the source arrays."""
    from pathlib import Path

    script = MATRIX_MEMORY_SCRIPT.format(repository=str(Path(__file__).resolve().parents[2]), seed=fresh_seed % 2**31)
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert output.returncode == 0, output.stderr[-3000:]
    equal, write_peak, read_peak, matrix_bytes = output.stdout.split()
    assert equal == "True"
    assert int(write_peak) <= 2 * int(matrix_bytes), (write_peak, matrix_bytes)
    assert int(read_peak) <= 2 * int(matrix_bytes), (read_peak, matrix_bytes)
