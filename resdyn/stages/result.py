"""What a stage returns: its tables' rows and what a person should see of them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa


@dataclass(frozen=True)
class Figure:
    """A PNG a stage drew, shown with its table (``label``: the metadata's name; default: the file's stem)."""

    path: Path
    label: str | None = None


@dataclass(frozen=True)
class Preview:
    """A markdown preview of the first rows of ``table`` (default: the table's own rows as written), ``without``
    the columns named (long lists)."""

    table: pa.Table | None = None
    without: tuple[str, ...] = ()


@dataclass
class StageResult:
    """Per table the stage writes (in the order the tables are handed on):

    - ``tables[name]``: a list of row dicts, a ``pyarrow.Table``, an iterable of column batches (dicts of arrays and
      scalars, consumed as they are written: one graph's edges in memory at a time) or the stream the stage filled
      through :meth:`~.tools.StageTools.stream`;
    - ``metadata[name]``: what a person sees with it: plain values (numbers, text, a dict), :class:`Figure`,
      :class:`Preview`.

    Every row must match its table's schema (dagster_project/store/schema.py): a missing column, an extra one or a
    value that does not cast is an error naming the table, never dropped or filled."""

    tables: dict[str, list[dict] | pa.Table | Iterable[dict] | object]
    metadata: dict[str, dict] = field(default_factory=dict)

    def rows(self, name: str) -> list[dict]:
        """The rows of table ``name`` as dicts, for a table returned as rows or a ``pyarrow.Table``."""
        value = self.tables[name]
        return value.to_pylist() if isinstance(value, pa.Table) else list(value)


__all__ = ["Figure", "Preview", "StageResult"]
