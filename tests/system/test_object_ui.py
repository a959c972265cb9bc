"""`resdyn ui --warehouse s3://...` against the real S3 server (the ``s3_server`` fixture): a partition launched
through the UI's GraphQL and the study's report job publish to the store, and every figure link their
materializations carry is served by the UI from the store's own object (bytes equal to the object, and a partition's
figure to the sha256 its manifest published); nothing is drawn into a local folder the UI would serve instead."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import time
import urllib.request

import pytest

from resdyn.dagster_project.configuration.ports import free_ports
from resdyn.dagster_project.store.artefacts import ARTEFACT_ROUTE
from resdyn.dagster_project.store.object_warehouse import ObjectWarehouse
from resdyn.models.registry import ModelSpec

from ..cli_helpers import REPOSITORY, RESDYN, environment, save_model
from ..graphql_helpers import LAUNCH, graphql, wait_for_run

PARTITION = "m@local"


MATERIALIZATIONS = """
    query($key: AssetKeyInput!, $partitions: [String!]) {
      assetOrError(assetKey: $key) { ... on Asset { assetMaterializations(partitions: $partitions, limit: 1) {
        runId metadataEntries { label ... on MarkdownMetadataEntry { mdStr } ... on PathMetadataEntry { path }
        ... on IntMetadataEntry { intValue } } } } }
    }"""


def _launch_and_wait(port: int, repository: dict, job: str, tags: list[dict], log) -> str:
    launched = graphql(port, LAUNCH, {"executionParams": {
        "selector": {**repository, "jobName": job}, "runConfigData": {}, "executionMetadata": {"tags": tags}}})
    assert launched["launchRun"]["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["launchRun"]["run"]["runId"]
    status = wait_for_run(port, run_id, timeout=900)
    assert status == "SUCCESS", f"{job}: {status}\n{log.read_text()[-4000:]}"
    return run_id


def _materialization(port: int, asset: str, partition: str | None = None) -> dict:
    found = graphql(port, MATERIALIZATIONS, {"key": {"path": [asset]},
                                              "partitions": [partition] if partition else None})
    events = found["assetOrError"]["assetMaterializations"]
    assert events, f"{asset} has no materialization"
    return {entry["label"]: next((entry[field] for field in ("mdStr", "path", "intValue") if entry.get(field) is not None),
                                 None) for entry in events[0]["metadataEntries"]}


def _served(port: int, url: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{url}", timeout=60) as response:
        return response.headers["Content-Type"], response.read()


def _figure_links(metadata: dict) -> list[str]:
    """The UI's figure addresses in a materialization's markdown (thumbnail and full figure of each)."""
    links = [link for value in metadata.values() if isinstance(value, str)
             for link in re.findall(rf"\(({re.escape(ARTEFACT_ROUTE)}/[^)\s]+\.png)\)", value)]
    assert links, f"no figure link in {sorted(metadata)}"
    return links


def _paths_name_objects(metadata: dict, location, objects: ObjectWarehouse) -> None:
    """Each figure's path entry names its object on the store (not the local spool file, gone once uploaded)."""
    paths = [value for label, value in metadata.items() if label.startswith("figure_") and label.endswith("_path")]
    assert paths, sorted(metadata)
    for path in paths:
        assert path.startswith(f"{location}/_artefacts/"), path
        assert objects.store.info(path[len(f"{location}/"):]) is not None, path


