"""The notebook API (resdyn.open, resdyn.run, polars frames) against the CLI on a warehouse built here, and the
tour notebook executed end to end."""

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import resdyn
from resdyn.dagster_project.interface.cli import main
from resdyn.dagster_project.store.errors import QueryError, ReadOnlySqlError
from resdyn.dagster_project.store.schema import PROVENANCE_COLUMNS
from resdyn.dagster_project.store.warehouse import Warehouse, new_run_id

from ..cli_helpers import REPOSITORY

QUICK_SETTINGS = dict(n_samples=6, sequence_length=12, per_sample_subsample=2, leiden_seeds=2, n_permutations=50)


@pytest.fixture(scope="module")
def study_root(built, tmp_path_factory):
    """The session's m@local warehouse, copied, plus a second model materialized through resdyn.run."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from resdyn.models.byte_tokenizer import build_byte_tokenizer
    from resdyn.models.tiny_configs import tiny_config

    _, root = built
    copy = tmp_path_factory.mktemp("notebook") / "warehouse"
    shutil.copytree(root, copy)
    second = copy.parent / "n"  # narrower than m (d = 16 against 32): tables of both widths side by side
    torch.manual_seed(1)
    AutoModelForCausalLM.from_config(tiny_config("llama", hidden_size=16, n_layers=2)).save_pretrained(second)
    build_byte_tokenizer().save_pretrained(second)
    study = resdyn.run(str(second), warehouse=copy, progress=True, **QUICK_SETTINGS)
    assert isinstance(study, resdyn.dagster_project.interface.notebook.Study)
    return copy


def _cli_csv(root, query, capsys) -> pl.DataFrame:
    capsys.readouterr()
    assert main(["sql", query, "--csv", "--warehouse", str(root)]) == 0
    return pl.read_csv(io.StringIO(capsys.readouterr().out.strip() + "\n"))  # print() adds a line after the CSV


def test_run_goes_through_the_cli_path_and_publishes(study_root):
    study = resdyn.open(study_root)
    partitions = study.partitions()
    assert sorted(partitions["model"].to_list()) == ["m", "n"] and set(partitions["status"]) == {"complete"}
    runs = study.runs("n@local")
    assert runs["status"].to_list() == ["success"]
    assert runs["executor"][0] == study.runs("m@local")["executor"][0]  # as `resdyn run` on the CLI records it
    assert study.settings("n@local")["n_samples"] == QUICK_SETTINGS["n_samples"]
    models = study.models()
    assert {"m", "n"} <= set(models["model"]) and set(models.filter(pl.col("model") == "n")["status"]) == {"complete"}


@pytest.mark.parametrize("question", ["fdr_significant_layers", "partition_overview", "bottleneck_depth",
                                      "SELECT model, depth, spectral_radius, operator_type FROM layer_metrics "
                                      "ORDER BY model, depth"])
def test_sql_frames_equal_the_cli_answer(study_root, question, capsys):
    study = resdyn.open(study_root)
    frame = study.sql(question)
    query = question if " " in question else f"{question}.sql"
    expected = _cli_csv(study_root, query, capsys)
    assert frame.height > 0 and frame.columns == expected.columns
    assert_frame_equal(frame, expected, check_dtypes=False, check_exact=False, rel_tol=1e-12, abs_tol=0.0)


def test_every_frame_equals_the_cli_answer(study_root, capsys):
    study = resdyn.open(study_root)
    same = dict(check_dtypes=False, check_exact=False, rel_tol=1e-12, abs_tol=0.0)
    scalar_partitions = "SELECT model, checkpoint, status, run_id, settings_hash, generation FROM partitions"
    assert_frame_equal(study.partitions().select("model", "checkpoint", "status", "run_id", "settings_hash",
                                                 "generation"),
                       _cli_csv(study_root, scalar_partitions + " ORDER BY model, checkpoint", capsys), **same)
    columns = "run_id, status, executor, settings_hash, started_at"
    assert_frame_equal(study.runs("n@local").select(columns.split(", ")), _cli_csv(
        study_root, f"SELECT {columns} FROM runs WHERE model = 'n' ORDER BY started_at", capsys), **same)
    metrics = "model, checkpoint, layer, sublayer, depth, spectral_radius, henrici_rel_j_minus_i, operator_type"
    assert_frame_equal(study.table("layer_metrics").select(metrics.split(", ")).sort("model", "depth").collect(),
                       _cli_csv(study_root, f"SELECT {metrics} FROM layer_metrics ORDER BY model, depth", capsys),
                       **same)
    frame, _ = study.compare("spectral_radius")
    assert_frame_equal(frame.select("model", "checkpoint", "depth", "relative_depth", "spectral_radius"), _cli_csv(
        study_root, "SELECT model, checkpoint, depth, depth / greatest(max(depth) OVER (PARTITION BY model, checkpoint),"
        " 1) AS relative_depth, spectral_radius FROM layer_metrics ORDER BY model, checkpoint, depth", capsys), **same)
    registered = study.models().filter(pl.col("model").is_in(["m", "n"]))
    assert registered.select("model", "checkpoint", "status").sort("model").rows() == [("m", "local", "complete"),
                                                                                       ("n", "local", "complete")]
    assert study.table("runs", "n", "local").collect()["status"].to_list() == ["success"]
    widths = study.table("jacobians").group_by("model").agg(pl.col("values").list.len().max()).sort("model").collect()
    assert widths.rows() == [("m", 32), ("n", 16)]  # two widths in one frame, as the views hold them


def test_parameters_are_bound_by_duckdb_and_cannot_inject(study_root):
    study = resdyn.open(study_root)
    query = "SELECT count(*) AS n FROM layer_metrics WHERE model = $model"
    assert study.sql(query, model="m")["n"][0] > 0
    for hostile in ("m' OR '1'='1", "m'; COPY layer_metrics TO 'x.csv'; --", "' UNION SELECT 1 --"):
        assert study.sql(query, model=hostile)["n"][0] == 0
    assert not list(Path(study_root).rglob("x.csv")) and not Path("x.csv").exists()


def test_sql_that_writes_is_refused_exactly_as_on_the_cli(study_root, capsys):
    study = resdyn.open(study_root)
    for statement in ("COPY layer_metrics TO 'stolen.parquet'", "CREATE TABLE t AS SELECT 1",
                      f"ATTACH '{study_root}/x.db' AS x"):
        with pytest.raises(ReadOnlySqlError) as error:
            study.sql(statement)
        capsys.readouterr()
        assert main(["sql", statement, "--warehouse", str(study_root)]) == 2
        assert str(error.value) in capsys.readouterr().err
    with pytest.raises(QueryError, match="hint"):
        study.sql("SELECT nope FROM layer_metrics")


def test_a_lazy_frame_sees_only_the_generation_published_when_it_was_made(study_root, built):
    study = resdyn.open(study_root)
    before = study.table("layer_metrics", "m", "local")
    old = before.collect()
    # a run's staged (unpublished) table is never read
    staged = Warehouse(study_root, run_id=new_run_id())
    staged.write("layer_metrics", "m", "local", staged.read("layer_metrics", "m", "local").slice(0, 1)
                 .drop_columns(list(PROVENANCE_COLUMNS)))  # the writer adds its own run's
    assert_frame_equal(study.table("layer_metrics", "m", "local").collect(), old)
    # a new generation published while the frame exists: the frame still reads its own, whole
    model, _ = built
    resdyn.run(str(model), checkpoints="local", warehouse=study_root, progress=False,
               **{**QUICK_SETTINGS, "n_samples": 5})
    assert_frame_equal(before.collect(), old)
    after = study.table("layer_metrics", "m", "local").collect()
    assert after["run_id"].n_unique() == 1 and after["run_id"][0] != old["run_id"][0]
    assert not np.allclose(after["spectral_radius"].to_numpy(), old["spectral_radius"].to_numpy(), rtol=1e-12)
    assert_frame_equal(after.drop("model", "checkpoint"),
                       pl.from_arrow(Warehouse(study_root).read("layer_metrics", "m", "local")), check_dtypes=False)
    # a second rerun removes the generation the first frame read (two are kept): it says so, derived frames too
    resdyn.run(str(model), checkpoints="local", warehouse=study_root, progress=False,
               **{**QUICK_SETTINGS, "n_samples": 6})
    with pytest.raises(FileNotFoundError, match=r"the generation this frame read was replaced .* make the frame again"):
        before.filter(pl.col("depth") > 0).select("spectral_radius").collect()


def test_jacobians_equal_the_table_rows(study_root):
    study = resdyn.open(study_root)
    rows = study.table("jacobians", "n", "local").filter(pl.col("depth") == 2).sort("row").collect()
    expected = np.asarray(rows["values"].to_list(), dtype=np.float64)
    jacobian = study.jacobian("n", "local", depth=2)
    assert jacobian.dtype == np.float64 and jacobian.shape == (len(rows), len(rows)) == (16, 16)
    assert jacobian.flags.writeable
    np.testing.assert_array_equal(jacobian, expected)
    samples = study.sample_jacobians("n", "local", depth=2)
    kept = study.table("sample_jacobians", "n", "local").filter(pl.col("depth") == 2).sort(
        "sample_id", "position", "row").collect()
    assert samples.shape == (QUICK_SETTINGS["per_sample_subsample"], len(rows), len(rows))
    np.testing.assert_array_equal(samples.reshape(-1, len(rows)), np.asarray(kept["values"].to_list()))
    with pytest.raises(KeyError, match="depth 999"):
        study.jacobian("n", "local", depth=999)


def test_a_notebook_figure_is_the_uis_figure(study_root, tmp_path):
    from matplotlib.figure import Figure
    from PIL import Image

    from resdyn import figure_frames

    study = resdyn.open(study_root)
    published = Warehouse(study_root).published_figures("n", "local")
    for name, checkpoint in (("schur_surgery", "local"), ("eigenvalue_clouds", "local"), ("cumulative_rank", None),
                             ("metrics_by_depth", None), ("coupling_by_depth", None)):
        inline = study.figure(name, "n", checkpoint)
        assert isinstance(inline, Figure)
        rendered = tmp_path / f"{name}.png"
        inline.savefig(rendered, dpi=110, bbox_inches="tight", format="png")  # as the assets save it
        assert np.array_equal(np.asarray(Image.open(rendered)), np.asarray(Image.open(published[name]))), name
    frame = study.table("schur_surgery", "n", "local").collect()
    redrawn = figure_frames.schur_surgery_figure("n@local", frame, tmp_path / "again")
    assert np.array_equal(np.asarray(Image.open(redrawn)), np.asarray(Image.open(published["schur_surgery"])))
    with pytest.raises(ValueError, match="one partition's figure"):
        study.figure("schur_surgery", "n")
    with pytest.raises(ValueError, match="draws every checkpoint"):
        study.figure("cumulative_rank", "n", "local")
    # a model or checkpoint with nothing published is named, with what is published: never an empty figure
    for name, checkpoint in (("metrics_by_depth", None), ("coupling_by_depth", None), ("eigenvalue_clouds", "x"),
                             ("schur_surgery", "x")):
        with pytest.raises(KeyError, match=r"nosuchmodel has no partition in .* and is not a registered model; the "
                                           r"partitions there: m@local, n@local"):
            study.figure(name, "nosuchmodel", checkpoint)


def test_compare_puts_every_partition_on_relative_depth(study_root):
    study = resdyn.open(study_root)
    frame, figure = study.compare("henrici_rel_j_minus_i")
    assert set(zip(frame["model"], frame["checkpoint"])) == {("m", "local"), ("n", "local")}
    assert frame["relative_depth"].min() == 0.0 and frame["relative_depth"].max() == 1.0
    assert len(figure.axes[0].lines) == 2
    only, _ = study.compare("spectral_radius", partitions=["n@local"])
    assert set(only["model"]) == {"n"}


def test_import_resdyn_stays_light():
    script = ("import sys, resdyn; print(sorted({m.split('.')[0] for m in sys.modules} & "
              "{'dagster', 'duckdb', 'polars', 'torch', 'transformers', 'matplotlib'}))")
    assert subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip() \
        == "[]"


def test_the_tour_notebook_runs_end_to_end(study_root, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(REPOSITORY / "docs" / "notebooks" / "tour.ipynb", as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")  # kept without outputs
    monkeypatch.setenv("RESDYN_WAREHOUSE", str(study_root))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(study_root.parent)}}).execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    images = [output for output in outputs if "image/png" in output.get("data", {})]
    assert len(images) >= 3, [output.get("data", {}).keys() for output in outputs]
    assert any("spectral radius" in output.get("text", "") for output in outputs)


def test_sql_errors_name_the_placeholder_the_value_or_the_file_that_is_wrong(study_root, tmp_path):
    from resdyn.dagster_project.store.errors import QueryError

    study = resdyn.open(study_root)
    assert study.sql("SELECT count(*) AS n FROM layer_metrics WHERE model = $model", model="m")["n"][0] > 0
    with pytest.raises(QueryError, match=r"value\(s\) modle given but the query does not use them \(it takes \$model\)"):
        study.sql("SELECT count(*) FROM layer_metrics WHERE model = $model", model="m", modle="m")
    with pytest.raises(QueryError, match=r"value\(s\) x given but the query does not use them \(it has no"):
        study.sql("SELECT 1", x=1)
    with pytest.raises(QueryError, match=r"placeholder\(s\) \$model have no value: pass model=\.\.\."):
        study.sql("SELECT count(*) FROM layer_metrics WHERE model = $model")
    with pytest.raises(QueryError, match=r"\$x in statement 1 of 2: values are bound to the last statement"):
        study.sql("SELECT $x; SELECT 1", x=1)
    outside = tmp_path / "outside.csv"
    outside.write_text("a\n1\n")
    with pytest.raises(QueryError, match=r"only the warehouse's tables can be read, by name"):
        study.sql(f"SELECT * FROM read_csv('{outside}')")


def test_arguments_of_the_wrong_type_are_type_errors_and_unknown_names_say_which_are_known(study_root):
    """Never an empty frame or an error about something else: a TypeError naming the type expected, a KeyError naming
    the partitions the warehouse holds (as `resdyn claims` / `resdyn forget` name them)."""
    from resdyn.dagster_project.interface.notebook import Study

    study = resdyn.open(study_root)
    for call, says in [
        (lambda: study.table("layer_metrics", model=5), r"model=5: give a str \(e.g. 'tiny-llama'\), not int"),
        (lambda: study.table("layer_metrics", checkpoint=["local"]), r"checkpoint=\['local'\]: give a str"),
        (lambda: study.table(3), r"name=3: give a str"),
        (lambda: study.jacobian("m", "local", "0"), r"depth='0': give an int .*, not str"),
        (lambda: study.jacobian("m", "local", True), r"depth=True: give an int"),
        (lambda: study.sample_jacobians("m", 0, 0), r"checkpoint=0: give a str"),
        (lambda: study.runs(42), r"partition=42: give a str \(e.g. 'tiny-llama@step-000400'\), not int"),
        (lambda: study.settings(None), r"partition=None: give a str"),
        (lambda: study.sql(123), r"query=123: give a str"),
        (lambda: study.compare("henrici_rel_j_minus_i", partitions=5), r"partitions=5: give a 'model@checkpoint' str"),
        (lambda: study.compare(7), r"metric=7: give a str"),
        (lambda: study.figure("cumulative_rank", 1), r"model=1: give a str"),
        (lambda: study.plot.cumulative_rank(None), r"model=None: give a str"),
    ]:
        with pytest.raises(TypeError, match=says):
            call()
    known = "the partitions there: m@local, n@local"
    for call, says in [
        (lambda: study.table("layer_metrics", model="nope"), f"nope has no partition in {study_root} and is not a "
                                                             f"registered model; {known}"),
        (lambda: study.table("layer_metrics", model="tiny-llama"), "tiny-llama has no partition .* \\(it is "
                                                                   "registered: `resdyn run --model tiny-llama`\\)"),
        (lambda: study.table("layer_metrics", model="m", checkpoint="nope"),
         "m@nope is no partition .*; the checkpoints of m there: local"),
        (lambda: study.table("runs", checkpoint="nope"), "has the checkpoint 'nope'; the checkpoints there: local"),
        (lambda: study.jacobian("nope", "local", 0), known),
        (lambda: study.sample_jacobians("m", "nope", 0), "the checkpoints of m there: local"),
        (lambda: study.compare("henrici_rel_j_minus_i", partitions=["m@local", "m@nope"]),
         "m@nope: no published rows of layer_metrics .* it has m@local, n@local"),
        (lambda: study.sql("fdr_significant_layer"), "no question 'fdr_significant_layer'; the questions: .*"
                                                     "fdr_significant_layers"),
        (lambda: study.runs("nope@x"), "no run of nope@x is recorded in .*; partitions with runs: m@local, n@local"),
    ]:
        with pytest.raises(KeyError, match=says):
            call()
    with pytest.raises(ValueError, match="not of the form 'model@checkpoint'"):
        study.runs("m")
    one, _ = study.compare("henrici_rel_j_minus_i", partitions="m@local")  # one partition, not its characters
    assert set(one["model"]) == {"m"} and one.height > 0
    assert isinstance(study, Study)


def test_a_damaged_or_rewritten_file_is_left_out_with_the_warning_the_cli_gives(warehouse_copy, capsys):
    import json
    import warnings

    from resdyn.dagster_project.interface.notebook import LeftOutWarning

    _, root = warehouse_copy
    manifest = json.loads((root / "_published/model=m/checkpoint=local.json").read_text())
    path = root / manifest["tables"]["layer_metrics"]["file"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))  # rewritten in place: the same size, another sha256
    assert main(["sql", "SELECT count(*) AS n FROM layer_metrics", "--warehouse", str(root)]) == 0
    said = [line.removeprefix("resdyn: warning: ") for line in capsys.readouterr().err.splitlines()
            if line.startswith("resdyn: warning: left out")]
    assert said and str(path) in said[0]
    study = resdyn.open(root)
    for answer in (lambda: study.table("layer_metrics").collect(), lambda: study.table("layer_metrics", "m").collect(),
                   lambda: study.sql("SELECT count(*) AS n FROM layer_metrics")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            frame = answer()
        assert [str(w.message) for w in caught if w.category is LeftOutWarning] == said
        assert frame.height == 0 or frame["n"].to_list() == [0]
