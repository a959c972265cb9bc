"""The one reader of matrix tables: one d x d float64 matrix per Parquet row group.

A matrix table (``jacobians``, ``schur_forms``, ``sample_jacobians``, ``jacobian_folds``) stores each matrix as d rows of a ``FixedSizeList<double>[d]`` column ``values``
with a ``row`` index, one row group per matrix, so a reader holds one matrix at a time. Assets and
the notebook read them through :class:`~.handles.MatrixTable` (a lazy handle over one partition's
file), worker processes through :func:`read_matrix` (a path and a row group: what a task can carry);
both end in :func:`matrix_of`, which puts the rows in order.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from resdyn.dagster_project.store.arrow_tables import matrix_rows


def matrix_of(data: pa.Table, column: str = "values") -> np.ndarray:
    """The float64 matrix of one row group (columns ``row`` and ``column``), rows sorted by ``row``."""
    values = matrix_rows(data.column(column))
    rows = data.column("row").to_numpy()
    if not np.array_equal(rows, np.arange(len(rows))):
        values = values[np.argsort(rows)]
    return np.asarray(values, dtype=np.float64)


def read_matrix(path: str | Path, row_group: int) -> np.ndarray:
    """Row group ``row_group`` of the matrix table file ``path`` (what a worker process is handed): a local file, or
    an object's ``s3://bucket/key``, read in ranges through this process's AWS configuration."""
    if str(path).startswith("s3://"):
        from resdyn.dagster_project.store.object_store import environment_filesystem

        opened = environment_filesystem().open_input_file(str(path).removeprefix("s3://"))
    else:
        opened = nullcontext(path)
    with opened as source:  # one request per column chunk from a store (pre_buffer), as from a file
        return matrix_of(pq.ParquetFile(source, pre_buffer=True).read_row_group(row_group, columns=["row", "values"]))


__all__ = ["matrix_of", "read_matrix"]
