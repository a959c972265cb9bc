"""The Parquet warehouse: hive-partitioned tables, atomic partition writes, read-only DuckDB.

Layout: ``<root>/<table>/model=<model>/checkpoint=<checkpoint>/data.parquet`` (zstd, statistics
on). ``model`` and ``checkpoint`` live in the path, not in the file: DuckDB's hive partitioning
adds them as VARCHAR columns. A partition is written to a hidden temp file in its directory and
renamed over ``data.parquet``, so a reader sees the old partition or the new one, never half of
one, and a rerun replaces exactly its partition. Temp files do not match ``*.parquet``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger(__name__)

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = REPOSITORY_ROOT / "warehouse"
SQL_DIRECTORY = REPOSITORY_ROOT / "sql"
PARTITION_FILE = "data.parquet"
IN_PROGRESS_SUFFIX = ".inprogress"


class CorruptPartitionError(IOError):
    pass


class MissingPartitionError(FileNotFoundError):
    pass


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

    def write(self, table: str, model: str, checkpoint: str, data: pa.Table) -> Path:
        """Replace the partition atomically: temp file in the same directory, fsync, rename."""
        for column in ("model", "checkpoint"):
            if column in data.column_names:
                data = data.drop_columns([column])  # carried by the hive path
        directory = self.partition_directory(table, model, checkpoint)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob(f".*{IN_PROGRESS_SUFFIX}"):
            stale.unlink(missing_ok=True)  # left by a killed writer
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".", suffix=IN_PROGRESS_SUFFIX)
        try:
            with os.fdopen(handle, "wb") as stream:
                pq.write_table(data, stream, compression="zstd", write_statistics=True)
                stream.flush()
                os.fsync(stream.fileno())
            target = directory / PARTITION_FILE
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return target

    # -- reads ----------------------------------------------------------------------------------

    def read(self, table: str, model: str, checkpoint: str) -> pa.Table:
        path = self.partition_path(table, model, checkpoint)
        if not path.is_file():
            raise MissingPartitionError(
                f"table {table!r} has no partition model={model}/checkpoint={checkpoint} under {self.root}; "
                f"materialize it first (`resdyn run --model {model} --checkpoint {checkpoint}`)"
            )
        try:
            return pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as error:
            raise CorruptPartitionError(
                f"{path} is not a readable Parquet file ({error}); delete it and rematerialize the partition "
                f"(`resdyn run --model {model} --checkpoint {checkpoint}`)"
            ) from error

    def content_hash(self, table: str, model: str, checkpoint: str) -> str:
        """Hash of the partition's data (not its file bytes), for Dagster data versions."""
        digest = hashlib.sha256()
        for batch in self.read(table, model, checkpoint).to_batches():
            for column in batch.columns:
                for buffer in column.buffers():
                    if buffer is not None:
                        digest.update(memoryview(buffer))
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
