"""The Parquet warehouse: generations of hive-partitioned tables, published together, read-only DuckDB.

Layout under the root::

    <table>/model=<m>/checkpoint=<c>/<run_id>.parquet   a table as one run wrote it (zstd; one row group
                                                         per record batch: a matrix table, one matrix each)
    _published/model=<m>/checkpoint=<c>.json            the manifest: which file of each table is published
    _staging/<run_id>/model=<m>/checkpoint=<c>/<t>.json  what a run has written and not yet published
    runs/model=<m>/checkpoint=<c>/<run_id>.parquet       the runs table (provenance, status): always visible
    _locks/<m>@<c>.json                                  the lease of the run materializing the partition

A writer streams record batches into a hidden temp file, reads its footer back, and renames it to
``<run_id>.parquet``; every row carries ``run_id`` and ``settings_hash``. The file is invisible
until the run *publishes*: when the last asset of the run's selection for that partition has
staged its tables, the manifest is rewritten (temp file + rename) to point at all of them at
once. Readers therefore see a partition's old tables or its new ones, never a mix left by a
failed or killed run. The previous generation's files are kept for queries already running and
removed at the next publication (with any file a dead run left behind).

Reads inside a run see that run's own staged tables first, then the published ones. DuckDB views
are built from the manifests (only published files), with external access limited to the root
and the configuration locked; only SELECT and EXPLAIN statements run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from resdyn.dagster_project.configuration.config import warehouse_root
from resdyn.dagster_project.store import leftovers
from resdyn.dagster_project.store.artefacts import StudyArtefacts
from resdyn.dagster_project.store.errors import (
    CorruptPartitionError,
    MissingPartitionError,
    PartitionBusyError,
)
from resdyn.dagster_project.store.fencing import check_may_publish, fenced_out, stamped
from resdyn.dagster_project.store.handles import MatrixTable
from resdyn.dagster_project.store.leases import acquire_lease, lease_is_live, read_lease, release_lease
from resdyn.dagster_project.store.manifest_recovery import (
    Restoration,
    base_for_fence,
    base_for_publication,
    copy_generation,
    copy_name,
    figure_record,
    missing_manifest_problem,
    restoration,
    stale_copies,
)
from resdyn.dagster_project.store.manifests import (
    FolderPlaces,
    VerifiedFiles,
    file_sha256,
    hashing_stream,
    named_files,
    next_generation,
    read_manifest,
)
from resdyn.dagster_project.store.schema import (
    PROVENANCE_COLUMNS,
    TABLES,
    TableSpec,
    conform_to,
    rows_table,
    table_spec,
)
from resdyn.dagster_project.store.table_identity import identity_field
from resdyn.files import (
    HOST,
    IN_PROGRESS_SUFFIX,
    atomic_write_text,
    file_lock,
    replace_atomically,
    written_by_dead_writer,
)

log = logging.getLogger(__name__)

PAGE_BYTES = 1 << 16  # Parquet data pages (and read buffers): memory per column while streaming
LOG_TABLES = ("runs",)  # tables outside the generations: every file is visible


@dataclass(frozen=True)
class WrittenTable:
    path: Path
    rows: int
    row_groups: int
    bytes: int
    content_hash: str  # of the data columns' buffers (not the file, not the provenance): equal data, equal hash
    sha256: str = ""  # of the file's bytes, as written


class TableWriter:
    """Streams record batches of one table partition into a temp file, then hands it over.

    Use as a context manager: on a clean exit the file is flushed, fsynced, its footer read back
    (a file that cannot be read is never handed over), renamed to ``target`` and passed to
    ``on_written``; on an exception the temp file is removed and nothing changes.
    """

    def __init__(self, target: Path, table: TableSpec, width: int | None, provenance: dict, on_written=None) -> None:
        self.target, self.table, self.on_written = target, table, on_written
        self.data_schema = table.schema(width)
        self.schema = self.data_schema
        for name in PROVENANCE_COLUMNS:
            self.schema = self.schema.append(pa.field(name, pa.string()))
        self.provenance = provenance
        self.rows = self.row_groups = 0
        self._digest = hashlib.sha256()
        self.result: WrittenTable | None = None
        directory = target.parent
        directory.mkdir(parents=True, exist_ok=True)
        sweep_dead_writers(directory)
        handle, self.temporary = tempfile.mkstemp(dir=directory, prefix=f".{HOST}-{os.getpid()}-",
                                                  suffix=IN_PROGRESS_SUFFIX)
        self._stream = hashing_stream(os.fdopen(handle, "wb"))
        strings = [f.name for f in self.schema if pa.types.is_string(f.type)]
        scalars = [f.name for f in self.schema if not pa.types.is_nested(f.type)]
        # no dictionary pages for numbers (building one for a matrix costs 16x its size and saves nothing),
        # statistics for scalar columns only, and small pages so a row group streams to disk as it is encoded
        self._writer = pq.ParquetWriter(self._stream, self.schema, compression="zstd", use_dictionary=strings,
                                        write_statistics=scalars, data_page_size=PAGE_BYTES)

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        """Append ``data`` (its data columns; provenance is added here), one row group per record batch."""
        data = conform_to(self.table.name, self.data_schema, data)  # refuses, never drops or fills
        batches = data.to_batches() if isinstance(data, pa.Table) else [data]
        for batch in batches:
            if batch.num_rows == 0:
                continue
            hash_batch(self._digest, batch)
            columns = list(batch.columns) + [pa.repeat(pa.scalar(self.provenance[name]), batch.num_rows)
                                             for name in PROVENANCE_COLUMNS]
            self._writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=self.schema),
                                     row_group_size=batch.num_rows)
            self.rows += batch.num_rows
            self.row_groups += 1

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        try:
            self._writer.close()
            self._stream.flush()
            os.fsync(self._stream.fileno())
            self._stream.close()
            if kind is None:
                footer = pq.read_metadata(self.temporary)  # what readers will see, checked before they can
                if footer.num_rows != self.rows:
                    raise CorruptPartitionError(f"{self.temporary}: wrote {self.rows} rows, footer says {footer.num_rows}")
                replace_atomically(Path(self.temporary), self.target)
                self.result = WrittenTable(self.target, self.rows, self.row_groups, self.target.stat().st_size,
                                           self._digest.hexdigest()[:16], self._stream.sha256)
                if self.on_written is not None:
                    self.on_written(self.table.name, self.result)
        finally:
            Path(self.temporary).unlink(missing_ok=True)


def sweep_dead_writers(directory: Path) -> None:
    """Remove temp files (``.<host>-<pid>-*.inprogress``) of writers on this machine whose process is gone; a live
    writer's file is never touched."""
    for stale in directory.glob(f".*{IN_PROGRESS_SUFFIX}"):
        if written_by_dead_writer(stale.name[1:]):
            stale.unlink(missing_ok=True)


