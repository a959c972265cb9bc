"""Executors by name, for the CLI, the UI and the jobs alike.

    in_process    every step in the run's own process (the default: one model load per step, no start-up cost)
    multiprocess  every step in its own process on this machine (Dagster's multiprocess executor), each
                  forked from a server that has imported the steps' code once
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
import subprocess
import sys
import time
import urllib.error
import urllib.request

import dagster as dg

from resdyn.dagster_project.configuration.config import (
    VARIABLES,
    ConfigError,
    child_environment,
    executable_path,
    forwarded_variables,
)

RAY_ADDRESS_VARIABLE = VARIABLES["ray_address"]
# What a step process of the multiprocess executor needs before its step starts: the job's module, every asset
# module and torch, imported once by a fork server the executor starts; each step forks from it. Spawned (Dagster's
# default), each step imported them again: 2-4 s apiece (benchmarks/redesign_equivalence.py --executor multiprocess).
# These imports start no Python thread, and the native ones they start (OpenBLAS, jemalloc) handle a fork. The first
# makes the fork server and its steps end with their parent when a process here owns the run (resdyn/lifeline.py).
STEP_PRELOAD = ("resdyn.dagster_project.launch.fork_server_preload", "resdyn.dagster_project.launch.study_definitions",
                "resdyn.dagster_project.launch.assets_index", "torch")


class ExecutorError(ConfigError):
    pass


ADDRESS_FORMS = ("http://HOST:8265 (the dashboard / job-submission address), HOST:6379 (the cluster's GCS address, "
                 "as `ray start` prints it) or ray://HOST:10001 (a Ray Client address)")
# asks the cluster where its dashboard is, in a child process so that an unanswering address costs a timeout
_DASHBOARD_LOOKUP = """import sys
from ray.dashboard.utils import ray_address_to_api_server_url, ray_client_address_to_api_server_url
address = sys.argv[1]
print(ray_client_address_to_api_server_url(address) if address.startswith("ray://") else
      ray_address_to_api_server_url(address))
"""


def ray_address(value: str, timeout: float = 20.0) -> str:
    """The job-submission (dashboard) URL that dagster-ray's executor needs, from any address a user holds:
    the URL itself, a GCS address ``HOST:PORT`` (the cluster is asked for its dashboard) or a Ray Client
    address ``ray://HOST:PORT`` (likewise, through a client connection)."""
    address = (value or "").strip()
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
    # on loopback, else Ray swaps 127.0.0.1 for the routable address
    loopback = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"} if rest.split(":")[0] in ("127.0.0.1", "localhost") else {}
    environment = child_environment(loopback, drop=("RAY_ADDRESS",))
    url, reason = ask_until_answered([sys.executable, "-c", _DASHBOARD_LOOKUP, address], timeout, environment)
    if url is None:
        raise ExecutorError(f"no Ray cluster answers at {address} (asked for its dashboard address: {reason}); start "
                            f"one (`ray start --head`) or pass one of {ADDRESS_FORMS}")
    return url


def ask_until_answered(command: list[str], timeout: float, environment: dict | None = None) -> tuple[str | None, str]:
    """Run ``command`` until its last output line is a URL or ``timeout`` seconds have passed: a busy cluster can
    refuse one Ray Client connection and take the next. Returns (the URL or None, why the last try failed)."""
    deadline, reason = time.monotonic() + timeout, f"no answer for {int(timeout)} s"
    while (left := deadline - time.monotonic()) > 1:
        try:
            found = subprocess.run(command, capture_output=True, text=True, timeout=left, env=environment)
        except subprocess.TimeoutExpired:
            return None, f"no answer for {int(timeout)} s"
        lines = found.stdout.strip().splitlines() if found.returncode == 0 else []
        if lines and "://" in lines[-1]:
            return lines[-1].rstrip("/"), ""
        errors = found.stderr.strip().splitlines()
        reason = errors[-1][:200] if errors else f"the lookup exited with {found.returncode}"
        time.sleep(min(2.0, max(0.0, deadline - time.monotonic() - 1)))
    return None, reason

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


def executor_definition(name: str, address: str = "") -> dg.ExecutorDefinition:
    """The executor called ``name`` (a checked StudyConfig.executor); for Ray, ``address`` in any form a user
    holds (:func:`ray_address` turns it into the job-submission URL; a URL is taken as it is)."""
    if name == "in_process":
        return dg.in_process_executor
    if name == "multiprocess":
        return dg.multiprocess_executor.configured({"retries": {"enabled": {}}, "start_method": {
            "forkserver": {"preload_modules": list(STEP_PRELOAD)}}})
    from dagster_ray import ray_executor

    return ray_executor.configured({"ray": {"address": ray_address(address), "env_vars": forwarded_variables(),
                                            "runtime_env": {"env_vars": {"PATH": executable_path()}}},
                                    "retries": {"enabled": {}}})


def largest_node_cpus(address: str, timeout: float = 10.0) -> int | None:
    """The CPU count of the cluster's largest alive node (Ray's state API), or None when it does not say."""
    try:
        with urllib.request.urlopen(f"{address.rstrip('/')}/api/v0/nodes", timeout=timeout) as response:
            nodes = json.loads(response.read())["data"]["result"]["result"]
        counts = [int(node.get("resources_total", {}).get("CPU", 0)) for node in nodes if node.get("state") == "ALIVE"]
        return max(counts) if counts and max(counts) > 0 else None
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return None
