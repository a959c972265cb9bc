"""What an asset body writes for its partition besides the tables it yields: streamed tables and figures.

A body never sees the warehouse, a path of a table, a lease or a manifest. It yields its tables (the IO
manager stages them) and, where one pass produces several tables at once (the pass over the model writes
activations, Jacobians and probes layer by layer), asks :meth:`PartitionOutputs.writer` for a streamed
writer whose receipt it yields. Figures go into :attr:`PartitionOutputs.figures`, the run's own folder,
published with the tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from resdyn.dagster_project.store.warehouse import TableWriter, Warehouse


@dataclass(frozen=True)
class PartitionOutputs:
    """The outputs of one run's step on one partition (``model@checkpoint``)."""

    _store: Warehouse
    model: str
    checkpoint: str

    def writer(self, table: str, *, width: int | None = None) -> TableWriter:
        """A streamed writer of ``table`` (a context manager; yield its ``result`` through ``written_output``);
        ``width``: the d of a matrix table's rows."""
        return self._store.open_writer(table, self.model, self.checkpoint, width=width)

    def identity(self, table: str) -> str | None:
        """The identity hash ``table`` gets from this run (its code version, declared settings and inputs'
        identities: store/table_identity.py), or None for a table no stage declares."""
        identity = self._store.identities.get(table)
        return identity.hash if identity is not None else None

    @property
    def figures(self) -> Path:
        """This run's figure folder for the partition (created)."""
        return self._store.artefact_directory("figures", self.model, self.checkpoint)
