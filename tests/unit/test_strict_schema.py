"""The schema refuses instead of dropping: every way a body builds a table (row dicts, an Arrow table, a record
batch) is checked against the table's schema, and the result of data that fits equals what pyarrow's own
conversion gives (the independent reference)."""

import numpy as np
import pyarrow as pa
import pytest

from resdyn.dagster_project.store import schema
from resdyn.dagster_project.store.arrow_tables import record_batch
from resdyn.dagster_project.store.errors import SchemaMismatchError
from resdyn.dagster_project.store.warehouse import Warehouse


@pytest.fixture
def probe_table():
    schema._table("strict_probe", "row", "toy", schema.LAYER, schema.SUBLAYER,
                  schema._c("value", schema.F64, "a number"), schema._c("values", "float64[d]", "a row"))
    yield "strict_probe"
    schema.TABLES.pop("strict_probe", None)


def _rows(rng, n=5, d=3):
    return [{"layer": int(rng.integers(0, 9)), "sublayer": str(rng.choice(["attn", "mlp"])),
             "value": float(rng.normal()), "values": rng.normal(size=d).tolist()} for _ in range(n)]


def test_rows_that_fit_give_the_table_pyarrow_gives(probe_table, fresh_seed):
    rows = _rows(np.random.default_rng(fresh_seed))
    reference = pa.Table.from_pylist(rows, schema=schema.table_spec(probe_table).schema(3))
    assert schema.rows_table(probe_table, rows, 3).equals(reference)
    shuffled = [dict(reversed(list(row.items()))) for row in rows]  # key order is not a column order
    assert schema.rows_table(probe_table, shuffled, 3).equals(reference)
    assert schema.conform(probe_table, reference.select(["values", "value", "sublayer", "layer"]), 3).equals(reference)
    assert schema.rows_table(probe_table, [], 3).num_rows == 0


@pytest.mark.parametrize("build", ["rows", "table", "record_batch"])
def test_a_column_the_schema_lacks_is_an_error_naming_table_and_column(probe_table, fresh_seed, build):
    rows = [{**row, "new_metric": 1.0} for row in _rows(np.random.default_rng(fresh_seed))]
    with pytest.raises(SchemaMismatchError, match=r"strict_probe.*'new_metric'.*not in the schema"):
        _build(build, probe_table, rows)


@pytest.mark.parametrize("build", ["rows", "table", "record_batch"])
def test_a_missing_column_is_an_error_not_a_column_of_nulls(probe_table, fresh_seed, build):
    rows = [{key: value for key, value in row.items() if key != "value"}
            for row in _rows(np.random.default_rng(fresh_seed))]
    with pytest.raises(SchemaMismatchError, match=r"strict_probe.*'value'.*missing"):
        _build(build, probe_table, rows)


@pytest.mark.parametrize("build", ["rows", "table", "record_batch"])
def test_a_value_that_does_not_cast_is_an_error_not_a_truncation(probe_table, fresh_seed, build):
    rows = _rows(np.random.default_rng(fresh_seed))
    rows[-1]["layer"] = 2.5  # from_pylist(rows, schema=...) makes this layer 2 without a word
    assert pa.Table.from_pylist(rows, schema=schema.table_spec(probe_table).schema(3))["layer"][-1].as_py() == 2
    with pytest.raises(SchemaMismatchError, match=r"strict_probe.*'layer'.*int32"):
        _build(build, probe_table, rows)


def test_a_row_that_names_other_columns_than_the_first_is_refused_with_its_index(probe_table, fresh_seed):
    rows = _rows(np.random.default_rng(fresh_seed))
    rows[3] = {**{key: value for key, value in rows[3].items() if key != "value"}, "valeu": 1.0}
    with pytest.raises(SchemaMismatchError, match=r"'valeu' in row 3"):
        schema.rows_table(probe_table, rows, 3)


def test_the_writer_refuses_what_it_used_to_drop_and_leaves_no_file(probe_table, fresh_seed, tmp_path):
    rows = _rows(np.random.default_rng(fresh_seed))
    table = pa.Table.from_pylist(rows).append_column("new_metric", pa.array(np.ones(len(rows))))
    store = Warehouse(tmp_path)
    with pytest.raises(SchemaMismatchError, match="new_metric"):
        store.write(probe_table, "m", "c", table, width=3)
    assert not [path for path in tmp_path.rglob("*") if path.is_file()
                and not path.name.endswith((".lock", ".json"))]  # no parquet, published or temporary


