"""One run's work on one partition: a lease, a provenance record, staged tables, one publication.

Every asset runs inside :func:`partition_run`:

- the settings are checked first (a bad value fails the step before anything is written);
- the partition's lease is taken (``_locks/<model>@<checkpoint>.json``): a second run of the same
  partition stops at once with a message naming the run that holds it, unless that run is dead
  (its process is gone, or the Dagster instance says it has ended), which is then recorded as
  ``killed``;
- the run's row of the ``runs`` table is written when its first step for the partition starts;
- on success the step's tables stay staged, and the step that completes the run's selection for
  the partition publishes them all (one manifest swap), records ``success`` and frees the lease;
- on an exception the run is recorded ``failed`` with the first line of the error, the lease is
  freed, nothing is published.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from resdyn.models.registry import split_partition_key

from . import interrupts
from .settings import settings_hash
from .warehouse import REPOSITORY_ROOT, PartitionBusyError, Warehouse, atomic_write_text, file_lock, process_alive

IN_PROGRESS_STATUSES = {"QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING"}


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@functools.lru_cache(maxsize=1)
def code_environment() -> dict:
    """Versions of the code that computes (package, git commit, libraries), once per process."""
    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    commit = ""
    if (REPOSITORY_ROOT / ".git").exists():
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPOSITORY_ROOT, capture_output=True, text=True,
                                    timeout=10).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPOSITORY_ROOT,
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            commit += "+dirty" if dirty else ""
        except (OSError, subprocess.SubprocessError):
            commit = ""
    return {"resdyn_version": version("resdyn"), "git_commit": commit, "torch_version": version("torch"),
            "transformers_version": version("transformers"), "dagster_version": version("dagster"),
            "python_version": platform.python_version(), "host": socket.gethostname()}


@functools.lru_cache(maxsize=4)
def corpus_record(directory: str | None) -> dict:
    """The analysis corpus, resolved once per process (and setting), by label and content hash."""
    from resdyn.corpus import load_wikitext

    corpus = load_wikitext("test", directory=directory)
    return {"corpus": corpus.label, "corpus_sha256": hashlib.sha256(corpus.text.encode()).hexdigest()[:16]}


def _instance_of(lease: dict):
    """The Dagster instance the lease's run was launched on, when it lives on disk here."""
    home = lease.get("dagster_home")
    if not home or not (Path(home) / "dagster.yaml").is_file():
        return None
    try:
        import dagster as dg

        return dg.DagsterInstance.from_config(home)
    except Exception:  # an instance that cannot be opened cannot say the run is gone
        return None


def lease_is_live(lease: dict, instance=None) -> bool:
    """Is the run named by ``lease`` still running? Its Dagster run status decides (on ``instance``, else on
    the instance the lease names); a single-process run is also gone when its process is; a lease nothing
    can judge (another machine, no instance) is respected."""
    return _lease_is_live(lease, instance if instance is not None else _instance_of(lease))


def _lease_is_live(lease: dict, instance) -> bool:
    if lease.get("host") == socket.gethostname() and lease.get("single_process"):
        if not process_alive(int(lease.get("pid", 0))):
            return False
    if instance is not None:
        run = instance.get_run_by_id(lease["run_id"])
        if run is not None:
            return run.status.value in IN_PROGRESS_STATUSES
    if lease.get("host") == socket.gethostname() and lease.get("single_process"):
        return process_alive(int(lease.get("pid", 0)))
    # a step of a multiprocess or Ray run: its pid is one step's and says nothing of the run; the run is
    # unknown to any instance here, so it cannot be judged and is respected
    return True


def acquire_lease(store: Warehouse, model: str, checkpoint: str, *, single_process: bool, instance=None) -> None:
    path = store.lease_path(model, checkpoint)
    with file_lock(path.with_name(path.name + ".lock")):
        if path.is_file():
            try:
                lease = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                lease = {"run_id": "?"}
            if lease.get("run_id") == store.run_id:
                return
            if lease.get("run_id") != "?" and _lease_is_live(lease, instance):
                raise PartitionBusyError(
                    f"partition {model}@{checkpoint} is being materialized by run {lease['run_id']} (pid "
                    f"{lease.get('pid')} on {lease.get('host')} since {lease.get('started_at')}); wait for it to "
                    f"finish, or stop it. If that run is gone, delete {path}."
                )
            _mark_killed(store, model, checkpoint, lease.get("run_id"))
        home = None if instance is None or instance.is_ephemeral else instance.root_directory
        atomic_write_text(path, json.dumps({"run_id": store.run_id, "pid": os.getpid(), "host": socket.gethostname(),
                                            "single_process": single_process, "dagster_home": home,
                                            "started_at": now()}))


def release_lease(store: Warehouse, model: str, checkpoint: str) -> None:
    path = store.lease_path(model, checkpoint)
    with file_lock(path.with_name(path.name + ".lock")):
        try:
            if json.loads(path.read_text()).get("run_id") == store.run_id:
                path.unlink()
        except (OSError, json.JSONDecodeError):
            pass


