"""The one interface of a warehouse, on disk (:class:`~.warehouse.Warehouse`) or on an object store
(:class:`~.object_warehouse.ObjectWarehouse`): every method the asset layer, the launch, the interface and the study
call. :func:`~resdyn.dagster_project.store.open_warehouse` returns one or the other as a :class:`WarehouseStore`,
so no caller asks which kind it holds; ``tests/unit/test_warehouse_interface.py`` checks that both classes have
every method with the same parameters.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import pyarrow as pa

if TYPE_CHECKING:  # the classes the methods return, from the modules that implement them
    from resdyn.dagster_project.store.artefacts import StudyArtefacts
    from resdyn.dagster_project.store.handles import MatrixTable
    from resdyn.dagster_project.store.manifest_recovery import Restoration
    from resdyn.dagster_project.store.warehouse import TableWriter, WrittenTable


@runtime_checkable
class WarehouseStore(Protocol):
    """What a warehouse does for its callers (docs/architecture.md, a warehouse on an object store)."""

    run_id: str | None
    settings_hash: str
    identities: dict

    def acquire_lease(self, model: str, checkpoint: str, *, single_process: bool, instance=None) -> None:
        """Hold the partition for this run (store/leases.py), or raise PartitionBusyError naming its holder."""
        ...

    def bound(self, run_id: str, settings_hash: str = "") -> "WarehouseStore":
        """The same warehouse, its writes bound to run ``run_id``."""
        ...

    def checkpoint_labels(self, model: str) -> dict[str, str]:
        """How figures that put ``model``'s checkpoints side by side name each one (:func:`checkpoint_labels`)."""
        ...

    def damaged_figures(self, manifest: dict, verified: Any = None) -> list[str]:
        """One line per published figure of ``manifest`` (a partition's) that is missing or no longer holds what."""
        ...

    def damaged_manifests(self) -> list[tuple[str, str, list[str]]]:
        """(model, checkpoint, problems) of every partition whose manifest is damaged or missing (a partition with a."""
        ...

    def discard_run(self, model: str, checkpoint: str) -> int:
        """Remove what this run wrote for the partition and did not publish; the bytes freed."""
        ...

    def exists(self) -> bool:
        """Is the warehouse there (a folder, or anything under the bucket prefix)?"""
        ...

    @property
    def results_folder(self) -> Path | None:
        """Where a report or claims asked for without --output are written (None: --output is needed)."""
        ...

    def unpublished_problems(self) -> list[str]:
        """`resdyn check`'s lines for what no manifest names and no live run wrote."""
        ...

    def reclaim_unpublished(self) -> str:
        """Remove at once what no manifest names and no live run wrote; what was removed, in words."""
        ...

    def forget(self, model: str, checkpoint: str) -> list[Path]:
        """Remove a partition's data: its published manifest first (so readers stop seeing it at once),."""
        ...

    def has_run_record(self, model: str, checkpoint: str) -> bool:
        """Has this run written its row of the partition's ``runs`` table (its first step for it has started)?."""
        ...

    def kept_manifest_copies(self, model: str, checkpoint: str) -> list[tuple[int, str, bytes]]:
        """(generation, path, bytes) of the manifest's kept copies, the newest first."""
        ...

    def manifest(self, model: str, checkpoint: str) -> dict:
        """The usable part of the partition's manifest (dagster_project/store/manifests.py): a damaged manifest."""
        ...

    def manifest_state(self, model: str, checkpoint: str) -> tuple[dict, list[str]]:
        """(the usable part of the partition's manifest, its problems): a manifest with a problem is damaged."""
        ...

    def matrix_table(self, table: str, model: str, checkpoint: str) -> MatrixTable:
        """The partition's matrix table as a lazy handle (:class:`~.handles.MatrixTable`: one matrix at a time)."""
        ...

    def open_writer(self, table: str, model: str, checkpoint: str, *, width: int | None = None) -> TableWriter:
        """A streaming writer for one partition of ``table`` (schema from dagster_project/store/schema.py)."""
        ...

    def partitions(self) -> list[tuple[str, str]]:
        """(model, checkpoint) of every partition with a manifest."""
        ...

    def prepare_for_writing(self) -> None:
        """Nothing to check on a folder (an object store checks it honours conditional writes)."""
        ...

    def publish(self, model: str, checkpoint: str) -> dict:
        """Publish everything this run staged for the partition (tables and figures), in one manifest swap."""
        ...

    def published_files(self) -> tuple[dict[str, list[str]], list[dict], list[str]]:
        """(table -> published files that look intact, manifest rows, problems): a file missing or of."""
        ...

    def published_table_names(self, model: str, checkpoint: str) -> set[str]:
        """The tables a partition's manifest publishes (none when it has no readable manifest)."""
        ...

    def query(self, sql: str, *, complete_only: bool = False, parameters: dict | None = None) -> pa.Table:
        """Run read-only SQL (SELECT / EXPLAIN; the last statement's result), ``$name`` placeholders of the."""
        ...

    def read(self, table: str, model: str, checkpoint: str, columns: list[str] | None = None) -> pa.Table:
        """One partition of a published table (the run's own staged table first, for a bound warehouse)."""
        ...

    def readable_run_files(self) -> list[str]:
        """The runs table's files whose footer reads."""
        ...

    def reclaim(self, found: list) -> int:
        """Remove leftovers found by :meth:`unpublished`; the bytes freed."""
        ...

    def record_run(self, model: str, checkpoint: str, row: dict) -> None:
        """Write (or rewrite) this run's row of the ``runs`` table for the partition."""
        ...

    def registry(self):
        """The registered models: the built-in ones and those runs added (``registry.json``)."""
        ...

    def registry_specs(self) -> dict:
        """Every registered model by name, as the registry holds it."""
        ...

    def release_lease(self, model: str, checkpoint: str) -> None:
        """Free the partition's lease, if this run holds it."""
        ...

    def require_existing(self) -> "WarehouseStore":
        """Reading a warehouse that is not there is an error, not an empty answer."""
        ...

    def restore_manifest(self, model: str, checkpoint: str) -> Restoration:
        """Restore the partition's damaged manifest (store/manifest_recovery.py), under the manifest's lock."""
        ...

    def row_groups(self, table: str, model: str, checkpoint: str,
                   columns: list[str] | None = None) -> Iterator[pa.Table]:
        """The partition one row group at a time (a matrix table: one matrix at a time). Decoded on this thread:."""
        ...

    def run_records(self, model: str, checkpoint: str) -> list[dict]:
        """Every run's row for the partition, each with the runs table's current columns: a row written before a."""
        ...

    def stage_figures(self, model: str, checkpoint: str, *, step_ended: bool = False) -> None:
        """Nothing to do on a folder: the run's figures are drawn where :meth:`publish` finds them."""
        ...

    def staged(self, model: str, checkpoint: str, run_id: str | None = None) -> dict[str, dict]:
        """Tables a run has written for a partition and not yet published."""
        ...

    def study_artefacts(self) -> Iterator[StudyArtefacts]:
        """Where the study-level assets draw: the warehouse folder itself (``report.html``, ``_artefacts/``)."""
        ...

    def sweep_partition(self, model: str, checkpoint: str) -> int:
        """Before a run writes: remove what runs of the partition that are not live left; the bytes freed."""
        ...

    def unknown_files(self, model: str, checkpoint: str) -> list[Path]:
        """The tables and figures of a partition whose manifest is damaged (any may be what it published)."""
        ...

    def unpublished(self, model: str, checkpoint: str) -> list:
        """What runs of the partition that are not live left unpublished (store/leftovers.py)."""
        ...

    def writable_registry(self):
        """The registry, for a launch that may register a new model (``registry.json`` under the root)."""
        ...

    def write(self, table: str, model: str, checkpoint: str, data: pa.Table | pa.RecordBatch, *,
              width: int | None = None) -> WrittenTable:
        """Write a whole table partition (one row group per record batch)."""
        ...


__all__ = ["WarehouseStore"]
