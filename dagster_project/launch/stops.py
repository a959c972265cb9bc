"""A launch that a signal stopped: what became of each of its partitions, made true where it is recorded and said.

``resdyn run`` ends the runs a SIGINT / SIGTERM stops (in its own process, or every run process with what it started:
run_loop.py), then settles each stopped partition from its manifest (:func:`settle_stopped_runs`): a run whose
generation was published before the stop is ``success`` in the runs table and said to have published; any other is
``failed``, its lease freed and what it left unpublished removed; the Dagster run is canceled.
"""

from __future__ import annotations

import signal
import sys

from resdyn.lifeline import owner_alive, owner_text, parse_owner
from resdyn.models.registry import split_partition_key


def start_quiet_resource_tracker() -> None:
    """Start this process's multiprocessing resource tracker (shared by every process the run processes start)
    without its warning of leaked semaphores: after a stop ends those processes outright it removes their
    semaphores, and a warning of it at exit would only alarm (seen after every stopped multiprocess run)."""
    from multiprocessing import resource_tracker

    option = "ignore::UserWarning:multiprocessing.resource_tracker"
    sys.warnoptions.append(option)  # what the tracker's interpreter is started with (util._args_from_interpreter_flags)
    try:
        resource_tracker.ensure_running()
    finally:
        sys.warnoptions.remove(option)


LAUNCH_TAG = "resdyn/launch"  # the launch (one `resdyn run`) a Dagster run belongs to: its stop finds its runs by it
OWNER_TAG = "resdyn/owner"  # the process that owns the run (resdyn.lifeline.owner_text): who can close it
UNFINISHED = ("NOT_STARTED", "QUEUED", "STARTING", "STARTED", "CANCELING")


def run_tags(launch_id: str) -> dict[str, str]:
    """The tags of a Dagster run that ``resdyn run`` launches (inside :func:`resdyn.lifeline.owning_runs`)."""
    return {"resdyn/cli": "run", LAUNCH_TAG: launch_id, OWNER_TAG: owner_text()}


def free_concurrency_slots(instance, run_id: str) -> None:
    """Give back the pool slots (``model_runner``) that the steps of run ``run_id`` claimed: a step ended outright
    (a stop, a kill) never frees its own, and Dagster's daemon, which would, is not running under ``resdyn run``."""
    if instance.event_log_storage.supports_global_concurrency_limits:
        instance.event_log_storage.free_concurrency_slots_for_run(run_id)


def close_abandoned_runs(instance) -> list[str]:
    """The Dagster runs that a ``resdyn run`` on this machine launched and left unfinished when it ended outright
    (``kill -9``: nothing closed them), recorded failed with their pool slots freed, and the slots of every finished
    run given back. Without this a killed run kept its ``model_runner`` slot, and every later multiprocess run on the
    same Dagster home waited for it without end. One line for each run closed, and one for slots held by a run this
    machine cannot judge."""
    import dagster as dg

    lines = []
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus[name] for name in UNFINISHED],
                                                   tags={"resdyn/cli": "run"}))
    for run in runs:
        owner = parse_owner(run.tags.get(OWNER_TAG))
        if owner is None or owner_alive(*owner):
            continue
        instance.report_run_failed(run, message=f"its resdyn run (pid {owner[0]}) ended without closing it")
        free_concurrency_slots(instance, run.run_id)
        lines.append(f"resdyn: Dagster run {run.run_id} of {run.tags.get('dagster/partition', '?')} was left "
                     f"{run.status.value} by a resdyn run that ended outright (pid {owner[0]}): recorded it failed and "
                     "freed its pool slots")
    if not instance.event_log_storage.supports_global_concurrency_limits:
        return lines
    holders = instance.event_log_storage.get_concurrency_run_ids()
    for record in instance.get_run_records(filters=dg.RunsFilter(run_ids=sorted(holders))) if holders else []:
        run = record.dagster_run
        if run.is_finished:
            free_concurrency_slots(instance, run.run_id)
        elif parse_owner(run.tags.get(OWNER_TAG)) is None:
            lines.append(f"resdyn: warning: Dagster run {run.run_id} ({run.status.value}, no resdyn process of this "
                         "machine owns it) holds pool slots; model steps wait until it ends. If it is dead, "
                         f"`dagster run delete {run.run_id}` frees them.")
    return lines


