"""``resdyn check``: every published file read back (footer, schema, rows) against its manifest entry."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from .schema import PROVENANCE_COLUMNS, TABLES
from .warehouse import Warehouse


def _fix(manifest: dict) -> str:
    return f"rematerialize it: `resdyn run --model {manifest['model']} --checkpoint {manifest['checkpoint']}`"


def scan(store: Warehouse) -> list[str]:
    """One line per problem: what is wrong, where, and the fix."""
    problems = []
    for manifest in store.manifests():
        for table, entry in sorted(manifest["tables"].items()):
            path = store.root / entry["file"]
            where = f"{path} ({table} of {manifest['model']}@{manifest['checkpoint']})"
            if not path.is_file():
                problems.append(f"missing: {where}; {_fix(manifest)}")
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
    for path in sorted((store.root / "runs").glob("model=*/checkpoint=*/*.parquet")):
        try:
            pq.read_metadata(path)
        except (pa.ArrowInvalid, OSError) as error:
            problems.append(f"unreadable run record: {path}: {str(error).splitlines()[0]}; delete it")
    for path in sorted((store.root / "_published").glob("model=*/checkpoint=*.json")):
        try:
            json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            problems.append(f"unreadable manifest: {path}: {error}; delete it and rematerialize the partition")
    return problems
