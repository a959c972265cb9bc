"""Warehouse integrity, one test per finding of the integrity issue, plus the kill drill.

Every test drives the real CLI (in-process through ``main`` or as a subprocess where a process has
to be killed or run concurrently) on a small random-init Llama saved to disk.
"""

import json
import random
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from resdyn.dagster_project.interface.cli import main
from resdyn.dagster_project.store.warehouse import Warehouse

from ..cli_helpers import (
    QUICK,
    REPOSITORY,
    environment,
    partition_state,
    run_cli,
    run_cli_in_process,
    save_model,
    snapshot,
)


def test_sql_cannot_write_create_or_attach(warehouse_copy, capsys, tmp_path, monkeypatch):
    _, root = warehouse_copy
    before = snapshot(root)
    target = next(root.glob("jacobians/model=m/checkpoint=local/*.parquet"))
    for sql in [f"COPY (SELECT 1 AS x) TO '{target}' (FORMAT parquet)", f"ATTACH '{root}/evil.duckdb'",
                "CREATE TABLE t AS SELECT 1", "INSERT INTO runs VALUES (1)", "SET enable_external_access = true",
                "INSTALL httpfs", f"SELECT 1; COPY (SELECT 1) TO '{root}/x.csv'", "PRAGMA version"]:
        assert main(["sql", sql, "--warehouse", str(root)]) == 2, sql
        error = capsys.readouterr().err.strip()
        assert error.count("\n") == 0 and "read-only" in error, (sql, error)
    assert main(["sql", "SELECT * FROM read_csv('/etc/passwd')", "--warehouse", str(root)]) == 2
    assert "Permission" in capsys.readouterr().err
    # nor under DuckDB's default spill folder (./.tmp), which it would otherwise allow beside the warehouse
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "secret.csv").write_text("a,b\n1,2\n")
    monkeypatch.chdir(tmp_path)
    assert main(["sql", "SELECT * FROM read_csv('.tmp/secret.csv')", "--warehouse", str(root)]) == 2
    assert "Permission" in capsys.readouterr().err
    assert snapshot(root) == before and not (root / "evil.duckdb").exists()
    assert partition_state(root)["status"] == "complete"


# every statement type DuckDB has, EXPLAIN ANALYZE included -----------------------------------------

def statement_of_every_type(root: Path) -> dict[str, list[str]]:
    """For each of DuckDB's statement types, statements of that type (some aimed at published files)."""
    target = next(root.glob("jacobians/model=m/checkpoint=local/*.parquet"))
    copy = f"COPY (SELECT 1 AS x) TO '{target}' (FORMAT parquet)"
    return {
        "INSERT": ["INSERT INTO runs VALUES (1)"], "UPDATE": ["UPDATE runs SET status = 'x'"],
        "CREATE": ["CREATE TABLE t AS SELECT 1", "CREATE VIEW v AS SELECT 1"], "DELETE": ["DELETE FROM runs"],
        "PREPARE": ["PREPARE p AS SELECT 1"], "EXECUTE": ["EXECUTE p"], "ALTER": ["ALTER VIEW runs RENAME TO r"],
        "TRANSACTION": ["BEGIN TRANSACTION"], "COPY": [copy, f"COPY runs FROM '{target}'"],
        "ANALYZE": ["ANALYZE"], "VARIABLE_SET": ["SET VARIABLE x = 1"], "CREATE_FUNC": ["CREATE MACRO f(a) AS a"],
        "EXPLAIN": [f"EXPLAIN ANALYZE {copy}", f"EXPLAIN {copy}", f"EXPLAIN (ANALYZE) {copy}",
                    f"explain analyse {copy}", f"EXPLAIN ANALYZE /* x */ {copy}",
                    "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1", f"EXPLAIN ANALYZE ATTACH '{root}/evil.duckdb'"],
        "DROP": ["DROP VIEW runs"], "EXPORT": [f"EXPORT DATABASE '{root}/exported'"], "PRAGMA": ["PRAGMA version"],
        "VACUUM": ["VACUUM"], "CALL": ["CALL pragma_version()"], "SET": ["SET enable_external_access = true",
                                                                       "RESET allowed_directories"],
        "LOAD": ["LOAD httpfs"], "EXTENSION": ["INSTALL httpfs"], "ATTACH": [f"ATTACH '{root}/evil.duckdb'"],
        "DETACH": ["DETACH memory"], "COPY_DATABASE": ["COPY FROM DATABASE memory TO memory"],
        "MERGE_INTO": ["MERGE INTO runs USING runs AS s ON false WHEN NOT MATCHED THEN DO NOTHING"],
        "MULTI": [f"SELECT 1; {copy}"],
    }


