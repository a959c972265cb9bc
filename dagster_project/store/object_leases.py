"""Leases on an object store: one object per partition (``_locks/<model>@<checkpoint>.json``), taken by a
conditional PUT, so that of any number of runs, on any machines, racing for a partition exactly one holds it.

- A free partition is taken with ``If-None-Match: *`` (:meth:`ObjectStore.create`): one writer's PUT succeeds,
  every other one gets 412.
- A held lease whose run is gone (judged as on disk: :func:`~.leases.lease_is_live`, its Dagster run status, or its
  process on this machine) is taken over with ``If-Match`` on the ETag read: where two runs find the same dead
  lease, one replaces it and the other's condition fails, and it stops as a second writer would.
- A lease is released by deleting it under ``If-Match`` on the holder's own ETag: a run never removes a lease that
  another run took over meanwhile.

Limit: a lease nothing can judge (a run on another machine, its instance not reachable from here) is respected
until a person deletes it (``resdyn forget`` names it); there is no expiry, because a clock on another machine
cannot decide that a slow run is dead.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass

from resdyn.dagster_project.store.errors import PartitionBusyError
from resdyn.dagster_project.store.leases import lease_is_live, now, parse_lease
from resdyn.dagster_project.store.object_store import ObjectStore
from resdyn.lifeline import owner_record


@dataclass(frozen=True)
class HeldLease:
    relative: str
    etag: str
    holder: dict


def lease_key(model: str, checkpoint: str) -> str:
    return f"_locks/{model}@{checkpoint}.json"


def holder_record(run_id: str, *, single_process: bool, dagster_home: str | None = None) -> dict:
    return {"run_id": run_id, "pid": os.getpid(), "host": socket.gethostname(), **owner_record(),
            "single_process": single_process, "dagster_home": dagster_home, "started_at": now()}


def acquire_object_lease(store: ObjectStore, model: str, checkpoint: str, holder: dict, *, is_live=lease_is_live,
                         on_taken_over=lambda previous: None, token_for=lambda previous: 0,
                         fence=lambda token: None, attempts: int = 5) -> HeldLease:
    """Hold the partition's lease for ``holder['run_id']``, or raise :class:`PartitionBusyError` naming the run
    that holds it. ``is_live(lease) -> bool`` judges a lease found there (default: as on disk);
    ``token_for(previous lease or None) -> int`` is the fencing token the lease is taken with (store/fencing.py);
    ``fence(token)`` refuses every older token *before* a dead lease is replaced (a fence whose replacement then
    loses is harmless); ``on_taken_over(previous)`` is told the holder of a dead lease this run took over (its run is
    then recorded as it ended)."""
    relative = lease_key(model, checkpoint)
    for _ in range(attempts):  # each pass ends in a decision unless the lease changed hands under us
        etag = store.create(relative, json.dumps({**holder, "fence": token_for(None)}).encode())
        if etag is not None:
            return HeldLease(relative, etag, holder)
        found = store.get(relative)
        if found is None:
            continue  # released between our PUT and our GET: try again
        current = parse_lease(found.data)
        if current.get("run_id") == holder["run_id"]:
            return HeldLease(relative, found.etag, current)  # ours (a retried PUT whose first answer was lost)
        if current.get("run_id") not in (None, "?") and is_live(current):
            raise PartitionBusyError(
                f"partition {model}@{checkpoint} is being materialized by run {current['run_id']} (pid "
                f"{current.get('pid')} on {current.get('host')} since {current.get('started_at')}); wait for it to "
                f"finish, or stop it. If that run is gone, delete {store.location.key(relative)} in "
                f"s3://{store.location.bucket}.")
        token = token_for(current)
        fence(token)
        etag = store.replace(relative, json.dumps({**holder, "fence": token}).encode(), found.etag)
        if etag is not None:  # a dead or unreadable lease: one taker wins
            on_taken_over(current)
            return HeldLease(relative, etag, holder)
    raise PartitionBusyError(f"partition {model}@{checkpoint}: its lease changed hands {attempts} times while this "
                             "run tried to take it; another run is taking it now")


def release_run_lease(store: ObjectStore, model: str, checkpoint: str, run_id: str) -> bool:
    """Give up the partition's lease if run ``run_id`` holds it (read, then deleted under If-Match on what was read:
    a lease another run took over meanwhile is theirs); whether it was removed. A step of a run may release the lease
    another step of it took (each step is a process of its own under some executors)."""
    found = store.get(lease_key(model, checkpoint))
    return found is not None and parse_lease(found.data).get("run_id") == run_id and \
        store.delete(lease_key(model, checkpoint), etag=found.etag)


def release_object_lease(store: ObjectStore, lease: HeldLease) -> bool:
    """Give the lease up, unless another run took it over meanwhile (then it is theirs); whether it was removed."""
    return store.delete(lease.relative, etag=lease.etag)
