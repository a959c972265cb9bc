"""A partition's tables on an object store, published as generations: warehouse.py's guarantees, built on S3.

The keys below the warehouse's prefix are the paths of a warehouse folder::

    <table>/model=<m>/checkpoint=<c>/<run_id>.parquet    a table as one run wrote it, under its final key
    _staging/<run_id>/model=<m>/checkpoint=<c>/<t>.json  what a run has written and not yet published
    _published/model=<m>/checkpoint=<c>.json             the manifest: the one object readers trust
    runs/model=<m>/checkpoint=<c>/<run_id>.parquet       the runs table (provenance, status): always visible
    _locks/<m>@<c>.json                                  the partition's lease (object_leases.py)

What an object store lacks, and what stands in for it:

- **No rename.** A table is written to a local spool file by the same :class:`~.warehouse.TableWriter` as on disk
  (its footer read back, its sha256 and content hash taken while writing), then uploaded under its final key,
  multipart when large. An upload is invisible until its last part completes, and no manifest names the key until
  publication, so a killed writer leaves nothing a reader sees. A spool holds one table being written (a pass that
  writes several at once has one spool each).
- **No lock around the manifest.** Publication is compare-and-swap: the manifest is read with its ETag and the next
  generation is put with ``If-Match`` on it (``If-None-Match: *`` for the first); where another publisher won, the
  manifest is read again and the entries applied again, so no publisher loses another's tables.
- **Listing may lag a write.** Visibility is never decided by listing, only by the manifest. Leftovers are found by
  listing and removed only when no manifest names them, no live lease's run wrote them and they are older than a
  grace period, so a writer whose upload a listing has not caught up with is never swept.
- **Hashes checked on read.** Each entry records the file's sha256 (taken while writing) and the ETag the store gave
  the upload: a whole-table read hashes the bytes it fetched; a row-group read compares the ETag (one HEAD) before
  reading ranges, so a replaced object is refused either way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from functools import cached_property
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from resdyn.dagster_project.store.errors import CorruptPartitionError, MissingPartitionError
from resdyn.dagster_project.store.fencing import check_may_publish, fenced_out, stamped
from resdyn.dagster_project.store.leases import lease_is_live, parse_lease
from resdyn.dagster_project.store.manifest_recovery import (
    Restoration,
    base_for_fence,
    base_for_publication,
    copy_generation,
    copy_name,
    figure_record,
    missing_manifest_problem,
    restoration,
    restored_text,
    stale_copies,
)
from resdyn.dagster_project.store.manifests import (
    KeyPlaces,
    empty_manifest,
    named_files,
    next_generation,
    parse_manifest,
)
from resdyn.dagster_project.store.object_leases import lease_key
from resdyn.dagster_project.store.object_store import ObjectInfo, ObjectStore, ObjectStoreError
from resdyn.dagster_project.store.schema import PROVENANCE_COLUMNS, TABLES, rows_table, table_spec
from resdyn.dagster_project.store.table_identity import identity_field
from resdyn.dagster_project.store.warehouse import (
    LOG_TABLES,
    TableWriter,
    WrittenTable,
    describe_parquet,
    hash_batch,
    new_run_id,
)
from resdyn.files import HOST, written_by_dead_writer

log = logging.getLogger(__name__)

PUBLISH_ATTEMPTS = 20  # compare-and-swap rounds before a publication gives up (each lost round: another won)
SWEEP_GRACE = timedelta(minutes=30)  # an unnamed object younger than this may be a live writer's: left alone


def table_key(table: str, model: str, checkpoint: str, run_id: str) -> str:
    return f"{table}/model={model}/checkpoint={checkpoint}/{run_id}.parquet"


def manifest_key(model: str, checkpoint: str) -> str:
    return f"_published/model={model}/checkpoint={checkpoint}.json"


def staging_prefix(run_id: str, model: str, checkpoint: str) -> str:
    return f"_staging/{run_id}/model={model}/checkpoint={checkpoint}/"


def figures_prefix(model: str | None = None, checkpoint: str | None = None) -> str:
    """Where runs put a partition's figures (every partition's when ``model`` or ``checkpoint`` is None)."""
    return "_artefacts/figures/" if model is None or checkpoint is None else f"_artefacts/figures/{model}/{checkpoint}/"


def figure_key(model: str, checkpoint: str, run_id: str, name: str) -> str:
    return f"{figures_prefix(model, checkpoint)}{run_id}/{name}.png"


def partition_prefixes(tables, model: str | None = None, checkpoint: str | None = None, *,
                       figures: bool = True) -> list[str]:
    """The prefixes under which runs write a partition's objects: each of ``tables``' folder, then (with ``figures``)
    the figures' (every partition's when ``model`` or ``checkpoint`` is None). Staged entries are per run, under
    ``_staging/<run>/`` (:func:`staging_prefix`)."""
    one = model is not None and checkpoint is not None
    return [f"{table}/model={model}/checkpoint={checkpoint}/" if one else f"{table}/" for table in tables] + \
        ([figures_prefix(model, checkpoint)] if figures else [])


def written_by(relative: str) -> tuple[str, str, str] | None:
    """(model, checkpoint, run) of an object a run writes for a partition: a table
    (``<table>/model=<m>/checkpoint=<c>/<run>.parquet``), a figure (``_artefacts/figures/<m>/<c>/<run>/<name>.png``) or a
    staged entry (``_staging/<run>/model=<m>/checkpoint=<c>/...``); None for any other key."""
    parts = relative.split("/")
    if parts[0] == "_staging" and len(parts) >= 5 and parts[2].startswith("model=") and \
            parts[3].startswith("checkpoint="):
        return parts[2].removeprefix("model="), parts[3].removeprefix("checkpoint="), parts[1]
    if parts[:2] == ["_artefacts", "figures"] and len(parts) == 6:
        return parts[2], parts[3], parts[4]
    if len(parts) == 4 and parts[1].startswith("model=") and parts[2].startswith("checkpoint=") and \
            parts[3].endswith(".parquet"):
        return parts[1].removeprefix("model="), parts[2].removeprefix("checkpoint="), parts[3].removesuffix(".parquet")
    return None


def sweep_dead_spools(directory: Path, prefix: str) -> None:
    """Remove local spool folders (``<prefix><host>-<pid>-...``) of writers on this machine whose process is gone: a
    step killed while it wrote left them, and on an object store no later writer opens the same folder."""
    for folder in directory.glob(f"{prefix}{HOST}-*"):
        if written_by_dead_writer(folder.name.removeprefix(prefix)):
            shutil.rmtree(folder, ignore_errors=True)


class SpooledTableWriter(TableWriter):
    """A :class:`~.warehouse.TableWriter` into a spool folder that is removed when the writer closes, whatever
    happened; its ``result`` names the object (``where``), not the spool file."""

    def __init__(self, spool: Path, *arguments, where: str, **options) -> None:
        self.spool, self.where = spool, where
        super().__init__(*arguments, **options)

    def __exit__(self, kind, value, traceback) -> None:
        try:
            super().__exit__(kind, value, traceback)
            if self.result is not None:
                self.result = dataclasses.replace(self.result, path=self.where)
        finally:
            shutil.rmtree(self.spool, ignore_errors=True)


class ObjectTables:
    """The tables of a warehouse on ``store``. ``run_id`` binds writes to one run: its tables are staged and published
    together by :meth:`publish`; without it every write publishes its table at once (as :class:`~.Warehouse`)."""

    def __init__(self, store: ObjectStore, *, run_id: str | None = None, settings_hash: str = "",
                 identities: dict | None = None) -> None:
        self.store, self.run_id, self.settings_hash = store, run_id, settings_hash
        self.identities = identities or {}  # table -> TableIdentity of this run (store/table_identity.py)

    @cached_property
    def filesystem(self):
        """pyarrow's S3 filesystem for this store (made once: each one opens its own connections)."""
        return self.store.filesystem()

    def where(self, relative: str) -> str:
        """The ``s3://`` URL of a key (messages name objects by it)."""
        return f"s3://{self.store.location.bucket}/{self.store.key(relative)}"

    # -- writes ---------------------------------------------------------------------------------------------

    def open_writer(self, table: str, model: str, checkpoint: str, *, width: int | None = None) -> TableWriter:
        """A streaming writer of one table partition (a context manager, as :meth:`~.Warehouse.open_writer`): the
        same :class:`~.warehouse.TableWriter` as on disk, into a spool folder of its own; on a clean exit the file is
        uploaded under its final key and staged for this run (or, without a run, published), and the spool removed.
        Its ``result`` is the :class:`~.warehouse.WrittenTable` with the object's ``s3://`` URL as its path."""
        run_id = self.run_id or new_run_id()
        relative = table_key(table, model, checkpoint, run_id)
        provenance = {"run_id": run_id, "settings_hash": self.settings_hash}
        sweep_dead_spools(Path(tempfile.gettempdir()), "resdyn-spool-")
        spool = Path(tempfile.mkdtemp(prefix=f"resdyn-spool-{HOST}-{os.getpid()}-"))

        def on_written(name: str, written: WrittenTable) -> None:
            try:
                self.store.upload_file(written.path, relative)  # its sha256 was taken as it was written
            finally:
                written.path.unlink(missing_ok=True)
            uploaded = self.store.info(relative)
            if uploaded is None or uploaded.size != written.bytes:
                raise ObjectStoreError(f"{self.where(relative)}: the upload of {written.bytes} bytes is not there as "
                                       f"written ({uploaded}); the store lost a completed upload")
            entry = {"file": relative, "rows": written.rows, "bytes": written.bytes, "sha256": written.sha256,
                     "content_hash": written.content_hash, "etag": uploaded.etag, "run_id": run_id,
                     "settings_hash": self.settings_hash, **identity_field(self.identities, name)}
            if name not in LOG_TABLES:
                if self.run_id is None:
                    self._publish_entries(model, checkpoint, {name: entry})
                else:
                    self.store.put(staging_prefix(run_id, model, checkpoint) + f"{name}.json",
                                   json.dumps(entry).encode())

        return SpooledTableWriter(spool, spool / f"{run_id}.parquet", table_spec(table), width, provenance, on_written,
                                  where=self.where(relative))

    def write(self, table: str, model: str, checkpoint: str, data: pa.Table | pa.RecordBatch, *,
              width: int | None = None) -> WrittenTable:
        """Write a whole table partition (one row group per record batch), then stage it for this run (or, without a
        run, publish it)."""
        with self.open_writer(table, model, checkpoint, width=width) as writer:
            writer.write(data)
        return writer.result

    def _entries_under(self, prefix: str) -> dict[str, dict]:
        """The staged entries directly under ``prefix`` (a listing: the stores this runs on list a completed PUT at
        once, AWS S3 since December 2020), by name."""
        entries = {}
        for found in self.store.list(prefix):
            name = found.relative.removeprefix(prefix)
            if "/" in name:  # below a folder of its own (the run's figures under figures/)
                continue
            stored = self.store.get(found.relative)
            if stored is not None:
                entries[name.removesuffix(".json")] = json.loads(stored.data)
        return entries

    def staged(self, model: str, checkpoint: str, run_id: str | None = None) -> dict[str, dict]:
        """Tables a run has written for a partition and not yet published."""
        return self._entries_under(staging_prefix(run_id or self.run_id, model, checkpoint))

    def staged_figures(self, model: str, checkpoint: str) -> dict[str, dict]:
        """The figures this run staged for the partition: name -> {file, bytes, sha256}."""
        return self._entries_under(staging_prefix(self.run_id, model, checkpoint) + "figures/")

    def stage_figures(self, model: str, checkpoint: str, directory: Path) -> int:
        """Upload the figures this run drew for the partition into ``directory`` (a local spool) that are new or
        changed since the last call, each to its key in the run's own folder (``_artefacts/figures/<m>/<c>/<run_id>/``),
        and stage it with its size and sha256 (a ``<name>.png.staged`` file beside it remembers the sha256 staged:
        the body may still read its figures after a first call); how many."""
        staged = 0
        for path in sorted(directory.glob("*.png")) if directory.is_dir() else []:
            marker = path.with_name(path.name + ".staged")
            data = path.read_bytes()  # a figure: kilobytes
            sha256 = hashlib.sha256(data).hexdigest()
            if marker.is_file() and marker.read_text() == sha256:
                continue
            relative = figure_key(model, checkpoint, self.run_id, path.stem)
            self.store.put(relative, data)
            self.store.put(staging_prefix(self.run_id, model, checkpoint) + f"figures/{path.stem}.json",
                           json.dumps({"file": relative, "bytes": len(data), "sha256": sha256}).encode())
            marker.write_text(sha256)
            staged += 1
        return staged

    def publish(self, model: str, checkpoint: str) -> dict:
        """Publish every table and figure this run staged for the partition, in one manifest put."""
        entries, figures = self.staged(model, checkpoint), self.staged_figures(model, checkpoint)
        manifest = self._publish_entries(model, checkpoint, entries, {name: entry["file"] for name, entry in
                                                                      figures.items()},
                                         {name: {"bytes": entry["bytes"], "sha256": entry["sha256"]}
                                          for name, entry in figures.items()})
        prefix = staging_prefix(self.run_id, model, checkpoint)
        for name in entries:
            self.store.delete(prefix + f"{name}.json")
        for name in figures:
            self.store.delete(prefix + f"figures/{name}.json")
        return manifest

    def _publish_entries(self, model: str, checkpoint: str, entries: dict[str, dict],
                         figures: dict[str, str] | None = None, figure_files: dict[str, dict] | None = None) -> dict:
        key = manifest_key(model, checkpoint)
        named = [(table, entry["file"], entry["bytes"], entry.get("etag")) for table, entry in entries.items()] + \
            [(f"figure {name}", file, figure_files[name]["bytes"], None) for name, file in (figures or {}).items()]
        for what, file, size, etag in named:  # never a manifest naming an object a sweep removed meanwhile
            found = self.store.info(file)
            if found is None or found.size != size or found.etag != (etag or found.etag):
                raise ObjectStoreError(f"{self.where(file)} ({what}) is no longer the object this run "
                                       "wrote (removed or replaced before publication, e.g. by `resdyn check "
                                       "--reclaim`); nothing was published: rerun the partition")
        # a takeover raises the manifest's fence before the new holder writes: read the lease once, and let the
        # compare-and-swap below see any takeover after this read (store/fencing.py)
        lease = self.lease(model, checkpoint) if self.run_id else None
        recorded = self.run_id is not None and self.store.info(table_key("runs", model, checkpoint,
                                                                         self.run_id)) is not None
        for _ in range(PUBLISH_ATTEMPTS):
            current = self.store.get(key)
            before, problems = self._state(model, checkpoint, current)
            trusted = not problems
            if problems:
                before, trusted = base_for_publication(self, model, checkpoint, before, problems)
            check_may_publish(self.run_id, lease, before, recorded, f"{model}@{checkpoint}")
            manifest = stamped(next_generation(before, entries, figures, figure_files), lease)
            body = json.dumps(manifest, indent=1).encode()
            put = self.store.create(key, body) if current is None else self.store.replace(key, body, current.etag)
            if put is not None:
                self._keep_copy(model, checkpoint, manifest, body)
                if trusted:  # over a damaged manifest nothing restored, what it named is unknown: nothing is removed
                    # a run's publication (figures given) also replaces figures: their folder is swept with the tables'
                    prefixes = partition_prefixes(entries, model, checkpoint, figures=figures is not None)
                    self._collect_garbage(manifest, set(before.get("previous", {}).values()) |
                                          set(before.get("previous_figures", {}).values()), prefixes)
                return manifest
        raise ObjectStoreError(f"{self.where(key)}: {PUBLISH_ATTEMPTS} publications of other writers won the "
                               "manifest while this one tried; nothing of this run was published, rerun it")

    def lease(self, model: str, checkpoint: str) -> dict | None:
        """The partition's lease as stored (None: no lease); an unreadable one is a lease of an unknown run."""
        found = self.store.get(lease_key(model, checkpoint))
        return None if found is None else parse_lease(found.data)

    def _keep_copy(self, model: str, checkpoint: str, manifest: dict, body: bytes) -> None:
        """The copy of a published generation beside its manifest (best effort: the manifest is what was published),
        and no copy older than the previous generation's (store/manifest_recovery.py)."""
        key = manifest_key(model, checkpoint)
        name = key.rsplit("/", 1)[1]
        try:
            self.store.put(copy_name(key, manifest["generation"]), body)
            kept = {copy_generation(name, found.relative.rsplit("/", 1)[1]): found
                    for found in self.store.list(copy_name(key, ""))}
            for generation in stale_copies([generation for generation in kept if generation is not None]):
                self.store.delete(kept[generation].relative, etag=kept[generation].etag)
        except Exception as error:  # noqa: BLE001 - botocore's errors are no OSError
            log.warning("%s@%s: generation %s is published, but its copy could not be kept beside the manifest (%s)",
                        model, checkpoint, manifest["generation"], (str(error).strip().splitlines() or
                                                                    [type(error).__name__])[0])

    def fence_out(self, model: str, checkpoint: str, token: int) -> None:
        """Refuse every publication under a lease token below ``token`` (store/fencing.py): the manifest rewritten
        under If-Match (created, publishing nothing, where there is none yet); a damaged one restored first (with
        nothing to restore it from, left as it is: a run that lost its lease is refused by its runs row then)."""
        key = manifest_key(model, checkpoint)
        for _ in range(PUBLISH_ATTEMPTS):
            current = self.store.get(key)
            usable, problems = self._state(model, checkpoint, current)
            manifest = base_for_fence(self, model, checkpoint, usable, problems)
            if manifest is None:
                return
            body = json.dumps(fenced_out(manifest, token), indent=1).encode()
            if (self.store.create(key, body) if current is None else self.store.replace(key, body, current.etag)):
                if problems:
                    self._keep_copy(model, checkpoint, manifest, body)
                return
        raise ObjectStoreError(f"{self.where(key)}: publications kept winning the manifest while this run fenced it; "
                               "run it again")

    # -- a damaged manifest's restoration (store/manifest_recovery.py) ----------------------------------------

    def _state(self, model: str, checkpoint: str, stored) -> tuple[dict, list[str]]:
        """(usable part, problems) of the manifest object ``stored`` (None: there is none; damaged when a kept copy
        or a successful run says the partition was published)."""
        key = manifest_key(model, checkpoint)
        if stored is None:
            missing = missing_manifest_problem(self, model, checkpoint, self.where(key))
            return empty_manifest(model, checkpoint), [missing] if missing else []
        return self._parse(key, stored.data, model, checkpoint)

    def manifest_state(self, model: str, checkpoint: str) -> tuple[dict, list[str]]:
        """(the usable part of the partition's manifest, its problems): a manifest with a problem is damaged."""
        return self._state(model, checkpoint, self.store.get(manifest_key(model, checkpoint)))

    def restoration(self, model: str, checkpoint: str, *, verify: bool = True) -> Restoration:
        """What the partition's manifest would be restored to (store/manifest_recovery.py); nothing is written."""
        return restoration(self, model, checkpoint, self.manifest_state(model, checkpoint)[0], verify=verify)

    def restore_manifest(self, model: str, checkpoint: str) -> Restoration:
        """Restore the partition's damaged manifest under If-Match on the damaged one (If-None-Match where it is gone):
        a publication meanwhile wins, and nothing is written."""
        key = manifest_key(model, checkpoint)
        current = self.store.get(key)
        usable, problems = self._state(model, checkpoint, current)
        if not problems:
            return Restoration(None, "no longer damaged: a run restored or republished it meanwhile")
        found = restoration(self, model, checkpoint, usable)
        if found.manifest is not None:
            body = restored_text(found.manifest).encode()
            put = self.store.create(key, body) if current is None else self.store.replace(key, body, current.etag)
            if put is None:
                return Restoration(None, "not restored: it changed while it was being restored (a run published "
                                         "meanwhile); run `resdyn check` again")
            self._keep_copy(model, checkpoint, found.manifest, body)
        return found

    @property
    def manifest_places(self) -> KeyPlaces:
        return KeyPlaces()

    def kept_manifest_copies(self, model: str, checkpoint: str) -> list[tuple[int, str, bytes]]:
        key = manifest_key(model, checkpoint)
        name, copies = key.rsplit("/", 1)[1], []
        for found in self.store.list(copy_name(key, "")):
            generation = copy_generation(name, found.relative.rsplit("/", 1)[1])
            stored = self.store.get(found.relative) if generation is not None else None
            if stored is not None:
                copies.append((generation, self.where(found.relative), stored.data))
        return sorted(copies, reverse=True)

    def file_problem(self, relative: str, record: dict) -> str | None:
        """Why the object ``relative`` is not what ``record`` (its bytes, sha256) says was published, or None."""
        hashed = self.store.sha256(relative)
        if hashed is None:
            return "missing"
        if isinstance(record.get("bytes"), int) and hashed[1] != record["bytes"]:
            return f"damaged (size {hashed[1]}, published {record['bytes']})"
        if isinstance(record.get("sha256"), str) and hashed[0] != record["sha256"]:
            return "damaged (content differs from what was published: sha256)"
        return None

    def table_files(self, table: str, model: str, checkpoint: str) -> list[str]:
        return [found.relative for found in self.store.list(f"{table}/model={model}/checkpoint={checkpoint}/")
                if found.relative.endswith(".parquet")]

    def describe_table_file(self, relative: str) -> dict:
        stored = self.store.get(relative)
        if stored is None:
            raise FileNotFoundError(f"{self.where(relative)} is gone")
        return {"bytes": len(stored.data), "sha256": hashlib.sha256(stored.data).hexdigest(), "etag": stored.etag,
                **describe_parquet(pq.ParquetFile(pa.BufferReader(stored.data)))}

    def run_figure_files(self, model: str, checkpoint: str) -> dict[str, dict[str, str]]:
        runs: dict[str, dict[str, str]] = {}
        for found in self.store.list(figures_prefix(model, checkpoint)):
            owner = written_by(found.relative)
            if owner is not None and found.relative.endswith(".png"):
                runs.setdefault(owner[2], {})[found.relative.rsplit("/", 1)[1].removesuffix(".png")] = found.relative
        return runs

    def describe_figure(self, relative: str) -> dict:
        """A figure's size and sha256, once it reads as a PNG."""
        stored = self.store.get(relative)
        if stored is None:
            raise FileNotFoundError(f"{self.where(relative)} is gone")
        return figure_record(stored.data, self.where(relative))

    def _collect_garbage(self, manifest: dict, superseded: set[str], prefixes: list[str]) -> None:
        """Remove under ``prefixes`` what the generation before the previous one named (``superseded``, named by no
        manifest any more), and unnamed objects of runs that hold no lease once older than the grace period (a
        listing may not show a live writer's upload yet)."""
        keep, live, cutoff = named_files(manifest), self._live_runs(), datetime.now(timezone.utc) - SWEEP_GRACE
        for prefix in prefixes:
            for found in self.store.list(prefix):
                if found.relative in keep:
                    continue
                owner = written_by(found.relative)
                if found.relative in superseded or (owner is not None and owner[2] not in live
                                                    and found.modified < cutoff):
                    self.store.delete(found.relative, etag=found.etag)

    def discard(self, model: str, checkpoint: str, run_id: str) -> int:
        """Remove what run ``run_id`` wrote for the partition and no manifest names (its tables, staged entries and
        figures): a failed run's own leftovers; the bytes freed."""
        manifest, damaged = self.manifest_state(model, checkpoint)
        named = named_files(manifest)
        candidates = [found for table in TABLES if table not in LOG_TABLES and not damaged
                      for found in [self.store.info(table_key(table, model, checkpoint, run_id))] if found is not None]
        candidates += self.store.list(staging_prefix(run_id, model, checkpoint)) if not damaged else []
        candidates += self.store.list(f"{figures_prefix(model, checkpoint)}{run_id}/") if not damaged else []
        return sum(found.size for found in candidates
                   if found.relative not in named and self.store.delete(found.relative, etag=found.etag))

    def _live_runs(self) -> set[str]:
        """Runs holding a lease judged live (a lease nothing can judge is respected, as on disk)."""
        live = set()
        for found in self.store.list("_locks/"):
            stored = self.store.get(found.relative)
            try:
                holder = json.loads(stored.data) if stored is not None else {}
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
            if isinstance(holder, dict) and holder.get("run_id") and lease_is_live(holder):
                live.add(holder["run_id"])
        return live

    def leftovers(self, model: str | None = None, checkpoint: str | None = None, *,
                  grace: timedelta = SWEEP_GRACE) -> list[ObjectInfo]:
        """What failed or killed runs left (of one partition, or of all): tables, figures and staged entries that no
        manifest names, whose run holds no live lease, older than ``grace``. What a reader sees is never one."""
        live, cutoff, left = self._live_runs(), datetime.now(timezone.utc) - grace, []
        named: dict[tuple[str, str], set[str]] = {}
        one = model is not None and checkpoint is not None
        # every run's record (LOG_TABLES) is kept: the history of the partition
        kept = [table for table in TABLES if table not in LOG_TABLES]
        for prefix in [*partition_prefixes(kept, model, checkpoint), "_staging/"]:
            for found in self.store.list(prefix):
                owner = written_by(found.relative)
                if owner is None or (one and owner[:2] != (model, checkpoint)):
                    continue
                if owner[:2] not in named:
                    manifest, damaged = self.manifest_state(*owner[:2])
                    named[owner[:2]] = None if damaged else named_files(manifest)  # damaged: every object unknown
                if owner[2] not in live and found.modified < cutoff and named[owner[:2]] is not None and \
                        found.relative not in named[owner[:2]]:
                    left.append(found)
        return left

    def sweep(self, model: str | None = None, checkpoint: str | None = None, *,
              grace: timedelta = SWEEP_GRACE) -> list[ObjectInfo]:
        """Remove :meth:`leftovers` (each only while it is the object listed: its ETag) and abort unfinished uploads
        older than ``grace``; what was removed."""
        removed = [found for found in self.leftovers(model, checkpoint, grace=grace)
                   if self.store.delete(found.relative, etag=found.etag)]
        # an upload in flight cannot be judged by its writer's process (it may be on another machine): a live run's
        # is never aborted, another's only after the grace period whatever ``grace`` says
        live = self._live_runs()
        self.store.abort_stale_uploads(older_than=max(grace, SWEEP_GRACE),
                                       keep=lambda relative: Path(relative).stem in live)
        return removed

    def forget(self, model: str, checkpoint: str) -> list[str]:
        """Remove the partition: its manifest first (readers stop seeing it at once), then every object under its
        tables' and figures' prefixes (each table's files, every run's record, figures) and its staged entries; the
        keys removed. The caller holds its lease."""
        removed = []
        manifest = self.store.info(manifest_key(model, checkpoint))
        if manifest is not None:
            if not self.store.delete(manifest.relative, etag=manifest.etag):  # a publication landed meanwhile
                raise ObjectStoreError(f"{self.where(manifest.relative)} changed while the partition was being "
                                       "forgotten; nothing else was removed: run the command again")
            removed.append(manifest.relative)
        for kept in self.store.list(copy_name(manifest_key(model, checkpoint), "")):  # its kept copies
            if self.store.delete(kept.relative, etag=kept.etag):
                removed.append(kept.relative)
        for prefix in partition_prefixes(TABLES, model, checkpoint):
            removed += [found.relative for found in self.store.list(prefix)
                        if self.store.delete(found.relative, etag=found.etag)]
        removed += [found.relative for found in self.store.list("_staging/")  # staged per run: its partition's only
                    if (written_by(found.relative) or ())[:2] == (model, checkpoint)
                    and self.store.delete(found.relative, etag=found.etag)]
        return removed

    # -- reads ----------------------------------------------------------------------------------------------

    def _parse(self, key: str, data: bytes, model: str, checkpoint: str) -> tuple[dict, list[str]]:
        try:
            text = data.decode()
        except UnicodeDecodeError as error:
            return empty_manifest(model, checkpoint), [f"unreadable manifest: {self.where(key)} ({error})"]
        return parse_manifest(text, self.where(key), model, checkpoint, KeyPlaces())

    def manifest(self, model: str, checkpoint: str) -> dict:
        """The usable part of the partition's manifest (a damaged entry left out with a warning, as on disk)."""
        key = manifest_key(model, checkpoint)
        stored = self.store.get(key)
        if stored is None:
            return empty_manifest(model, checkpoint)
        manifest, problems = self._parse(key, stored.data, model, checkpoint)
        for problem in problems:
            log.warning(problem)
        return manifest

    def entry(self, table: str, model: str, checkpoint: str) -> dict:
        """The entry a reader of this partition uses: this run's staged one, else the published one."""
        if table in LOG_TABLES:
            raise ValueError(f"{table} has one file per run; read it with run_records")
        if self.run_id is not None:
            staged = self.store.get(staging_prefix(self.run_id, model, checkpoint) + f"{table}.json")
            if staged is not None:
                return json.loads(staged.data)
        entry = self.manifest(model, checkpoint)["tables"].get(table)
        if entry is None:
            raise MissingPartitionError(
                f"table {table!r} has no published partition model={model}/checkpoint={checkpoint} under "
                f"{self.where('')}; materialize it first (`resdyn run --model {model} --checkpoint {checkpoint}`)")
        return entry

    def _damaged(self, entry: dict, model: str, checkpoint: str, why: str) -> CorruptPartitionError:
        return CorruptPartitionError(f"{self.where(entry['file'])} is {why}; rematerialize the partition "
                                     f"(`resdyn run --model {model} --checkpoint {checkpoint}`)")

    def read(self, table: str, model: str, checkpoint: str, columns: list[str] | None = None) -> pa.Table:
        """The whole partition, its bytes checked against the sha256 published for them."""
        entry = self.entry(table, model, checkpoint)
        stored = self.store.get(entry["file"])
        if stored is None:
            raise self._damaged(entry, model, checkpoint, "missing")
        if len(stored.data) != entry["bytes"] or hashlib.sha256(stored.data).hexdigest() != entry["sha256"]:
            raise self._damaged(entry, model, checkpoint,
                                "damaged (content differs from what was published: size or sha256)")
        return pq.read_table(pa.BufferReader(stored.data), columns=columns)

    def _published_object(self, table: str, model: str, checkpoint: str) -> str:
        """The key of the partition's file, checked to be the object published (its size and ETag: one HEAD)."""
        entry = self.entry(table, model, checkpoint)
        found = self.store.info(entry["file"])
        if found is None:
            raise self._damaged(entry, model, checkpoint, "missing")
        # a manifest written by other tools (a folder copied to the store) records no ETag: size only, then
        if found.size != entry["bytes"] or found.etag != entry.get("etag", found.etag):
            raise self._damaged(entry, model, checkpoint, "not the object published (size or ETag differs)")
        return entry["file"]

    def row_groups(self, table: str, model: str, checkpoint: str, columns: list[str] | None = None
                   ) -> Iterator[pa.Table]:
        """The partition one row group at a time, read in ranges, from the object published."""
        relative = self._published_object(table, model, checkpoint)
        with self.filesystem.open_input_file(self.store.arrow_path(relative)) as source:
            # each read of the source is a GET: a row group's column chunks fetched in coalesced ranges (pre_buffer),
            # not 64 KiB at a time as from a local file (7.5x slower on the test server, benchmarks/object_store.py)
            parquet = pq.ParquetFile(source, pre_buffer=True)
            for index in range(parquet.num_row_groups):
                yield parquet.read_row_group(index, columns=columns, use_threads=False)

    def read_row_group(self, table: str, model: str, checkpoint: str, index: int,
                       columns: list[str] | None = None) -> pa.Table:
        relative = self._published_object(table, model, checkpoint)
        with self.filesystem.open_input_file(self.store.arrow_path(relative)) as source:
            return pq.ParquetFile(source, pre_buffer=True).read_row_group(index, columns=columns)

    def schema(self, table: str, model: str, checkpoint: str) -> pa.Schema:
        """The Arrow schema of the partition's object (its footer, read in ranges)."""
        relative = self._published_object(table, model, checkpoint)
        with self.filesystem.open_input_file(self.store.arrow_path(relative)) as source:
            return pq.read_schema(source)

    def content_hash(self, table: str, model: str, checkpoint: str) -> str:
        """Hash of the partition's data columns (equal to :meth:`~.Warehouse.content_hash` for equal data)."""
        digest = hashlib.sha256()
        for group in self.row_groups(table, model, checkpoint, columns=table_spec(table).column_names):
            for batch in group.to_batches():
                hash_batch(digest, batch)
        return digest.hexdigest()[:16]

    # -- runs -----------------------------------------------------------------------------------------------

    def record_run(self, model: str, checkpoint: str, row: dict) -> None:
        """Write (or rewrite: same key, one PUT) this run's row of the ``runs`` table for the partition."""
        table = rows_table("runs", [{key: value for key, value in row.items() if key not in PROVENANCE_COLUMNS}])
        ObjectTables(self.store, run_id=row["run_id"], settings_hash=row["settings_hash"]).write(
            "runs", model, checkpoint, table)

    def run_records(self, model: str, checkpoint: str) -> list[dict]:
        """Every run's row for the partition, with the runs table's current columns (as on disk)."""
        names = [*table_spec("runs").column_names, *PROVENANCE_COLUMNS]
        records = []
        for found in self.store.list(f"runs/model={model}/checkpoint={checkpoint}/"):
            stored = self.store.get(found.relative)
            try:
                rows = pq.read_table(pa.BufferReader(stored.data)).to_pylist() if stored is not None else []
            except (pa.ArrowInvalid, OSError):
                log.warning("unreadable runs object %s", self.where(found.relative))
                continue
            records += [{**dict.fromkeys(names), **row} for row in rows]
        return sorted(records, key=lambda row: row["started_at"] or "")