def test_every_statement_type_that_is_not_a_plain_read_is_refused(warehouse_copy, capsys):
    import duckdb

    _, root = warehouse_copy
    before = snapshot(root)
    statements = statement_of_every_type(root)
    # every type DuckDB's parser can give but the ones that only read (or that no SQL text produces)
    untyped = {"INVALID", "SELECT", "RELATION", "LOGICAL_PLAN"}
    assert set(duckdb.StatementType.__members__) - untyped <= set(statements) | {"MULTI"}
    for kind, texts in statements.items():
        for sql in texts:
            assert main(["sql", sql, "--warehouse", str(root)]) == 2, (kind, sql)
            error = capsys.readouterr().err.strip()
            parse_error = "syntax" in error or "Parser" in error
            assert error.count("\n") == 0 and ("read-only" in error or parse_error), (kind, sql, error)
    for sql in ["EXPLAIN SELECT * FROM runs", "EXPLAIN ANALYZE SELECT count(*) FROM jacobians",
                "EXPLAIN (FORMAT JSON) SELECT 1", "DESCRIBE runs", "SUMMARIZE SELECT 1 AS x", "SHOW TABLES",
                "WITH x AS (SELECT 1 AS a) SELECT * FROM x", "FROM runs", "VALUES (1)"]:
        assert main(["sql", sql, "--warehouse", str(root)]) == 0, sql
        capsys.readouterr()
    assert snapshot(root) == before and not (root / "evil.duckdb").exists()
    assert partition_state(root)["status"] == "complete"


def test_sql_over_a_missing_warehouse_is_an_error(tmp_path, capsys):
    missing = tmp_path / "nonexistent"
    for command in (["sql", "SELECT 1"], ["questions"], ["models"], ["report"]):
        assert main([*command, "--warehouse", str(missing)]) == 2, command
        error = capsys.readouterr().err.strip()
        assert str(missing) in error and "resdyn run" in error and error.count("\n") == 0, error
    assert not missing.exists()


def readme_selections() -> list[str]:
    """The asset selections the `--select` paragraph of docs/usage.md (the CLI's page) gives as examples."""
    import re

    text = (REPOSITORY / "docs" / "usage.md").read_text()
    paragraph = text[text.index("`--select` runs only"):]
    paragraph = paragraph[:paragraph.index("\n\n")]
    return re.findall(r"`(?:--select )?'([^']+)'`", paragraph)


