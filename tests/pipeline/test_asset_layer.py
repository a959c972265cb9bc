"""The asset layer itself, tested as Dagster's examples test theirs: the IO manager in isolation (two toy assets
through it into a temporary warehouse), one asset body invoked directly, and the asset docs/architecture.md shows
being added (one module, one schema entry) materialized for real."""

import re
import shutil
from pathlib import Path

import dagster as dg
import numpy as np
import pyarrow as pa
import pytest

from resdyn.dagster_project.asset_layer.io_manager import table_output
from resdyn.dagster_project.asset_layer.partition_assets import ANALYSIS, partition_asset
from resdyn.dagster_project.asset_layer.partitions import register_partitions
from resdyn.dagster_project.configuration.config import StudyConfig
from resdyn.dagster_project.launch.study_definitions import study_assets, study_resources
from resdyn.dagster_project.store import schema
from resdyn.dagster_project.store.arrow_tables import record_batch
from resdyn.dagster_project.store.handles import MatrixTable, TableHandle, table_handle
from resdyn.dagster_project.store.leftovers import unpublished_files
from resdyn.dagster_project.store.warehouse import Warehouse

from ..pipeline_helpers import TINY_PARTITION

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture
def toy_tables():
    """Two small tables registered for one test (the schema is the one place that says what a table is)."""
    added = ["toy_source", "toy_sum"]
    schema._table("toy_source", "value", "toy", schema._c("value", schema.F64, "a number"))
    schema._table("toy_sum", "run", "toy", schema._c("total", schema.F64, "sum of toy_source.value"),
                  schema._c("source_file", schema.STR, "the file the input handle read"))
    yield
    for name in added:
        schema.TABLES.pop(name, None)


def _toy_assets(fail_after_reading: bool = False, published_after_last_output: list | None = None, root=None):
    @partition_asset(ANALYSIS, group_name="toy", description="toy numbers")
    def toy_source(context):
        yield table_output(pa.table({"value": pa.array([1.0, 2.0, 3.5])}))

    @partition_asset(ANALYSIS, group_name="toy", description="their sum, from the input handle")
    def toy_sum(toy_source: TableHandle):
        assert isinstance(toy_source, TableHandle)  # a handle, not the data: nothing read yet
        values = toy_source.read(["value"]).column("value").to_numpy()
        if fail_after_reading:
            raise RuntimeError("a failing toy step")
        yield table_output(pa.table({"total": pa.array([values.sum()]), "source_file": [str(toy_source.path)]}))
        if published_after_last_output is not None:  # every output is staged now, and nothing is published yet
            published_after_last_output.append(sorted(Warehouse(root).manifest("toy", "a").get("tables", {})))

    return toy_source, toy_sum


def _materialize(root, assets, key="toy@a", selection=None):
    config = StudyConfig.resolve({"warehouse": str(root)}, {})
    instance = dg.DagsterInstance.ephemeral()
    register_partitions(instance, [key])
    return dg.materialize([asset.definition() for asset in assets], partition_key=key, instance=instance,
                          resources=study_resources(config), raise_on_error=False, selection=selection)


def test_the_io_manager_stages_loads_lazily_and_publishes_once_the_selection_is_staged(tmp_path, toy_tables):
    published_after_last_output = []
    result = _materialize(tmp_path, _toy_assets(published_after_last_output=published_after_last_output,
                                                root=tmp_path))
    assert result.success
    # publication is a step of its own, after the body: the IO manager staging the last output published nothing
    assert published_after_last_output == [[]]
    store = Warehouse(tmp_path)
    assert set(store.manifest("toy", "a")["tables"]) >= {"toy_source", "toy_sum"}
    total = store.read("toy_sum", "toy", "a").to_pylist()[0]
    assert total["total"] == pytest.approx(6.5)
    # the input handle read this run's own staged toy_source: the file the manifest now publishes
    assert Path(total["source_file"]) == store.table_path("toy_source", "toy", "a")
    assert unpublished_files(store) == []
    # a run of toy_sum alone loads the published toy_source through the same manager
    again = _materialize(tmp_path, _toy_assets(), selection=[dg.AssetKey("toy_sum")])
    assert again.success
    assert Warehouse(tmp_path).read("toy_sum", "toy", "a").to_pylist()[0]["total"] == pytest.approx(6.5)


def test_a_failed_run_publishes_nothing_and_leaves_nothing(tmp_path, toy_tables):
    assert _materialize(tmp_path, _toy_assets()).success
    store = Warehouse(tmp_path)
    before = store.manifest("toy", "a")
    failed = _materialize(tmp_path, _toy_assets(fail_after_reading=True))
    assert not failed.success
    assert Warehouse(tmp_path).manifest("toy", "a") == before  # toy_source was staged again, then discarded
    assert unpublished_files(Warehouse(tmp_path)) == []


