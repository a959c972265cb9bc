"""``resdyn check``: every published file read back (footer, schema, rows) against its manifest entry, in a folder or
on an object store."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from resdyn.dagster_project.store.manifests import VerifiedFiles
from resdyn.dagster_project.store.schema import PROVENANCE_COLUMNS, TABLES


def _fix(manifest: dict) -> str:
    return f"rematerialize it: `resdyn run --model {manifest['model']} --checkpoint {manifest['checkpoint']}`"


def _footer_problems(where: str, table: str, entry: dict, manifest: dict, read_footer, size: int) -> list[str]:
    """A published file's footer against its entry: readable, the table's columns, the rows and bytes published."""
    try:
        footer = read_footer()
        columns = set(footer.schema.to_arrow_schema().names)
    except (pa.ArrowInvalid, OSError) as error:
        return [f"unreadable: {where}: {str(error).splitlines()[0]}; {_fix(manifest)}"]
    expected = set(TABLES[table].column_names) | set(PROVENANCE_COLUMNS) if table in TABLES else columns
    if expected - columns:
        return [f"wrong schema: {where} lacks {sorted(expected - columns)}; {_fix(manifest)}"]
    if footer.num_rows != entry["rows"] or size != entry["bytes"]:
        return [f"changed since published: {where} ({footer.num_rows} rows, {size} bytes; published {entry['rows']} "
                f"rows, {entry['bytes']} bytes); {_fix(manifest)}"]
    return []


def scan(store) -> list[str]:
    """One line per problem: what is wrong, where, and the fix. Manifests are checked against their schema
    (dagster_project/store/manifests.py: their own partition, a whole generation, entries inside the partition's
    folders), then every published file against its entry: present, same size and sha256, a readable footer
    with the table's columns and rows. A warehouse on an object store: :func:`scan_objects`."""
    if store.arrow_filesystem is not None:
        return scan_objects(store)
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
            problems += _footer_problems(where, table, entry, manifest, lambda path=path: pq.read_metadata(path),
                                         path.stat().st_size)
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


def scan_objects(store) -> list[str]:
    """:func:`scan` for a warehouse on an object store (:class:`~.object_warehouse.ObjectWarehouse`): every published
    object fetched whole and its sha256 compared with the one published (a full check, unlike a view's HEAD), then
    its footer; the runs table's objects read; stale partitions."""
    manifests, problems = store.read_manifests()
    for manifest in manifests:
        for table, entry in sorted(manifest["tables"].items()):
            url = store.tables.where(entry["file"])
            where = f"{url} ({table} of {manifest['model']}@{manifest['checkpoint']})"
            hashed = store.store.sha256(entry["file"])  # streamed: never a whole object in memory
            if hashed is None:
                problems.append(f"missing: {where}; {_fix(manifest)}")
            elif "sha256" in entry and hashed[0] != entry["sha256"]:
                problems.append(f"changed since published: {where}: damaged (content differs from what was "
                                f"published: sha256); {_fix(manifest)}")
            else:
                path = store.store.arrow_path(entry["file"])
                problems += _footer_problems(where, table, entry, manifest, lambda path=path: pq.read_metadata(
                    path, filesystem=store.arrow_filesystem), hashed[1])
        problems += [f"changed since published: {line}" for line in store.damaged_figures(manifest)]
    problems += stale_partitions(store)
    for found in store.store.list("runs/"):
        stored = store.store.get(found.relative)
        try:
            pq.read_metadata(pa.BufferReader(stored.data if stored is not None else b""))
        except (pa.ArrowInvalid, OSError) as error:
            problems.append(f"unreadable run record: {store.tables.where(found.relative)}: "
                            f"{str(error).splitlines()[0]}; delete it")
    return problems


def stale_partitions(store) -> list[str]:
    """One line per partition made from a source file its model is no longer registered with (sql/views.sql)."""
    rows = store.query("SELECT model, checkpoint, source_sha256, registered_sha256 FROM partitions "
                       "WHERE status = 'stale' ORDER BY model, checkpoint").to_pylist()
    return [f"stale: {r['model']}@{r['checkpoint']} was made from a file with sha256 {r['source_sha256'][:12]}; "
            f"{r['model']} is registered with {r['registered_sha256'][:12]} now: rerun it (`resdyn run --model "
            f"{r['model']} --checkpoint {r['checkpoint']}`)" for r in rows]
