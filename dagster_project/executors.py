"""Executors by name, for the CLI, the UI and the jobs alike.

    in_process    every step in the run's own process (the default: one model load per step, no start-up cost)
    multiprocess  every step in its own process on this machine (Dagster's multiprocess executor)
    ray           every step a Ray job on a cluster (dagster-ray's ``ray_executor``): model-running steps ask
                  Ray for a GPU when the device is cuda, analysis steps for CPUs

``RESDYN_EXECUTOR`` and ``RESDYN_RAY_ADDRESS`` (the cluster's job-submission address,
``http://HOST:8265``) choose them for the UI and the jobs; ``resdyn run --executor --ray-address``
overrides both. Steps that run the model share the concurrency pool ``model_runner``
(``RESDYN_MODEL_RUNNERS`` slots, default 1), so a backfill of many partitions never loads more
models at once than the machine (or its GPUs) can hold. Every step retries up to twice, so a
worker that dies mid-step costs that step, not the run.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import dagster as dg

EXECUTORS = ("in_process", "multiprocess", "ray")
EXECUTOR_VARIABLE = "RESDYN_EXECUTOR"
RAY_ADDRESS_VARIABLE = "RESDYN_RAY_ADDRESS"
MODEL_RUNNER_POOL = "model_runner"
MODEL_RUNNERS_VARIABLE = "RESDYN_MODEL_RUNNERS"
NODE_CPUS_VARIABLE = "RESDYN_RAY_NODE_CPUS"  # set by the CLI from the cluster, read by ray_tags
STEP_RETRIES = dg.RetryPolicy(max_retries=2, delay=1)
# what a step on a Ray worker needs from the submitting environment
FORWARDED_VARIABLES = ("DAGSTER_HOME", "RESDYN_WAREHOUSE", "RESDYN_WIKITEXT_DIR", "RESDYN_WIKITEXT_TOKENIZED_DIR",
                       "HF_HOME", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_VERBOSITY", "PYTHONPATH",
                       "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", EXECUTOR_VARIABLE, RAY_ADDRESS_VARIABLE)


class ExecutorError(ValueError):
    pass


def executor_name(value: str | None = None) -> str:
    name = (value or os.environ.get(EXECUTOR_VARIABLE) or "in_process").strip().replace("-", "_")
    if name not in EXECUTORS:
        raise ExecutorError(f"{EXECUTOR_VARIABLE} / --executor={name!r} must be one of {', '.join(EXECUTORS)}")
    return name


ADDRESS_FORMS = ("http://HOST:8265 (the dashboard / job-submission address), HOST:6379 (the cluster's GCS address, "
                 "as `ray start` prints it) or ray://HOST:10001 (a Ray Client address)")
# asks the cluster where its dashboard is, in a child process so that an unanswering address costs a timeout
_DASHBOARD_LOOKUP = """import sys
from ray.dashboard.utils import ray_address_to_api_server_url, ray_client_address_to_api_server_url
address = sys.argv[1]
print(ray_client_address_to_api_server_url(address) if address.startswith("ray://") else
      ray_address_to_api_server_url(address))
"""


def ray_address(value: str | None = None, timeout: float = 20.0) -> str:
    """The job-submission (dashboard) URL that dagster-ray's executor needs, from any address a user holds:
    the URL itself, a GCS address ``HOST:PORT`` (the cluster is asked for its dashboard) or a Ray Client
    address ``ray://HOST:PORT`` (likewise, through a client connection)."""
    address = (value or os.environ.get(RAY_ADDRESS_VARIABLE) or os.environ.get("RAY_ADDRESS") or "").strip()
    if not address:
        raise ExecutorError(f"the ray executor needs the cluster's address: --ray-address or {RAY_ADDRESS_VARIABLE}, "
                            f"one of {ADDRESS_FORMS}")
    scheme, _, rest = address.partition("://") if "://" in address else ("", "", address)
    if scheme in ("http", "https"):
        return address.rstrip("/")
    if scheme not in ("", "ray") or not rest or "/" in rest.rstrip("/"):
        raise ExecutorError(f"--ray-address / {RAY_ADDRESS_VARIABLE}={address!r} is not a Ray address: expected "
                            f"{ADDRESS_FORMS}")
    if scheme == "" and _job_api_error(f"http://{address}", timeout=3) is None:
        return f"http://{address}"  # HOST:8265 without its scheme
    try:
        environment = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        if rest.split(":")[0] in ("127.0.0.1", "localhost"):  # else Ray swaps loopback for the routable address
            environment["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        found = subprocess.run([sys.executable, "-c", _DASHBOARD_LOOKUP, address], capture_output=True, text=True,
                               timeout=timeout, env=environment)
    except subprocess.TimeoutExpired:
        found = None
    lines = found.stdout.strip().splitlines() if found is not None and found.returncode == 0 else []
    if not lines or "://" not in lines[-1]:
        raise ExecutorError(f"no Ray cluster answers at {address} (asked for its dashboard address"
                            f"{' for ' + str(int(timeout)) + ' s' if found is None else ''}); start one "
                            f"(`ray start --head`) or pass one of {ADDRESS_FORMS}")
    return lines[-1].rstrip("/")


