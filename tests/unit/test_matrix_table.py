"""The one matrix reader: rows back in order whatever order they were written in, one matrix per row group."""

import numpy as np
import pyarrow as pa

from resdyn.dagster_project.store.arrow_tables import fixed_size_lists
from resdyn.dagster_project.store.handles import MatrixTable, table_handle
from resdyn.dagster_project.store.matrices import read_matrix
from resdyn.dagster_project.store.schema import table_spec
from resdyn.dagster_project.store.warehouse import Warehouse


def _batches_with_shuffled_rows(matrices, rng):
    width = matrices[0].shape[1]
    for index, matrix in enumerate(matrices):
        order = rng.permutation(len(matrix))
        yield pa.record_batch({
            "layer": pa.array(np.full(len(matrix), index // 2), pa.int32()),
            "sublayer": pa.array([("attn", "mlp")[index % 2]] * len(matrix)),
            "depth": pa.array(np.full(len(matrix), index), pa.int32()),
            "row": pa.array(order.astype(np.int32)), "values": fixed_size_lists(matrix[order])},
            schema=table_spec("schur_forms").schema(width))


def test_every_reader_returns_the_written_matrices_in_row_order(tmp_path, fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    matrices = [rng.normal(size=(7, 7)) for _ in range(4)]
    store = Warehouse(tmp_path, run_id="run-1")  # reads see this run's staged table
    store.write("schur_forms", "m", "c", pa.Table.from_batches(list(_batches_with_shuffled_rows(matrices, rng))),
                width=7)
    table = table_handle(store, "schur_forms", "m", "c")
    assert isinstance(table, MatrixTable) and table.path.is_file() and table.width == 7
    keys = table.keys()
    assert keys == [(0, (0, "attn")), (1, (0, "mlp")), (2, (1, "attn")), (3, (1, "mlp"))]
    assert [key for key, _ in table.keys(("depth",))] == [0, 1, 2, 3]
    for index, ((key, matrix), expected) in enumerate(zip(table.matrices(), matrices, strict=True)):
        assert key == keys[index][1] and matrix.dtype == np.float64
        np.testing.assert_array_equal(matrix, expected)
        np.testing.assert_array_equal(table.matrix(index), expected)
        np.testing.assert_array_equal(read_matrix(table.path, index), expected)
    assert table.read(["depth"]).column("depth").to_pylist() == sorted(np.repeat(np.arange(4), 7).tolist())
