"""Which tables of each partition a run must make, and why: the stale ones and their downstream, nothing else.

A published table is current for a run when its recorded identity (store/table_identity.py: its stage's code
version, the settings its stage declares, its inputs' identities) is the one the run would give it. A stage runs
whole (a multi-asset writes all its tables at once), so a stale table brings its stage's other tables with it; a
table downstream of a stale one is stale itself (its inputs' identities change). A partition made from a model file
or directory other than the one registered now is remade whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from resdyn.dagster_project.configuration.settings import BY_NAME, IN_HASH
from resdyn.dagster_project.store.run_records import corpus_record
from resdyn.dagster_project.store.schema import TABLES
from resdyn.dagster_project.store.table_identity import expected_identities, stage_of_tables, stale_tables
from resdyn.models.registry import split_partition_key

FLAGS = {name: setting.flag for name, setting in BY_NAME.items()}


@dataclass
class PartitionPlan:
    """One partition's plan: the tables to make (with why, per stale table), and those reused as published."""

    key: str
    reasons: dict[str, str] = field(default_factory=dict)  # stale table -> why
    run: list[str] = field(default_factory=list)  # every table the run makes (the stale tables' whole stages)
    reused: list[str] = field(default_factory=list)

    def selection(self) -> str:
        """The plan as Dagster's asset selection syntax."""
        return " or ".join(f"key:{table}" for table in self.run)

    def lines(self) -> list[str]:
        if not self.run:
            return [f"resdyn: {self.key}: every table current ({len(self.reused)} reused): not run again"]
        lines = [f"resdyn: {self.key}: reuses {len(self.reused)} current table(s), makes {len(self.run)}"]
        lines += [f"    {table}: {why}" for table, why in self.reasons.items()]
        brought = [table for table in self.run if table not in self.reasons]
        if brought:
            lines.append(f"    with its stage: {', '.join(brought)}")
        return lines


def expected_for(config) -> dict:
    """Every declared table's identity as a run under ``config`` would make it."""
    return expected_identities(dict(config.settings), IN_HASH,
                               corpus_record(config.wikitext_directory or None)["corpus_sha256"])


def plan_partitions(store, keys: list[str], config, tables: set[str]) -> list[PartitionPlan]:
    """A :class:`PartitionPlan` per key: of ``tables`` (the run's selection, table names), the stale ones and their
    stages. An optional table (written for some partitions only, as training_loss) is judged only where published."""
    expected = expected_for(config)
    maker = stage_of_tables()
    intact, whole = _published_state(store)
    plans = []
    for key in keys:
        model, checkpoint = split_partition_key(key)
        manifest = _manifest(store, model, checkpoint)
        entries = dict(manifest.get("tables", {}))
        judged = [table for table in sorted(tables) if table in expected
                  and (TABLES[table].required or table in entries)]
        plan = PartitionPlan(key)
        remade = whole.get((model, checkpoint)) or (_damaged_figures(store, manifest) if entries else None)
        if remade:
            plan.reasons = {table: remade for table in judged}
        else:
            plan.reasons = stale_tables(entries, expected, judged, intact=intact.get((model, checkpoint), {}),
                                        flags=FLAGS)
        stages = {maker[table].stage for table in plan.reasons}
        plan.run = [table for table in judged if maker[table].stage in stages]
        plan.reused = [table for table in judged if table not in plan.run]
        plans.append(plan)
    return plans


def _damaged_figures(store, manifest: dict) -> str | None:
    damaged = store.damaged_figures(manifest)
    return f"{len(damaged)} published figure(s) damaged or missing ({damaged[0].split(' (figure')[0]})" \
        if damaged else None


def _manifest(store, model: str, checkpoint: str) -> dict:
    try:
        return store.manifest(model, checkpoint)
    except (OSError, ValueError, AttributeError):
        return {}


def _published_state(store) -> tuple[dict, dict]:
    """(per partition: table -> intact, per partition to remake whole: why). Read from the views: a partition made
    from another model file is ``stale``; one whose local model directory was rewritten in place since is too."""
    if not store.exists():
        return {}, {}
    intact: dict = {}
    for row in store.query("SELECT model, checkpoint, table_name, intact FROM published_tables").to_pylist():
        intact.setdefault((row["model"], row["checkpoint"]), {})[row["table_name"]] = row["intact"]
    whole = {}
    for row in store.query(
            "SELECT p.model, p.checkpoint, p.status, r.model_source FROM partitions p LEFT JOIN runs r "
            "ON r.run_id = p.run_id AND r.model = p.model AND r.checkpoint = p.checkpoint").to_pylist():
        if row["status"] == "stale":
            whole[row["model"], row["checkpoint"]] = "made from another model file than the one registered now"
        elif _directory_rewritten(row.get("model_source")):
            whole[row["model"], row["checkpoint"]] = "its model directory was rewritten in place since"
    return intact, whole


def _directory_rewritten(model_source: str | None) -> bool:
    """Was the local model directory a partition was made from changed since (``runs.model_source`` records
    its fingerprint)? A directory that is gone is not judged here (the run names it)."""
    from resdyn.models.sources import directory_fingerprint

    try:
        origin = json.loads(model_source) if model_source else {}
    except ValueError:
        return False
    recorded = origin.get("directory_fingerprint") if isinstance(origin, dict) else None
    if not recorded:
        return False
    now = directory_fingerprint(origin.get("source") or "")
    return now is not None and now != recorded


__all__ = ["PartitionPlan", "expected_for", "plan_partitions"]