def _job_api_error(url: str, timeout: float) -> str | None:
    """Why the job API at ``url`` does not answer, or None when it does."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/api/version", timeout=timeout) as response:
            json.loads(response.read() or b"{}")
        return None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as error:  # a GCS port answers gRPC
        return str(getattr(error, "reason", error)) or type(error).__name__


def check_ray_address(address: str, timeout: float = 10.0) -> None:
    """One request to the cluster's job API; a one-line error naming the address when it does not answer."""
    reason = _job_api_error(address, timeout)
    if reason is not None:
        raise ExecutorError(f"no Ray cluster answers at {address} ({reason}); start one (`ray start --head`) or "
                            f"pass its job-submission address with --ray-address / {RAY_ADDRESS_VARIABLE}") from None


def executor_definition(name: str | None = None, address: str | None = None) -> dg.ExecutorDefinition:
    name = executor_name(name)
    if name == "in_process":
        return dg.in_process_executor
    if name == "multiprocess":
        return dg.multiprocess_executor.configured({"retries": {"enabled": {}}})
    from dagster_ray import ray_executor

    forwarded = [variable for variable in FORWARDED_VARIABLES if os.environ.get(variable)]
    # a step's entry point is `dagster api execute_step`: this environment's scripts first on the worker's PATH
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return ray_executor.configured({"ray": {"address": ray_address(address), "env_vars": forwarded,
                                            "runtime_env": {"env_vars": {"PATH": path}}},
                                    "retries": {"enabled": {}}})


def ray_tags(kind: str) -> dict:
    """op_tags asking Ray for what a step needs: a GPU for the model when the device is cuda, else CPUs."""
    device = os.environ.get("RESDYN_DEVICE") or "auto"
    workers = int(os.environ.get("RESDYN_WORKERS") or 0)
    # the largest node's cores (the CLI asks the cluster); a request above it would never be scheduled
    node_cpus = int(os.environ.get(NODE_CPUS_VARIABLE) or 0)
    if kind == "model":
        wants_gpu = device.startswith("cuda") or (device == "auto" and os.environ.get("RESDYN_RAY_GPUS") == "1")
        request = {"num_gpus": 1, "num_cpus": 1} if wants_gpu else {"num_cpus": 1}
    elif workers == 0:  # one per core: every core of a node, when the cluster said how many a node has
        request = {"num_cpus": node_cpus or 1}
    else:
        request = {"num_cpus": min(workers, node_cpus or os.cpu_count() or 1)}
    return {"dagster-ray/config": json.dumps(request)}


def largest_node_cpus(address: str, timeout: float = 10.0) -> int | None:
    """The CPU count of the cluster's largest alive node (Ray's state API), or None when it does not say."""
    try:
        with urllib.request.urlopen(f"{address.rstrip('/')}/api/v0/nodes", timeout=timeout) as response:
            nodes = json.loads(response.read())["data"]["result"]["result"]
        counts = [int(node.get("resources_total", {}).get("CPU", 0)) for node in nodes if node.get("state") == "ALIVE"]
        return max(counts) if counts and max(counts) > 0 else None
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return None


def export_step_settings(values: dict) -> None:
    """Put the run's device and worker count where step tags are derived from, before any asset module
    is imported (their op tags are fixed at import): a CLI flag must reach Ray's resource request."""
    os.environ["RESDYN_DEVICE"] = str(values["device"])
    os.environ["RESDYN_WORKERS"] = str(values["workers"])


def model_runner_slots() -> int:
    raw = os.environ.get(MODEL_RUNNERS_VARIABLE) or "1"
    try:
        slots = int(raw)
    except ValueError:
        slots = 0
    if slots < 1:
        raise ExecutorError(f"{MODEL_RUNNERS_VARIABLE}={raw!r} must be a whole number >= 1 (how many steps may "
                            "run a model at once; default 1)")
    return slots