def hash_batch(digest, batch: pa.RecordBatch) -> None:
    """Add a batch's data buffers to ``digest``: the content hash of a table (equal data, equal hash)."""
    for column in batch.columns:
        for buffer in column.buffers():
            if buffer is not None:
                digest.update(memoryview(buffer))


def describe_parquet(parquet: pq.ParquetFile) -> dict:
    """What a manifest entry records of a table file beside its bytes and sha256, read back from it: its rows, the
    content hash of its data columns (as :meth:`Warehouse.content_hash`) and the settings hash its rows carry."""
    names = set(parquet.schema_arrow.names)
    data_columns = [name for name in parquet.schema_arrow.names if name not in PROVENANCE_COLUMNS]
    digest, settings = hashlib.sha256(), ""
    for index in range(parquet.num_row_groups):
        for batch in parquet.read_row_group(index, columns=data_columns, use_threads=False).to_batches():
            hash_batch(digest, batch)
    if "settings_hash" in names and parquet.metadata.num_rows:
        settings = parquet.read_row_group(0, columns=["settings_hash"]).column(0)[0].as_py() or ""
    return {"rows": parquet.metadata.num_rows, "content_hash": digest.hexdigest()[:16], "settings_hash": settings}


def kept_copy_paths(manifest: Path) -> dict[int, Path]:
    """generation -> path of the kept copies beside the manifest file ``manifest`` (store/manifest_recovery.py)."""
    found = {copy_generation(manifest.name, item.name): item for item in manifest.parent.glob(f"{manifest.name}.*")}
    return {generation: item for generation, item in found.items() if generation is not None}


def new_run_id() -> str:
    """For writes outside a Dagster run (scripts, tests): a unique, sortable id."""
    return f"adhoc-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


class PublishedPartitions:
    """What a warehouse publishes, from its ``read_manifests()`` (a folder's or an object store's)."""

    def read_manifests(self) -> tuple[list[dict], list[str]]:
        raise NotImplementedError

    def manifests(self) -> Iterator[dict]:
        """Every partition's usable manifest; the problems found in them logged (``resdyn check`` lists them)."""
        manifests, problems = self.read_manifests()
        for problem in problems:
            log.warning("%s (see `resdyn check`)", problem)
        yield from manifests

    def partitions(self) -> list[tuple[str, str]]:
        return [(manifest["model"], manifest["checkpoint"]) for manifest in self.manifests()]

    def checkpoint_labels(self, model: str) -> dict[str, str]:
        """How figures that put ``model``'s checkpoints side by side name each one (:func:`checkpoint_labels`)."""
        return checkpoint_labels(self.query("SELECT checkpoint, status, d_model, settings_hash FROM partitions "
                                            "WHERE model = $model", parameters={"model": model}).to_pylist())

    def connect(self, *, complete_only: bool = False) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB over the published tables (views from the manifests, sql/views.sql on top),
        that can read only the warehouse's tables and whose configuration is locked."""
        from resdyn.dagster_project.store.views import build_connection

        return build_connection(self, complete_only=complete_only)

    def query(self, sql: str, *, complete_only: bool = False, parameters: dict | None = None) -> pa.Table:
        """Run read-only SQL (SELECT / EXPLAIN; the last statement's result), ``$name`` placeholders of the
        last statement bound to ``parameters`` by DuckDB."""
        from resdyn.dagster_project.store.views import run_read_only

        with self.connect(complete_only=complete_only) as connection:
            return run_read_only(connection, sql, parameters)