@pytest.fixture
def ui_over_s3(s3_warehouse, tmp_path):
    """Model m registered in the S3 warehouse's registry, and `resdyn ui --warehouse s3://...` (no daemon: the
    instance launches runs at once) on a free loopback port, stopped by its PID at the end."""
    model = save_model(tmp_path / "m")
    with ObjectWarehouse(s3_warehouse).writable_registry() as registry:
        registry.add(ModelSpec("m", "llama", str(model), {"local": "local"}))
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        "run_coordinator:\n  module: dagster._core.run_coordinator\n  class: DefaultRunCoordinator\n"
        "telemetry:\n  enabled: false\n")
    workdir = tmp_path / "workdir"  # the UI's own folder: nothing may be drawn into it
    workdir.mkdir()
    env = environment(DAGSTER_HOME=str(home), XDG_CACHE_HOME=str(tmp_path / "cache"), RESDYN_SAMPLES="6",
                      RESDYN_SEQ_LEN="12", RESDYN_PER_SAMPLE="2", RESDYN_LEIDEN_SEEDS="2", RESDYN_PERMUTATIONS="50")
    (port,) = free_ports(1)
    log = tmp_path / "ui.log"
    process = subprocess.Popen([*RESDYN, "ui", "--warehouse", str(s3_warehouse), "--host", "127.0.0.1", "--port",
                                str(port), "--no-daemon"], cwd=workdir, env=env, stdout=open(log, "w"),
                               stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 240
        while True:
            try:
                nodes = graphql(port, "{ repositoriesOrError { ... on RepositoryConnection "
                                       "{ nodes { name location { name } } } } }")["repositoriesOrError"]["nodes"]
                if nodes:
                    break
            except OSError:
                pass
            if time.time() > deadline or process.poll() is not None:
                pytest.fail("resdyn ui did not start:\n" + log.read_text()[-3000:])
            time.sleep(1)
        repository = {"repositoryName": nodes[0]["name"], "repositoryLocationName": nodes[0]["location"]["name"]}
        yield {"port": port, "repository": repository, "log": log, "workdir": workdir}
    finally:
        process.terminate()
        try:
            process.wait(timeout=150)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def test_the_ui_over_s3_serves_every_figure_its_runs_link_from_the_stores_objects(ui_over_s3, s3_warehouse):
    port, repository, log = ui_over_s3["port"], ui_over_s3["repository"], ui_over_s3["log"]
    added = graphql(port, """
        mutation($repositorySelector: RepositorySelector!, $partitionsDefName: String!, $partitionKey: String!) {
          addDynamicPartition(repositorySelector: $repositorySelector, partitionsDefName: $partitionsDefName,
                              partitionKey: $partitionKey) { __typename }
        }""", {"repositorySelector": repository, "partitionsDefName": "model_checkpoint", "partitionKey": PARTITION})
    assert added["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess"
    _launch_and_wait(port, repository, "resdyn_job", [{"key": "dagster/partition", "value": PARTITION}], log)
    objects = ObjectWarehouse(s3_warehouse)
    manifest = objects.manifest("m", "local")
    assert manifest["tables"] and manifest["figures"]

    # a partition's figure: linked at its store key, served from the store, the bytes its manifest published
    metadata = _materialization(port, "layer_metrics", PARTITION)
    links = _figure_links(metadata)
    _paths_name_objects(metadata, s3_warehouse, objects)
    published = {file: entry["sha256"] for name, entry in manifest["figure_files"].items()
                 for file in [manifest["figures"][name]]}
    for link in links:
        key = "_artefacts/" + link[len(ARTEFACT_ROUTE) + 1:]
        content_type, served = _served(port, link)
        assert content_type == "image/png" and served[:8] == b"\x89PNG\r\n\x1a\n", link
        assert served == objects.store.get(key).data, link
        assert hashlib.sha256(served).hexdigest() == published[key], f"{link}: not the published figure"

    # the study's assets: drawn locally, put under the warehouse's keys, linked and served from there
    _launch_and_wait(port, repository, "study_report_job", [], log)
    report = _materialization(port, "study_report")
    assert report["path"] == f"{s3_warehouse}/report.html"
    html = objects.store.get("report.html").data
    assert len(html) == report["bytes"] and html.startswith(b"<!doctype html>")
    assert b"resdyn: the residual stream" in html
    for asset in ("study_fdr_layers", "metrics_by_checkpoint"):
        metadata = _materialization(port, asset)
        _paths_name_objects(metadata, s3_warehouse, objects)
        for link in _figure_links(metadata):
            content_type, served = _served(port, link)
            assert content_type == "image/png" and served == objects.store.get(
                "_artefacts/" + link[len(ARTEFACT_ROUTE) + 1:]).data, link
    assert not list(ui_over_s3["workdir"].iterdir()), "the UI wrote into its working folder"
    assert not (REPOSITORY / "s3:").exists()
