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

import json
import os
import sys
import urllib.error
import urllib.request

import dagster as dg

EXECUTORS = ("in_process", "multiprocess", "ray")
EXECUTOR_VARIABLE = "RESDYN_EXECUTOR"
RAY_ADDRESS_VARIABLE = "RESDYN_RAY_ADDRESS"
MODEL_RUNNER_POOL = "model_runner"
MODEL_RUNNERS_VARIABLE = "RESDYN_MODEL_RUNNERS"
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


def ray_address(value: str | None = None) -> str:
    address = value or os.environ.get(RAY_ADDRESS_VARIABLE) or os.environ.get("RAY_ADDRESS") or ""
    if not address:
        raise ExecutorError(f"the ray executor needs the cluster's job-submission address: --ray-address "
                            f"http://HOST:8265 or {RAY_ADDRESS_VARIABLE}")
    return address if "://" in address else f"http://{address}"


def check_ray_address(address: str, timeout: float = 10.0) -> None:
    """One request to the cluster's job API; a one-line error naming the address when it does not answer."""
    try:
        with urllib.request.urlopen(f"{address.rstrip('/')}/api/version", timeout=timeout) as response:
            json.loads(response.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
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
    device = os.environ.get("RESDYN_DEVICE", "auto")
    workers = int(os.environ.get("RESDYN_WORKERS") or 0) or 1
    if kind == "model":
        wants_gpu = device.startswith("cuda") or (device == "auto" and os.environ.get("RESDYN_RAY_GPUS") == "1")
        request = {"num_gpus": 1, "num_cpus": 1} if wants_gpu else {"num_cpus": 1}
    else:
        request = {"num_cpus": min(workers, os.cpu_count() or 1)}
    return {"dagster-ray/config": json.dumps(request)}


def model_runner_slots() -> int:
    return max(1, int(os.environ.get(MODEL_RUNNERS_VARIABLE) or 1))
