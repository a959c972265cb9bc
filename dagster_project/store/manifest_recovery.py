"""A damaged manifest, restored: from the copy of a generation kept beside it, else rebuilt from the partition's files.

A manifest that cannot be read whole hides what it published: its files are then *unknown*, neither published nor
leftovers, and nothing removes them (store/leftovers.py) or publishes over them (a publication restores the manifest
first). Restoring needs no trust in the damaged text:

1. **The kept copies.** Every publication writes the manifest and then a copy of it beside, named by its generation
   (``_published/model=<m>/checkpoint=<c>.json.<generation>``), keeping the current and the previous generation's.
   The newest copy, when it parses cleanly, is the manifest again; each of its files is checked against the size and
   sha256 it records, and one that differs is named (to be rematerialized), never a reason to fall back to an older
   generation (that would leave the newer files unnamed, and so removable).
2. **The files and the runs table.** Without such a copy (a warehouse written before copies were kept, or the newest
   copy damaged too), each table's file is the one of the run that most recently ended ``success`` (the runs table),
   read back (footer, rows, sha256 and content hash) before it is named; each figure is checked to be a PNG.

A manifest that is gone while a kept copy or a successful run says the partition was published is damaged too
(:func:`missing_manifest_problem`). A restoration keeps the highest fence any source knows (store/fencing.py).

:func:`restoration` says what would be restored and from where; the warehouse writes it (``resdyn check --restore``,
and a publication over a damaged manifest).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from resdyn.dagster_project.store.fencing import token_of
from resdyn.dagster_project.store.manifests import parse_manifest
from resdyn.dagster_project.store.schema import TABLES

log = logging.getLogger(__name__)

COPIES_KEPT = 2  # the current generation's and the previous one's
LOG_TABLES = ("runs",)  # one file per run, never named by a manifest


def copy_name(manifest_name: str, generation: int) -> str:
    """The name of a manifest's kept copy of ``generation`` beside it (``checkpoint=<c>.json.<generation>``)."""
    return f"{manifest_name}.{generation}"


def copy_generation(manifest_name: str, name: str) -> int | None:
    """The generation a file called ``name`` beside the manifest ``manifest_name`` is the kept copy of, or None."""
    suffix = name.removeprefix(manifest_name + ".") if name.startswith(manifest_name + ".") else ""
    return int(suffix) if suffix.isdigit() else None


def stale_copies(generations: list[int]) -> list[int]:
    """The kept copies to remove once ``generations`` are kept: all but the :data:`COPIES_KEPT` newest."""
    return sorted(generations, reverse=True)[COPIES_KEPT:]


@dataclass
class Restoration:
    """What a damaged manifest would be restored to (``manifest``: None when there is nothing to restore it from),
    ``source`` in words, why each kept copy or file was passed over, and the files of the restored manifest that are
    not what it records (``damaged``: named, to be rematerialized)."""

    manifest: dict | None
    source: str
    passed_over: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.manifest is None:
            return f"nothing to restore it from ({'; '.join(self.passed_over) or 'no kept copy, no table file'})"
        tables, figures = len(self.manifest["tables"]), len(self.manifest.get("figures", {}))
        damaged = (f"; {len(self.damaged)} of its files damaged ({self.damaged[0]}): rerun the partition to "
                   "rematerialize them") if self.damaged else ""
        return f"from {self.source}: {tables} table(s), {figures} figure(s){damaged}"


def restoration(sources, model: str, checkpoint: str, usable: dict | None = None, *, verify: bool = True
                ) -> Restoration:
    """The manifest of partition ``model@checkpoint`` restored (module docstring): the newest kept copy when it parses
    cleanly (each of its files checked against the size and sha256 it records with ``verify``: a damaged one is
    named, never a reason to roll back to an older generation, whose restoration would leave the newer files unnamed);
    else rebuilt from the files of successful runs; else the newest older copy that parses. Its fence is the highest
    any source knows (``usable``: the damaged manifest's usable part; the kept copies; the partition's lease), so that a
    restoration never lets a fenced-out run publish. ``sources``: the warehouse's reading side
    (``kept_manifest_copies``, ``file_problem``, ``table_files``, ``describe_table_file``, ``run_figure_files``,
    ``describe_figure``, ``run_records``, ``lease``, ``manifest_places``)."""
    passed_over, parsed, copies = [], [], sources.kept_manifest_copies(model, checkpoint)
    for generation, where, data in copies:
        try:
            manifest, problems = parse_manifest(data.decode(), where, model, checkpoint, sources.manifest_places)
        except UnicodeDecodeError:
            manifest, problems = None, [f"{where}: not text"]
        if problems:
            passed_over.append(problems[0])
        else:
            parsed.append((generation, where, manifest))
    known = [usable or {}, *(manifest for _, _, manifest in parsed), {"fenced_below": token_of(
        sources.lease(model, checkpoint))}]
    newest = max([generation for generation, _, _ in copies] + [token_of(usable, "generation")])
    if parsed and parsed[0][0] == newest:
        generation, where, manifest = parsed[0]
        found = Restoration(manifest, f"the copy of generation {generation} kept at {where}", passed_over)
        if verify:
            found.damaged = _damaged_files(sources, manifest)
    else:
        found = _rebuilt(sources, model, checkpoint, newest, passed_over)
        if found.manifest is None and parsed:  # nothing to rebuild from: an older generation is better than none
            generation, where, manifest = parsed[0]
            found = Restoration(manifest, f"the copy of generation {generation} kept at {where} (the newest copy "
                                          "could not be read: what was published after it is not in it)", passed_over)
    if found.manifest is not None:
        found.manifest = with_fences(found.manifest, known)
    return found


