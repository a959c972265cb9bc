"""numpy <-> Arrow without Python lists: record batches built from buffers, matrices read back zero-copy.

A d x d float64 matrix becomes a ``FixedSizeList<double>[d]`` column whose child array *is* the
matrix's buffer (``pa.array`` on a contiguous numpy array does not copy); reading back,
``flatten().to_numpy(zero_copy_only=True)`` returns a view of the decoded Arrow buffer. Constant
columns are ``pa.repeat`` scalars, index columns ``np.arange``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from resdyn.dagster_project.store.schema import check_column_names, column_mismatch, same_kind, table_spec


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
    """``value`` repeated ``n_rows`` times as ``arrow_type``: inferred, then cast safely (``pa.scalar(1.5,
    pa.int32())`` would be 1)."""
    scalar = value if isinstance(value, pa.Scalar) else pa.scalar(value)
    if not same_kind(scalar.type, arrow_type):
        raise TypeError(f"a value of type {scalar.type}")
    return pa.repeat(scalar if scalar.type == arrow_type else scalar.cast(arrow_type, safe=True), n_rows)


def record_batch(table: str, width: int | None, columns: dict) -> pa.RecordBatch:
    """A record batch of ``table``'s schema (d = ``width`` for its matrix columns); scalars in ``columns`` are repeated to the batch length. Strict as
    :func:`~.schema.conform`: a column the schema lacks or needs, or a value that does not cast, is an error."""
    spec = table_spec(table)
    schema = spec.schema(width)
    check_column_names(spec.name, list(columns), schema.names)
    lengths = {len(value) for value in columns.values() if isinstance(value, (pa.Array, np.ndarray))}
    if len(lengths) != 1:
        raise ValueError(f"{spec.name}: columns of different lengths {sorted(lengths)}")
    n_rows = lengths.pop()
    arrays = []
    for field in schema:
        value = columns[field.name]
        try:
            array = value if isinstance(value, pa.Array) else pa.array(value) if isinstance(value, np.ndarray) else None
            if array is not None and not same_kind(array.type, field.type):
                raise TypeError(f"values of type {array.type}")
            if array is not None:
                arrays.append(array if array.type == field.type else array.cast(field.type, safe=True))
            else:
                arrays.append(constant(value, n_rows, field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
                OverflowError) as error:
            raise column_mismatch(spec.name, field, error) from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def matrix_rows(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A fixed-size-list column back to an (n_rows, d) numpy array, without copying when it is one chunk."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if column.null_count:
        raise ValueError("the matrix column holds nulls")
    values = column.flatten().to_numpy(zero_copy_only=True)
    return values.reshape(len(column), -1) if len(column) else values.reshape(0, 0)