def _build(how: str, name: str, rows: list[dict]):
    if how == "rows":
        return schema.rows_table(name, rows, 3)
    columns = {key: [row[key] for row in rows] for key in rows[0]}
    if how == "table":
        return schema.conform(name, pa.table(columns), 3)
    arrays = {key: (np.asarray(values) if key != "values" else pa.array(values, pa.list_(pa.float64(), 3)))
              for key, values in columns.items()}
    return record_batch(name, 3, arrays)


@pytest.mark.parametrize("column, value", [("sublayer", 7), ("layer", True), ("value", "0.5"), ("layer", 2.5)])
@pytest.mark.parametrize("build", ["rows", "table", "record_batch", "constant"])
def test_a_value_of_another_kind_is_refused_where_arrow_would_convert_it(probe_table, fresh_seed, build, column,
                                                                          value):
    """A number into a string column, a boolean or string into a number column: Arrow's casts would make them
    '7', 1 and 0.5; the schema refuses them (a whole float into an integer column passes: the cast checks)."""
    rows = _rows(np.random.default_rng(fresh_seed))
    for row in rows:
        row[column] = value
    if build == "constant":
        columns = {key: [row[key] for row in rows] for key in rows[0]}
        arrays = {key: (np.asarray(values) if key != "values" else pa.array(values, pa.list_(pa.float64(), 3)))
                  for key, values in columns.items()}
        arrays[column] = value  # a scalar, repeated
        with pytest.raises(SchemaMismatchError, match=rf"strict_probe.*'{column}'"):
            record_batch(probe_table, 3, arrays)
        return
    with pytest.raises(SchemaMismatchError, match=rf"strict_probe.*'{column}'"):
        _build(build, probe_table, rows)
    for row in rows:
        row["layer"] = 4.0
        row[column] = 4.0 if column == "layer" else {"sublayer": "mlp", "value": 0.5}.get(column, 4.0)
    assert _build(build, probe_table, rows).column("layer").to_pylist() == [4] * len(rows)


def test_a_table_written_before_its_newest_columns_reads_them_as_nulls(tmp_path, fresh_seed):
    """A warehouse folder written before a column existed (layer_metrics before eigenvector_condition_number,
    coupling_tests before its degree strata): DuckDB's view has the column, null in the old file's rows, beside a
    new file's values, as the object store's schema-driven reader gives it; the SQL the claims run binds."""
    import random
    from types import SimpleNamespace

    import duckdb
    import pyarrow.parquet as pq

    from resdyn.dagster_project.store.views import _empty, _view

    rng = random.Random(fresh_seed)
    added = {"layer_metrics": "eigenvector_condition_number", "coupling_tests": "stratum_boundary"}
    connection = duckdb.connect(":memory:")
    for table, column in added.items():
        files = []
        for checkpoint, has_it in (("old", False), ("new", True)):
            schema = _empty(table).drop_columns(["model", "checkpoint"]).schema
            row = {field.name: None for field in schema}
            row.update(layer=rng.randrange(30), sublayer="attn")
            value = [rng.randrange(9), rng.randrange(9)] if column.startswith("stratum") else rng.uniform(1, 99)
            row[column] = value
            written = pa.Table.from_pylist([row], schema=schema)
            if not has_it:
                written = written.drop_columns([column])
            path = tmp_path / table / "model=m" / f"checkpoint={checkpoint}" / "part.parquet"
            path.parent.mkdir(parents=True)
            pq.write_table(written, path)
            files.append(str(path))
        _view(connection, SimpleNamespace(arrow_filesystem=None), table, files[:1])  # a warehouse of old files only
        assert dict(connection.sql(f"SELECT checkpoint, {column} FROM {table}").fetchall()) == {"old": None}
        _view(connection, SimpleNamespace(arrow_filesystem=None), table, files)
        got = dict(connection.sql(f"SELECT checkpoint, {column} FROM {table}").fetchall())
        assert got == {"old": None, "new": value}, (table, got)