def _damaged_files(sources, manifest: dict) -> list[str]:
    """One line per table or figure of ``manifest`` that is not the file it records (size and sha256)."""
    recorded = manifest.get("figure_files") if isinstance(manifest.get("figure_files"), dict) else {}
    return [f"{entry['file']} ({table}) is {problem}" for table, entry in sorted(manifest["tables"].items())
            if (problem := sources.file_problem(entry["file"], entry))] + \
        [f"{file} (figure {name}) is {problem}" for name, file in sorted(manifest.get("figures", {}).items())
         if (problem := sources.file_problem(file, recorded.get(name) or {}))]


def with_fences(manifest: dict, known: list[dict]) -> dict:
    """``manifest`` with the highest fence and fencing token of ``known`` manifests (and leases' tokens as fences)."""
    return {**manifest, "fenced_below": max(token_of(item, "fenced_below") for item in [manifest, *known]),
            "fencing_token": max(token_of(item, "fencing_token") for item in [manifest, *known])}


def _ended(row: dict) -> datetime:
    """When a run ended, comparable across time zones (the runs table's ISO text with its offset)."""
    try:
        return datetime.strptime(row.get("ended_at") or "", "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)


def _rebuilt(sources, model: str, checkpoint: str, newest: int, passed_over: list[str]) -> Restoration:
    """The manifest rebuilt from the files of the runs the runs table records ``success``, the latest first: each
    table file read back (footer, rows, hashes) and each figure checked to be a PNG before it is named."""
    ended = {row["run_id"]: _ended(row) for row in sources.run_records(model, checkpoint)
             if row.get("status") == "success"}
    order = sorted(ended, key=lambda run: ended[run], reverse=True)
    tables = {}
    for table in sorted(set(TABLES) - set(LOG_TABLES)):
        files = {file.rsplit("/", 1)[-1].removesuffix(".parquet"): file
                 for file in sources.table_files(table, model, checkpoint)}
        for run in (run for run in order if run in files):
            try:
                tables[table] = {"file": files[run], **sources.describe_table_file(files[run]), "run_id": run}
                break
            except Exception as error:  # noqa: BLE001 - an unreadable file is passed over, named, never published
                passed_over.append(f"{files[run]}: {_first_line(error)}")
    figures, figure_files = {}, {}
    by_run = sources.run_figure_files(model, checkpoint)
    for run in order:
        for name, file in sorted(by_run.get(run, {}).items()):
            if name in figures:
                continue
            try:
                figure_files[name] = sources.describe_figure(file)
                figures[name] = file
            except Exception as error:  # noqa: BLE001 - as for a table: passed over and named
                passed_over.append(f"{file}: {_first_line(error)}")
    if not tables:
        return Restoration(None, "", passed_over + ["no table file of a run the runs table records `success`"])
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    generation = newest + 1
    manifest = {"model": model, "checkpoint": checkpoint, "generation": generation, "published_at": stamp,
                "tables": {table: {**entry, "generation": generation, "published_at": stamp}
                           for table, entry in tables.items()},
                "previous": {}, "figures": figures, "figure_files": figure_files, "previous_figures": {},
                "restored": {"from": "table files and the runs table", "at": stamp}}
    return Restoration(manifest, f"the files of {len({entry['run_id'] for entry in tables.values()})} run(s) the "
                                 "runs table records `success`", passed_over)


def base_for_publication(sources, model: str, checkpoint: str, usable: dict, problems: list[str]) -> tuple[dict, bool]:
    """What a publication over a damaged manifest builds on, and whether it may then remove files it does not name:
    the restored manifest (it names what the damaged one did), else the damaged one's usable part, over which it
    removes nothing (what it hid is still unknown)."""
    found = restoration(sources, model, checkpoint, usable, verify=False)
    log.warning("%s@%s: its manifest is damaged (%s); publishing over %s", model, checkpoint, problems[0],
                f"it restored {found.summary()}" if found.manifest is not None else
                f"its usable part, removing nothing it may have named ({found.summary()})")
    return (found.manifest, True) if found.manifest is not None else (with_fences(usable, []), False)


def base_for_fence(sources, model: str, checkpoint: str, usable: dict, problems: list[str]) -> dict | None:
    """What a takeover's fence is written into: the manifest as it is, or a damaged one restored (None, with a
    warning, when nothing restores it: then a run that held a lease and lost it is refused by its runs row,
    :func:`~.fencing.publication_refusal`)."""
    if not problems:
        return usable
    restored = restoration(sources, model, checkpoint, usable, verify=False).manifest
    if restored is None:
        log.warning("%s@%s: its manifest is damaged and nothing restores it, so no fence was recorded in it (%s)",
                    model, checkpoint, problems[0])
    return restored


def missing_manifest_problem(sources, model: str, checkpoint: str, where: str) -> str | None:
    """Why a partition without a manifest is one whose manifest was lost (a kept copy of it, or a run of it recorded
    ``success``, says it was published), or None: a partition never published."""
    copies = sources.kept_manifest_copies(model, checkpoint)
    published = copies or [row for row in sources.run_records(model, checkpoint) if row.get("status") == "success"]
    if not published:
        return None
    why = f"its copy of generation {copies[0][0]}" if copies else f"run {published[0]['run_id']} recorded `success`"
    return (f"missing manifest: {where} is gone, while {why} says the partition was published; its files are kept, "
            f"none reclaimed, until `resdyn check --restore` restores it (or a rerun publishes it: `resdyn run --model "
            f"{model} --checkpoint {checkpoint}`)")


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def figure_record(data: bytes, where: str) -> dict:
    """The size and sha256 a manifest records of a figure, once ``data`` reads as a PNG (its signature)."""
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError(f"{where} is not a PNG")
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def restored_text(manifest: dict) -> str:
    return json.dumps(manifest, indent=1)
