"""Rerun only what changed (issue 60's acceptance on the tiny suite): one partition made once, then (d) a table the
warehouse never had, (a) a stage's code version bumped, (b) a setting only the coupling stages read, (c) the sample
size; each run makes exactly the stale tables and their downstream, the rest kept byte for byte and untouched."""

import contextlib
import io
import json
import os

import pytest

from resdyn.dagster_project.configuration.config import StudyConfig
from resdyn.dagster_project.store.warehouse import Warehouse
from resdyn.models.registry import split_partition_key

from ..pipeline_helpers import SMALL, TINY_PARTITION, bumped_code_version

MEASUREMENT_TABLES = ("activations", "jacobians", "sample_jacobians", "jacobian_folds", "finite_difference_probe")


def run(root, selection=None, **settings) -> tuple[dict, str]:
    """(the partition's summary, what the run printed) of an in-process `resdyn run` of TINY_PARTITION."""
    from resdyn.dagster_project.launch.run_loop import run_partitions
    from resdyn.dagster_project.launch.study_definitions import prepare

    config = prepare(StudyConfig.resolve({**SMALL, **settings, "warehouse": str(root), "executor": "in_process"}))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        outcome = run_partitions(config, [TINY_PARTITION], selection)
    assert not outcome.failed, printed.getvalue()
    return outcome.summary.get(TINY_PARTITION, {}), printed.getvalue()


def stages_run(summary: dict) -> set[str]:
    """The asset steps a run executed (its checks' steps left out)."""
    from resdyn.dagster_project.store.table_identity import declarations

    return {step for step in summary.get("steps", {}) if step in declarations()}


def file_states(root, tables) -> dict[str, tuple]:
    """Per table: its published file, size, modification time (ns) and sha256, as the manifest and disk say."""
    store = Warehouse(root)
    entries = store.manifest(*split_partition_key(TINY_PARTITION))["tables"]
    return {table: (entries[table]["file"], entries[table]["sha256"], os.stat(root / entries[table]["file"]).st_size,
                    os.stat(root / entries[table]["file"]).st_mtime_ns) for table in tables}


def status(root) -> dict:
    return Warehouse(root).query("SELECT status, stale_tables FROM partitions").to_pylist()[0]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A warehouse holding TINY_PARTITION made before `volume_changes` existed (every other table)."""
    root = tmp_path_factory.mktemp("reruns")
    run(root, "not key:volume_changes")
    return root


def test_reruns_make_exactly_the_stale_tables_and_their_downstream(made):
    from resdyn.dagster_project.launch.assets_index import PARTITION_ASSETS

    root = made
    assert status(root)["status"] == "incomplete"
    kept = file_states(root, MEASUREMENT_TABLES)
    n_tables = len({table for asset in PARTITION_ASSETS for table in asset.table_versions()})  # the tiny suite has all

    # (d) a table the warehouse never had: only it runs, and the partition is complete again
    summary, said = run(root)
    assert stages_run(summary) == {"volume_changes"}, said
    assert "volume_changes: not published" in said and f"reuses {n_tables - 1} current table(s), makes 1" in said
    assert status(root) == {"status": "complete", "stale_tables": None}

    # a second run finds every table current and runs nothing
    summary, said = run(root)
    assert summary == {} and f"every table current ({n_tables} reused): not run again" in said

    # (a) the transient stage's code version bumped (and kept so: the code is now that version): it and what
    # reads its tables rerun, nothing else
    with bumped_code_version("transient_analysis"):
        assert status(root)["status"] == "inconsistent"
        assert "transient_dynamics: code version '3' -> '4'" in status(root)["stale_tables"]
        summary, said = run(root)
        assert stages_run(summary) == {"transient_analysis", "layer_metrics_per_sample"}, said
        assert "transient_dynamics: code version '3' -> '4'" in said
        assert "layer_metrics_per_sample: input transient_dynamics is stale" in said
        assert status(root)["status"] == "complete"
        assert file_states(root, MEASUREMENT_TABLES) == kept  # the same files, bytes and modification times

        # (b) a setting only the coupling stages read
        summary, said = run(root, n_permutations=SMALL["n_permutations"] // 2)
        assert stages_run(summary) == {"coupling_tests", "community_coupling"}, said
        assert f"setting --permutations {SMALL['n_permutations']} -> {SMALL['n_permutations'] // 2}" in said
        assert status(root)["status"] == "complete" and file_states(root, MEASUREMENT_TABLES) == kept

        # (c) the sample size: every stage from the samples on runs again; the model step (the checkpoint and its
        # training loss) reads no sample and is kept
        summary, said = run(root, n_samples=SMALL["n_samples"] - 2, n_permutations=SMALL["n_permutations"] // 2)
        assert stages_run(summary) == {asset.name for asset in PARTITION_ASSETS} - {"model_checkpoints"}, said
        assert f"reuses 2 current table(s), makes {n_tables - 2}" in said and "samples: setting --samples 12 -> 10" in said
        assert summary["n_checks"] == 6 and not summary["failing_checks"]
        assert status(root)["status"] == "complete"
        assert all(state[0] != kept[table][0] for table, state in file_states(root, MEASUREMENT_TABLES).items())


def test_settings_a_run_config_changes_are_the_ones_recorded_in_the_identity(made, tmp_path):
    """The UI's launchpad changes a setting through run config: the table written records that value in its
    identity (and its rows' settings hash), so what reads the old table is no longer current."""
    import shutil

    import dagster as dg

    from resdyn.dagster_project.asset_layer.partitions import register_partitions
    from resdyn.dagster_project.configuration.settings import settings_hash
    from resdyn.dagster_project.launch.study_definitions import study_assets, study_resources

    root = tmp_path / "warehouse"
    shutil.copytree(made, root)
    instance = dg.DagsterInstance.ephemeral()
    register_partitions(instance, [TINY_PARTITION])
    config = StudyConfig.resolve({**SMALL, "warehouse": str(root)})
    seed = config.settings["seed"] + 1
    result = dg.materialize(study_assets(config), partition_key=TINY_PARTITION, resources=study_resources(config),
                            instance=instance, selection=[dg.AssetKey("samples")],
                            run_config={"resources": {"settings": {"config": {"seed": seed}}}})
    assert result.success
    store = Warehouse(root)
    entry = store.manifest(*split_partition_key(TINY_PARTITION))["tables"]["samples"]
    assert entry["identity"]["settings"]["seed"] == seed
    # a run config replaces the resource's whole config (the rest at their defaults): the run's record says what ran
    ran = json.loads(store.query("SELECT settings FROM runs WHERE run_id = $run",
                                 parameters={"run": result.run_id}).to_pylist()[0]["settings"])
    assert ran["seed"] == seed
    assert store.query("SELECT DISTINCT settings_hash FROM samples").to_pylist() == [
        {"settings_hash": settings_hash(ran)}]
    assert {name: ran[name] for name in entry["identity"]["settings"] if name in ran} == {
        name: value for name, value in entry["identity"]["settings"].items() if name in ran}
    assert store.query("SELECT current, stale_reason FROM published_tables WHERE table_name = 'activations'"
                       ).to_pylist() == [{"current": False, "stale_reason": "input samples changed since"}]
