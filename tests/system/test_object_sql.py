"""Read-only SQL over a warehouse on a real S3 server (SeaweedFS, the ``s3_server`` fixture): every table and view
answers as it does over the same files on disk, the named questions print the same, and the SQL guard's refusals
hold (no writes, no file outside the warehouse's tables, locked configuration)."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from resdyn.dagster_project.interface.cli import main
from resdyn.dagster_project.store.object_store import ObjectStore
from resdyn.dagster_project.store.object_warehouse import ObjectWarehouse
from resdyn.dagster_project.store.schema import TABLES
from resdyn.dagster_project.store.warehouse import Warehouse

from ..cli_helpers import environment, run_cli_in_process
from ..s3_helpers import put_published_generation


def _without_nan(value):
    """``value`` with every float NaN replaced by a marker (NaN != NaN would make equal tables differ)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, list):
        return [_without_nan(item) for item in value]
    if isinstance(value, dict):
        return {key: _without_nan(item) for key, item in value.items()}
    return value


@pytest.fixture
def mirrored(built, s3_warehouse):
    _, root = built
    put_published_generation(root, ObjectStore(s3_warehouse))
    return root, s3_warehouse


def test_every_table_and_view_answers_over_s3_as_over_the_same_files_on_disk(mirrored):
    root, location = mirrored
    disk, s3 = Warehouse(root), ObjectWarehouse(location).require_existing()
    compared = 0
    for name in [*TABLES, "partitions", "published_tables", "study_tables", "partition_sources"]:
        sql = f"SELECT * EXCLUDE (run_id) FROM {name} ORDER BY ALL" if name == "runs" else \
            f"SELECT * FROM {name} ORDER BY ALL"
        on_disk, on_s3 = disk.query(sql), s3.query(sql)
        assert on_s3.schema == on_disk.schema, name
        assert _without_nan(on_s3.to_pylist()) == _without_nan(on_disk.to_pylist()), name
        compared += on_disk.num_rows > 0
    assert compared >= 15  # the built partition fills most tables: the comparison is not of empty views
    assert s3.query("SELECT status FROM partitions").to_pylist() == [{"status": "complete"}]


def test_named_questions_models_and_sql_through_the_cli_print_the_same_over_s3(mirrored, s3_environment):
    root, location = mirrored

    def cli(*arguments) -> str:
        completed = run_cli_in_process(*arguments, env=environment(**s3_environment))
        assert completed.returncode == 0, completed.stderr[-2000:]
        return completed.stdout

    assert cli("questions", "--warehouse", str(location)) == cli("questions", "--warehouse", str(root))
    models = cli("models", "--warehouse", str(location))
    assert models == cli("models", "--warehouse", str(root)) and "m@local" in models  # the added model's registry
    query = "SELECT layer, sublayer, round(spectral_radius, 9) AS r FROM layer_metrics ORDER BY ALL"
    assert cli("sql", query, "--warehouse", str(location), "--csv") == cli("sql", query, "--warehouse", str(root),
                                                                         "--csv")


def test_sql_over_s3_cannot_write_or_read_anything_but_the_warehouses_tables(mirrored, capsys, s3_environment):
    root, location = mirrored
    store = ObjectStore(location)
    before = {found.relative: found.etag for found in store.list()}
    published = next(key for key in before if key.startswith("jacobians/"))
    for sql in [f"COPY (SELECT 1 AS x) TO '{root}/x.parquet' (FORMAT parquet)", f"ATTACH '{root}/evil.duckdb'",
                "CREATE TABLE t AS SELECT 1", "SET enable_external_access = true", "INSTALL httpfs",
                f"COPY (SELECT 1) TO 's3://{location.bucket}/{location.prefix}/x.csv'"]:
        assert main(["sql", sql, "--warehouse", str(location)]) == 2, sql
        assert "read-only" in capsys.readouterr().err, sql
    for sql in ["SELECT * FROM read_csv('/etc/passwd')", f"SELECT * FROM read_parquet('{root}/{published}')",
                f"SELECT * FROM read_parquet('s3://{location.bucket}/{location.prefix}/{published}')"]:
        assert main(["sql", sql, "--warehouse", str(location)]) == 2, sql
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and ("Permission" in error or "disabled" in error), (sql, error)
    assert {found.relative: found.etag for found in store.list()} == before
    assert not (root / "x.parquet").exists() and not (root / "evil.duckdb").exists()


