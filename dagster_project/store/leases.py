"""Leases: which run may write a partition now (``_locks/<model>@<checkpoint>.json``).

A second run of the same partition stops at once with a message naming the run that holds it,
unless that run is gone: the process that owns it (``owner_pid``: the ``resdyn run`` that launched it, whose end ends
every process of the run, resdyn/lifeline.py) is gone, its Dagster run status says it ended (on the instance the lease
names), or, for a single-process run on this machine, its process is gone; a lease nothing here can judge (another
machine, no instance) is respected. A lease carries a fencing token (store/fencing.py): a run that takes a dead run's
lease over fences the partition against the old token first, so the old run can never publish.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from resdyn.dagster_project.store.errors import PartitionBusyError
from resdyn.dagster_project.store.fencing import next_token
from resdyn.files import atomic_write_text, file_lock, process_alive
from resdyn.lifeline import owner_alive, owner_record

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
    owner = lease.get("owner_pid")
    if lease.get("host") == socket.gethostname() and isinstance(owner, int) and not owner_alive(
            owner, lease.get("owner_start")):
        return False  # the process that owned the run is gone, and every process of the run ended with it
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
        previous = read_lease(store, model, checkpoint)
        if previous is not None:
            if previous.get("run_id") == store.run_id:
                return
            if previous.get("run_id") != "?" and _lease_is_live(previous, instance):
                raise PartitionBusyError(
                    f"partition {model}@{checkpoint} is being materialized by run {previous['run_id']} (pid "
                    f"{previous.get('pid')} on {previous.get('host')} since {previous.get('started_at')}); wait for it "
                    f"to finish, or stop it. If that run is gone, delete {path}."
                )
        token = next_token(previous, store.manifest_state(model, checkpoint)[0])
        if previous is not None:  # before this run writes anything, the run it takes over can no longer publish
            store.fence_out(model, checkpoint, token)
            mark_killed(store, model, checkpoint, previous.get("run_id"))
        home = None if instance is None or instance.is_ephemeral else instance.root_directory
        atomic_write_text(path, json.dumps({"run_id": store.run_id, "fence": token, "pid": os.getpid(),
                                            "host": socket.gethostname(), **owner_record(),
                                            "single_process": single_process, "dagster_home": home,
                                            "started_at": now()}))


def read_lease(store, model: str, checkpoint: str) -> dict | None:
    """The partition's lease as its file holds it (None: no lease); an unreadable one is a lease of an unknown run."""
    try:
        return parse_lease(store.lease_path(model, checkpoint).read_bytes())
    except FileNotFoundError:
        return None
    except OSError:
        return {"run_id": "?"}


def parse_lease(data: bytes) -> dict:
    """A lease from its stored bytes (a file's or an object's); one that does not parse is a lease of an unknown run."""
    try:
        lease = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {"run_id": "?"}
    return lease if isinstance(lease, dict) else {"run_id": "?"}


def release_lease(store, model: str, checkpoint: str) -> None:
    path = store.lease_path(model, checkpoint)
    with file_lock(path.with_name(path.name + ".lock")):
        try:
            if json.loads(path.read_text()).get("run_id") == store.run_id:
                path.unlink()
        except (OSError, json.JSONDecodeError):
            pass


def mark_killed(store, model: str, checkpoint: str, run_id: str | None) -> None:
    """Record run ``run_id`` of the partition, found dead by a later run, as it ended: ``success`` when the manifest
    publishes its tables (it died between its publication and its record), else ``killed``; only while its record
    still says ``started``."""
    from resdyn.dagster_project.store.manifests import run_ending

    for record in store.run_records(model, checkpoint):
        if record["run_id"] == run_id and record["status"] == "started":
            ending = run_ending(store.manifest_state(model, checkpoint)[0], run_id, "killed", "found dead by a later run")
            store.record_run(model, checkpoint, {**record, **ending, "ended_at": now()})
