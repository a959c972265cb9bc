"""DuckDB over the warehouse: views of the published files, read-only by construction, errors in one line.

Each table of dagster_project/store/schema.py becomes a view over exactly the files its partitions'
manifests publish (an unpublished, superseded or damaged file is never read); tables with no
published partition are empty views of the right columns. ``published_tables`` (one row per
published table of a partition) and ``study_tables`` (the tables a complete partition holds) are
registered beside them, with ``partition_sources`` (each partition's source file hash beside the one its
model is registered with now), then ``sql/views.sql`` adds the derived views (``partitions``). The
connection can read files only under the warehouse root, cannot change that, and
:func:`run_read_only` runs only SELECT statements and EXPLAINs of SELECT statements, judged by DuckDB's
own parser on what it would execute (``EXPLAIN ANALYZE`` executes its statement, so the statement
after the EXPLAIN is parsed and judged too): DuckDB's ``allowed_directories`` alone would still let
``COPY ... TO`` and ``ATTACH`` write there.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import re
import shutil
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from resdyn.dagster_project.configuration.config import SQL_DIRECTORY
from resdyn.dagster_project.store.errors import QueryError, ReadOnlySqlError
from resdyn.dagster_project.store.schema import PROVENANCE_COLUMNS, TABLES
from resdyn.dagster_project.store.table_identity import declarations, lineage_reasons, merged_settings

READ_STATEMENTS = ("SELECT", "EXPLAIN")

log = logging.getLogger(__name__)
_WARNED: set[tuple[str, str]] = set()

HIVE_COLUMNS = ds.partitioning(pa.schema([("model", pa.string()), ("checkpoint", pa.string())]), flavor="hive")
HIVE = "hive_partitioning = true, hive_types = {'model': VARCHAR, 'checkpoint': VARCHAR}, union_by_name = true"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _empty(table: str) -> pa.Table:
    schema = TABLES[table].schema()
    for name in PROVENANCE_COLUMNS:
        schema = schema.append(pa.field(name, pa.string()))
    schema = schema.append(pa.field("model", pa.string())).append(pa.field("checkpoint", pa.string()))
    return schema.empty_table()


def _view(connection, store, table: str, files: list[str]) -> None:
    if files and store.arrow_filesystem is not None:  # an object store: pyarrow reads, DuckDB opens no file
        dataset = ds.dataset(sorted(files), filesystem=store.arrow_filesystem, format="parquet",
                             partitioning=HIVE_COLUMNS, partition_base_dir=store.table_directory(table),
                             schema=_empty(table).schema)  # a column an older file lacks reads as null (runs)
        connection.register(f"_files_{table}", dataset)
        # the hive columns in the order read_parquet gives them on disk, so a query answers alike on both
        connection.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * EXCLUDE (model, checkpoint), checkpoint, model "
                           f"FROM _files_{table}")
    elif files:
        file_list = "[" + ", ".join(_literal(path) for path in sorted(files)) + "]"
        # a table written before one of its columns existed (runs before a provenance column, layer_metrics before
        # eigenvector_condition_number, ...): the column is there, null, as the object store's schema reads it
        connection.register(f"_empty_{table}", _empty(table))
        read = f"SELECT * FROM read_parquet({file_list}, {HIVE}) UNION ALL BY NAME SELECT * FROM _empty_{table}"
        connection.execute(f"CREATE OR REPLACE VIEW {table} AS {read}")
    else:
        connection.register(f"_empty_{table}", _empty(table))
        connection.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM _empty_{table}")


def warn_once(store, message: str) -> None:
    """Log ``message`` about ``store`` once per process (one command opens many connections)."""
    if (str(store), message) not in _WARNED:
        _WARNED.add((str(store), message))
        log.warning(message)


def readable_run_files(store) -> list[str]:
    """The runs table's files of a warehouse folder whose footer reads (a damaged one left out, warned once)."""
    files = []
    for path in sorted((store.root / "runs").glob("model=*/checkpoint=*/*.parquet")):
        try:
            pq.read_metadata(path)
            files.append(path.as_posix())
        except (pa.ArrowInvalid, OSError):
            warn_once(store, f"{path} is not readable and is left out of the runs view; see `resdyn check`")
    return files


