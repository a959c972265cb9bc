"""The study on a real Ray cluster (a head and a worker node on 127.0.0.1), through dagster-ray's executor.

The cluster is started by this module (``resdyn.dagster_project.launch.ray_local``) and stopped by killing the
PIDs it started, never with ``ray stop``. A partition runs through the Ray executor into a warehouse on the test S3
server (the steps read and write the warehouse only through the store; on one host they still share /tmp, the
model store in the cache folder and the Dagster home) while one step's process is
SIGKILLed: Dagster's retry policy reruns that step, and every table equals an in-process run of the same partition
on local disk. The partition runs its model steps, their checks and one analysis step (``SELECTION``): every step
is a Ray job that starts a Python of its own (seconds of imports each), and the other analysis steps go through the
same store and executor (they run in process in every pipeline test).
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from resdyn.dagster_project.configuration.ports import free_ports
from resdyn.dagster_project.launch.ray_local import LocalCluster
from resdyn.dagster_project.store.object_warehouse import ObjectWarehouse
from resdyn.dagster_project.store.warehouse import Warehouse

from ..cli_helpers import save_model

pytestmark = pytest.mark.cluster

REPOSITORY = Path(__file__).resolve().parents[2]
QUICK = ["--samples", "5", "--seq-len", "12", "--per-sample", "1", "--leiden-seeds", "2", "--permutations", "30",
         "--log-level", "WARNING"]
# the model's steps (a model-resource step: the one killed), the four checks that read its tables back (side by side
# on the two nodes), an analysis step that reads the activations from the store and the spectral step, whose worker
# pool reads the mean Jacobians from the store in processes of its own
SELECTION = "group:inputs or group:measurements or key:graph_edges or key:layer_metrics"
TABLES = ["model_checkpoints", "samples", "activations", "jacobians", "sample_jacobians", "finite_difference_probe",
          "graph_edges", "eigenvalues", "singular_values", "layer_metrics", "cumulative_rank", "schur_surgery",
          "schur_forms"]


def _environment(**extra) -> dict:
    values = {key: value for key, value in os.environ.items() if not key.startswith("RESDYN_") or
              key in ("RESDYN_WIKITEXT_DIR", "RESDYN_WIKITEXT_TOKENIZED_DIR")}
    return {**values, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", **extra}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(tmp_path_factory.mktemp("ray"), workers=1, num_cpus=1, environment=_environment()) as running:
        yield {"address": running.address, "gcs": running.gcs, "client": running.client, "nodes": running.nodes()}


def _step_processes(step: str) -> list[int]:
    """PIDs of processes running Dagster step ``step`` (dagster-ray passes DAGSTER_RUN_STEP_KEY to them)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environment = (entry / "environ").read_bytes().split(b"\0")
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        program = Path(command.split(b"\0", 1)[0].decode(errors="replace")).name
        # the step's own Python process, not a shell Ray may start it through: a shell killed before it forks (or
        # while its child starts, on a loaded machine) left the step running and nothing retried
        if f"DAGSTER_RUN_STEP_KEY={step}".encode() in environment and b"execute_step" in command and \
                program not in ("sh", "bash", "dash"):
            pids.append(int(entry.name))
    return pids


def test_every_node_is_on_loopback(cluster):
    assert len(cluster["nodes"]) == 2
    assert {node["address"] for node in cluster["nodes"]} == {"127.0.0.1"}