def test_a_stage_called_directly_with_the_warehouse_input_handles(tiny_study, fresh_seed):
    """unit_amplification's stage on the stored Jacobians, outside any run (the warehouse's lazy handles as its
    frames): its batches equal the column, row and diagonal norms numpy gives for each stored matrix."""
    from resdyn.stages import StageTools
    from resdyn.stages.coupling import unit_amplification

    store, _, _ = tiny_study
    model, checkpoint = TINY_PARTITION.split("@")
    jacobians = table_handle(store, "jacobians", model, checkpoint)
    assert isinstance(jacobians, MatrixTable)
    result = unit_amplification(StageTools(TINY_PARTITION), jacobians=jacobians,
                                model_checkpoints=table_handle(store, "model_checkpoints", model, checkpoint))
    batches = [record_batch("unit_amplification", None, columns) for columns in result.tables["unit_amplification"]]
    matrices = list(jacobians.matrices())
    assert len(batches) == len(matrices)
    pick = np.random.default_rng(fresh_seed).integers(len(matrices))
    (layer, sublayer), matrix = matrices[pick]
    batch = batches[pick].to_pydict()
    assert set(batch["layer"]) == {layer} and set(batch["sublayer"]) == {sublayer}
    np.testing.assert_allclose(batch["log_column_norm"], np.log(np.sqrt((matrix ** 2).sum(axis=0))), rtol=1e-12)
    np.testing.assert_allclose(batch["row_norm"], np.sqrt((matrix ** 2).sum(axis=1)), rtol=1e-12)
    np.testing.assert_array_equal(batch["diagonal"], matrix.diagonal())


def test_the_asset_the_architecture_page_adds_is_a_stage_a_declaration_and_one_schema_entry(tiny_study, tmp_path):
    """The two code blocks of docs/architecture.md are resdyn/stages/volume.py and assets/volume.py as they are
    (less their docstrings), and materialized alone on a copy of the session warehouse its log |det J| equals the
    sum of log |eigenvalue| of each Jacobian (an independent factorization: numpy's eigenvalues against resdyn's LU)."""
    page = (REPOSITORY / "docs" / "architecture.md").read_text()
    section = page.split("### Adding an asset", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    modules = [(REPOSITORY / folder / "volume.py").read_text() for folder in ("resdyn/stages", "assets")]
    assert [module.split('"""', 2)[2].strip() for module in modules] == [block.strip() for block in blocks]
    store, _, _ = tiny_study
    root = tmp_path / "warehouse"
    shutil.copytree(store.root, root)
    config = StudyConfig.resolve({"warehouse": str(root)}, {})
    instance = dg.DagsterInstance.ephemeral()
    register_partitions(instance, [TINY_PARTITION])
    result = dg.materialize([*study_assets(config)], partition_key=TINY_PARTITION, instance=instance,
                            resources=study_resources(config), selection=[dg.AssetKey("volume_changes")])
    assert result.success
    model, checkpoint = TINY_PARTITION.split("@")
    rows = Warehouse(root).read("volume_changes", model, checkpoint).to_pylist()
    matrices = dict(Warehouse(root).matrix_table("jacobians", model, checkpoint).matrices())
    assert len(rows) == len(matrices) and [row["depth"] for row in rows] == sorted(row["depth"] for row in rows)
    for row in rows:
        eigenvalues = np.linalg.eigvals(matrices[row["layer"], row["sublayer"]].astype(np.float64))
        assert row["log_abs_determinant"] == pytest.approx(np.sum(np.log(np.abs(eigenvalues))), rel=1e-8, abs=1e-9)
        assert row["trace_j_minus_i"] == pytest.approx(np.sum(eigenvalues.real) - len(eigenvalues), abs=1e-8)


def test_a_metric_added_to_a_body_without_its_schema_entry_fails_the_step_naming_it(tiny_study, tmp_path,
                                                                                 monkeypatch):
    """A developer adds a metric to resdyn.spectra's per-sublayer dict and forgets store/schema.py: the step that
    writes layer_metrics fails, naming the table and the column, and nothing of the run is published (before the
    strict schema, ``from_pylist(rows, schema=...)`` dropped the column and the run succeeded)."""
    import dataclasses

    import resdyn.stages.workers as worker
    from resdyn.stages.spectral import TABLES as SPECTRAL_TABLES

    analyse = worker.analyse_sublayer

    def with_a_new_metric(matrix, *args, **kwargs):
        spectrum = analyse(matrix, *args, **kwargs)
        return dataclasses.replace(spectrum, metrics={**spectrum.metrics, "trace_over_width": float(np.trace(matrix))})

    monkeypatch.setattr(worker, "analyse_sublayer", with_a_new_metric)
    store, _, _ = tiny_study
    root = tmp_path / "warehouse"
    shutil.copytree(store.root, root)
    model, checkpoint = TINY_PARTITION.split("@")
    before = Warehouse(root).manifest(model, checkpoint)
    config = StudyConfig.resolve({"warehouse": str(root)}, {})
    instance = dg.DagsterInstance.ephemeral()
    register_partitions(instance, [TINY_PARTITION])
    result = dg.materialize(study_assets(config), partition_key=TINY_PARTITION, instance=instance,
                            resources=study_resources(config), raise_on_error=False,
                            selection=[dg.AssetKey(name) for name in SPECTRAL_TABLES])
    assert not result.success
    messages = [event.step_failure_data.error.message for event in result.all_events if event.is_step_failure]
    assert any("layer_metrics" in message and "'trace_over_width'" in message and "not in the schema" in message
               for message in messages), messages
    assert Warehouse(root).manifest(model, checkpoint) == before
    assert unpublished_files(Warehouse(root)) == []