@functools.cache
def _spill_directory() -> str:
    directory = tempfile.mkdtemp(prefix="resdyn-duckdb-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


def build_connection(store, *, complete_only: bool = False) -> duckdb.DuckDBPyConnection:
    store.require_existing()
    connection = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                                    "autoload_known_extensions": False})
    # DuckDB allows its own spill directory beside the warehouse's (default: ./.tmp, anything a user put there):
    # a private one instead, made for this process and removed at its exit
    connection.execute(f"SET temp_directory = {_literal(_spill_directory())}")
    allowed = ", ".join(_literal(directory) for directory in store.sql_directories())
    connection.execute(f"SET allowed_directories = [{allowed}]")
    connection.execute("SET enable_external_access = false")
    files, published, problems = store.published_files()
    for problem in problems:
        warn_once(store, problem)
    store.problems = problems
    connection.register("published_tables", published_tables(published))
    connection.register("partition_sources", partition_sources(store, files.get("model_checkpoints", [])))
    connection.register("study_tables", pa.table({"table_name": list(TABLES),
                                                  "required": [TABLES[t].required for t in TABLES]}))
    for table in TABLES:
        _view(connection, store, table, store.readable_run_files() if table == "runs" else files.get(table, []))
    for statement in derived_view_statements():
        connection.execute(statement)
    if complete_only:
        complete = {(m, c) for m, c in connection.sql(
            "SELECT model, checkpoint FROM partitions WHERE status = 'complete'").fetchall()}
        for table in TABLES:
            if table == "runs":
                continue
            kept = [path for path in files.get(table, []) if _partition_of(path) in complete]
            _view(connection, store, table, kept)
    connection.execute("SET lock_configuration = true")
    return connection


PUBLISHED_TABLES_SCHEMA = pa.schema([
    ("model", pa.string()), ("checkpoint", pa.string()), ("table_name", pa.string()), ("run_id", pa.string()),
    ("settings_hash", pa.string()), ("generation", pa.int64()), ("rows", pa.int64()), ("intact", pa.bool_()),
    ("identity", pa.string()), ("code_version", pa.string()), ("settings", pa.string()), ("current", pa.bool_()),
    ("stale_reason", pa.string()), ("partition_settings", pa.string()), ("settings_conflicts", pa.string())])


def published_tables(rows: list[dict]) -> pa.Table:
    """The ``published_tables`` relation: one row per published table of a partition, with its recorded identity
    (store/table_identity.py) and whether it is current by lineage (its code version the stage's now; made from its
    inputs as they are published now), and per partition
    the settings its tables were made with (their declared settings merged) and any conflict between them."""
    versions = {table: version for stage in declarations().values() for table, version in stage.tables.items()}
    by_partition: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        by_partition.setdefault((row["model"], row["checkpoint"]), []).append(row)
    out = []
    for partition_rows in by_partition.values():
        entries = {row["table_name"]: {"identity": row.get("identity")} for row in partition_rows}
        intact = {row["table_name"]: row["intact"] for row in partition_rows}
        reasons = lineage_reasons(entries, versions, intact)
        merged, conflicts = merged_settings(entries)
        for row in partition_rows:
            identity = row.get("identity") if isinstance(row.get("identity"), dict) else {}
            reason = reasons.get(row["table_name"])
            out.append({**{key: row.get(key) for key in ("model", "checkpoint", "table_name", "run_id",
                                                         "settings_hash", "generation", "rows", "intact")},
                        "identity": identity.get("hash"), "code_version": identity.get("code_version"),
                        "settings": json.dumps(identity["settings"], sort_keys=True) if identity else None,
                        "current": reason is None, "stale_reason": reason,
                        "partition_settings": json.dumps(merged, sort_keys=True),
                        "settings_conflicts": "; ".join(conflicts) or None})
    return pa.Table.from_pylist(out, schema=PUBLISHED_TABLES_SCHEMA)


def partition_sources(store, model_checkpoint_files: list[str]) -> pa.Table:
    """One row per partition with a published ``model_checkpoints`` row: the sha256 of the file it was made from
    (GGUF models and the checkpoints derived from them: the null model and its quantized control), the sha256
    its model is registered with now, and its width. A file read whole: it is one row."""
    try:
        specs = store.registry_specs()
    except (OSError, ValueError, KeyError, TypeError):  # a damaged registry: `resdyn check` names it
        specs = {}
    rows = []
    for path in model_checkpoint_files:
        found = _partition_of(path)
        try:
            row = pq.read_table(path, filesystem=store.arrow_filesystem).slice(0, 1).to_pylist()
        except (pa.ArrowInvalid, OSError):
            continue  # left out and named by published_files
        if found is None or not row:
            continue
        spec = specs.get(found[0])
        rows.append({"model": found[0], "checkpoint": found[1], "source_sha256": row[0].get("source_sha256") or "",
                     "registered_sha256": spec.sha256 if spec is not None and spec.is_gguf else "",
                     "d_model": row[0].get("d_model")})
    return pa.Table.from_pylist(rows, schema=pa.schema([
        ("model", pa.string()), ("checkpoint", pa.string()), ("source_sha256", pa.string()),
        ("registered_sha256", pa.string()), ("d_model", pa.int32())]))


def _partition_of(path: str) -> tuple[str, str] | None:
    match = re.search(r"model=([^/]+)/checkpoint=([^/]+)/", path)
    return (match.group(1), match.group(2)) if match else None


def derived_view_statements() -> list[str]:
    """The CREATE VIEW statements of sql/views.sql (comments dropped)."""
    lines = (SQL_DIRECTORY / "views.sql").read_text().splitlines()
    text = "\n".join(line for line in lines if not line.strip().startswith("--"))
    return [statement.strip() for statement in text.split(";") if statement.strip()]


