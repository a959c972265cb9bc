"""numpy <-> Arrow without Python lists: record batches built from buffers, matrices read back zero-copy.

A d x d float64 matrix becomes a ``FixedSizeList<double>[d]`` column whose child array *is* the
matrix's buffer (``pa.array`` on a contiguous numpy array does not copy); reading back,
``flatten().to_numpy(zero_copy_only=True)`` returns a view of the decoded Arrow buffer. Constant
columns are ``pa.repeat`` scalars, index columns ``np.arange``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .schema import TableSpec


def fixed_size_lists(matrix: np.ndarray, dtype=np.float64) -> pa.FixedSizeListArray:
    """Rows of a 2-d array as a fixed-size-list array sharing the array's buffer."""
    matrix = np.ascontiguousarray(matrix, dtype=dtype)
    return pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), matrix.shape[1])


def nullable_lists(matrix: np.ndarray | None, n_rows: int) -> pa.ListArray:
    """Rows of a 2-d float64 array as a list array (sharing its buffer), or ``n_rows`` nulls that cost no
    values when ``matrix`` is None (a null fixed-size list would still hold n_rows x d values)."""
    if matrix is None:
        offsets = pa.array(np.zeros(n_rows + 1, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, pa.array(np.zeros(0)), mask=pa.array(np.ones(n_rows, dtype=bool)))
    matrix = np.ascontiguousarray(matrix, dtype=np.float64)
    offsets = pa.array(np.arange(0, matrix.size + 1, matrix.shape[1], dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(matrix.reshape(-1)))


def constant(value, n_rows: int, arrow_type: pa.DataType) -> pa.Array:
    return pa.repeat(pa.scalar(value, arrow_type), n_rows)


def record_batch(spec: TableSpec, width: int | None, columns: dict) -> pa.RecordBatch:
    """A record batch of ``spec``'s schema; scalars in ``columns`` are repeated to the batch length."""
    schema = spec.schema(width)
    lengths = {len(value) for value in columns.values() if isinstance(value, (pa.Array, np.ndarray))}
    if len(lengths) != 1:
        raise ValueError(f"{spec.name}: columns of different lengths {sorted(lengths)}")
    n_rows = lengths.pop()
    arrays = []
    for field in schema:
        if field.name not in columns:
            raise KeyError(f"{spec.name}: column {field.name!r} missing")
        value = columns[field.name]
        if isinstance(value, pa.Array):
            arrays.append(value if value.type == field.type else value.cast(field.type))
        elif isinstance(value, np.ndarray):
            arrays.append(pa.array(value, type=field.type))
        else:
            arrays.append(constant(value, n_rows, field.type))
    extra = set(columns) - set(schema.names)
    if extra:
        raise KeyError(f"{spec.name}: columns {sorted(extra)} are not in its schema (dagster_project/store/schema.py)")
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def matrix_rows(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A fixed-size-list column back to an (n_rows, d) numpy array, without copying when it is one chunk."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if column.null_count:
        raise ValueError("the matrix column holds nulls")
    values = column.flatten().to_numpy(zero_copy_only=True)
    return values.reshape(len(column), -1) if len(column) else values.reshape(0, 0)
