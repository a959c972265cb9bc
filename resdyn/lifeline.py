"""A run's processes end with the process that owns the run, however it ends.

``resdyn run`` (or ``resdyn.run`` in a notebook) owns the runs it launches. With the multiprocess executor each
partition's run is a process of its own (the run worker), which starts Dagster's fork server, which forks every step;
steps start worker pools of their own. A SIGKILL runs no cleanup, so without more each of them outlived a killed owner,
kept forking steps and published a generation 1 min 45 s after the kill.

Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``, prctl(2)) kills a process when the thread that started it
ends; it is set in each link of the chain, so the end of the owner ends the whole tree within milliseconds:

- the run worker (:func:`die_with_parent`, called by the launch before the run starts: its parent is the owner);
- the fork server, which imports ``dagster_project/launch/fork_server_preload.py`` while :data:`OWNER_VARIABLE` names an owner
  (:func:`arm_fork_server`), and every step it forks (a fork handler: the signal is not inherited across fork);
- the worker pools of a step (their initializer calls :func:`die_with_parent`).

Where ``prctl`` does not exist, a thread watches the parent instead. :data:`OWNER_VARIABLE` (``pid:start:host``) lets
a lease name the process that owns its run (:func:`owner_record`), so that a later run judges the lease by that
process's life (:func:`owner_alive`) rather than by a step's pid or a Dagster run status nobody will ever close.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from resdyn.files import process_alive

OWNER_VARIABLE = "RESDYN_RUN_OWNER"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCH_SECONDS = 0.5  # how often the fallback thread looks at its parent


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces): state, parent pid, ...
    (proc(5), from field 3 on); None where it cannot be read."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start(pid: int) -> str | None:
    """When process ``pid`` started, as the kernel counts it (``/proc/<pid>/stat`` field 22, clock ticks since boot):
    with the pid, what tells a process from a later one that reuses its pid. None where it cannot be read."""
    fields = stat_fields(pid)
    return None if fields is None else fields[19]


def owner_alive(pid: int, start: str | None) -> bool:
    """Is the process ``pid`` that started at ``start`` (:func:`process_start`) still running on this machine?"""
    if not process_alive(pid):
        return False
    now = process_start(pid) if start is not None else None
    return now is None or now == start


def current_owner() -> tuple[int, str | None] | None:
    """The process that owns the runs of this process tree (:data:`OWNER_VARIABLE`), when it runs on this machine
    (a Ray step on another machine is told of it too, and cannot judge it); else None."""
    return parse_owner(owner_text())


def owner_text() -> str:
    """:data:`OWNER_VARIABLE` as :func:`owning_runs` set it (``pid:start:host``), or "" outside such a block."""
    return os.environ.get(OWNER_VARIABLE, "")


def parse_owner(text: str | None) -> tuple[int, str | None] | None:
    """``(pid, start)`` of an owner written as :data:`OWNER_VARIABLE` is (``pid:start:host``), when that process
    runs on this machine; else None."""
    pid, start, host = ((text or "").split(":", 2) + ["", ""])[:3]
    return (int(pid), start or None) if pid.isdigit() and host == socket.gethostname() else None


def owner_record() -> dict:
    """What a lease records of the process that owns its run (:func:`owning_runs`); nothing for a run no process on
    this machine owns (one the Dagster UI launched: its Dagster run status judges it)."""
    owner = current_owner()
    return {} if owner is None else {"owner_pid": owner[0], "owner_start": owner[1]}


@contextmanager
def owning_runs() -> Iterator[None]:
    """Make this process the owner of the runs launched in the block: every process they start ends when it ends."""
    previous = os.environ.get(OWNER_VARIABLE)
    os.environ[OWNER_VARIABLE] = f"{os.getpid()}:{process_start(os.getpid()) or ''}:{socket.gethostname()}"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(OWNER_VARIABLE, None)
        else:
            os.environ[OWNER_VARIABLE] = previous


def die_with_parent() -> None:
    """End this process (SIGKILL) when its parent ends; at once if the parent, or the owner of the run, is gone
    already (it may have died before this call could arm the signal)."""
    parent = os.getppid()
    if not _parent_death_signal(signal.SIGKILL):
        threading.Thread(target=_watch_parent, args=(parent,), name="resdyn-lifeline", daemon=True).start()
    owner = current_owner()
    if os.getppid() != parent or parent == 1 or (owner is not None and not owner_alive(*owner)):
        os.kill(os.getpid(), signal.SIGKILL)


def _parent_death_signal(signum: int) -> bool:
    """Ask the kernel to send ``signum`` to this process when its parent ends (Linux); whether it took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_SECONDS)
    os.kill(os.getpid(), signal.SIGKILL)


def arm_fork_server() -> None:
    """In a fork server of a run that has an owner: it, and every process it forks (the steps), die with their parent.
    A process a step forks in turn is left alone (the handler is inherited): its forking thread may end before it."""
    owner = current_owner()
    if owner is None or owner[0] == os.getpid():
        return
    die_with_parent()
    fork_server = os.getpid()
    os.register_at_fork(after_in_child=lambda: die_with_parent() if os.getppid() == fork_server else None)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` on this machine (children first), from ``/proc``; empty where it cannot be read."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = stat_fields(entry.name)
        if fields is None or not fields[1].isdigit():
            continue
        parent = int(fields[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, frontier = [], [pid]
    while frontier:
        below = children.get(frontier.pop(0), [])
        found += below
        frontier += below
    return found


def end_process_trees(pids: list[int], timeout: float = 10.0) -> list[int]:
    """SIGKILL each of ``pids`` and every process below them, then wait until all are gone; those still there after
    ``timeout`` seconds (none, unless a process is stuck in the kernel)."""
    everyone = {(pid, process_start(pid)) for root in pids for pid in [root, *descendants(root)]}
    for pid, _ in everyone:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + timeout
    while True:
        for pid, _ in everyone:  # reap our own children, so that they do not linger as zombies
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        alive = [pid for pid, start in everyone if _running(pid, start)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _running(pid: int, start: str | None) -> bool:
    """Is ``pid`` still the process that started at ``start``, and not a zombie waiting to be reaped? One read."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z" and (start is None or fields[19] == start)