def _mark_killed(store: Warehouse, model: str, checkpoint: str, run_id: str | None) -> None:
    for record in store.run_records(model, checkpoint):
        if record["run_id"] == run_id and record["status"] == "started":
            store.record_run(model, checkpoint, {**record, "status": "killed", "ended_at": now(),
                                                 "error": "found dead by a later run"})


def model_source(store: Warehouse, model: str, checkpoint: str) -> str:
    """The registry's account of a partition's checkpoint, as JSON (``runs.model_source``)."""
    from resdyn.models.registry import ModelRegistry
    from resdyn.models.sources import registered_origin

    try:
        spec, revision = ModelRegistry(store.registry_file).resolve(f"{model}@{checkpoint}")
    except KeyError:
        return json.dumps({"source": None, "error": "not in the registry"})
    origin = {key: value for key, value in registered_origin(spec, checkpoint).as_dict().items() if value}
    return json.dumps({"source": spec.source, "family": spec.family, "revision": revision, **origin,
                       **({"init_config": spec.init_config} if spec.init_config else {})}, sort_keys=True)


def map_conventions(store: Warehouse, model: str, checkpoint: str) -> str | None:
    """What the family's sublayer maps hold fixed, as JSON (``runs.map_conventions``)."""
    from resdyn.models.adapters import adapter_for
    from resdyn.models.registry import ModelRegistry

    try:
        spec, _ = ModelRegistry(store.registry_file).resolve(f"{model}@{checkpoint}")
        return json.dumps(adapter_for(spec.family).conventions, sort_keys=True)
    except (KeyError, ValueError):
        return None


def _record(store: Warehouse, model: str, checkpoint: str, settings_values: dict, executor: str,
            corpus_directory: str | None, **fields) -> None:
    existing = {r["run_id"]: r for r in store.run_records(model, checkpoint)}.get(store.run_id)
    row = existing or {
        "run_id": store.run_id, "settings_hash": store.settings_hash, "settings": json.dumps(settings_values,
                                                                                             sort_keys=True),
        **corpus_record(corpus_directory), "dtype": settings_values["dtype"],
        "backend": settings_values["backend"], "device": settings_values["device"], "executor": executor,
        "model_source": model_source(store, model, checkpoint),
        "map_conventions": map_conventions(store, model, checkpoint), **code_environment(), "pid": os.getpid(),
        "started_at": now(), "ended_at": None, "status": "started", "error": None,
    }
    store.record_run(model, checkpoint, {**row, **fields})


def record_interrupted(store: Warehouse, model: str, checkpoint: str, reason: str) -> None:
    """Close this process's runs of the partition that a signal stopped between steps (no step was there to
    record the failure): status ``failed`` with ``reason``, and the lease freed."""
    for row in store.run_records(model, checkpoint):
        row = {key: value for key, value in row.items() if key not in ("model", "checkpoint")}
        if row["status"] == "started" and row["pid"] == os.getpid() and row["host"] == socket.gethostname():
            bound = Warehouse(store.root, run_id=row["run_id"], settings_hash=row["settings_hash"])
            store.record_run(model, checkpoint, {**row, "status": "failed", "ended_at": now(), "error": reason})
            release_lease(bound, model, checkpoint)


def selected_tables(context) -> set[str]:
    """The tables this run will write for the partition: its selected assets (each writes its own table)."""
    keys = context.run.asset_selection or context.job_def.asset_layer.executable_asset_keys
    return {key.to_user_string() for key in keys}


@contextmanager
def partition_run(context, warehouse, settings) -> Iterator[Warehouse]:
    """The warehouse bound to this run and partition, for one asset step (module docstring)."""
    model, checkpoint = split_partition_key(context.partition_key)
    values = settings.values()
    store = Warehouse(warehouse.open().root, run_id=context.run_id, settings_hash=settings_hash(values))
    executor = context.job_def.executor_def.name
    corpus = warehouse.wikitext_directory or None
    single_process = "in_process" in executor or "in-process" in executor
    acquire_lease(store, model, checkpoint, single_process=single_process, instance=context.instance)
    try:
        if not store.partition_directory("runs", model, checkpoint).joinpath(f"{store.run_id}.parquet").is_file():
            _record(store, model, checkpoint, values, executor, corpus)
        interrupts.check(f"the start of {getattr(getattr(context, 'op_def', None), 'name', 'a step')}")
        yield store
        interrupts.check(f"{getattr(getattr(context, 'op_def', None), 'name', 'a step')} of {context.partition_key}")
    except BaseException as error:
        message = (str(error).strip().splitlines() or [type(error).__name__])[0]
        step = getattr(getattr(context, "op_def", None), "name", "")
        _record(store, model, checkpoint, values, executor, corpus, status="failed", ended_at=now(),
                error=f"{step}: {type(error).__name__}: {message}"[:2000])
        release_lease(store, model, checkpoint)
        raise
    staged = set(store.staged(model, checkpoint))
    if not staged and store.published_by(model, checkpoint, store.run_id):
        # a step that drew its figures after a concurrent step had already published this run's tables
        store.publish_figures(model, checkpoint)
    elif selected_tables(context) <= staged:
        store.publish(model, checkpoint)
        _record(store, model, checkpoint, values, executor, corpus, status="success", ended_at=now())
        release_lease(store, model, checkpoint)
