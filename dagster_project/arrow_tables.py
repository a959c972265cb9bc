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


def nullable_fixed_size_lists(matrix: np.ndarray | None, n_rows: int, width: int) -> pa.FixedSizeListArray:
    """Like :func:`fixed_size_lists`, or ``n_rows`` nulls of that type when ``matrix`` is None."""
    if matrix is not None:
        return fixed_size_lists(matrix)
    return pa.nulls(n_rows, pa.list_(pa.float64(), width))


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
        raise KeyError(f"{spec.name}: columns {sorted(extra)} are not in its schema (dagster_project/schema.py)")
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def matrix_rows(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A fixed-size-list column back to an (n_rows, d) numpy array, without copying when it is one chunk."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if column.null_count:
        raise ValueError("the matrix column holds nulls")
    width = column.type.list_size
    return column.flatten().to_numpy(zero_copy_only=True).reshape(-1, width)
