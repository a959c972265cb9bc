"""What makes a published table what it is: its stage's code version, the settings its stage declares, its inputs.

A table's identity (Merkle-style, as Dagster's data versions: the version of an asset is a hash of its code version
and its inputs' versions) is

    hash(table, code_version, {declared setting: value}, {input table: input's identity hash})

where the settings are those its stage declares that change numbers (``Setting.in_hash``) and, for a stage that
reads the corpus, the corpus's sha256. Each published table records its identity in its manifest entry
(``identity``: the parts and the hash). Two judgments follow:

- against a run's request (:func:`stale_tables`): the identity every table would have if made now, from the
  declarations and this run's settings, top down; a table whose recorded hash differs is stale, with the reason
  (code version, which setting, which input, not published, damaged, no recorded identity);
- without a request (:func:`lineage_reasons`, the views' ``current``): a table is current when it has an identity,
  its code version is the stage's now, and each input it was made from is the input's recorded identity now (and
  that input is current): what a partition's consumers need, whichever runs made its tables.

The declarations are registered by the asset layer when the asset modules are imported (:func:`declare`); a process
that has not imported them (``resdyn sql``: importing every asset module would take seconds) reads the same
declarations from ``stage_declarations.json`` beside this module, which ``python -m
resdyn.dagster_project.launch.assets_index`` writes from the assets and a unit test keeps equal to them. This module
imports neither Dagster nor the asset layer (the store never reaches it).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from functools import cache, cached_property
from graphlib import TopologicalSorter
from pathlib import Path

NO_IDENTITY = "no recorded identity (published before tables carried one)"
DECLARATIONS_FILE = Path(__file__).with_name("stage_declarations.json")


@dataclass(frozen=True)
class StageDeclaration:
    """One stage (an asset or multi-asset): the tables it writes with their code versions, the settings it reads,
    the tables it reads (or waits on) and whether it reads the corpus."""

    stage: str
    tables: dict[str, str]  # table -> code version
    settings: tuple[str, ...]
    inputs: tuple[str, ...]
    reads_corpus: bool = False


@dataclass(frozen=True)
class TableIdentity:
    code_version: str
    settings: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)  # input table -> its identity hash

    @cached_property
    def hash(self) -> str:
        return identity_hash(self.code_version, self.settings, self.inputs)

    def record(self) -> dict:
        """The manifest entry's ``identity``."""
        return {"code_version": self.code_version, "settings": self.settings, "inputs": self.inputs,
                "hash": self.hash}


def identity_field(identities: dict, table: str) -> dict:
    """A manifest entry's ``identity`` field for ``table`` (nothing where the run declared none for it)."""
    identity = identities.get(table)
    return {"identity": identity.record()} if identity is not None else {}


