"""A warehouse on an object store, read: its published partitions, read-only SQL over them, whole tables.

The reading side of :class:`~.warehouse.Warehouse` for ``s3://bucket/prefix`` (the writing side is
:class:`~.object_generations.ObjectTables`; runs do not write here yet). The views are those of a folder
(:func:`~.views.build_connection`, the same ``sql/views.sql`` on top), each over exactly the files the manifests
publish, read through pyarrow's ``S3FileSystem`` as datasets registered in DuckDB: DuckDB's own S3 extension cannot
be installed offline, and a registered dataset needs no file access from DuckDB at all, so its file access stays
off (no directory allowed): SQL reads the warehouse's tables by name and nothing else, anywhere.

A published file is checked against its entry by one HEAD (size and the ETag its upload got) before a view may read
it; a whole-table read also checks its sha256 (:meth:`ObjectTables.read`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from resdyn.dagster_project.configuration.locations import ObjectLocation
from resdyn.dagster_project.store.handles import MatrixTable
from resdyn.dagster_project.store.object_generations import ObjectTables
from resdyn.dagster_project.store.object_store import ObjectStore
from resdyn.dagster_project.store.warehouse import PublishedPartitions


class ObjectWarehouse(PublishedPartitions):
    """The published partitions of the warehouse at ``location`` (``s3://bucket/prefix``), read-only."""

    def __init__(self, location: ObjectLocation) -> None:
        self.location = location
        self.store = ObjectStore(location)
        self.tables = ObjectTables(self.store)
        self.problems: list[str] = []

    def __str__(self) -> str:
        return str(self.location)

    def require_existing(self) -> "ObjectWarehouse":
        """Reading a warehouse that is not there is an error, not an empty answer."""
        if not self.store.list("_published/") and not self.store.list("runs/"):
            raise FileNotFoundError(f"no warehouse at {self.location}: nothing is published under that prefix; "
                                    "check the bucket, the prefix and AWS_ENDPOINT_URL_S3")
        return self

    # -- what the views read ----------------------------------------------------------------------------

    @property
    def arrow_filesystem(self):
        return self.tables.filesystem

    def sql_directories(self) -> list[str]:
        """Where DuckDB may open files itself: nowhere (the tables reach it as registered datasets)."""
        return []

    def table_directory(self, table: str) -> str:
        """The hive base of ``table``'s files on :attr:`arrow_filesystem` (model=/checkpoint= below it)."""
        return self.store.arrow_path(table)

    def read_manifests(self) -> tuple[list[dict], list[str]]:
        """Every partition's usable manifest, and one line per problem found in them."""
        manifests, problems = [], []
        for found in self.store.list("_published/"):
            parts = found.relative.removeprefix("_published/").split("/")
            if len(parts) != 2 or not parts[0].startswith("model=") or not parts[1].startswith("checkpoint=") or \
                    not parts[1].endswith(".json"):
                continue
            model, checkpoint = parts[0].removeprefix("model="), parts[1].removeprefix("checkpoint=")[:-5]
            stored = self.store.get(found.relative)
            if stored is None:  # removed since the listing
                continue
            manifest, found_problems = self.tables._parse(found.relative, stored.data, model, checkpoint)
            problems += found_problems
            if manifest["tables"] or not found_problems:
                manifests.append(manifest)
        return manifests, problems

    def published_files(self) -> tuple[dict[str, list[str]], list[dict], list[str]]:
        """(table -> published files that are the objects published, manifest rows, problems): an object missing,
        of another size or another ETag than published is left out of the views and reported."""
        files: dict[str, list[str]] = {}
        rows = []
        manifests, problems = self.read_manifests()
        for manifest in manifests:
            for table, entry in manifest["tables"].items():
                found = self.store.info(entry["file"])
                if found is None:
                    problem = "missing"
                elif found.size != entry["bytes"] or found.etag != entry.get("etag", found.etag):  # no ETag: size
                    problem = "not the object published (size or ETag differs)"
                else:
                    problem = None
                if problem is not None:
                    problems.append(f"{self.tables.where(entry['file'])} is {problem}; rematerialize with "
                                    f"`resdyn run --model {manifest['model']} --checkpoint {manifest['checkpoint']}`")
                else:
                    files.setdefault(table, []).append(self.store.arrow_path(entry["file"]))
                generation = entry.get("generation")
                rows.append({"model": manifest["model"], "checkpoint": manifest["checkpoint"], "table_name": table,
                             "run_id": entry.get("run_id"), "settings_hash": entry.get("settings_hash"),
                             "generation": generation if isinstance(generation, int) else None,
                             "rows": entry["rows"], "intact": problem is None})
        return files, rows, problems

    def readable_run_files(self) -> list[str]:
        """The runs table's objects (``runs/model=*/checkpoint=*/*.parquet``) whose footer reads; another object there
        is left out with a warning (once per process), so one bad object does not stop every query, as on disk."""
        from resdyn.dagster_project.store.views import warn_once

        files = []
        for found in self.store.list("runs/"):
            parts = found.relative.split("/")
            if len(parts) != 4 or not parts[1].startswith("model=") or not parts[2].startswith("checkpoint=") or \
                    not parts[3].endswith(".parquet"):
                continue
            path = self.store.arrow_path(found.relative)
            try:
                pq.read_metadata(path, filesystem=self.arrow_filesystem)
                files.append(path)
            except (pa.ArrowInvalid, OSError):
                warn_once(self, f"{self.tables.where(found.relative)} is not readable and is left out of the runs "
                                "view; see `resdyn check`")
        return files

    # -- reads ------------------------------------------------------------------------------------------

    def read(self, table: str, model: str, checkpoint: str, columns: list[str] | None = None) -> pa.Table:
        return self.tables.read(table, model, checkpoint, columns)

    def row_groups(self, table: str, model: str, checkpoint: str, columns: list[str] | None = None):
        return self.tables.row_groups(table, model, checkpoint, columns)

    def read_row_group(self, table: str, model: str, checkpoint: str, index: int,
                       columns: list[str] | None = None) -> pa.Table:
        return self.tables.read_row_group(table, model, checkpoint, index, columns)

    def matrix_table(self, table: str, model: str, checkpoint: str) -> MatrixTable:
        """The partition's matrix table as a lazy handle (one matrix at a time)."""
        return MatrixTable(self, table, model, checkpoint)

    def manifest(self, model: str, checkpoint: str) -> dict:
        return self.tables.manifest(model, checkpoint)

    def has(self, table: str, model: str, checkpoint: str) -> bool:
        return table in self.tables.manifest(model, checkpoint)["tables"]

    def registry(self):
        """The registered models: the built-in ones and those a run added (``registry.json`` on the store)."""
        from resdyn.models.registry import ModelRegistry

        stored = self.store.get("registry.json")
        if stored is None:
            return ModelRegistry(None)
        with tempfile.TemporaryDirectory(prefix="resdyn-registry-") as directory:  # the registry reads a file
            path = Path(directory) / "registry.json"
            path.write_bytes(stored.data)
            registry = ModelRegistry(path)
        registry.user_file = None  # read once; nothing writes it back from here
        return registry

    def registry_specs(self) -> dict:
        return self.registry().specs
