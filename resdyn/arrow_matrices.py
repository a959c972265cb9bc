"""numpy matrices as Arrow list columns and back, without Python lists or copies.

A d x d float64 matrix becomes a ``FixedSizeList<double>[d]`` column whose child array *is* the
matrix's buffer (``pa.array`` on a contiguous numpy array does not copy); reading back,
``flatten().to_numpy(zero_copy_only=True)`` returns a view of the decoded Arrow buffer.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


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


def matrix_rows(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A fixed-size-list column back to an (n_rows, d) numpy array, without copying when it is one chunk."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if column.null_count:
        raise ValueError("the matrix column holds nulls")
    values = column.flatten().to_numpy(zero_copy_only=True)
    return values.reshape(len(column), -1) if len(column) else values.reshape(0, 0)


__all__ = ["fixed_size_lists", "matrix_rows", "nullable_lists"]
