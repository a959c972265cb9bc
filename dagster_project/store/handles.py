"""Lazy handles over one partition's table, as a run sees it: what the IO manager hands an asset as an input.

A handle reads nothing until asked; the file it reads is resolved on first use (this run's staged table,
else the published one: :meth:`~.warehouse.Warehouse.table_path`), inside the step's lease. Matrix tables
(one d x d matrix per row group, rows indexed by ``row``) get a :class:`MatrixTable`, which reads one
matrix at a time; every other table a :class:`TableHandle`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa

from resdyn.dagster_project.store.matrices import matrix_of, read_matrix
from resdyn.dagster_project.store.schema import TABLES

SUBLAYER_KEY = ("layer", "sublayer")


class TableHandle:
    """One partition's table: :meth:`read` (Arrow), :meth:`row_groups`, :meth:`first`, :attr:`path`."""

    def __init__(self, store, table: str, model: str, checkpoint: str) -> None:
        if table not in TABLES:
            raise KeyError(f"no table {table!r}; tables: {', '.join(TABLES)}")
        self.store, self.table, self.model, self.checkpoint = store, table, model, checkpoint

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.table}, {self.model}@{self.checkpoint})"

    @cached_property
    def path(self) -> Path:
        """The file read: this run's staged table, else the published one (workers get a :class:`MatrixReference`)."""
        return self.store.table_path(self.table, self.model, self.checkpoint)

    def read(self, columns: list[str] | None = None) -> pa.Table:
        return self.store.read(self.table, self.model, self.checkpoint, columns=columns)

    def row_groups(self, columns: list[str] | None = None) -> Iterator[pa.Table]:
        """The table one row group at a time."""
        return self.store.row_groups(self.table, self.model, self.checkpoint, columns=columns)

    def first(self, column: str):
        """The value of ``column`` in the first row (a one-row table: ``model_checkpoints.d_model``)."""
        return self.read([column]).column(column)[0].as_py()


@dataclass(frozen=True)
class MatrixReference:
    """One matrix of a matrix table as a worker process is handed it: picklable, read by :meth:`load` where the
    work runs (a body passes references, never a path; the file is the one its run sees, resolved by the handle)."""

    _file: str
    row_group: int

    def load(self) -> np.ndarray:
        """The d x d matrix, float64."""
        return read_matrix(self._file, self.row_group)


class MatrixTable(TableHandle):
    """A matrix table: its keys first (a few small columns), then one matrix at a time."""

    def keys(self, group: tuple[str, ...] = SUBLAYER_KEY) -> list[tuple[int, tuple]]:
        """(row group, values of ``group``) of every matrix, in file order."""
        return [(index, tuple(data.column(name)[0].as_py() for name in group))
                for index, data in enumerate(self.row_groups(list(group)))]

    @property
    def width(self) -> int:
        """d, from the file's schema (the footer): no matrix is read for it."""
        return self.store.schema(self.table, self.model, self.checkpoint).field("values").type.list_size

    def reference(self, row_group: int) -> MatrixReference:
        """The matrix of row group ``row_group``, to hand a worker process."""
        return MatrixReference(str(self.path), row_group)

    def matrix(self, row_group: int) -> np.ndarray:
        return matrix_of(self.store.read_row_group(self.table, self.model, self.checkpoint, row_group,
                                                   columns=["row", "values"]))

    def matrices(self, group: tuple[str, ...] = SUBLAYER_KEY) -> Iterator[tuple[tuple, np.ndarray]]:
        """((values of ``group``), matrix) in file order, one row group (one matrix) in memory at a time."""
        for data in self.row_groups([*group, "row", "values"]):
            # no reference kept here once yielded (the matrix may be a view of the row group's buffer): while the
            # next row group is read, only the caller's copy of the previous matrix is alive
            yield tuple(data.column(name)[0].as_py() for name in group), matrix_of(data)
            del data


def is_matrix_table(table: str) -> bool:
    """One d x d matrix per row group: a ``row`` index and a ``values`` row (read back as float64)."""
    columns = {column.name: column for column in TABLES[table].columns}
    return "row" in columns and "values" in columns and columns["values"].type in ("float64[d]", "float32[d]")


def table_handle(store, table: str, model: str, checkpoint: str) -> TableHandle:
    """The handle the IO manager gives an asset for ``table`` of ``model@checkpoint``."""
    return (MatrixTable if is_matrix_table(table) else TableHandle)(store, table, model, checkpoint)


__all__ = ["MatrixReference", "MatrixTable", "TableHandle", "is_matrix_table", "table_handle"]
