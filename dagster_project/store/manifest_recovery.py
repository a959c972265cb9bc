"""A damaged manifest, restored: from the copy of a generation kept beside it, else rebuilt from the partition's files.

A manifest that cannot be read whole hides what it published: its files are then *unknown*, neither published nor
leftovers, and nothing removes them (store/leftovers.py) or publishes over them (a publication restores the manifest
first). Restoring needs no trust in the damaged text:

1. **The kept copies.** Every publication writes the manifest and then a copy of it beside, named by its generation
   (``_published/model=<m>/checkpoint=<c>.json.<generation>``), keeping the current and the previous generation's.
   The newest copy that parses cleanly and whose every table and figure is the file it published (size and sha256)
   is the manifest again.
2. **The files and the runs table.** Without such a copy (a warehouse written before copies were kept, or copies
   damaged too), each table's file is the one of the run that most recently ended ``success`` (the runs table), read
   back (footer, rows, sha256 and content hash) before it is named; each figure likewise.

:func:`restoration` says what would be restored and from where; the warehouse writes it (``resdyn check --restore``,
and a publication over a damaged manifest).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from resdyn.dagster_project.store.manifests import parse_manifest
from resdyn.dagster_project.store.schema import TABLES

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
    ``source`` in words, and why each kept copy or file was passed over."""

    manifest: dict | None
    source: str
    passed_over: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.manifest is None:
            return f"nothing to restore it from ({'; '.join(self.passed_over) or 'no kept copy, no table file'})"
        tables, figures = len(self.manifest["tables"]), len(self.manifest.get("figures", {}))
        return f"from {self.source}: {tables} table(s), {figures} figure(s)"


def restoration(sources, model: str, checkpoint: str) -> Restoration:
    """The manifest of partition ``model@checkpoint`` as the newest intact kept copy, else rebuilt from its files
    (module docstring). ``sources``: the warehouse's reading side (``kept_manifest_copies``, ``file_problem``,
    ``table_files``, ``describe_table_file``, ``run_figure_files``, ``describe_figure``, ``run_records``,
    ``manifest_places``)."""
    passed_over = []
    newest = 0
    for generation, where, data in sources.kept_manifest_copies(model, checkpoint):
        newest = max(newest, generation)
        try:
            text = data.decode()
        except UnicodeDecodeError:
            passed_over.append(f"{where}: not text")
            continue
        manifest, problems = parse_manifest(text, where, model, checkpoint, sources.manifest_places)
        problems += [f"{where}: {entry['file']} is {problem}" for entry in manifest["tables"].values()
                     if (problem := sources.file_problem(entry["file"], entry))]
        recorded = manifest.get("figure_files") if isinstance(manifest.get("figure_files"), dict) else {}
        problems += [f"{where}: figure {name} is {problem}" for name, file in manifest.get("figures", {}).items()
                     if (problem := sources.file_problem(file, recorded.get(name) or {}))]
        if problems:
            passed_over.append(problems[0])
            continue
        return Restoration(manifest, f"the copy of generation {generation} kept at {where}", passed_over)
    return _rebuilt(sources, model, checkpoint, newest, passed_over)


def _rebuilt(sources, model: str, checkpoint: str, newest: int, passed_over: list[str]) -> Restoration:
    """The manifest rebuilt from the files of the runs the runs table records ``success``, the latest first."""
    ended = {row["run_id"]: row.get("ended_at") or "" for row in sources.run_records(model, checkpoint)
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
                passed_over.append(f"{files[run]}: {str(error).splitlines()[0] if str(error) else type(error).__name__}")
    figures, figure_files = {}, {}
    by_run = sources.run_figure_files(model, checkpoint)
    for run in order:
        for name, file in sorted(by_run.get(run, {}).items()):
            if name not in figures:
                figures[name], figure_files[name] = file, sources.describe_figure(file)
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


def restored_text(manifest: dict) -> str:
    return json.dumps(manifest, indent=1)