def test_a_selection_without_its_inputs_is_refused_before_the_first_step_naming_one_that_runs(built, tmp_path,
                                                                                                capsys):
    from resdyn.dagster_project.launch.selection import check_inputs, partition_asset_keys

    model, _ = built
    root = tmp_path / "warehouse"
    common = ["run", "--model", str(model), "--samples", "6", *QUICK, "--warehouse", str(root)]
    assert main([*common, "--select", "group:inputs or group:measurements or group:spectra"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "layer_metrics_per_sample reads" in error and "transient_dynamics" in error
    assert not list(root.glob("*/model=m")) and not list(root.glob("_published/*")), "nothing may be written"
    suggested = error.split("run --select '")[1].rstrip("'")
    assert main([*common, "--select", suggested]) == 0, capsys.readouterr()
    published = Warehouse(root).published_table_names("m", "local")
    assert {"layer_metrics_per_sample", "transient_dynamics", "layer_metrics"} <= published
    assert "communities" not in published  # the suggestion adds what is needed, not everything
    # the README's examples, in the README's order: the measurement stage first, then analysis from its tables
    examples = readme_selections()
    assert examples[0] == "group:inputs or group:measurements" and len(examples) >= 3, examples
    measured = {"model_checkpoints", "samples", "activations", "jacobians", "sample_jacobians",
                "finite_difference_probe", "jacobian_folds"}
    for selection in examples:
        check_inputs(selection, partition_asset_keys(selection), measured if selection != examples[0] else set(),
                     "m@local")


def _truncate_weights(model: Path) -> str:
    shard = next(model.glob("*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:-100])
    return str(shard)


def _damage_header(model: Path) -> str:
    shard = next(model.glob("*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[8:24] = b"#" * 16
    shard.write_bytes(bytes(data))
    return str(shard)


def _rename_a_header_field(model: Path) -> str:
    """The header stays valid JSON of the same length, but one tensor's ``dtype`` is ``dtypx``."""
    shard = next(model.glob("*.safetensors"))
    data = shard.read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = data[8:8 + length].replace(b'"dtype"', b'"dtypx"', 1)
    shard.write_bytes(data[:8] + header + data[8 + length:])
    return str(shard)


def _remove_tokenizer(model: Path) -> str:
    for path in model.iterdir():
        if "token" in path.name or path.name in ("vocab.json", "merges.txt"):
            path.unlink()
    return "tokenizer"


@pytest.mark.parametrize("damage", [_truncate_weights, _damage_header, _rename_a_header_field, _remove_tokenizer])
def test_a_damaged_model_directory_is_one_line_naming_the_file_and_nothing_is_registered(built, tmp_path, damage,
                                                                                          capsys):
    model = save_model(tmp_path / "damaged")
    named = damage(model)
    root = tmp_path / "warehouse"
    capsys.readouterr()
    assert main(["run", "--model", str(model), *QUICK, "--warehouse", str(root)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and named in error and "save_pretrained" in error, error
    assert not (root / "registry.json").exists() and not list(root.glob("*/model=damaged"))


@pytest.mark.parametrize("variable, value", [("RESDYN_MODEL_RUNNERS", "abc"), ("RESDYN_MODEL_RUNNERS", "0"),
                                             ("RESDYN_GRAPH_THRESHOLD", "nan"), ("RESDYN_GRAPH_THRESHOLD", "inf")])
def test_a_bad_environment_variable_is_named(built, tmp_path, variable, value, capsys, monkeypatch):
    model, _ = built
    monkeypatch.setenv(variable, value)
    root = tmp_path / "warehouse"
    assert main(["run", "--model", str(model), *QUICK, "--warehouse", str(root)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and f"{variable}={value!r}" in error, error
    assert not list(root.glob("*/model=m"))


def test_a_damaged_registry_file_is_named_with_its_fix(built, tmp_path, capsys):
    model, _ = built
    root = tmp_path / "warehouse"
    root.mkdir()
    for damaged in ("{not json", "[1, 2]", '{"name": "x"}', '[{"name": "x", "nonsense": 1}]'):
        (root / "registry.json").write_text(damaged)
        for command in (["run", "--model", str(model), *QUICK], ["models"]):
            assert main([*command, "--warehouse", str(root)]) == 2, (damaged, command)
            error = capsys.readouterr().err.strip()
            assert error.count("\n") == 0 and str(root / "registry.json") in error and "damaged" in error, error
        assert (root / "registry.json").read_text() == damaged  # never rewritten from a half-read file


def test_a_graph_without_edges_is_a_result(built, tmp_path):
    """--graph threshold --graph-threshold 0.99 leaves graphs without an edge: singletons, no gamma chosen,
    no boundary units, every coupling test undefined with its reason; the partition completes."""
    model, _ = built
    root = tmp_path / "warehouse"
    assert main(["run", "--model", str(model), "--samples", "40", *QUICK, "--graph", "threshold",
                 "--graph-threshold", "0.99", "--warehouse", str(root)]) == 0
    store = Warehouse(root)
    graphs = store.query("SELECT layer, boundary, count(*) AS edges FROM graph_edges GROUP BY ALL").to_pylist()
    units = store.query("SELECT layer, boundary, count(*) AS units, count(DISTINCT community) AS communities, "
                        "bool_or(is_boundary) AS any_boundary, bool_and(isnan(gamma)) AS no_gamma "
                        "FROM communities GROUP BY ALL ORDER BY ALL").to_pylist()
    d = store.query("SELECT d_model FROM model_checkpoints").to_pylist()[0]["d_model"]
    activations = store.query("SELECT count(DISTINCT (layer, boundary)) AS n FROM activations").to_pylist()[0]["n"]
    assert len(units) == activations and all(row["units"] == d for row in units)
    with_edges = {(row["layer"], row["boundary"]) for row in graphs}
    empty = [row for row in units if (row["layer"], row["boundary"]) not in with_edges]
    assert empty, "the threshold must leave at least one graph without edges"
    assert all(row["communities"] == d and not row["any_boundary"] and row["no_gamma"] for row in empty)
    assert partition_state(root)["status"] == "complete"
    tests = store.query("SELECT * FROM coupling_tests").to_pylist()
    undefined = [row for row in tests if row["direction"] == "undefined"]
    assert undefined and all(row["reason"] and row["q_value"] is None and row["p_value"] == 1.0 for row in undefined)


# 2 and 4 ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("arguments, named", [
    (["--samples", "0"], "--samples"), (["--samples", "-3"], "--samples"), (["--seq-len", "0"], "--seq-len"),
    (["--samples", "abc"], "--samples"), (["--positions", "some"], "--positions"),
    (["--positions", "all", "--warmup", "12"], "warmup"), (["--device", "cuda:5"], "cuda:5"),
    (["--dtype", "float16"], "--dtype"), (["--backend", "magic"], "--backend"),
])
def test_bad_settings_fail_in_one_line_before_anything_is_written(warehouse_copy, arguments, named, capsys):
    model, root = warehouse_copy
    before, state = snapshot(root), partition_state(root)
    assert main(["run", "--model", str(model), *QUICK, *arguments, "--warehouse", str(root)]) == 2
    error = capsys.readouterr().err.strip()
    assert named in error and error.count("\n") == 0, error
    assert snapshot(root) == before and partition_state(root) == state


# 3 and the kill drill ----------------------------------------------------------------------------




def test_a_damaged_file_is_named_and_every_other_table_still_answers(warehouse_copy, capsys):
    _, root = warehouse_copy
    damaged = Warehouse(root).table_path("jacobians", "m", "local")
    damaged.write_bytes(damaged.read_bytes()[:200])
    assert main(["sql", "SELECT count(*) AS n FROM layer_metrics", "--warehouse", str(root), "--csv"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines()[-1] == "4" and str(damaged) in captured.err and "resdyn check" in captured.err
    assert partition_state(root)["status"] == "incomplete"
    assert main(["check", "--warehouse", str(root)]) == 1
    report = capsys.readouterr().out
    assert str(damaged) in report and "resdyn run --model m --checkpoint local" in report
    assert main(["questions", "--warehouse", str(root)]) == 0
    answers = capsys.readouterr().out
    assert "skipped: m@local (incomplete)" in answers and "not answerable" not in answers
    # a command that asks many questions names the damaged file once, not once per query
    questions = run_cli_in_process("questions", "--warehouse", str(root))
    assert questions.returncode == 0 and questions.stderr.count(str(damaged)) == 1, questions.stderr


def test_a_same_size_damaged_file_is_left_out_and_named_and_the_rest_answers(warehouse_copy, capsys):
    _, root = warehouse_copy
    damaged = Warehouse(root).table_path("jacobians", "m", "local")
    data = bytearray(damaged.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(64)
    damaged.write_bytes(bytes(data))  # same size: a size check cannot see it
    for command in (["sql", "SELECT count(*) AS n FROM layer_metrics", "--csv"], ["sql", "SELECT * FROM jacobians"],
                    ["models"], ["questions"], ["report", "--output", str(root / "report.html")]):
        assert main([*command, "--warehouse", str(root)]) == 0, command
        captured = capsys.readouterr()
        warnings = [line for line in captured.err.splitlines() if str(damaged) in line]
        assert len(warnings) == 1 and "sha256" in warnings[0] and "resdyn run --model m" in warnings[0], captured.err
        assert "Traceback" not in captured.err + captured.out
    assert Warehouse(root).query("SELECT count(*) AS n FROM jacobians").to_pylist() == [{"n": 0}]
    assert main(["check", "--warehouse", str(root)]) == 1
    report = capsys.readouterr().out
    assert str(damaged) in report and "changed since published" in report


def test_a_damaged_published_figure_is_named_by_check_and_rerun_by_resume(warehouse_copy, capsys):
    model, root = warehouse_copy
    figures = Warehouse(root).published_figures("m", "local")
    name, damaged = random.choice(sorted(figures.items()))
    data = bytearray(damaged.read_bytes())
    data[random.randrange(len(data))] ^= 0xFF  # same size: a size check cannot see it
    damaged.write_bytes(bytes(data))
    assert main(["check", "--warehouse", str(root)]) == 1
    report = capsys.readouterr().out
    assert str(damaged) in report and f"figure {name} of m@local" in report and "changed since published" in report
    resumed = run_cli_in_process("run", "--model", str(model), "--samples", "6", *QUICK, "--warehouse", str(root), "--resume")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "published figure(s) damaged or missing" in resumed.stdout and "not run again" not in resumed.stdout
    assert main(["check", "--warehouse", str(root)]) == 0, capsys.readouterr().out
    again = run_cli_in_process("run", "--model", str(model), "--samples", "6", *QUICK, "--warehouse", str(root),
                               "--resume")
    assert again.returncode == 0 and "every table current" in again.stdout and "not run again" in again.stdout, \
        again.stdout[-3000:]


def test_a_manifest_write_killed_midway_is_listed_and_reclaimed_but_a_live_one_is_left_alone(warehouse_copy,
                                                                                            capsys):
    import fcntl

    _, root = warehouse_copy
    manifest = Warehouse(root).manifest_path("m", "local")
    left = manifest.with_name(f".{manifest.name}.{random.randrange(10**8):08d}.inprogress")  # as mkstemp names it
    left.write_text(manifest.read_text()[: random.randrange(1, 200)])  # a kill -9 in the middle of the write
    with open(manifest.with_name(manifest.name + ".lock"), "a") as lock:  # a writer holds the manifest now
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert main(["check", "--warehouse", str(root)]) == 0, capsys.readouterr().out
        fcntl.flock(lock, fcntl.LOCK_UN)
    capsys.readouterr()
    assert main(["check", "--warehouse", str(root)]) == 1
    assert f"unpublished: {left}" in capsys.readouterr().out
    assert main(["check", "--reclaim", "--warehouse", str(root)]) == 0
    assert not left.exists() and manifest.is_file() and partition_state(root)["status"] == "complete"


def test_runs_recorded_before_a_provenance_column_existed_read_as_null(warehouse_copy):
    import pyarrow.parquet as pq

    from resdyn.dagster_project.launch.assets_index import tables_code_version

    _, root = warehouse_copy
    recorded = Warehouse(root).query("SELECT DISTINCT tables_code_version AS v FROM runs").to_pylist()
    assert recorded == [{"v": tables_code_version()}]  # what this resdyn records
    for path in (root / "runs").glob("model=*/checkpoint=*/*.parquet"):  # as an older resdyn wrote them
        pq.write_table(pq.read_table(path).drop_columns(["tables_code_version", "git_commit"]), path)
    store = Warehouse(root)
    row = store.query("SELECT settings_hash, corpus_sha256, tables_code_version, git_commit FROM runs").to_pylist()[0]
    assert row["tables_code_version"] is None and row["git_commit"] is None and row["corpus_sha256"]
    # an old run found dead by a later one is rewritten at today's schema (the strict writer refuses a row that
    # lacks a column: its reader gives the unknown ones as None), and a later run is not blocked by its lease
    old = store.run_records("m", "local")[0]
    assert old["tables_code_version"] is None
    store.record_run("m", "local", {**old, "status": "killed", "error": "found dead by a later run"})
    rewritten = [r for r in Warehouse(root).run_records("m", "local") if r["run_id"] == old["run_id"]]
    assert [(r["status"], r["tables_code_version"], r["settings_hash"]) for r in rewritten] == [
        ("killed", None, old["settings_hash"])]


def _manifest_path(root: Path) -> Path:
    return root / "_published" / "model=m" / "checkpoint=local.json"


def _damage_manifest(root: Path, kind: str) -> str:
    """Damage m@local's manifest by hand; returns what `check` must name."""
    path = _manifest_path(root)
    text = path.read_text()
    if kind == "invalid json":
        path.write_text(text.replace('"tables"', "tables", 1))
        return str(path)
    if kind == "truncated":
        path.write_text(text[: len(text) // 2])
        return str(path)
    manifest = json.loads(text)
    if kind == "generation abc":
        manifest["generation"] = "abc"
        path.write_text(json.dumps(manifest))
        return "generation 'abc'"
    entry = manifest["tables"]["jacobians"]
    if kind == "another partition's file":
        source = root / entry["file"]
        other = root / "jacobians" / "model=other" / "checkpoint=local" / source.name
        other.parent.mkdir(parents=True)
        shutil.copy(source, other)  # same size, same bytes: only the path gives it away
        entry["file"] = str(other.relative_to(root))
    elif kind == "outside the warehouse":  # a same-size copy outside the root, behind a path of the right shape
        outside = root.parent / "elsewhere" / "jacobians" / "model=m" / "checkpoint=local" / Path(entry["file"]).name
        outside.parent.mkdir(parents=True)
        shutil.copy(root / entry["file"], outside)
        entry["file"] = "../elsewhere/jacobians/model=m/checkpoint=local/" + outside.name
    path.write_text(json.dumps(manifest))
    return entry["file"]


@pytest.mark.parametrize("kind", ["invalid json", "truncated", "generation abc", "another partition's file",
                                  "outside the warehouse"])
def test_a_hand_damaged_manifest_is_reported_the_views_answer_and_a_rerun_repairs_it(warehouse_copy, kind, capsys):
    model, root = warehouse_copy
    named = _damage_manifest(root, kind)
    assert main(["check", "--warehouse", str(root)]) == 1
    report = capsys.readouterr().out
    assert named in report and str(_manifest_path(root)) in report, report
    for command in (["sql", "SELECT count(*) AS n FROM runs"], ["models"], ["questions"]):
        assert main([*command, "--warehouse", str(root)]) == 0, command
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err + captured.out and str(_manifest_path(root)) in captured.err
    shown = Warehouse(root).query("SELECT DISTINCT model FROM jacobians").to_pylist()
    assert shown in ([], [{"model": "m"}]) and {"model": "other"} not in shown
    if kind in ("invalid json", "another partition's file"):  # a rerun publishes over what is sound (two cases:
        # an unusable manifest and a bad entry; a rerun costs a partition's run)
        assert main(["run", "--model", str(model), "--samples", "6", *QUICK, "--warehouse", str(root)]) == 0
        capsys.readouterr()
        if kind == "another partition's file":  # the planted copy: a file no manifest names, listed, then reclaimed
            assert main(["check", "--warehouse", str(root)]) == 1
            assert f"unpublished: {root / 'jacobians' / 'model=other'}" in capsys.readouterr().out
            planted = sum(path.stat().st_size for path in (root / "jacobians" / "model=other").rglob("*.parquet"))
            assert main(["check", "--reclaim", "--warehouse", str(root)]) == 0
            assert f"removed 1 unpublished file(s), {planted} bytes" in capsys.readouterr().out
            assert not (root / "jacobians" / "model=other").exists()
        assert main(["check", "--warehouse", str(root)]) == 0, capsys.readouterr().out
        assert partition_state(root)["status"] == "complete"





def _register(arguments):
    file, name, start = arguments
    from resdyn.models.registry import ModelRegistry, ModelSpec

    while time.time() < start:
        time.sleep(0.001)
    ModelRegistry(Path(file)).add(ModelSpec(name, "llama", f"/models/{name}", {"local": "local"}))


def test_concurrent_registrations_all_land(tmp_path):
    import multiprocessing

    from resdyn.models.registry import ModelRegistry

    file = tmp_path / "registry.json"
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        for round_ in range(4):
            start = time.time() + 1.0
            pool.map(_register, [(str(file), f"model-{round_}-{i}", start) for i in range(3)])
    names = {entry["name"] for entry in json.loads(file.read_text())}
    assert names == {f"model-{r}-{i}" for r in range(4) for i in range(3)}
    assert {f"model-3-{i}" for i in range(3)} <= set(ModelRegistry(file).specs)






def test_environment_settings_are_honoured_and_a_bad_one_is_named(built, tmp_path):
    model, _ = built
    root = tmp_path / "warehouse"
    env = environment(RESDYN_SEED="5", RESDYN_DTYPE="float32", RESDYN_POSITIONS="all", RESDYN_WARMUP="9",
                      RESDYN_SAMPLES="3")
    completed = run_cli_in_process("run", "--model", str(model), *QUICK, "--warehouse", str(root), env=env)
    assert completed.returncode == 0, completed.stdout[-3000:]
    store = Warehouse(root)
    settings = json.loads(store.query("SELECT settings FROM runs").to_pylist()[0]["settings"])
    assert (settings["seed"], settings["dtype"], settings["positions"], settings["warmup"], settings["n_samples"]) == (
        5, "float32", "all", 9, 3)
    assert store.query("SELECT DISTINCT seed FROM samples").to_pylist() == [{"seed": 5}]
    assert store.query("SELECT list(DISTINCT position ORDER BY position) AS p FROM samples").to_pylist() == [
        {"p": [9, 10, 11]}]
    assert store.query("SELECT DISTINCT dtype FROM model_checkpoints").to_pylist() == [{"dtype": "float32"}]
    # a flag beats the variable
    bad = environment(RESDYN_SAMPLES="abc")
    assert run_cli_in_process("sql", "SELECT 1 AS one", "--warehouse", str(root), env=bad).returncode == 0
    refused = run_cli("run", "--model", str(model), "--warehouse", str(root), env=bad)  # a process: one line
    assert refused.returncode == 2 and "RESDYN_SAMPLES" in refused.stderr and refused.stderr.count("\n") == 1
    flagged = run_cli_in_process("run", "--model", str(model), "--samples", "x", "--warehouse", str(root), env=bad)
    assert "--samples" in flagged.stderr and "RESDYN_SAMPLES" not in flagged.stderr



def test_a_revision_for_a_local_directory_is_refused(built, tmp_path, capsys):
    model, _ = built
    root = tmp_path / "warehouse"
    assert main(["run", "--model", str(model), "--revision", "nosuchrev", "--warehouse", str(root)]) == 2
    assert "local directory" in capsys.readouterr().err
    assert not (root / "registry.json").exists()



def test_written_files_honour_the_umask(built, tmp_path):
    script = (
        "import os, sys, numpy as np, pyarrow as pa\n"
        "os.umask(0o027)\n"
        f"sys.path.insert(0, {str(REPOSITORY)!r})\n"
        "from resdyn.dagster_project.store.warehouse import Warehouse\n"
        "from resdyn.models.registry import ModelRegistry, ModelSpec\n"
        f"store = Warehouse({str(tmp_path / 'w')!r})\n"
        "store.write('training_loss', 'm', 'c', pa.table({'step': pa.array([1], pa.int32()), 'loss': [0.5], "
        "'training_corpus': ['x']}))\n"
        "ModelRegistry(store.registry_file).add(ModelSpec('m', 'llama', '/m', {'c': 'c'}))\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=REPOSITORY)
    files = [p for p in (tmp_path / "w").rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    assert len(files) >= 3
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o640, path



@pytest.mark.parametrize("sql, hint", [("SELEC 1", "syntax"), ("SELECT * FROM no_such_table", "tables:"),
                                       ("SELECT no_such_column FROM layer_metrics", "DESCRIBE")])
def test_sql_errors_are_one_line_with_a_hint(built, sql, hint, capsys):
    _, root = built
    assert main(["sql", sql, "--warehouse", str(root)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "Traceback" not in error and hint in error, error








def test_offline_the_hub_is_asked_at_most_once_and_quickly(tmp_path):
    script = (
        "import logging, time, sys\n"
        f"sys.path.insert(0, {str(REPOSITORY)!r})\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "started = time.perf_counter()\n"
        "from resdyn.corpus import load_training_text, load_wikitext\n"
        "from resdyn.models.hub import _probe\n"
        "labels = [load_wikitext('test').label, load_wikitext('valid').label, load_training_text().label]\n"
        "print(labels[0], round(time.perf_counter() - started, 1), _probe.cache_info().misses)\n"
    )
    base = {key: value for key, value in environment().items()
            if key not in ("RESDYN_WIKITEXT_DIR", "RESDYN_WIKITEXT_TOKENIZED_DIR", "HF_HUB_OFFLINE",
                           "HF_DATASETS_OFFLINE")}
    unreachable = subprocess.run([sys.executable, "-c", script], env={**base, "HF_ENDPOINT": "https://127.0.0.1:9"},
                                 capture_output=True, text=True, timeout=120)
    label, seconds, probes = unreachable.stdout.split()
    # one probe, not one per load (about 1 s idle; the bound only rules out waiting on the network's timeouts)
    assert label == "fallback:pydoc_data.topics" and int(probes) == 1 and float(seconds) < 30, unreachable.stderr[-2000:]
    offline = subprocess.run([sys.executable, "-c", script], env={**base, "HF_HUB_OFFLINE": "1"},
                             capture_output=True, text=True, timeout=120)
    label, seconds, probes = offline.stdout.split()
    assert label == "fallback:pydoc_data.topics" and int(probes) == 0 and float(seconds) < 30


# forgetting a partition and the registry's partition keys (UI findings 2 and 3) ----------------

def test_forget_asks_then_removes_the_partition_its_data_and_its_registry_entry(warehouse_copy, capsys, monkeypatch,
                                                                               tmp_path):
    import dagster as dg

    from resdyn.dagster_project.asset_layer.partitions import model_checkpoint_partitions
    from resdyn.models.registry import ModelRegistry

    _, root = warehouse_copy
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    dg.DagsterInstance.get().add_dynamic_partitions(model_checkpoint_partitions.name, ["m@local"])
    assert main(["forget", "m@nowhere", "--warehouse", str(root)]) == 2
    assert "unknown partition 'm@nowhere'" in capsys.readouterr().err
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    assert main(["forget", "m@local", "--warehouse", str(root)]) == 1
    assert partition_state(root)["status"] == "complete"
    assert main(["forget", "m@local", "--yes", "--warehouse", str(root)]) == 0
    assert partition_state(root) == {}
    assert not any((root / "jacobians").rglob("*.parquet")) and not (root / "_artefacts" / "figures" / "m").exists()
    assert "m" not in ModelRegistry(root / "registry.json").specs
    assert "m@local" not in dg.DagsterInstance.get().get_dynamic_partitions(model_checkpoint_partitions.name)
    assert Warehouse(root).query("SELECT count(*) AS n FROM layer_metrics").to_pylist() == [{"n": 0}]


def test_forget_with_no_one_to_ask_removes_nothing_and_says_so_in_one_line(warehouse_copy, capsys, monkeypatch):
    """stdin at its end (``< /dev/null``, a pipe) or closed: one line saying nothing was removed and to give --yes,
    no EOFError; a SIGTERM at the question stops it with 143 (128 + SIGTERM, as the help says) and one line."""
    import io
    import os
    import select
    import signal

    from ..cli_helpers import RESDYN, environment

    _, root = warehouse_copy
    closed = io.StringIO()
    closed.close()
    for stdin, says in ((io.StringIO(""), "stdin ended before an answer"), (None, "stdin is closed, so there is no one to ask"),
                        (closed, "stdin is closed, so there is no one to ask")):
        monkeypatch.setattr("sys.stdin", stdin)
        assert main(["forget", "m@local", "--warehouse", str(root)]) == 2
        error = capsys.readouterr().err
        assert error == f"resdyn: error: nothing removed: {says}; give --yes to remove m@local without asking\n"
    assert partition_state(root)["status"] == "complete"
    process = subprocess.Popen([*RESDYN, "forget", "m@local", "--warehouse", str(root)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment())
    try:
        asked, deadline = b"", time.monotonic() + 120
        while b"[y/N]" not in asked:
            assert time.monotonic() < deadline and process.poll() is None, asked
            if select.select([process.stdout], [], [], 1.0)[0]:
                asked += os.read(process.stdout.fileno(), 4096)
        process.send_signal(signal.SIGTERM)
        _, error = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143 and error.decode().splitlines() == ["resdyn: stopped by SIGTERM"], error
    assert partition_state(root)["status"] == "complete"


def test_the_sensor_keeps_partition_keys_equal_to_the_registry(built, tmp_path):
    import dagster as dg

    from resdyn.dagster_project.asset_layer.partitions import model_checkpoint_partitions
    from resdyn.dagster_project.asset_layer.resources import WarehouseResource
    from resdyn.dagster_project.launch.sensors import registry_partitions
    from resdyn.models.registry import ModelRegistry

    _, root = built
    instance = dg.DagsterInstance.ephemeral()
    typed = ["tiny-llama@step-000300", "m@local", "smollm2-135m@simex-x2-3"]
    instance.add_dynamic_partitions(model_checkpoint_partitions.name, typed)
    context = dg.build_sensor_context(instance=instance)
    result = registry_partitions(context, warehouse=WarehouseResource(root=str(root)))
    requests = {type(r).__name__: set(r.partition_keys) for r in result.dynamic_partitions_requests}
    registry = ModelRegistry(root / "registry.json")
    registered = set(registry.partition_keys())
    offered = set(registry.default_partition_keys())
    assert requests["DeleteDynamicPartitionsRequest"] == {"tiny-llama@step-000300"}  # typed in the UI, names nothing
    # the SIMEX set's 16 draws are offered once they have data (a registered one typed in stays)
    assert requests["AddDynamicPartitionsRequest"] == offered - {"m@local"}
    assert "smollm2-135m@simex-x1-1" in registered - offered and "smollm2-135m@trained" in offered
    assert "tiny-llama@step-000400" in registered and "llama-3.1-8b@main" in registered
