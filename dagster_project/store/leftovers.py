"""Files a run wrote that no manifest names and no live run will publish: what a failed or killed run leaves.

A run writes each table to ``<table>/model=/checkpoint=/<run_id>.parquet`` (through a temp file
``.<host>-<pid>-*.inprogress``), a staging entry per table under ``_staging/<run_id>/`` and its figures
under ``_artefacts/figures/<model>/<checkpoint>/<run_id>/``; publication names them in the partition's manifest.
A run that fails removes its own (:func:`discard_run`), and so does a run stopped by a signal; what a killed run
left (its files, and a manifest write it was killed in: ``_published/.../.checkpoint=<c>.json.*.inprogress``) is
swept by the next run of the partition before it writes (:func:`sweep_partition`), and ``resdyn check`` lists it
by path and size, with ``resdyn check --reclaim`` to remove it at once.

A partition whose manifest is damaged has no leftovers: what the manifest named cannot be told from what a dead run
left, so its tables and figures are *unknown* (:func:`unknown_files`) and nothing removes them until the manifest is
restored (store/manifest_recovery.py); only temp files of dead writers, which no manifest ever names, are leftovers
there (a staging entry is kept too: it says what a run wrote, should the manifest need rebuilding by hand).
"""

from __future__ import annotations

import fcntl
import json
from dataclasses import dataclass
from pathlib import Path

from resdyn.dagster_project.store.leases import lease_is_live
from resdyn.dagster_project.store.manifests import named_files
from resdyn.dagster_project.store.schema import TABLES
from resdyn.files import IN_PROGRESS_SUFFIX, written_by_dead_writer


@dataclass(frozen=True)
class Leftover:
    path: Path
    bytes: int
    run_id: str  # the run that wrote it ("" for a temp file of a dead writer)
    model: str
    checkpoint: str