def test_partitions_through_ray_into_s3_equal_in_process_on_disk_even_when_a_step_is_killed(cluster, tmp_path,
                                                                                               s3_warehouse):
    # one partition, each step a Ray job on one of two 1-CPU nodes (steps side by side), and a killed step; a second
    # partition would double the test's minutes and test nothing more (partitions are independent runs)
    models = [save_model(tmp_path / "alpha", 0)]
    arguments = [argument for model in models for argument in ("--model", str(model))]
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    ray_warehouse, local_warehouse = str(s3_warehouse), tmp_path / "local"
    process = subprocess.Popen(
        [sys.executable, "-m", "resdyn", "run", *arguments, *QUICK, "--select", SELECTION, "--warehouse",
         str(ray_warehouse),
         "--executor", "ray", "--ray-address", cluster["address"]], cwd=REPOSITORY,
        env=_environment(DAGSTER_HOME=str(home), XDG_CACHE_HOME=str(tmp_path / "cache")), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    killed = []
    deadline = time.time() + 600
    while not killed and time.time() < deadline and process.poll() is None:
        pids = _step_processes("measurements")
        if pids:
            time.sleep(0.5)  # let it start its work
            for pid in pids:
                try:
                    killed.append((pid, Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200]))
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    continue
        time.sleep(0.2)
    output = process.communicate(timeout=900)[0]
    assert killed, "no measurements step was seen running; nothing was killed:\n" + output[-3000:]
    assert process.returncode == 0, output[-4000:]
    assert output.count(" ok in ") == 1, output[-3000:]

    # the killed step was retried by Dagster, and the runs (with their steps' logs) are in the instance
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(home)
    try:
        instance = dg.DagsterInstance.get()
        runs = instance.get_runs()
        assert {run.tags["dagster/partition"] for run in runs} == {"alpha@local"}
        assert all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
        events = [record.event_log_entry for run in runs for record in instance.get_records_for_run(run.run_id).records]
        kinds = [entry.dagster_event.event_type_value for entry in events if entry.dagster_event]
        assert "STEP_UP_FOR_RETRY" in kinds and "STEP_RESTARTED" in kinds, (killed, output[-3000:])
        assert "LOGS_CAPTURED" in kinds
        steps = {entry.step_key for entry in events if entry.step_key}
        assert {"measurements", "graph_edges", "spectral_analysis",
                "jacobians_jacobians_match_finite_differences"} <= steps, steps
        assert "transient_analysis" not in steps, steps  # the selection, not the whole partition
    finally:
        del os.environ["DAGSTER_HOME"]

    local = subprocess.run([sys.executable, "-m", "resdyn", "run", *arguments, *QUICK, "--select", SELECTION,
                            "--warehouse", str(local_warehouse)], cwd=REPOSITORY, env=_environment(), capture_output=True, text=True,
                           timeout=900)
    assert local.returncode == 0, local.stdout[-3000:]
    ray_store, local_store = ObjectWarehouse(s3_warehouse), Warehouse(local_warehouse)
    for table in TABLES:
        query = f"SELECT model, count(*) AS n FROM {table} GROUP BY model ORDER BY model"
        assert ray_store.query(query).to_pylist() == local_store.query(query).to_pylist(), table
    partitions = "SELECT model, checkpoint, status FROM partitions"
    assert ray_store.query(partitions).to_pylist() == local_store.query(partitions).to_pylist()
    from ..pipeline_helpers import read_mean_jacobians

    for name in ("alpha",):
        ours, theirs = read_mean_jacobians(ray_store, name, "local"), read_mean_jacobians(local_store, name, "local")
        assert set(ours) == set(theirs)
        assert max(float(np.abs(ours[key] - theirs[key]).max()) for key in ours) <= 1e-12


@pytest.mark.parametrize("address", ["http://127.0.0.1:{closed}", "http://10.255.255.1:8265"])
def test_an_unreachable_ray_address_is_a_one_line_error_not_a_hang(address, tmp_path):
    closed = free_ports(1)[0]
    address = address.format(closed=closed)
    started = time.perf_counter()
    completed = subprocess.run([sys.executable, "-m", "resdyn", "run", "--model", "tiny-llama", "--executor", "ray",
                                "--ray-address", address, "--warehouse", str(tmp_path)], cwd=REPOSITORY,
                               env=_environment(), capture_output=True, text=True, timeout=180)
    assert time.perf_counter() - started < 90  # about 10 s idle; generous for a loaded machine
    assert completed.returncode == 2
    assert address in completed.stderr and completed.stderr.strip().count("\n") == 0, completed.stderr


@pytest.mark.parametrize("form", ["127.0.0.1:{closed}", "ray://127.0.0.1:{closed}"])
def test_a_gcs_or_client_address_nobody_answers_is_waited_for_until_the_timeout_then_named(form):
    from resdyn.dagster_project.launch.executors import ExecutorError, ray_address

    address = form.format(closed=free_ports(1)[0])
    started = time.perf_counter()
    with pytest.raises(ExecutorError, match=r"asked for its dashboard address: no answer for 5 s\)") as error:
        ray_address(address, timeout=5)
    assert 4 <= time.perf_counter() - started < 45  # the timeout is 5 s: the upper bound only rules out a hang
    assert address in str(error.value) and "\n" not in str(error.value)