def test_an_object_that_is_not_the_one_published_is_left_out_of_the_views_and_named(mirrored, capsys):
    root, location = mirrored
    store = ObjectStore(location)
    manifest = json.loads(store.get("_published/model=m/checkpoint=local.json").data)
    entry = manifest["tables"]["layer_metrics"]
    data = bytearray(store.get(entry["file"]).data)
    data[len(data) // 2] ^= 0xFF
    store.put(entry["file"], bytes(data))  # same size, another ETag
    s3 = ObjectWarehouse(location)
    assert s3.query("SELECT count(*) AS n FROM layer_metrics").to_pylist() == [{"n": 0}]
    assert any("layer_metrics" in problem and "ETag" in problem for problem in s3.problems)
    assert s3.query("SELECT status FROM partitions").to_pylist() != [{"status": "complete"}]
    import resdyn  # the notebook warns where the CLI does, with the CLI's line
    from resdyn.dagster_project.interface.notebook import LeftOutWarning

    with pytest.warns(LeftOutWarning, match=r"^left out s3://.*layer_metrics.* is not the object published"):
        assert resdyn.open(str(location)).table("layer_metrics", model="m").collect().height == 0


def test_the_notebook_over_s3_gives_the_frames_and_matrices_it_gives_on_disk(mirrored):
    import polars as pl

    import resdyn

    root, location = mirrored
    disk, s3 = resdyn.open(str(root)), resdyn.open(str(location))
    assert str(location) in repr(s3)
    for name in ("layer_metrics", "eigenvalues", "communities", "runs"):
        on_disk, on_s3 = disk.table(name).collect(), s3.table(name).collect()
        assert on_s3.columns == on_disk.columns, name
        assert on_s3.height == on_disk.height > 0, name
        assert on_s3.sort(on_s3.columns[:6]).equals(on_disk.sort(on_disk.columns[:6]), null_equal=True), name
    assert s3.partitions().equals(disk.partitions())
    depths = disk.sql("SELECT DISTINCT depth FROM jacobians ORDER BY depth")["depth"].to_list()
    for depth in depths:
        matrix = s3.jacobian("m", "local", depth)
        assert matrix.dtype == "float64" and (matrix == disk.jacobian("m", "local", depth)).all()
    assert isinstance(s3.sql("fdr_significant_layers"), pl.DataFrame)


def test_check_over_s3_reads_every_published_object_names_damage_and_reclaims_leftovers(mirrored, s3_environment):
    root, location = mirrored
    store = ObjectStore(location)

    def check(*extra) -> subprocess.CompletedProcess:
        return run_cli_in_process("check", "--warehouse", str(location), *extra, env=environment(**s3_environment))

    clean = check()
    assert clean.returncode == 0 and "every published file is readable" in clean.stdout, clean.stdout + clean.stderr
    # a killed run's leftovers: a table object and a staged entry no manifest names, its run holding no lease
    leftover = "eigenvalues/model=m/checkpoint=local/dead-run.parquet"
    store.put(leftover, b"PAR1 not finished")
    store.put("_staging/dead-run/model=m/checkpoint=local/eigenvalues.json", b"{}")
    manifest = json.loads(store.get("_published/model=m/checkpoint=local.json").data)
    damaged = manifest["tables"]["singular_values"]["file"]
    data = bytearray(store.get(damaged).data)
    data[len(data) // 2] ^= 0xFF
    store.put(damaged, bytes(data))
    found = check()
    assert found.returncode == 1
    lines = found.stdout.splitlines()
    assert any(damaged in line and "sha256" in line and "resdyn run --model m" in line for line in lines)
    assert sum(line.startswith("unpublished:") for line in lines) == 2
    assert any(leftover in line for line in lines)
    reclaimed = check("--reclaim")
    assert "removed 2 unpublished object(s)" in reclaimed.stdout
    assert store.info(leftover) is None and not store.list("_staging/")
    assert store.info(manifest["tables"]["eigenvalues"]["file"]) is not None  # the published one is kept


def test_the_report_over_s3_is_drawn_on_this_machine_equal_to_the_disks_and_writes_nothing_to_the_store(
        warehouse_copy, s3_warehouse, tmp_path, capsys):
    from resdyn.dagster_project.study.report import build_report

    _, root = warehouse_copy  # a copy: the disk report draws its figures inside the warehouse folder
    store = ObjectStore(s3_warehouse)
    put_published_generation(root, store)
    before = {found.relative: found.etag for found in store.list("")}
    assert main(["report", "--warehouse", str(s3_warehouse)]) == 2  # no --output: refused, naming it
    assert "--output FILE" in capsys.readouterr().err
    output = tmp_path / "s3-report" / "report.html"
    assert main(["report", "--warehouse", str(s3_warehouse), "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert f"report: {output}" in printed
    drawn = sorted(path.relative_to(output.parent) for path in output.parent.rglob("*.png"))
    assert drawn and all(path.parts[0] == "report_figures" for path in drawn)
    assert "metrics_by_checkpoint of m: " + str(output.parent / "report_figures" / "comparisons" / "m") in printed
    assert {found.relative: found.etag for found in store.list("")} == before  # the store is read, never written
    disk_output, disk_results = build_report(Warehouse(root), tmp_path / "disk-report.html")
    s3_output, s3_results = build_report(ObjectWarehouse(s3_warehouse).require_existing(), output)
    assert sorted(s3_results) == sorted(disk_results) and len(disk_results) >= 4
    for name, (table, figure) in disk_results.items():
        assert s3_results[name][0].equals(table), name
        assert s3_results[name][1].read_bytes() == figure.read_bytes(), name
    assert s3_output.read_text().replace(str(s3_warehouse), "W") == disk_output.read_text().replace(str(root), "W")


def test_forget_over_s3_is_refused_while_a_live_run_holds_the_partition_then_removes_every_object_of_it(
        mirrored, capsys, monkeypatch, tmp_path):
    _, location = mirrored
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    store = ObjectStore(location)
    registry_and_neighbours = {"registry.json", "eigenvalues/model=m2/checkpoint=local/r.parquet",
                               "eigenvalues/model=m/checkpoint=kept/r.parquet", "_artefacts/figures/m2/local/r/x.png",
                               "_staging/r/model=m2/checkpoint=local/t.json",
                               "_staging/r/model=m/checkpoint=localer/t.json"}
    for relative in registry_and_neighbours - {"registry.json"}:  # other partitions' objects: all kept
        store.put(relative, b"another partition's")
    ours = {"_staging/r/model=m/checkpoint=local/figures/x.json", "_staging/r/model=m/checkpoint=local/t.json",
            "eigenvalues/model=m/checkpoint=local/nested/not-a-run.bin"}
    for relative in ours:  # what runs of m@local staged, and an object under its prefix no run would name
        store.put(relative, b"m@local's")
    assert ours < {found.relative for found in store.list("")}
    holder = ObjectWarehouse(location, run_id="a-live-run")
    holder.acquire_lease("m", "local", single_process=True)  # this process: alive, so judged live
    assert main(["forget", "m@local", "--yes", "--warehouse", str(location)]) == 1
    assert "being materialized by run a-live-run" in capsys.readouterr().err
    assert ObjectWarehouse(location).partitions() == [("m", "local")]  # nothing removed
    holder.release_lease("m", "local")
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    assert main(["forget", "m@local", "--warehouse", str(location)]) == 1  # asked, and told no
    assert ObjectWarehouse(location).partitions() == [("m", "local")]
    assert main(["forget", "m@local", "--yes", "--warehouse", str(location)]) == 0
    assert "data path(s) removed; removed from the registry" in capsys.readouterr().out
    assert ObjectWarehouse(location).partitions() == []
    assert {found.relative for found in store.list("")} == registry_and_neighbours  # m@local's all gone, its lease too
    assert "m" not in ObjectWarehouse(location).registry().specs