def close_stopped_runs(store, instance, key: str, launch_id: str, signum: int) -> str:
    """After a stop, whose processes have all ended: this launch's runs of ``key`` (found by their tag) settled
    (:func:`settle_stopped_runs`), and canceled on the Dagster instance; the sentence that says what became of them."""
    import dagster as dg

    runs = instance.get_runs(filters=dg.RunsFilter(tags={LAUNCH_TAG: launch_id, "dagster/partition": key}))
    name = signal.Signals(signum).name
    for run in runs:
        if not run.is_finished:
            instance.report_run_canceled(run, message=f"stopped by {name} (resdyn run)")
        free_concurrency_slots(instance, run.run_id)
    return settle_stopped_runs(store, key, [run.run_id for run in runs], name)


def settle_stopped_runs(store, key: str, run_ids: list[str], stopped_by: str) -> str:
    """Make what is recorded of the stopped runs ``run_ids`` of ``key`` true (their processes have ended): a run whose
    generation the manifest publishes is ``success`` in the runs table, any other ``failed``; their leases are freed
    and what they left unpublished removed. The sentence that says what became of the partition."""
    from resdyn.dagster_project.store.leases import now
    from resdyn.dagster_project.store.manifests import run_ending

    model, checkpoint = split_partition_key(key)
    if not run_ids:
        return f"{key} stopped by {stopped_by} before its run started; nothing of it was written."
    try:
        manifest = store.manifest_state(model, checkpoint)[0]
        endings = {run_id: run_ending(manifest, run_id, "failed", f"stopped by {stopped_by}") for run_id in run_ids}
        published = [run_id for run_id, ending in endings.items() if ending["status"] == "success"]
        for row in store.run_records(model, checkpoint):
            ending = endings.get(row["run_id"])
            if ending is not None and (row["status"] != ending["status"] or row["ended_at"] is None):
                store.record_run(model, checkpoint, {**{k: v for k, v in row.items() if k not in ("model",
                                                                                                  "checkpoint")},
                                                     "status": ending["status"], "ended_at": row["ended_at"] or now(),
                                                     "error": row["error"] or ending["error"]})
        for run_id in run_ids:
            store.bound(run_id, "").release_lease(model, checkpoint)
    except Exception as error:  # noqa: BLE001 - an object store out of reach: said, not raised
        return (f"{key} stopped by {stopped_by}; its record could not be updated ({str(error).splitlines()[0]}): "
                "`resdyn check` says what is published")
    if published:
        return (f"{key} stopped by {stopped_by} after its run {published[0]} had published its generation (the runs "
                "table records it `success`).")
    return (f"{key} stopped by {stopped_by} before it published; nothing of it is published. "
            f"{sweep_after_stop(store, key)}")


def sweep_after_stop(store, key: str) -> str:
    """Remove what the stopped run wrote for ``key`` and did not publish (its lease is free by now), and say what
    was removed and what, if anything, is left (a worker still writing) with the command that removes it."""
    model, checkpoint = split_partition_key(key)
    try:
        leftovers = store.unpublished(model, checkpoint)
        freed, removed = store.reclaim(leftovers), len(leftovers)
    except Exception as error:  # noqa: BLE001 - a full disk, an object store out of reach: said, not raised
        return f"Its unpublished files could not be removed ({error}): `resdyn check --reclaim` removes them."
    left = store.unpublished(model, checkpoint)
    said = f"Removed its {removed} unpublished file(s) ({freed / 2**20:.1f} MiB)."
    if left:
        said += (f" {len(left)} file(s) ({sum(item.bytes for item in left) / 2**20:.1f} MiB) are still held by a "
                 "live writer: `resdyn check --reclaim` removes them once it is gone.")
    return said