class Warehouse(PublishedPartitions):
    """The warehouse root. ``run_id`` binds writes (and first reads) to one run: its tables are staged
    and published by :meth:`publish`; without it every write publishes its table at once."""

    def __init__(self, root: str | os.PathLike | None = None, *, run_id: str | None = None,
                 settings_hash: str = "", identities: dict | None = None) -> None:
        self.root = warehouse_root(root)
        self.run_id = run_id
        self.settings_hash = settings_hash
        self.identities = identities or {}  # table -> TableIdentity of this run (store/table_identity.py)

    def __str__(self) -> str:
        return str(self.root)

    def require_existing(self) -> "Warehouse":
        """Reading a warehouse that is not there is an error, not an empty answer."""
        if self.root.exists() and not self.root.is_dir():
            raise NotADirectoryError(f"the warehouse {self.root} is not a directory: pass --warehouse DIR (or set "
                                     "RESDYN_WAREHOUSE) to one `resdyn run` made")
        if not self.root.is_dir():
            raise FileNotFoundError(f"no warehouse at {self.root}: `resdyn run` writes one there, or pass "
                                    "--warehouse DIR (or set RESDYN_WAREHOUSE) to an existing one")
        return self

    def bound(self, run_id: str, settings_hash: str = "") -> "Warehouse":
        """The same warehouse, its writes bound to run ``run_id``."""
        return Warehouse(self.root, run_id=run_id, settings_hash=settings_hash)

    def exists(self) -> bool:
        return self.root.is_dir()

    @property
    def results_folder(self) -> Path | None:
        """Where a report or claims asked for without --output are written: the warehouse's own folder."""
        return self.root

    def unpublished_problems(self) -> list[str]:
        """`resdyn check`'s lines for what no manifest names and no live run wrote (store/leftovers.py)."""
        return leftovers.describe(leftovers.unpublished_files(self))

    def reclaim_unpublished(self) -> str:
        """Remove at once what no manifest names and no live run wrote (a person's explicit act: no grace period);
        what was removed, in words."""
        found = leftovers.unpublished_files(self)
        return f"removed {len(found)} unpublished file(s), {leftovers.reclaim(self, found)} bytes"

    def prepare_for_writing(self) -> None:
        """Nothing to check on a folder (an object store checks it honours conditional writes)."""

    @property
    def local_state_directory(self) -> Path:
        """Where this machine keeps what a run needs on local disk (the model store, a Dagster instance): the root."""
        return self.root

    # -- one run's hold on a partition: its lease, its leftovers -------------------------------

    def acquire_lease(self, model: str, checkpoint: str, *, single_process: bool, instance=None) -> None:
        """Hold the partition for this run (store/leases.py), or raise PartitionBusyError naming its holder."""
        acquire_lease(self, model, checkpoint, single_process=single_process, instance=instance)

    def release_lease(self, model: str, checkpoint: str) -> None:
        release_lease(self, model, checkpoint)

    def has_run_record(self, model: str, checkpoint: str) -> bool:
        """Has this run written its row of the partition's ``runs`` table (its first step for it has started)?"""
        return (self.partition_directory("runs", model, checkpoint) / f"{self.run_id}.parquet").is_file()

    def unpublished(self, model: str, checkpoint: str) -> list:
        """What runs of the partition that are not live left unpublished (store/leftovers.py)."""
        return leftovers.unpublished_files(self, model, checkpoint)

    def reclaim(self, found: list) -> int:
        return leftovers.reclaim(self, found)

    def sweep_partition(self, model: str, checkpoint: str) -> int:
        """Before a run writes: remove what runs of the partition that are not live left; the bytes freed."""
        return leftovers.sweep_partition(self, model, checkpoint)

    def discard_run(self, model: str, checkpoint: str) -> int:
        """Remove what this run wrote for the partition and did not publish; the bytes freed."""
        return leftovers.discard_run(self, model, checkpoint)

    def stage_figures(self, model: str, checkpoint: str, *, step_ended: bool = False) -> None:
        """Nothing to do on a folder: the run's figures are drawn where :meth:`publish` finds them."""

    # -- paths ----------------------------------------------------------------------------------

    def partition_directory(self, table: str, model: str, checkpoint: str) -> Path:
        return self.root / table / f"model={model}" / f"checkpoint={checkpoint}"

    def manifest_path(self, model: str, checkpoint: str) -> Path:
        return self.root / "_published" / f"model={model}" / f"checkpoint={checkpoint}.json"

    def staging_directory(self, run_id: str, model: str, checkpoint: str) -> Path:
        return self.root / "_staging" / run_id / f"model={model}" / f"checkpoint={checkpoint}"

    def lease_path(self, model: str, checkpoint: str) -> Path:
        return self.root / "_locks" / f"{model}@{checkpoint}.json"

    def artefact_directory(self, kind: str, model: str, checkpoint: str) -> Path:
        """Where this run writes a partition's non-table outputs (figures), outside every table's glob: a
        folder of its own (``<run_id>/``), so a run that fails or is killed never overwrites a published
        figure; :meth:`publish` publishes them with the tables (``figures`` in the manifest)."""
        directory = self.root / "_artefacts" / kind / model / checkpoint / (self.run_id or "unstaged")
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    @contextmanager
    def study_artefacts(self) -> Iterator[StudyArtefacts]:
        """Where the study-level assets draw: the warehouse folder itself (``report.html``, ``_artefacts/``)."""
        yield StudyArtefacts(self.root)

    @property
    def models_directory(self) -> Path:
        return self.root / "_models"

    @property
    def registry_file(self) -> Path:
        return self.root / "registry.json"

    def forget(self, model: str, checkpoint: str) -> list[Path]:
        """Remove a partition's data: its published manifest first (so readers stop seeing it at once),
        then every table's files, its figures and its runs. Refused while a live run holds the lease."""
        lease = self.lease_path(model, checkpoint)
        if lease.is_file():
            try:
                holder = json.loads(lease.read_text())
            except (OSError, json.JSONDecodeError):
                holder = {}
            if holder.get("run_id") and lease_is_live(holder):  # the run's own status, as a second run judges it
                raise PartitionBusyError(f"partition {model}@{checkpoint} is being materialized by run "
                                         f"{holder.get('run_id')} (pid {holder.get('pid')} on {holder.get('host')}); "
                                         f"wait for it or stop it first. If that run is gone, delete {lease}.")
        removed = []
        manifest = self.manifest_path(model, checkpoint)
        if manifest.is_file():
            manifest.unlink()
            removed.append(manifest)
        for kept in kept_copy_paths(manifest).values():  # its kept copies (store/manifest_recovery.py)
            kept.unlink(missing_ok=True)
            removed.append(kept)
        for directory in [self.partition_directory(table, model, checkpoint) for table in TABLES] + [
                self.root / "_artefacts" / kind / model / checkpoint for kind in ("figures",)]:
            if directory.is_dir():
                shutil.rmtree(directory)
                removed.append(directory)
                try:  # the model's directory too, when this was its last checkpoint
                    directory.parent.rmdir()
                except OSError:
                    pass
        lease.unlink(missing_ok=True)
        return removed

    # -- manifests ------------------------------------------------------------------------------

    def manifest(self, model: str, checkpoint: str) -> dict:
        """The usable part of the partition's manifest (dagster_project/store/manifests.py): a damaged manifest
        or entry is left out with a warning (``resdyn check --restore`` restores it)."""
        manifest, problems = self.manifest_state(model, checkpoint)
        for problem in problems:
            log.warning(problem)
        return manifest

    def manifest_state(self, model: str, checkpoint: str) -> tuple[dict, list[str]]:
        """(the usable part of the partition's manifest, its problems): a manifest with a problem is damaged, and what
        it names is unknown (nothing of the partition is removed, and a publication restores it first); so is a
        manifest that is gone while a kept copy or a successful run says the partition was published."""
        path = self.manifest_path(model, checkpoint)
        manifest, problems = read_manifest(self.root, path, model, checkpoint, strict=True)
        if not problems and not path.is_file():
            missing = missing_manifest_problem(self, model, checkpoint, str(path))
            problems = [missing] if missing else []
        return manifest, problems

    def read_manifests(self) -> tuple[list[dict], list[str]]:
        """Every partition's usable manifest, and one line per problem found in them. A manifest that publishes
        nothing (a takeover's fence before any publication: store/fencing.py) is no partition."""
        manifests, problems = [], []
        for path in sorted((self.root / "_published").glob("model=*/checkpoint=*.json")):
            model, checkpoint = path.parent.name.removeprefix("model="), path.stem.removeprefix("checkpoint=")
            manifest, found = read_manifest(self.root, path, model, checkpoint)
            problems += found
            if path.is_file() and (manifest["tables"] or manifest.get("figures")):
                manifests.append(manifest)
        return manifests, problems

    def damaged_manifests(self) -> list[tuple[str, str, list[str]]]:
        """(model, checkpoint, problems) of every partition whose manifest is damaged or missing (a partition with a
        manifest, a kept copy of one, or a run record)."""
        found, names = [], set()
        for path in (self.root / "_published").glob("model=*/checkpoint=*.json*"):
            checkpoint = path.name.removeprefix("checkpoint=").split(".json", 1)[0]
            names.add((path.parent.name.removeprefix("model="), checkpoint))
        for path in (self.root / "runs").glob("model=*/checkpoint=*"):
            names.add((path.parent.name.removeprefix("model="), path.name.removeprefix("checkpoint=")))
        for model, checkpoint in sorted(names):
            problems = self.manifest_state(model, checkpoint)[1]
            if problems:
                found.append((model, checkpoint, problems))
        return found

    def unknown_files(self, model: str, checkpoint: str) -> list[Path]:
        """The tables and figures of a partition whose manifest is damaged (any may be what it published)."""
        return leftovers.unknown_files(self, model, checkpoint)

    def restoration(self, model: str, checkpoint: str, *, verify: bool = True) -> Restoration:
        """What the partition's manifest would be restored to (store/manifest_recovery.py); nothing is written."""
        return restoration(self, model, checkpoint, self.manifest_state(model, checkpoint)[0], verify=verify)

    def restore_manifest(self, model: str, checkpoint: str) -> Restoration:
        """Restore the partition's damaged manifest (store/manifest_recovery.py), under the manifest's lock; one that
        is no longer damaged (a run restored it meanwhile) is left as it is (``manifest`` None, ``source`` says so)."""
        path = self.manifest_path(model, checkpoint)
        with file_lock(path.with_name(path.name + ".lock")):
            if not self.manifest_state(model, checkpoint)[1]:
                return Restoration(None, "no longer damaged: a run restored or republished it meanwhile")
            found = self.restoration(model, checkpoint)
            if found.manifest is not None:
                self._write_manifest(model, checkpoint, found.manifest)
            return found

    def _write_manifest(self, model: str, checkpoint: str, manifest: dict) -> None:
        """The manifest, then its copy beside it (store/manifest_recovery.py; best effort: the manifest is what was
        published), and no copy older than the previous generation's. The caller holds the manifest's lock."""
        path = self.manifest_path(model, checkpoint)
        text = json.dumps(manifest, indent=1)
        atomic_write_text(path, text)
        if not manifest["tables"] and not manifest.get("figures"):
            return  # a fence alone: no generation to keep
        try:
            atomic_write_text(path.with_name(copy_name(path.name, manifest["generation"])), text)
            kept = kept_copy_paths(path)
            for generation in stale_copies(list(kept)):
                kept[generation].unlink(missing_ok=True)
        except OSError as error:
            log.warning("%s@%s: generation %s is published, but its copy could not be kept beside the manifest (%s)",
                        model, checkpoint, manifest["generation"], error)

    def fence_out(self, model: str, checkpoint: str, token: int) -> None:
        """Refuse every publication under a lease token below ``token`` (store/fencing.py), in the manifest; a damaged
        one restored first (with nothing to restore it from it is left as it is, and a run that held a lease and
        lost it is refused by its runs row: :func:`~.fencing.publication_refusal`)."""
        path = self.manifest_path(model, checkpoint)
        with file_lock(path.with_name(path.name + ".lock")):
            usable, problems = self.manifest_state(model, checkpoint)
            manifest = base_for_fence(self, model, checkpoint, usable, problems)
            if manifest is None:
                return
            if problems:  # restored: its generation's copy is kept again
                self._write_manifest(model, checkpoint, fenced_out(manifest, token))
            else:
                atomic_write_text(path, json.dumps(fenced_out(manifest, token), indent=1))

    def lease(self, model: str, checkpoint: str) -> dict | None:
        """The partition's lease as its file holds it (None: no lease)."""
        return read_lease(self, model, checkpoint)

    # the reading side of a restoration (store/manifest_recovery.py)

    @property
    def manifest_places(self) -> FolderPlaces:
        return FolderPlaces(self.root)

    def kept_manifest_copies(self, model: str, checkpoint: str) -> list[tuple[int, str, bytes]]:
        """(generation, path, bytes) of the manifest's kept copies, the newest first."""
        copies = []
        for generation, item in kept_copy_paths(self.manifest_path(model, checkpoint)).items():
            try:
                copies.append((generation, str(item), item.read_bytes()))
            except OSError:
                continue
        return sorted(copies, reverse=True)

    def file_problem(self, relative: str, record: dict) -> str | None:
        """Why the file ``relative`` is not what ``record`` (its bytes and sha256) says was published, or None."""
        if not isinstance(record.get("bytes"), int):
            return None if (self.root / relative).is_file() else "missing"
        return VerifiedFiles(self.root).problem(self.root / relative, record)

    def table_files(self, table: str, model: str, checkpoint: str) -> list[str]:
        return [str(path.relative_to(self.root)) for path in
                sorted(self.partition_directory(table, model, checkpoint).glob("*.parquet"))]

    def describe_table_file(self, relative: str) -> dict:
        """A table file's manifest entry fields, read back from the file (footer, rows, hashes, settings hash)."""
        path = self.root / relative
        return {"bytes": path.stat().st_size, "sha256": file_sha256(path), **describe_parquet(pq.ParquetFile(path))}

    def run_figure_files(self, model: str, checkpoint: str) -> dict[str, dict[str, str]]:
        """run id -> figure name -> file, of every run's figures of the partition."""
        base = self.root / "_artefacts" / "figures" / model / checkpoint
        return {folder.name: {path.stem: str(path.relative_to(self.root)) for path in sorted(folder.glob("*.png"))}
                for folder in sorted(base.glob("*")) if folder.is_dir()}

    def describe_figure(self, relative: str) -> dict:
        """A figure's size and sha256, once it reads as a PNG."""
        return figure_record((self.root / relative).read_bytes(), relative)

    def published_table_names(self, model: str, checkpoint: str) -> set[str]:
        """The tables a partition's manifest publishes (none when it has no readable manifest)."""
        try:
            return set(self.manifest(model, checkpoint).get("tables", {}))
        except (OSError, ValueError, AttributeError):
            return set()

    # -- writes ---------------------------------------------------------------------------------

    def open_writer(self, table: str, model: str, checkpoint: str, *, width: int | None = None) -> TableWriter:
        """A streaming writer for one partition of ``table`` (schema from dagster_project/store/schema.py)."""
        run_id = self.run_id or new_run_id()
        target = self.partition_directory(table, model, checkpoint) / f"{run_id}.parquet"
        provenance = {"run_id": run_id, "settings_hash": self.settings_hash}
        if table in LOG_TABLES:
            return TableWriter(target, table_spec(table), width, provenance)

        def on_written(name: str, written: WrittenTable) -> None:
            entry = {"file": str(written.path.relative_to(self.root)), "rows": written.rows, "bytes": written.bytes,
                     "sha256": written.sha256, "content_hash": written.content_hash, "run_id": run_id,
                     "settings_hash": self.settings_hash, **identity_field(self.identities, name)}
            if self.run_id is None:
                self._publish_entries(model, checkpoint, {name: entry})
            else:
                atomic_write_text(self.staging_directory(run_id, model, checkpoint) / f"{name}.json", json.dumps(entry))

        return TableWriter(target, table_spec(table), width, provenance, on_written)

    def write(self, table: str, model: str, checkpoint: str, data: pa.Table | pa.RecordBatch, *,
              width: int | None = None) -> WrittenTable:
        """Write a whole table partition (one row group per record batch)."""
        with self.open_writer(table, model, checkpoint, width=width) as writer:
            writer.write(data)
        return writer.result

    def staged(self, model: str, checkpoint: str, run_id: str | None = None) -> dict[str, dict]:
        """Tables a run has written for a partition and not yet published."""
        directory = self.staging_directory(run_id or self.run_id, model, checkpoint)
        return {path.stem: json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))}

    def publish(self, model: str, checkpoint: str) -> dict:
        """Publish everything this run staged for the partition (tables and figures), in one manifest swap."""
        entries = self.staged(model, checkpoint)
        manifest = self._publish_entries(model, checkpoint, entries, self._run_figures(model, checkpoint))
        for path in self.staging_directory(self.run_id, model, checkpoint).glob("*.json"):
            path.unlink(missing_ok=True)
        return manifest

    def _publish_entries(self, model: str, checkpoint: str, entries: dict[str, dict],
                         figures: dict[str, str] | None = None) -> dict:
        """One manifest swap publishing ``entries`` and ``figures``. A run's publication holds its lease's lock and
        the manifest's (in that order, as a takeover does), and is refused when its lease was taken over
        (store/fencing.py); over a damaged manifest it restores the manifest first, so nothing it hid is lost."""
        path = self.manifest_path(model, checkpoint)
        lease_lock = self.lease_path(model, checkpoint)
        with file_lock(lease_lock.with_name(lease_lock.name + ".lock")) if self.run_id else nullcontext():
            lease = read_lease(self, model, checkpoint) if self.run_id else None
            with file_lock(path.with_name(path.name + ".lock")):
                before, problems = self.manifest_state(model, checkpoint)
                trusted = not problems
                if problems:
                    before, trusted = base_for_publication(self, model, checkpoint, before, problems)
                check_may_publish(self.run_id, lease, before,
                                  self.run_id is not None and self.has_run_record(model, checkpoint),
                                  f"{model}@{checkpoint}")
                superseded = dict(before.get("previous", {}))
                # each figure's size and hash, as for a table's file: `resdyn check` and --resume see a damaged one
                figure_files = {name: {"bytes": (self.root / file).stat().st_size,
                                       "sha256": file_sha256(self.root / file)} for name, file in (figures or {}).items()}
                manifest = stamped(next_generation(before, entries, figures, figure_files), lease)
                self._write_manifest(model, checkpoint, manifest)
                verified = VerifiedFiles(self.root)  # the writer hashed each file as it wrote it: no second read
                for entry in entries.values():
                    if entry.get("sha256") and (self.root / entry["file"]).is_file():
                        verified.remember(self.root / entry["file"], entry["sha256"])
                for name, file in (figures or {}).items():  # hashed just above: `check` and --resume need not again
                    verified.remember(self.root / file, manifest["figure_files"][name]["sha256"])
                verified.save()
        if trusted:  # over a damaged manifest nothing restored, what it named is unknown: nothing is removed
            self._collect_garbage(model, checkpoint, manifest, superseded, set(entries))
            if figures is not None:  # a run's publication: its figures in, the superseded ones out
                self._collect_figure_garbage(model, checkpoint, manifest)
        return manifest

    def _collect_figure_garbage(self, model: str, checkpoint: str, manifest: dict) -> None:
        """Remove figures neither the published nor the previous generation names, unless a live run wrote them."""
        keep = named_files(manifest)
        base = self.root / "_artefacts" / "figures" / model / checkpoint
        for directory in (path for path in base.glob("*") if path.is_dir()):
            if directory.name != "unstaged" and self._written_by_live_run(directory):
                continue
            for path in directory.glob("*.png"):
                relative = str(path.relative_to(self.root))
                full = relative if not path.stem.endswith(".inline") else relative.replace(".inline.png", ".png")
                if full not in keep:
                    path.unlink(missing_ok=True)
            try:
                directory.rmdir()  # only when empty
            except OSError:
                pass

    def _run_figures(self, model: str, checkpoint: str) -> dict[str, str]:
        """This run's figures of the partition: name -> path relative to the root."""
        directory = self.root / "_artefacts" / "figures" / model / checkpoint / self.run_id
        return {path.stem: str(path.relative_to(self.root)) for path in sorted(directory.glob("*.png"))}

    def damaged_figures(self, manifest: dict, verified: VerifiedFiles | None = None) -> list[str]:
        """One line per published figure of ``manifest`` (a partition's) that is missing or no longer holds what
        was published (size and sha256; a figure published before hashes were recorded: its PNG signature);
        ``verified``: the caller's cache of verified hashes (it saves it), else one of this call's own."""
        own = verified is None
        verified, problems = verified or VerifiedFiles(self.root), []
        recorded = manifest.get("figure_files") if isinstance(manifest.get("figure_files"), dict) else {}
        for name, file in sorted(manifest.get("figures", {}).items()):
            path, entry = self.root / file, recorded.get(name)
            if isinstance(entry, dict) and isinstance(entry.get("bytes"), int) and isinstance(entry.get("sha256"), str):
                problem = verified.problem(path, entry)
            elif not path.is_file():
                problem = "missing"
            else:
                with open(path, "rb") as stream:
                    problem = None if stream.read(8) == b"\x89PNG\r\n\x1a\n" else "damaged (not a PNG)"
            if problem is not None:
                problems.append(f"{path} (figure {name} of {manifest['model']}@{manifest['checkpoint']}) is {problem}; "
                                f"rematerialize it: `resdyn run --model {manifest['model']} --checkpoint "
                                f"{manifest['checkpoint']}`")
        if own:
            verified.save()
        return problems

    def published_figures(self, model: str, checkpoint: str) -> dict[str, Path]:
        """The figures of the partition's published generation, by name."""
        return {name: self.root / file for name, file in self.manifest(model, checkpoint).get("figures", {}).items()}

    def _collect_garbage(self, model: str, checkpoint: str, manifest: dict, superseded: dict, tables: set) -> None:
        """Remove the generation before the previous one, and files no manifest entry names (dead runs)."""
        keep = named_files(manifest)
        for table in tables:
            directory = self.partition_directory(table, model, checkpoint)
            for path in directory.glob("*.parquet"):
                relative = str(path.relative_to(self.root))
                if relative not in keep and (relative in superseded.values() or not self._written_by_live_run(path)):
                    path.unlink(missing_ok=True)

    def _written_by_live_run(self, path: Path) -> bool:
        """Is ``path`` a staged table of a run that may still publish (its lease is held)?"""
        run_id = path.stem
        for lease in (self.root / "_locks").glob("*.json"):
            try:
                if json.loads(lease.read_text()).get("run_id") == run_id:
                    return True
            except (OSError, json.JSONDecodeError):
                continue
        return False

    # -- reads ----------------------------------------------------------------------------------

    def table_path(self, table: str, model: str, checkpoint: str) -> Path:
        """The file a reader of this partition sees: this run's staged one, else the published one."""
        if table in LOG_TABLES:
            raise ValueError(f"{table} has one file per run; query it through SQL")
        if self.run_id is not None:
            staged = self.staging_directory(self.run_id, model, checkpoint) / f"{table}.json"
            if staged.is_file():
                return self.root / json.loads(staged.read_text())["file"]
        entry = self.manifest(model, checkpoint)["tables"].get(table)
        if entry is None:
            raise MissingPartitionError(
                f"table {table!r} has no published partition model={model}/checkpoint={checkpoint} under {self.root}; "
                f"materialize it first (`resdyn run --model {model} --checkpoint {checkpoint}`)"
            )
        return self.root / entry["file"]

    def has(self, table: str, model: str, checkpoint: str) -> bool:
        try:
            self.table_path(table, model, checkpoint)
            return True
        except MissingPartitionError:
            return False

    def _corrupt(self, path: Path, model: str, checkpoint: str, error: Exception) -> CorruptPartitionError:
        return CorruptPartitionError(
            f"{path} is not a readable Parquet file ({str(error).splitlines()[0]}); rematerialize the partition "
            f"(`resdyn run --model {model} --checkpoint {checkpoint}`)"
        )

    def read(self, table: str, model: str, checkpoint: str, columns: list[str] | None = None) -> pa.Table:
        path = self.table_path(table, model, checkpoint)
        try:
            return pq.read_table(path, columns=columns)
        except (pa.ArrowInvalid, OSError) as error:
            raise self._corrupt(path, model, checkpoint, error) from error

    def _parquet_file(self, table: str, model: str, checkpoint: str) -> pq.ParquetFile:
        path = self.table_path(table, model, checkpoint)
        try:
            return pq.ParquetFile(path, buffer_size=PAGE_BYTES, pre_buffer=False)
        except (pa.ArrowInvalid, OSError) as error:
            raise self._corrupt(path, model, checkpoint, error) from error

    def row_groups(self, table: str, model: str, checkpoint: str, columns: list[str] | None = None
                   ) -> Iterator[pa.Table]:
        """The partition one row group at a time (a matrix table: one matrix at a time). Decoded on this thread:
        a row group is one large column and a few small ones, and column threads only made the peak memory
        depend on their timing (a third matrix now and then on a loaded machine)."""
        parquet = self._parquet_file(table, model, checkpoint)
        for index in range(parquet.num_row_groups):
            yield parquet.read_row_group(index, columns=columns, use_threads=False)

    def schema(self, table: str, model: str, checkpoint: str) -> pa.Schema:
        """The Arrow schema of the partition's file as this run sees it (its footer: no data read)."""
        return self._parquet_file(table, model, checkpoint).schema_arrow

    def matrix_table(self, table: str, model: str, checkpoint: str) -> MatrixTable:
        """The partition's matrix table as a lazy handle (:class:`~.handles.MatrixTable`: one matrix at a time)."""
        return MatrixTable(self, table, model, checkpoint)

    def read_row_group(self, table: str, model: str, checkpoint: str, index: int,
                       columns: list[str] | None = None) -> pa.Table:
        return self._parquet_file(table, model, checkpoint).read_row_group(index, columns=columns)

    def content_hash(self, table: str, model: str, checkpoint: str) -> str:
        """Hash of the partition's data columns (not its file bytes, not its provenance)."""
        digest = hashlib.sha256()
        names = table_spec(table).column_names
        for group in self.row_groups(table, model, checkpoint, columns=names):
            for batch in group.to_batches():
                hash_batch(digest, batch)
        return digest.hexdigest()[:16]

    # -- runs -----------------------------------------------------------------------------------

    def record_run(self, model: str, checkpoint: str, row: dict) -> None:
        """Write (or rewrite) this run's row of the ``runs`` table for the partition."""
        # run_id and settings_hash are the provenance every row gets from the writer, not columns of the data
        table = rows_table("runs", [{key: value for key, value in row.items() if key not in PROVENANCE_COLUMNS}])
        Warehouse(self.root, run_id=row["run_id"], settings_hash=row["settings_hash"]).write(
            "runs", model, checkpoint, table)

    def run_records(self, model: str, checkpoint: str) -> list[dict]:
        """Every run's row for the partition, each with the runs table's current columns: a row written before a
        column existed (``tables_code_version``, ``git_commit``) has it as None, unknown, so that rewriting an old
        run's row (a killed run found by a later one) writes today's schema instead of failing on it."""
        directory = self.partition_directory("runs", model, checkpoint)
        names = [*table_spec("runs").column_names, *PROVENANCE_COLUMNS]
        records = []
        for path in directory.glob("*.parquet"):
            try:
                rows = pq.read_table(path).to_pylist()
            except (pa.ArrowInvalid, OSError):
                log.warning("unreadable runs file %s", path)
                continue
            records += [{**dict.fromkeys(names), **row} for row in rows]
        return sorted(records, key=lambda row: row["started_at"] or "")

    # -- DuckDB ---------------------------------------------------------------------------------

    arrow_filesystem = None  # local files: DuckDB reads them itself, only under the root

    def sql_directories(self) -> list[str]:
        """Where DuckDB may open files: under the root only."""
        return [self.root.as_posix() + "/"]

    def table_directory(self, table: str) -> str:
        return (self.root / table).as_posix()

    def readable_run_files(self) -> list[str]:
        from resdyn.dagster_project.store.views import readable_run_files

        return readable_run_files(self)

    def registry(self):
        """The registered models: the built-in ones and those runs added (``registry.json``)."""
        from resdyn.models.registry import ModelRegistry

        return ModelRegistry(self.registry_file)

    def registry_specs(self) -> dict:
        return self.registry().specs

    @contextmanager
    def writable_registry(self):
        """The registry, for a launch that may register a new model (``registry.json`` under the root)."""
        from resdyn.models.registry import ModelRegistry

        yield ModelRegistry(self.registry_file)

    def published_files(self) -> tuple[dict[str, list[str]], list[dict], list[str]]:
        """(table -> published files that look intact, manifest rows, problems): a file missing or of
        another size than published is left out of the views and reported, so the rest still answers."""
        files: dict[str, list[str]] = {}
        rows = []
        manifests, problems = self.read_manifests()
        verified = VerifiedFiles(self.root)
        for manifest in manifests:
            for table, entry in manifest["tables"].items():
                path = self.root / entry["file"]
                problem = verified.problem(path, entry)
                if problem is None and "sha256" not in entry:  # published before hashes: its footer, at least
                    try:
                        pq.read_metadata(path)
                    except (pa.ArrowInvalid, OSError):
                        problem = "damaged (unreadable footer)"
                intact = problem is None
                if not intact:
                    problems.append(f"{path} is {problem}; rematerialize with `resdyn run --model "
                                    f"{manifest['model']} --checkpoint {manifest['checkpoint']}` (and see "
                                    "`resdyn check`)")
                else:
                    files.setdefault(table, []).append(path.as_posix())
                generation = entry.get("generation")
                rows.append({"model": manifest["model"], "checkpoint": manifest["checkpoint"], "table_name": table,
                             "run_id": entry.get("run_id"), "settings_hash": entry.get("settings_hash"),
                             "generation": generation if isinstance(generation, int) else None,
                             "rows": entry["rows"], "identity": entry.get("identity"), "intact": intact})
        verified.save()
        return files, rows, problems


def checkpoint_labels(rows: list[dict]) -> dict[str, str]:
    """Each checkpoint of one model (``partitions`` rows: checkpoint, status, d_model, settings_hash) as a legend
    names it: marked where it was made from a file the model is no longer registered with (stale), and, where the
    checkpoints differ in width or analysis settings, with its own, so that a figure never shows them as
    comparable without saying so."""
    widths = {row["d_model"] for row in rows if row.get("d_model") is not None}
    hashes = {row["settings_hash"] for row in rows if row.get("settings_hash")}
    labels = {}
    for row in rows:
        marks = (["stale: made from another file"] if row["status"] == "stale" else []) + \
                ([f"d = {row['d_model']}"] if len(widths) > 1 and row.get("d_model") is not None else []) + \
                ([f"settings {row['settings_hash'][:6]}"] if len(hashes) > 1 and row.get("settings_hash") else [])
        labels[row["checkpoint"]] = row["checkpoint"] + (f" ({'; '.join(marks)})" if marks else "")
    return labels


def partition_key_of(path: Path) -> tuple[str, str] | None:
    match = re.search(r"model=([^/]+)/checkpoint=([^/]+)", path.as_posix())
    return (match.group(1), match.group(2)) if match else None