def sql_text(argument: str) -> str:
    """The SQL an argument of ``resdyn sql`` names: a ``.sql`` file (as given, else in sql/questions/), or the
    argument itself as SQL."""
    if argument.endswith(".sql"):
        path = Path(argument)
        if not path.is_file():
            path = SQL_DIRECTORY / "questions" / argument
        if not path.is_file():
            raise FileNotFoundError(f"no SQL file {argument} (looked here and in sql/questions/)")
        return path.read_text()
    return argument


def run_read_only(connection: duckdb.DuckDBPyConnection, sql: str, parameters: dict | None = None) -> pa.Table:
    """The result of the last statement of ``sql``, after checking every statement only reads. ``parameters``
    are bound by DuckDB to the last statement's ``$name`` placeholders (values, never SQL text)."""
    try:
        statements = connection.extract_statements(sql)
    except duckdb.Error as error:
        raise QueryError(_one_line(error, sql)) from None
    if not statements:
        raise QueryError("no SQL statement given")
    _check_parameters(statements, parameters or {})
    for statement in statements:
        kind = _executed_kind(connection, statement)
        if kind not in READ_STATEMENTS:
            raise ReadOnlySqlError(f"SQL is read-only here: {kind} statements are not allowed (only SELECT, WITH, "
                                   "DESCRIBE, SHOW, SUMMARIZE and EXPLAIN of those); the warehouse is written by "
                                   "`resdyn run`")
    try:
        result = None
        for index, statement in enumerate(statements):
            last = index == len(statements) - 1
            result = connection.sql(statement.query, params=parameters if last and parameters else None)
        return result.to_arrow_table() if result is not None else pa.table({})
    except duckdb.Error as error:
        raise QueryError(_one_line(error, sql)) from None


def _check_parameters(statements: list, given: dict) -> None:
    """Values are bound to the last statement's ``$name`` placeholders only: a placeholder elsewhere, one without a
    value, or a value no placeholder takes is an error that names it."""
    for number, statement in enumerate(statements[:-1], start=1):
        if statement.named_parameters:
            raise QueryError(f"${', $'.join(sorted(statement.named_parameters))} in statement {number} of "
                             f"{len(statements)}: values are bound to the last statement's placeholders only; move "
                             "the query with placeholders last (or write the value into the earlier statement)")
    wanted = set(statements[-1].named_parameters)
    missing, unused = sorted(wanted - set(given)), sorted(set(given) - wanted)
    if missing:
        raise QueryError(f"the query's placeholder(s) ${', $'.join(missing)} have no value: pass "
                         f"{', '.join(f'{name}=...' for name in missing)} to study.sql (`resdyn sql` takes none: "
                         "write the value into the SQL)")
    if unused:
        takes = f"it takes ${', $'.join(sorted(wanted))}" if wanted else "it has no $placeholder"
        raise QueryError(f"value(s) {', '.join(unused)} given but the query does not use them ({takes}); a "
                         "placeholder is written $name, a letter or _ then letters, digits or _")


_EXPLAIN_PREFIX = re.compile(r"^\s*EXPLAIN\s*(\([^()]*\))?\s*(ANALY[SZ]E\b)?", re.IGNORECASE)


def _executed_kind(connection: duckdb.DuckDBPyConnection, statement) -> str:
    """The type of the statement DuckDB would execute: an EXPLAIN's own statement (``EXPLAIN ANALYZE``
    runs it), found by parsing what follows the EXPLAIN; anything that does not parse as exactly one
    statement after the prefix counts as a write (refused), never as a read."""
    kind = statement.type.name
    if kind != "EXPLAIN":
        return kind
    prefix = _EXPLAIN_PREFIX.match(statement.query)
    if prefix is None:
        return "EXPLAIN of an unrecognised statement"
    try:
        inner = connection.extract_statements(statement.query[prefix.end():])
    except duckdb.Error:
        return "EXPLAIN of an unrecognised statement"
    if len(inner) != 1:
        return "EXPLAIN of an unrecognised statement"
    inner_kind = _executed_kind(connection, inner[0])
    return "EXPLAIN" if inner_kind == "SELECT" else f"EXPLAIN {inner_kind}"


def _one_line(error: Exception, sql: str) -> str:
    """DuckDB's message, first line, with a hint of what to do."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    name = type(error).__name__
    if "CatalogException" in name or "does not exist" in message:
        hint = ("tables: " + ", ".join(TABLES) + "; views: partitions; `resdyn sql \"SHOW TABLES\"` lists them")
    elif "Parser" in name:
        hint = "check the SQL syntax"
    elif "Binder" in name:
        hint = "`resdyn sql \"DESCRIBE <table>\"` lists a table's columns"
    elif "Permission" in name or "Cannot access file" in message:
        hint = ("only the warehouse's tables can be read, by name (`resdyn sql \"SHOW TABLES\"`); files outside it "
                "are refused")
    elif "IO" in name or ".parquet" in message:
        hint = "a warehouse file could not be read: `resdyn check` lists damaged files and how to fix them"
    else:
        hint = "see `resdyn sql --help`"
    return f"{message} (hint: {hint})"
