"""Input frames built in memory: what a test or a notebook hands a stage in place of the warehouse's handles.

A stage reads its inputs through a few methods, the same as the warehouse's lazy handles
(dagster_project/store/handles.py): a table frame's ``read(columns)``, ``row_groups(columns)`` (one graph, one
matrix at a time) and ``first(column)``; a matrix frame's ``keys(group)``, ``width``, ``matrix(i)``,
``matrices(group)`` and ``reference(i)`` (what a worker process loads: here the matrix itself).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa


class TableFrame:
    """A table in memory; its row groups are the runs of equal ``groups`` values (one per graph, as written)."""

    def __init__(self, table: pa.Table | list[dict], groups: tuple[str, ...] = ()) -> None:
        self.table = table if isinstance(table, pa.Table) else pa.Table.from_pylist(table)
        self.groups = groups

    def read(self, columns: list[str] | None = None) -> pa.Table:
        return self.table if columns is None else self.table.select(columns)

    def row_groups(self, columns: list[str] | None = None) -> Iterator[pa.Table]:
        if not self.groups or self.table.num_rows == 0:
            yield self.read(columns)
            return
        keys = list(zip(*(self.table.column(name).to_pylist() for name in self.groups)))
        start = 0
        for end in range(1, len(keys) + 1):
            if end == len(keys) or keys[end] != keys[start]:
                yield self.read(columns).slice(start, end - start)
                start = end

    def first(self, column: str):
        return self.table.column(column)[0].as_py()


@dataclass(frozen=True)
class LoadedMatrix:
    """A matrix handed to a worker as it is (picklable): the in-memory twin of a warehouse MatrixReference."""

    values: np.ndarray

    def load(self) -> np.ndarray:
        return np.asarray(self.values, dtype=np.float64)


class MatrixFrames:
    """d x d matrices in memory, keyed by named fields (``key_names``), in the given order (the file order)."""

    def __init__(self, matrices: Mapping[tuple, np.ndarray], key_names: tuple[str, ...] = ("layer", "sublayer")) -> None:
        self.key_names = key_names
        self._keys = [dict(zip(key_names, key)) for key in matrices]
        self._matrices = [np.asarray(matrix, dtype=np.float64) for matrix in matrices.values()]

    def keys(self, group: tuple[str, ...] = ("layer", "sublayer")) -> list[tuple[int, tuple]]:
        return [(index, tuple(key[name] for name in group)) for index, key in enumerate(self._keys)]

    @property
    def width(self) -> int:
        return self._matrices[0].shape[0]

    def reference(self, row_group: int) -> LoadedMatrix:
        return LoadedMatrix(self._matrices[row_group])

    def matrix(self, row_group: int) -> np.ndarray:
        return self._matrices[row_group]

    def matrices(self, group: tuple[str, ...] = ("layer", "sublayer")) -> Iterator[tuple[tuple, np.ndarray]]:
        for (_, key), matrix in zip(self.keys(group), self._matrices):
            yield key, matrix

    def row_groups(self, columns: list[str] | None = None) -> Iterator[pa.Table]:
        """One row group per matrix, its key columns (and ``row``, ``values`` when asked), as the warehouse's."""
        for key, matrix in zip(self._keys, self._matrices):
            d = len(matrix)
            data = {name: [value] * d for name, value in key.items()}
            data["row"] = np.arange(d, dtype=np.int32)
            data["values"] = pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), d)
            table = pa.table(data)
            yield table if columns is None else table.select(columns)

    def read(self, columns: list[str] | None = None) -> pa.Table:
        return pa.concat_tables(list(self.row_groups(columns)))


__all__ = ["LoadedMatrix", "MatrixFrames", "TableFrame"]