def test_a_lookup_refused_once_is_asked_again_and_a_lookup_that_keeps_failing_names_its_last_error(tmp_path):
    from resdyn.dagster_project.launch.executors import ask_until_answered

    # a real child process that fails on its first call (as a busy cluster's Ray Client can) and answers on the next
    marker = tmp_path / "asked"
    flaky = ("import pathlib, sys\nmarker = pathlib.Path(sys.argv[1])\nif not marker.exists():\n"
             "    marker.touch(); sys.exit('ConnectionError: ray client connection timeout')\nprint('http://127.0.0.1:8265/')")
    assert ask_until_answered([sys.executable, "-c", flaky, str(marker)], timeout=20) == ("http://127.0.0.1:8265", "")
    started = time.perf_counter()
    url, reason = ask_until_answered([sys.executable, "-c", "import sys; sys.exit('refused: 42')"], timeout=4)
    assert url is None and reason == "refused: 42"
    assert 2.5 <= time.perf_counter() - started < 40  # asked again until the timeout (4 s), not forever


def test_every_address_form_a_user_holds_leads_to_the_job_submission_address(cluster):
    from resdyn.dagster_project.launch.executors import ExecutorError, ray_address

    dashboard = cluster["address"]
    assert ray_address(dashboard) == dashboard
    assert ray_address(dashboard.removeprefix("http://")) == dashboard  # HOST:8265 without its scheme
    # the lookups ask the cluster itself; right after the partition test its two 1-CPU nodes are still winding
    # down Ray jobs and can take longer than the interactive 20 s to answer a Ray Client (seen once in a clean
    # clone's full run): this test is about the answer, not its speed
    assert ray_address(cluster["gcs"], timeout=120) == dashboard  # HOST:6379, as `ray start` prints it
    assert ray_address(cluster["client"], timeout=120) == dashboard  # ray://HOST:10001
    from resdyn.dagster_project.launch.executors import largest_node_cpus

    assert largest_node_cpus(dashboard) == 1  # each node of this cluster has one CPU
    for wrong in ("grpc://127.0.0.1:6379", "ftp://x", "127.0.0.1:6379/path", "ray://"):
        with pytest.raises(ExecutorError, match="expected http://HOST:8265") as error:
            ray_address(wrong)
        assert "\n" not in str(error.value)


def test_ray_resource_requests_follow_the_run_settings():
    """--device cuda asks Ray for a GPU for the model steps; --workers 0 asks for every core of the largest node
    (never more than a node has: such a job would never be scheduled; 1 when the cluster did not say). The
    definitions are built from the run's configuration, so the steps' own tags carry them."""
    import json

    from resdyn.dagster_project.configuration.config import StudyConfig
    from resdyn.dagster_project.launch.study_definitions import build_definitions, step_tags

    flags = StudyConfig.resolve({"workers": 0}, {})  # cuda is not here to pass the device check: set it below
    config = StudyConfig(settings={**flags.settings, "device": "cuda"}, ray_node_cpus=6)
    tags = {key.to_user_string(): json.loads(definition.op.tags["dagster-ray/config"])
            for definition in build_definitions(config).assets if "resdyn/step" in definition.op.tags
            for key in definition.keys}
    assert tags["activations"] == {"num_gpus": 1, "num_cpus": 1} and tags["layer_metrics"] == {"num_cpus": 6}
    # (device, workers, the largest node's CPUs as the cluster reports them, GPU asked, CPUs asked)
    for device, workers, node, gpu, cpus in (("cpu", 0, 6, None, 6), ("cuda:1", 1, 6, 1, 1),
                                             ("cpu", 8, 6, None, 6), ("cpu", 64, 0, None, os.cpu_count()),
                                             ("cpu", 0, 0, None, 1)):
        config = StudyConfig(settings={**flags.settings, "device": device, "workers": workers}, ray_node_cpus=node)
        model, analysis = (json.loads(step_tags(config, kind)["dagster-ray/config"]) for kind in ("model", "analysis"))
        assert model.get("num_gpus") == gpu and analysis == {"num_cpus": cpus}, (device, workers, node)
    # device auto asks for a GPU where the cluster has them (RESDYN_RAY_GPUS=1), and the config survives JSON
    config = StudyConfig.resolve({}, {"RESDYN_RAY_GPUS": "1", "RESDYN_RAY_NODE_CPUS": "6"})
    assert json.loads(step_tags(StudyConfig.from_json(config.to_json()), "model")["dagster-ray/config"]) == {
        "num_gpus": 1, "num_cpus": 1}
