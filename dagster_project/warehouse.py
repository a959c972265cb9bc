"""The Parquet warehouse: hive-partitioned tables, atomic streamed partition writes, read-only DuckDB.

Layout: ``<root>/<table>/model=<model>/checkpoint=<checkpoint>/data.parquet`` (zstd, statistics
on). ``model`` and ``checkpoint`` live in the path, not in the file: DuckDB's hive partitioning
adds them as VARCHAR columns. A partition is streamed, one row group per record batch (a matrix
table: one sublayer per row group), into a hidden temp file in its directory; its footer is read
back, then it is renamed over ``data.parquet``, so a reader sees the old partition or the new
one, never half of one, and a rerun replaces exactly its partition. Temp files do not match
``*.parquet``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from .schema import TableSpec, spec

log = logging.getLogger(__name__)

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = REPOSITORY_ROOT / "warehouse"
SQL_DIRECTORY = REPOSITORY_ROOT / "sql"
PARTITION_FILE = "data.parquet"
IN_PROGRESS_SUFFIX = ".inprogress"
PAGE_BYTES = 1 << 16  # Parquet data pages (and read buffers): memory per column while streaming


class CorruptPartitionError(IOError):
    pass


class MissingPartitionError(FileNotFoundError):
    pass


@dataclass(frozen=True)
class WrittenTable:
    path: Path
    rows: int
    row_groups: int
    content_hash: str  # of the data buffers, not the file bytes: equal data, equal hash


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class TableWriter:
    """Streams record batches of one table partition into a temp file, then publishes it atomically.

    Use as a context manager: on a clean exit the file is flushed, fsynced, its footer read back
    (a file that cannot be read is never published), and renamed over the partition; on an
    exception the temp file is removed and the old partition stays.
    """

    def __init__(self, directory: Path, table: TableSpec, width: int | None) -> None:
        self.directory, self.table, self.schema = directory, table, table.schema(width)
        self.rows = self.row_groups = 0
        self._digest = hashlib.sha256()
        self.result: WrittenTable | None = None
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob(f".*{IN_PROGRESS_SUFFIX}"):
            owner = stale.name[1:].split("-", 1)[0]
            if not owner.isdigit() or not _process_alive(int(owner)):
                stale.unlink(missing_ok=True)  # left by a killed writer; a live writer's file is never touched
        handle, self.temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.getpid()}-", suffix=IN_PROGRESS_SUFFIX)
        self._stream = os.fdopen(handle, "wb")
        strings = [f.name for f in self.schema if pa.types.is_string(f.type)]
        scalars = [f.name for f in self.schema if not pa.types.is_nested(f.type)]
        # no dictionary pages for numbers (building one for a matrix costs 16x its size and saves nothing),
        # statistics for scalar columns only, and small pages so a row group streams to disk as it is encoded
        self._writer = pq.ParquetWriter(self._stream, self.schema, compression="zstd", use_dictionary=strings,
                                        write_statistics=scalars, data_page_size=PAGE_BYTES)

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        """Append ``data`` (one row group per record batch)."""
        if data.schema != self.schema:
            data = data.select(self.schema.names).cast(self.schema)
        batches = data.to_batches() if isinstance(data, pa.Table) else [data]
        for batch in batches:
            if batch.num_rows == 0:
                continue
            self._writer.write_batch(batch, row_group_size=batch.num_rows)
            _hash_batch(self._digest, batch)
            self.rows += batch.num_rows
            self.row_groups += 1

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        try:
            self._writer.close()
            self._stream.flush()
            os.fsync(self._stream.fileno())
            self._stream.close()
            if kind is None:
                footer = pq.read_metadata(self.temporary)  # what readers will see, checked before they can
                if footer.num_rows != self.rows:
                    raise CorruptPartitionError(f"{self.temporary}: wrote {self.rows} rows, footer says {footer.num_rows}")
                target = self.directory / PARTITION_FILE
                os.replace(self.temporary, target)
                self.result = WrittenTable(target, self.rows, self.row_groups, self._digest.hexdigest()[:16])
        finally:
            Path(self.temporary).unlink(missing_ok=True)


def _hash_batch(digest, batch: pa.RecordBatch) -> None:
    for column in batch.columns:
        for buffer in column.buffers():
            if buffer is not None:
                digest.update(memoryview(buffer))


class Warehouse:
    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root or os.environ.get("RESDYN_WAREHOUSE") or DEFAULT_ROOT).resolve()

    # -- paths ----------------------------------------------------------------------------------

    def partition_directory(self, table: str, model: str, checkpoint: str) -> Path:
        return self.root / table / f"model={model}" / f"checkpoint={checkpoint}"

    def partition_path(self, table: str, model: str, checkpoint: str) -> Path:
        return self.partition_directory(table, model, checkpoint) / PARTITION_FILE

    def artefact_directory(self, kind: str, model: str, checkpoint: str) -> Path:
        """Non-table outputs (figures, model directories), outside every table's glob."""
        directory = self.root / "_artefacts" / kind / model / checkpoint
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    @property
    def models_directory(self) -> Path:
        return self.root / "_models"

    @property
    def registry_file(self) -> Path:
        return self.root / "registry.json"

    def tables(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))

    # -- writes ---------------------------------------------------------------------------------

    def open_writer(self, table: str, model: str, checkpoint: str, *, width: int | None = None) -> TableWriter:
        """A streaming writer for one partition of ``table`` (schema from dagster_project/schema.py)."""
        return TableWriter(self.partition_directory(table, model, checkpoint), spec(table), width)

    def write(self, table: str, model: str, checkpoint: str, data: pa.Table | pa.RecordBatch, *,
              width: int | None = None) -> WrittenTable:
        """Replace the partition atomically with ``data`` (one call, one row group per batch)."""
        with self.open_writer(table, model, checkpoint, width=width) as writer:
            writer.write(data)
        return writer.result

    # -- reads ----------------------------------------------------------------------------------

    def _existing_path(self, table: str, model: str, checkpoint: str) -> Path:
        path = self.partition_path(table, model, checkpoint)
        if not path.is_file():
            raise MissingPartitionError(
                f"table {table!r} has no partition model={model}/checkpoint={checkpoint} under {self.root}; "
                f"materialize it first (`resdyn run --model {model} --checkpoint {checkpoint}`)"
            )
        return path

    def read(self, table: str, model: str, checkpoint: str, columns: list[str] | None = None) -> pa.Table:
        path = self._existing_path(table, model, checkpoint)
        try:
            return pq.read_table(path, columns=columns)
        except (pa.ArrowInvalid, OSError) as error:
            raise CorruptPartitionError(
                f"{path} is not a readable Parquet file ({error}); delete it and rematerialize the partition "
                f"(`resdyn run --model {model} --checkpoint {checkpoint}`)"
            ) from error

    def _parquet_file(self, table: str, model: str, checkpoint: str) -> pq.ParquetFile:
        path = self._existing_path(table, model, checkpoint)
        try:
            return pq.ParquetFile(path, buffer_size=PAGE_BYTES, pre_buffer=False)
        except (pa.ArrowInvalid, OSError) as error:
            raise CorruptPartitionError(
                f"{path} is not a readable Parquet file ({error}); delete it and rematerialize the partition "
                f"(`resdyn run --model {model} --checkpoint {checkpoint}`)"
            ) from error

    def row_groups(self, table: str, model: str, checkpoint: str, columns: list[str] | None = None
                   ) -> Iterator[pa.Table]:
        """The partition one row group at a time (a matrix table: one matrix at a time)."""
        parquet = self._parquet_file(table, model, checkpoint)
        for index in range(parquet.num_row_groups):
            yield parquet.read_row_group(index, columns=columns)

    def read_row_group(self, table: str, model: str, checkpoint: str, index: int,
                       columns: list[str] | None = None) -> pa.Table:
        return self._parquet_file(table, model, checkpoint).read_row_group(index, columns=columns)

    def content_hash(self, table: str, model: str, checkpoint: str) -> str:
        """Hash of the partition's data (not its file bytes), for Dagster data versions."""
        digest = hashlib.sha256()
        for group in self.row_groups(table, model, checkpoint):
            for batch in group.to_batches():
                _hash_batch(digest, batch)
        return digest.hexdigest()[:16]

    # -- DuckDB ---------------------------------------------------------------------------------

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB with one read-only view per table that has data (sql/views.sql)."""
        connection = duckdb.connect(":memory:")
        present = set(self.tables())
        for table, statement in view_statements(self.root):
            if table in present:
                connection.execute(statement)
        return connection

    def query(self, sql: str) -> pa.Table:
        with self.connect() as connection:
            return connection.sql(sql).to_arrow_table()


def view_statements(root: Path) -> list[tuple[str, str]]:
    """``sql/views.sql`` split into (table, CREATE VIEW statement), with the warehouse root filled in."""
    lines = (SQL_DIRECTORY / "views.sql").read_text().splitlines()
    text = "\n".join(line for line in lines if not line.strip().startswith("--"))
    statements = []
    for statement in text.split(";"):
        body = statement.strip()
        if not body:
            continue
        table = body.split()[4] if body.upper().startswith("CREATE OR REPLACE VIEW") else body.split()[2]
        statements.append((table, body.replace("{warehouse}", root.as_posix().replace("'", "''"))))
    return statements
