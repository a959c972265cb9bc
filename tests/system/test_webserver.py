"""The Definitions load as `dagster dev` loads them, and the webserver runs a partition end to end."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from resdyn.dagster_project.configuration.ports import free_ports

from ..graphql_helpers import LAUNCH, graphql, wait_for_run

REPOSITORY = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
KEY = "tiny-llama@step-000000"


def _environment(tmp_path: Path) -> dict:
    home = tmp_path / "dagster_home"
    home.mkdir()
    # launch runs straight away (no daemon needed for the queue)
    (home / "dagster.yaml").write_text(
        "run_coordinator:\n  module: dagster._core.run_coordinator\n  class: DefaultRunCoordinator\n"
        "telemetry:\n  enabled: false\n")
    return {**os.environ, "DAGSTER_HOME": str(home), "RESDYN_WAREHOUSE": str(tmp_path / "warehouse"),
            "RESDYN_SAMPLES": "8", "RESDYN_SEQ_LEN": "16"}


def test_definitions_load_like_dagster_dev(tmp_path):
    completed = subprocess.run(
        [str(BIN / "dagster"), "definitions", "validate", "-m", "resdyn.dagster_project.definitions"],
        cwd=REPOSITORY, env=_environment(tmp_path), capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "passed validation" in completed.stdout + completed.stderr


def _stale_status(port: int, asset: str) -> str:
    nodes = graphql(port, """
        query($keys: [AssetKeyInput!], $partition: String) {
          assetNodes(assetKeys: $keys) { staleStatus(partition: $partition) }
        }""", {"keys": [{"path": [asset]}], "partition": KEY})["assetNodes"]
    return nodes[0]["staleStatus"]


def test_webserver_launches_a_partition_materialization(tmp_path):
    (port,) = free_ports(1)
    environment = _environment(tmp_path)
    log = open(tmp_path / "webserver.log", "w")
    server = subprocess.Popen(
        [str(BIN / "dagster-webserver"), "-m", "resdyn.dagster_project.definitions", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPOSITORY, env=environment, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 180
        while True:
            try:
                repositories = graphql(port, "{ repositoriesOrError { ... on RepositoryConnection "
                                              "{ nodes { name location { name } } } } }")
                nodes = repositories["repositoriesOrError"]["nodes"]
                if nodes:
                    break
            except OSError:
                pass
            if time.time() > deadline or server.poll() is not None:
                pytest.fail("webserver did not come up:\n" + (tmp_path / "webserver.log").read_text()[-3000:])
            time.sleep(1)
        repository = {"repositoryName": nodes[0]["name"], "repositoryLocationName": nodes[0]["location"]["name"]}
        added = graphql(port, """
            mutation($repositorySelector: RepositorySelector!, $partitionsDefName: String!, $partitionKey: String!) {
              addDynamicPartition(repositorySelector: $repositorySelector, partitionsDefName: $partitionsDefName,
                                  partitionKey: $partitionKey) { __typename }
            }""", {"repositorySelector": repository, "partitionsDefName": "model_checkpoint", "partitionKey": KEY})
        assert added["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess"
        launched = graphql(port, LAUNCH, {"executionParams": {
                "selector": {**repository, "jobName": "resdyn_job"}, "runConfigData": {},
                "executionMetadata": {"tags": [{"key": "dagster/partition", "value": KEY}]}}})
        assert launched["launchRun"]["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["launchRun"]["run"]["runId"]
        assert wait_for_run(port, run_id) == "SUCCESS", (tmp_path / "webserver.log").read_text()[-4000:]
        from resdyn.dagster_project.store.warehouse import Warehouse

        store = Warehouse(tmp_path / "warehouse")
        for table in ("model_checkpoints", "samples", "activations", "jacobians"):
            assert store.has(table, "tiny-llama", "step-000000"), table
        assert _stale_status(port, "jacobians") == "FRESH"
        # rematerialize only `samples`, with another seed: everything downstream of it is stale
        launched = graphql(port, LAUNCH, {"executionParams": {
            "selector": {**repository, "jobName": "resdyn_job", "assetSelection": [{"path": ["samples"]}]},
            "runConfigData": {"resources": {"settings": {"config": {"seed": 1}}}},
            "executionMetadata": {"tags": [{"key": "dagster/partition", "value": KEY}]}}})
        assert launched["launchRun"]["__typename"] == "LaunchRunSuccess", launched
        assert wait_for_run(port, launched["launchRun"]["run"]["runId"]) == "SUCCESS"
        assert store.query("SELECT DISTINCT seed FROM samples").to_pylist() == [{"seed": 1}]
        # Dagster marks the direct dependents stale (its staleness looks one edge up); the partitions view
        # marks the whole partition, whose tables now come from two runs
        for asset in ("activations", "jacobians", "sample_jacobians", "finite_difference_probe"):
            assert _stale_status(port, asset) == "STALE", asset
        assert store.query("SELECT status FROM partitions").to_pylist() == [{"status": "inconsistent"}]
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