def identity_hash(code_version: str, settings: dict, inputs: dict) -> str:
    text = json.dumps({"code_version": code_version, "settings": settings, "inputs": inputs}, sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_DECLARATIONS: dict[str, StageDeclaration] = {}


def declare(declaration: StageDeclaration) -> None:
    """Register a stage (the asset layer does, for each asset module imported). A table declared by two stages is
    refused: a table has one maker."""
    for table in declaration.tables:
        for other in declarations().values():
            if table in other.tables and other.stage != declaration.stage:
                raise ValueError(f"table {table!r} is declared by both {other.stage} and {declaration.stage}")
    _DECLARATIONS[declaration.stage] = declaration


def declarations() -> dict[str, StageDeclaration]:
    """Every stage by name: those of ``stage_declarations.json`` (written from the assets), each replaced by the
    stage the asset modules registered in this process, where they did."""
    return {**_declarations_file(), **_DECLARATIONS}


@cache
def _declarations_file() -> dict[str, StageDeclaration]:
    stages = json.loads(DECLARATIONS_FILE.read_text())
    return {name: StageDeclaration(name, dict(stage["tables"]), tuple(stage["settings"]), tuple(stage["inputs"]),
                                   bool(stage["reads_corpus"])) for name, stage in stages.items()}


def declarations_text(stages: dict[str, StageDeclaration]) -> str:
    """``stage_declarations.json`` as it should read for ``stages``."""
    return json.dumps({name: {key: value for key, value in asdict(stage).items() if key != "stage"}
                       for name, stage in sorted(stages.items())}, indent=1, sort_keys=True) + "\n"


def stage_of_tables(stages: dict[str, StageDeclaration] | None = None) -> dict[str, StageDeclaration]:
    stages = declarations() if stages is None else stages
    return {table: stage for stage in stages.values() for table in stage.tables}


def _depth_order(stages: dict[str, StageDeclaration]) -> list[StageDeclaration]:
    """Stages ordered so that each comes after the stages making its inputs (inputs no stage makes are ignored);
    a cycle is graphlib's CycleError."""
    maker = stage_of_tables(stages)
    graph = {name: {maker[table].stage for table in stage.inputs if table in maker}
             for name, stage in sorted(stages.items())}
    return [stages[name] for name in TopologicalSorter(graph).static_order()]


def expected_identities(settings: dict, in_hash: set[str], corpus_sha256: str = "",
                        stages: dict[str, StageDeclaration] | None = None) -> dict[str, TableIdentity]:
    """The identity of every declared table as a run with ``settings`` (every setting's value) would make it now;
    ``in_hash``: the names of the settings that change numbers (the others, workers or batch size, never enter)."""
    stages = declarations() if stages is None else stages
    identities: dict[str, TableIdentity] = {}
    for stage in _depth_order(stages):
        read = {name: settings[name] for name in stage.settings if name in in_hash}
        if stage.reads_corpus:
            read["corpus_sha256"] = corpus_sha256
        inputs = {table: identities[table].hash for table in stage.inputs if table in identities}
        for table, version in stage.tables.items():
            identities[table] = TableIdentity(str(version or ""), dict(sorted(read.items())),
                                              dict(sorted(inputs.items())))
    return identities


def _recorded(entry: dict | None) -> dict | None:
    identity = (entry or {}).get("identity")
    return identity if isinstance(identity, dict) and isinstance(identity.get("hash"), str) else None


def _setting_change(name: str, before, after, flags: dict[str, str]) -> str:
    return f"setting {flags.get(name, name)} {before!r} -> {after!r}"


def stale_tables(entries: dict[str, dict], expected: dict[str, TableIdentity], tables: list[str] | None = None, *,
                 intact: dict[str, bool] | None = None, flags: dict[str, str] | None = None) -> dict[str, str]:
    """table -> why it is stale, for each of ``tables`` (default: every expected one) whose published entry (of a
    manifest's ``tables``) is not what a run with ``expected`` would make. A table is current when its recorded
    identity hash equals the expected one; the reason names the first difference found: not published, damaged,
    no recorded identity, code version, a setting, an input."""
    flags = flags or {}
    intact = intact or {}
    stale: dict[str, str] = {}
    for table in _tables_in_order(expected, tables):
        want = expected[table]
        entry = entries.get(table)
        recorded = _recorded(entry)
        if entry is None:
            stale[table] = "not published"
        elif not intact.get(table, True):
            stale[table] = "damaged (its file does not match its manifest entry)"
        elif recorded is None:
            stale[table] = NO_IDENTITY
        elif recorded["hash"] != want.hash:
            stale[table] = _difference(recorded, want, stale, flags)
    return stale


def _tables_in_order(expected: dict[str, TableIdentity], tables: list[str] | None) -> list[str]:
    """``tables`` (default: every expected one) with each table's inputs judged before it."""
    chosen = set(expected if tables is None else tables) & set(expected)
    order = TopologicalSorter({table: set(identity.inputs) & set(expected) for table, identity in expected.items()})
    return [table for table in order.static_order() if table in chosen]


def _difference(recorded: dict, want: TableIdentity, stale: dict[str, str], flags: dict[str, str]) -> str:
    if str(recorded.get("code_version")) != want.code_version:
        return f"code version {recorded.get('code_version')!r} -> {want.code_version!r}"
    settings = recorded.get("settings") or {}
    changed = [_setting_change(name, settings.get(name), value, flags) for name, value in want.settings.items()
               if settings.get(name) != value]
    changed += [f"setting {flags.get(name, name)} no longer read" for name in settings if name not in want.settings]
    if changed:
        return "; ".join(changed)
    inputs = recorded.get("inputs") or {}
    for table, value in want.inputs.items():
        if inputs.get(table) != value:
            return f"input {table} {'is stale' if table in stale else 'changed'}"
    return "inputs differ"


def lineage_reasons(entries: dict[str, dict], code_versions: dict[str, str] | None = None,
                    intact: dict[str, bool] | None = None) -> dict[str, str]:
    """table -> why it is not current, for each published table of one partition (``entries``: its manifest's
    ``tables``), with no request to compare against: no recorded identity; a code version other than the stage's
    now (``code_versions``, where known); made from an input whose recorded identity has changed since, or that is
    not current itself, or not published."""
    intact = intact or {}
    reasons: dict[str, str] = {}
    judging: set[str] = set()

    def judge(table: str) -> str | None:
        if table in reasons:
            return reasons[table]
        if table in judging:
            return None
        judging.add(table)
        reason = _lineage_reason(table, entries, code_versions or {}, intact, judge)
        if reason:
            reasons[table] = reason
        return reason

    for table in entries:
        judge(table)
    return reasons


def _lineage_reason(table, entries, code_versions, intact, judge) -> str | None:
    if not intact.get(table, True):
        return "damaged (its file does not match its manifest entry)"
    recorded = _recorded(entries[table])
    if recorded is None:
        return NO_IDENTITY
    now = code_versions.get(table)
    if now is not None and str(recorded.get("code_version")) != str(now):
        return f"code version {recorded.get('code_version')!r} -> {now!r}"
    for upstream, made_from in sorted((recorded.get("inputs") or {}).items()):
        upstream_identity = _recorded(entries.get(upstream))
        if entries.get(upstream) is None:
            return f"input {upstream} not published"
        if upstream_identity is None or upstream_identity["hash"] != made_from:
            return f"input {upstream} changed since"
        if judge(upstream):
            return f"input {upstream} is not current"
    return None


def merged_settings(entries: dict[str, dict]) -> tuple[dict, list[str]]:
    """(the settings a partition's tables were made with: the union of their recorded declared settings, the
    conflicts: one line per setting two tables recorded with different values)."""
    merged, seen_in, conflicts = {}, {}, []
    for table in sorted(entries):
        recorded = _recorded(entries[table])
        for name, value in ((recorded or {}).get("settings") or {}).items():
            if name in merged and merged[name] != value:
                conflicts.append(f"{name}: {merged[name]!r} ({seen_in[name]}) vs {value!r} ({table})")
            else:
                merged.setdefault(name, value)
                seen_in.setdefault(name, table)
    return merged, conflicts


__all__ = ["DECLARATIONS_FILE", "NO_IDENTITY", "StageDeclaration", "TableIdentity", "declarations",
           "declarations_text", "declare", "expected_identities", "identity_field", "identity_hash", "lineage_reasons",
           "merged_settings", "stage_of_tables", "stale_tables"]
