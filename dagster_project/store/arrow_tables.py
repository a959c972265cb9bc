"""Record batches of a table's schema built from numpy buffers without Python lists: matrices as list columns
(resdyn/arrow_matrices.py, zero-copy), constant columns as ``pa.repeat`` scalars, index columns ``np.arange``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from resdyn.arrow_matrices import fixed_size_lists, matrix_rows, nullable_lists
from resdyn.dagster_project.store.schema import check_column_names, column_mismatch, same_kind, table_spec


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
            if isinstance(value, np.ndarray) and value.ndim == 2:  # a matrix: one row a list (a stage's plain array)
                value = _list_rows(value, field.type)
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


def _list_rows(matrix: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    """The rows of a 2-d array as the list column ``arrow_type`` (fixed-size or not), sharing its buffer."""
    if pa.types.is_fixed_size_list(arrow_type):
        return fixed_size_lists(matrix, arrow_type.value_type.to_pandas_dtype())
    if pa.types.is_list(arrow_type):
        return nullable_lists(matrix, len(matrix))
    raise TypeError(f"a {matrix.shape[0]} x {matrix.shape[1]} array for a column of type {arrow_type}")


__all__ = ["constant", "fixed_size_lists", "matrix_rows", "nullable_lists", "record_batch"]
