"""Leases: which run may write a partition now (``_locks/<model>@<checkpoint>.json``).

A second run of the same partition stops at once with a message naming the run that holds it,
unless that run is gone: its Dagster run status says it ended (on the instance the lease names),
or, for a single-process run on this machine, its process is gone; a lease nothing here can judge
(another machine, no instance) is respected.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from resdyn.dagster_project.store.errors import PartitionBusyError
from resdyn.files import atomic_write_text, file_lock, process_alive

IN_PROGRESS_STATUSES = {"QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING"}


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


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


def acquire_lease(store, model: str, checkpoint: str, *, single_process: bool, instance=None) -> None:
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
            mark_killed(store, model, checkpoint, lease.get("run_id"))
        home = None if instance is None or instance.is_ephemeral else instance.root_directory
        atomic_write_text(path, json.dumps({"run_id": store.run_id, "pid": os.getpid(), "host": socket.gethostname(),
                                            "single_process": single_process, "dagster_home": home,
                                            "started_at": now()}))


def release_lease(store, model: str, checkpoint: str) -> None:
    path = store.lease_path(model, checkpoint)
    with file_lock(path.with_name(path.name + ".lock")):
        try:
            if json.loads(path.read_text()).get("run_id") == store.run_id:
                path.unlink()
        except (OSError, json.JSONDecodeError):
            pass


def mark_killed(store, model: str, checkpoint: str, run_id: str | None) -> None:
    """Record run ``run_id`` of the partition ``killed`` when it was still ``started`` (a later run found it dead)."""
    for record in store.run_records(model, checkpoint):
        if record["run_id"] == run_id and record["status"] == "started":
            store.record_run(model, checkpoint, {**record, "status": "killed", "ended_at": now(),
                                                 "error": "found dead by a later run"})