def _live_runs(store) -> set[str]:
    """Run ids whose lease is held by a run that is still running (it may yet publish what it staged)."""
    live = set()
    for lease in (store.root / "_locks").glob("*.json"):
        try:
            holder = json.loads(lease.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if holder.get("run_id") and lease_is_live(holder):
            live.add(holder["run_id"])
    return live


def _partitions(store, model: str | None, checkpoint: str | None) -> set[tuple[str, str]]:
    """Every (model, checkpoint) with a folder of a table, a staging entry or figures; or the one given."""
    if model is not None and checkpoint is not None:
        return {(model, checkpoint)}
    found = set()
    for table in TABLES:
        for directory in (store.root / table).glob("model=*/checkpoint=*"):
            found.add((directory.parent.name.removeprefix("model="), directory.name.removeprefix("checkpoint=")))
    for directory in (store.root / "_staging").glob("*/model=*/checkpoint=*"):
        found.add((directory.parent.name.removeprefix("model="), directory.name.removeprefix("checkpoint=")))
    for directory in (store.root / "_artefacts" / "figures").glob("*/*"):
        found.add((directory.parent.name, directory.name))
    for path in (store.root / "_published").glob(f"model=*/.checkpoint=*.json.*{IN_PROGRESS_SUFFIX}"):
        found.add((path.parent.name.removeprefix("model="), path.name[1:].split(".json.", 1)[0].removeprefix(
            "checkpoint=")))  # a manifest write killed before the partition had any file
    return {(m, c) for m, c in found if model is None or m == model}


def unpublished_files(store, model: str | None = None, checkpoint: str | None = None, *,
                      run_id: str | None = None) -> list[Leftover]:
    """What no manifest names (tables, staging entries, figures, dead writers' temp files) of runs that are not
    live; of one partition when ``model`` and ``checkpoint`` are given; of one run (live or not) with ``run_id``."""
    live = set() if run_id is not None else _live_runs(store)
    left = []

    def add(path: Path, owner: str, m: str, c: str) -> None:
        if (run_id is None and owner not in live) or owner == run_id:
            try:
                left.append(Leftover(path, path.stat().st_size, owner, m, c))
            except OSError:
                pass  # removed meanwhile

    for m, c in sorted(_partitions(store, model, checkpoint)):
        manifest, damaged = store.manifest_state(m, c)
        named = named_files(manifest)
        for table in TABLES:
            if table == "runs":  # every run's record is kept: the history of the partition
                continue
            directory = store.partition_directory(table, m, c)
            for path in directory.glob("*.parquet") if not damaged else ():
                if str(path.relative_to(store.root)) not in named:
                    add(path, path.stem, m, c)
            if run_id is None:
                for path in directory.glob(f".*{IN_PROGRESS_SUFFIX}"):
                    if written_by_dead_writer(path.name[1:]):
                        left.append(Leftover(path, path.stat().st_size, "", m, c))
        if run_id is None:
            left += [Leftover(path, size, "", m, c) for path, size in _dead_manifest_writes(store, m, c)]
        for path in (store.root / "_staging").glob(f"*/model={m}/checkpoint={c}/*.json") if not damaged else ():
            add(path, path.parents[2].name, m, c)
        for path in (store.root / "_artefacts" / "figures" / m / c).glob("*/*.png") if not damaged else ():
            relative = str(path.relative_to(store.root))
            full = relative.replace(".inline.png", ".png") if path.stem.endswith(".inline") else relative
            if full not in named:
                add(path, path.parent.name, m, c)
    return left


def unknown_files(store, model: str, checkpoint: str) -> list[Path]:
    """The tables and figures of a partition whose manifest is damaged: any of them may be what it published."""
    files = [path for table in TABLES if table != "runs"
             for path in store.partition_directory(table, model, checkpoint).glob("*.parquet")]
    return files + sorted((store.root / "_artefacts" / "figures" / model / checkpoint).glob("*/*.png"))


def _dead_manifest_writes(store, model: str, checkpoint: str) -> list[tuple[Path, int]]:
    """Temp files of the partition's manifest (``_published/model=<m>/.checkpoint=<c>.json.*.inprogress``) that
    no writer holds: every manifest write holds the manifest's lock, so while we can take it, none is under way
    and such a file is what a killed writer left (a writer holding the lock now: nothing is judged)."""
    path = store.manifest_path(model, checkpoint)
    temporary = list(path.parent.glob(f".{path.name}.*{IN_PROGRESS_SUFFIX}"))
    if not temporary:
        return []
    try:
        handle = open(path.with_name(path.name + ".lock"), "a")
    except OSError:  # a read-only warehouse: nothing can be judged (or removed) here
        return []
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return []
        try:
            found = []
            for item in temporary:
                try:
                    found.append((item, item.stat().st_size))
                except FileNotFoundError:
                    continue
            return found
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def reclaim(store, leftovers: list[Leftover]) -> int:
    """Remove ``leftovers`` and the folders they leave empty; the bytes freed."""
    freed = 0
    for leftover in leftovers:
        try:
            leftover.path.unlink()
            freed += leftover.bytes
        except FileNotFoundError:
            continue
        for folder in leftover.path.parents:
            if folder == store.root or store.root not in folder.parents:
                break
            try:
                folder.rmdir()  # only when empty
            except OSError:
                break
    return freed


def discard_run(store, model: str, checkpoint: str) -> int:
    """Remove what this run (``store.run_id``) wrote for the partition and did not publish; the bytes freed."""
    return reclaim(store, unpublished_files(store, model, checkpoint, run_id=store.run_id))


def sweep_partition(store, model: str, checkpoint: str) -> int:
    """Before a run writes: remove what runs of the partition that are not live left; the bytes freed."""
    return reclaim(store, unpublished_files(store, model, checkpoint))


def describe(leftovers: list[Leftover]) -> list[str]:
    """`resdyn check`'s lines: one per file, with its size and what reclaims it."""
    return [f"unpublished: {item.path} ({item.bytes} bytes{', run ' + item.run_id if item.run_id else ', a dead writer'}"
            f" of {item.model}@{item.checkpoint}); `resdyn check --reclaim` removes it (so does the next run of the "
            "partition)" for item in leftovers]
