"""A warehouse on an object store: what :class:`~.warehouse.Warehouse` is for a folder, for ``s3://bucket/prefix``.

Runs write it (tables and figures through :class:`~.object_generations.ObjectTables`, leases through
:mod:`~.object_leases`), and it is read: its published partitions, read-only SQL over them, whole tables, one
matrix at a time. What a run needs on local disk and is not the warehouse (the model store a checkpoint is made in,
a Dagster instance for executors with processes of their own) lives in :attr:`ObjectWarehouse.local_state_directory`,
under the user's cache folder, per bucket and prefix; figures are drawn into a spool folder of the step's process and
uploaded before each of the step's tables is staged, and when it ends. The views are those of a folder
(:func:`~.views.build_connection`, the same ``sql/views.sql`` on top), each over exactly the files the manifests
publish, read through pyarrow's ``S3FileSystem`` as datasets registered in DuckDB: DuckDB's own S3 extension cannot
be installed offline, and a registered dataset needs no file access from DuckDB at all, so its file access stays
off (no directory allowed): SQL reads the warehouse's tables by name and nothing else, anywhere.

A published file is checked against its entry by one HEAD (size and the ETag its upload got) before a view may read
it; a whole-table read also checks its sha256 (:meth:`ObjectTables.read`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from resdyn.dagster_project.configuration.locations import ObjectLocation
from resdyn.dagster_project.store.artefacts import StudyArtefacts, keep_elsewhere
from resdyn.dagster_project.store.fencing import next_token
from resdyn.dagster_project.store.handles import MatrixTable
from resdyn.dagster_project.store.leases import lease_is_live, mark_killed
from resdyn.dagster_project.store.object_generations import (
    ObjectTables,
    partition_prefixes,
    sweep_dead_spools,
    table_key,
    written_by,
)
from resdyn.dagster_project.store.object_leases import (
    acquire_object_lease,
    holder_record,
    release_object_lease,
    release_run_lease,
)
from resdyn.dagster_project.store.object_store import ObjectStore, ObjectStoreError
from resdyn.dagster_project.store.schema import TABLES
from resdyn.dagster_project.store.warehouse import PublishedPartitions, new_run_id
from resdyn.files import HOST


class ObjectWarehouse(PublishedPartitions):
    """The warehouse at ``location`` (``s3://bucket/prefix``). ``run_id`` binds writes (and first reads) to one run:
    its tables and figures are staged and published together by :meth:`publish` (as on disk)."""

    def __init__(self, location: ObjectLocation, *, run_id: str | None = None, settings_hash: str = "",
                 store: ObjectStore | None = None, identities: dict | None = None) -> None:
        self.location = location
        self.store = store or ObjectStore(location)
        self.run_id, self.settings_hash = run_id, settings_hash
        self.identities = identities or {}
        self.tables = ObjectTables(self.store, run_id=run_id, settings_hash=settings_hash, identities=self.identities)
        self.problems: list[str] = []

    def __str__(self) -> str:
        return str(self.location)

    def bound(self, run_id: str, settings_hash: str = "") -> "ObjectWarehouse":
        """The same warehouse, its writes bound to run ``run_id`` (one client shared)."""
        return ObjectWarehouse(self.location, run_id=run_id, settings_hash=settings_hash, store=self.store)

    def exists(self) -> bool:
        return bool(self.store.list("_published/") or self.store.list("runs/"))

    @property
    def results_folder(self) -> Path | None:
        """None: an object store holds only what runs publish, so a report or claims need --output."""
        return None

    def unpublished_problems(self) -> list[str]:
        """`resdyn check`'s lines for the objects no manifest names and no live run wrote
        (store/object_generations.py)."""
        return [f"unpublished: {self.tables.where(found.relative)} ({found.size} bytes); `resdyn check --reclaim` "
                "removes it" for found in self.tables.leftovers(grace=timedelta(0))]

    def reclaim_unpublished(self) -> str:
        """Remove at once the objects no manifest names and no live run wrote (a person's explicit act: no grace
        period, which guards the sweeps runs make while other writers may be uploading); what was removed, in
        words."""
        removed = self.tables.sweep(grace=timedelta(0))
        return f"removed {len(removed)} unpublished object(s), {sum(found.size for found in removed)} bytes"

    def prepare_for_writing(self) -> None:
        """Refuse a store whose conditional writes do not hold (leases and manifests rest on them)."""
        self.store.require_conditional_writes()

    @property
    def local_state_directory(self) -> Path:
        """What runs on this machine keep on local disk for this warehouse (the model store, a Dagster instance):
        ``$XDG_CACHE_HOME/resdyn/s3/<bucket>/<prefix>`` (default ``~/.cache``). Not the warehouse: nothing in it is
        read as a result, and a model there is remade from its registered source when missing."""
        from resdyn.dagster_project.store.manifests import cache_directory

        return cache_directory() / "s3" / self.location.bucket / (self.location.prefix or "_root")

    @property
    def models_directory(self) -> Path:
        return self.local_state_directory / "_models"

    def require_existing(self) -> "ObjectWarehouse":
        """Reading a warehouse that is not there is an error, not an empty answer."""
        if not self.exists():
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
            if manifest["tables"] or manifest.get("figures"):  # a fence alone (store/fencing.py) is no partition
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
                             "rows": entry["rows"], "identity": entry.get("identity"), "intact": problem is None})
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

    def manifest_state(self, model: str, checkpoint: str) -> tuple[dict, list[str]]:
        return self.tables.manifest_state(model, checkpoint)

    def damaged_manifests(self) -> list[tuple[str, str, list[str]]]:
        """(model, checkpoint, problems) of every partition whose manifest is damaged or missing (a partition with a
        manifest, a kept copy of one, or a run record)."""
        names = set()
        for listed in self.store.list("_published/"):
            parts = listed.relative.removeprefix("_published/").split("/")
            if len(parts) == 2 and parts[0].startswith("model=") and parts[1].startswith("checkpoint="):
                names.add((parts[0].removeprefix("model="), parts[1].removeprefix("checkpoint=").split(".json")[0]))
        for listed in self.store.list("runs/"):
            owner = written_by(listed.relative)
            if owner is not None:
                names.add(owner[:2])
        return [(model, checkpoint, problems) for model, checkpoint in sorted(names)
                if (problems := self.tables.manifest_state(model, checkpoint)[1])]

    def restoration(self, model: str, checkpoint: str, *, verify: bool = True):
        """What the partition's manifest would be restored to (store/manifest_recovery.py); nothing is written."""
        return self.tables.restoration(model, checkpoint, verify=verify)

    def restore_manifest(self, model: str, checkpoint: str):
        return self.tables.restore_manifest(model, checkpoint)

    def kept_manifest_copies(self, model: str, checkpoint: str) -> list[tuple[int, str, bytes]]:
        return self.tables.kept_manifest_copies(model, checkpoint)

    def unknown_files(self, model: str, checkpoint: str) -> list:
        """The tables and figures of a partition whose manifest is damaged (any may be what it published)."""
        return [found for prefix in partition_prefixes([table for table in TABLES if table != "runs"], model,
                                                       checkpoint) for found in self.store.list(prefix)]

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

    @contextmanager
    def writable_registry(self):
        """The registry, for a launch that may register a new model: ``registry.json`` read into a temporary file,
        and put back when the launch changed it, under If-Match on what was read (a registration another launch made
        meanwhile is never lost: this one is refused and says so)."""
        from resdyn.models.registry import ModelRegistry

        stored = self.store.get("registry.json")
        with tempfile.TemporaryDirectory(prefix="resdyn-registry-") as directory:
            path = Path(directory) / "registry.json"
            if stored is not None:
                path.write_bytes(stored.data)
            yield ModelRegistry(path)
            after = path.read_bytes() if path.is_file() else None
            if after is not None and after != (stored.data if stored is not None else None):
                put = self.store.create("registry.json", after) if stored is None else \
                    self.store.replace("registry.json", after, stored.etag)
                if put is None:
                    raise ObjectStoreError(f"{self.tables.where('registry.json')}: another launch registered a model "
                                           "while this one did; run the command again")

    # -- writes (a run's) -------------------------------------------------------------------------------

    def open_writer(self, table: str, model: str, checkpoint: str, *, width: int | None = None):
        return self.tables.open_writer(table, model, checkpoint, width=width)

    def write(self, table: str, model: str, checkpoint: str, data, *, width: int | None = None):
        return self.tables.write(table, model, checkpoint, data, width=width)

    def staged(self, model: str, checkpoint: str, run_id: str | None = None) -> dict[str, dict]:
        return self.tables.staged(model, checkpoint, run_id)

    @property
    def _spool(self) -> Path:
        """This process's local spool of this run's figures (steps of one run may run at once, each a process)."""
        return Path(tempfile.gettempdir()) / "resdyn-figures" / f"{HOST}-{os.getpid()}-{self.run_id or 'unstaged'}"

    def _spooled(self, kind: str, model: str, checkpoint: str) -> Path:
        """The spool folder of this run's ``kind`` of the partition, laid out as the store's keys
        (``_artefacts/<kind>/<m>/<c>/<run_id>/``): a figure's UI address (:func:`~.artefacts.artefact_url`) is then
        the one ``resdyn ui`` serves from the store once it is uploaded."""
        return self._spool / "_artefacts" / kind / model / checkpoint / (self.run_id or "unstaged")

    def artefact_directory(self, kind: str, model: str, checkpoint: str) -> Path:
        """Where this step's process draws the partition's figures (in :attr:`_spool`, created), uploaded by
        :meth:`stage_figures`."""
        directory = self._spooled(kind, model, checkpoint)
        if not directory.is_dir():
            sweep_dead_spools(self._spool.parent, "")  # a killed step's figures, never uploaded
            directory.mkdir(parents=True, exist_ok=True)
        keep_elsewhere(self._spool, str(self.location))  # a figure's metadata names its key, not the spool file
        return directory

    @contextmanager
    def study_artefacts(self):
        """Where the study-level assets draw: a local folder laid out as the warehouse (``report.html``,
        ``_artefacts/report/``, ``_artefacts/comparisons/``, ``_artefacts/claims/``) whose files are uploaded under
        the same keys once the block ends without an error, ``report.html`` last (each upload atomic: one PUT, or a
        multipart upload invisible until complete, replacing the last materialization's as a folder's files are
        rewritten in place), and removed either way. An error in the block uploads nothing; an upload failing part-way
        leaves the earlier files replaced and fails the step (a rerun replaces them all). A folder a killed process
        left is removed by the next one on this machine."""
        sweep_dead_spools(Path(tempfile.gettempdir()), "resdyn-study-")
        directory = Path(tempfile.mkdtemp(prefix=f"resdyn-study-{HOST}-{os.getpid()}-"))
        keep_elsewhere(directory, str(self.location))
        try:
            yield StudyArtefacts(directory)
            files = [path for path in directory.rglob("*") if path.is_file()]
            # the figure indexes after the figures they name (the UI serves what an index names), report.html last
            for path in sorted(files, key=lambda path: (path.name == "report.html", path.name == "figures.json",
                                                         path.as_posix())):
                self.store.upload_file(path, path.relative_to(directory).as_posix())
        finally:
            keep_elsewhere(directory, None)
            shutil.rmtree(directory, ignore_errors=True)

    def stage_figures(self, model: str, checkpoint: str, *, step_ended: bool = False) -> None:
        """Upload the figures this step drew for the partition so far and stage them (before each of its tables is
        staged, and when it ends); when it has ended, remove its spool folder."""
        self.tables.stage_figures(model, checkpoint, self._spooled("figures", model, checkpoint))
        if step_ended:
            keep_elsewhere(self._spool, None)
            shutil.rmtree(self._spool, ignore_errors=True)

    def publish(self, model: str, checkpoint: str) -> dict:
        return self.tables.publish(model, checkpoint)

    def record_run(self, model: str, checkpoint: str, row: dict) -> None:
        self.tables.record_run(model, checkpoint, row)

    def run_records(self, model: str, checkpoint: str) -> list[dict]:
        return self.tables.run_records(model, checkpoint)

    def has_run_record(self, model: str, checkpoint: str) -> bool:
        return self.store.info(table_key("runs", model, checkpoint, self.run_id)) is not None

    def acquire_lease(self, model: str, checkpoint: str, *, single_process: bool, instance=None) -> None:
        """Hold the partition for this run (a conditional PUT: store/object_leases.py), or raise PartitionBusyError
        naming its holder; a dead holder's run is recorded ``killed``."""
        home = None if instance is None or instance.is_ephemeral else instance.root_directory
        holder = holder_record(self.run_id, single_process=single_process, dagster_home=home)

        acquire_object_lease(self.store, model, checkpoint, holder,
                             is_live=lambda lease: lease_is_live(lease, instance),
                             token_for=lambda previous: next_token(previous, self.tables.manifest_state(
                                 model, checkpoint)[0]),
                             fence=lambda token: self.tables.fence_out(model, checkpoint, token),
                             on_taken_over=lambda previous: mark_killed(self, model, checkpoint,
                                                                        previous.get("run_id")))

    def release_lease(self, model: str, checkpoint: str) -> None:
        release_run_lease(self.store, model, checkpoint, self.run_id)

    def forget(self, model: str, checkpoint: str) -> list[str]:
        """Remove a partition's data (:meth:`ObjectTables.forget`) while holding its lease, so a live run of it is
        refused (PartitionBusyError naming the run) and none starts meanwhile; the keys removed. A forget killed
        midway leaves its lease (``forget-...``), taken over by the next run or forget on this machine; from another
        machine it cannot be judged and is respected until deleted, as a run's is."""
        self.prepare_for_writing()  # the lease rests on conditional writes, as a run's does
        holder = holder_record(f"forget-{new_run_id()}", single_process=True)
        lease = acquire_object_lease(self.store, model, checkpoint, holder)
        try:
            return self.tables.forget(model, checkpoint)
        finally:
            release_object_lease(self.store, lease)

    def unpublished(self, model: str, checkpoint: str) -> list:
        """What runs of the partition that are not live left (objects no manifest names; no grace period: this is
        asked after a run stopped, or by a person)."""
        return self.tables.leftovers(model, checkpoint, grace=timedelta(0))

    def reclaim(self, found: list) -> int:
        """Remove leftovers found by :meth:`unpublished` (each only while it is the object found); the bytes freed."""
        return sum(item.size for item in found if self.store.delete(item.relative, etag=item.etag))

    def sweep_partition(self, model: str, checkpoint: str) -> int:
        """Before a run writes: remove what runs of the partition that are not live left, once older than the grace
        period (a listing may lag a live writer's upload)."""
        return sum(found.size for found in self.tables.sweep(model, checkpoint))

    def discard_run(self, model: str, checkpoint: str) -> int:
        keep_elsewhere(self._spool, None)
        shutil.rmtree(self._spool, ignore_errors=True)
        return self.tables.discard(model, checkpoint, self.run_id)

    def damaged_figures(self, manifest: dict, verified=None) -> list[str]:
        """One line per published figure of ``manifest`` that is missing or of another size than published."""
        problems = []
        recorded = manifest.get("figure_files") if isinstance(manifest.get("figure_files"), dict) else {}
        for name, file in sorted(manifest.get("figures", {}).items()):
            found = self.store.info(file)
            size = (recorded.get(name) or {}).get("bytes")
            if found is None or (isinstance(size, int) and found.size != size):
                problems.append(f"{self.tables.where(file)} (figure {name} of {manifest['model']}@"
                                f"{manifest['checkpoint']}) is {'missing' if found is None else 'damaged'}; "
                                f"rematerialize it: `resdyn run --model {manifest['model']} --checkpoint "
                                f"{manifest['checkpoint']}`")
        return problems

    def published_table_names(self, model: str, checkpoint: str) -> set[str]:
        return set(self.manifest(model, checkpoint)["tables"])

    def table_path(self, table: str, model: str, checkpoint: str) -> str:
        """The ``s3://`` URL of the object a reader of this partition sees (this run's staged one, else the published
        one): what a worker's matrix reference reads."""
        return self.tables.where(self.tables.entry(table, model, checkpoint)["file"])

    def schema(self, table: str, model: str, checkpoint: str) -> pa.Schema:
        return self.tables.schema(table, model, checkpoint)
