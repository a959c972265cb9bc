"""``resdyn check``: every published file read back (footer, schema, rows) against its manifest entry."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from resdyn.dagster_project.store.manifests import VerifiedFiles
from resdyn.dagster_project.store.schema import PROVENANCE_COLUMNS, TABLES
from resdyn.dagster_project.store.warehouse import Warehouse


def _fix(manifest: dict) -> str:
    return f"rematerialize it: `resdyn run --model {manifest['model']} --checkpoint {manifest['checkpoint']}`"


def scan(store: Warehouse) -> list[str]:
    """One line per problem: what is wrong, where, and the fix. Manifests are checked against their schema
    (dagster_project/store/manifests.py: their own partition, a whole generation, entries inside the partition's
    folders), then every published file against its entry: present, same size and sha256, a readable footer
    with the table's columns and rows."""
    manifests, problems = store.read_manifests()
    verified = VerifiedFiles(store.root)
    for manifest in manifests:
        for table, entry in sorted(manifest["tables"].items()):
            path = store.root / entry["file"]
            where = f"{path} ({table} of {manifest['model']}@{manifest['checkpoint']})"
            problem = verified.problem(path, entry)
            if problem == "missing":
                problems.append(f"missing: {where}; {_fix(manifest)}")
                continue
            if problem is not None and problem.startswith("damaged (content"):
                problems.append(f"changed since published: {where}: {problem}; {_fix(manifest)}")
                continue
            try:
                footer = pq.read_metadata(path)
                columns = set(footer.schema.to_arrow_schema().names)
            except (pa.ArrowInvalid, OSError) as error:
                problems.append(f"unreadable: {where}: {str(error).splitlines()[0]}; {_fix(manifest)}")
                continue
            expected = set(TABLES[table].column_names) | set(PROVENANCE_COLUMNS) if table in TABLES else columns
            if expected - columns:
                problems.append(f"wrong schema: {where} lacks {sorted(expected - columns)}; {_fix(manifest)}")
            elif footer.num_rows != entry["rows"] or path.stat().st_size != entry["bytes"]:
                problems.append(f"changed since published: {where} ({footer.num_rows} rows, "
                                f"{path.stat().st_size} bytes; published {entry['rows']} rows, {entry['bytes']} "
                                f"bytes); {_fix(manifest)}")
    for manifest in manifests:  # the figures published with the tables, against their recorded size and hash
        problems += [f"changed since published: {line}" for line in store.damaged_figures(manifest, verified)]
    verified.save()
    problems += stale_partitions(store)
    for path in sorted((store.root / "runs").glob("model=*/checkpoint=*/*.parquet")):
        try:
            pq.read_metadata(path)
        except (pa.ArrowInvalid, OSError) as error:
            problems.append(f"unreadable run record: {path}: {str(error).splitlines()[0]}; delete it")
    return problems


def stale_partitions(store: Warehouse) -> list[str]:
    """One line per partition made from a source file its model is no longer registered with (sql/views.sql)."""
    rows = store.query("SELECT model, checkpoint, source_sha256, registered_sha256 FROM partitions "
                       "WHERE status = 'stale' ORDER BY model, checkpoint").to_pylist()
    return [f"stale: {r['model']}@{r['checkpoint']} was made from a file with sha256 {r['source_sha256'][:12]}; "
            f"{r['model']} is registered with {r['registered_sha256'][:12]} now: rerun it (`resdyn run --model "
            f"{r['model']} --checkpoint {r['checkpoint']}`)" for r in rows]
