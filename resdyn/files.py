"""Files that are whole or absent, and locks between processes: the one implementation every writer uses
(the warehouse's tables and manifests, the model registry, model directories, figures).

A file is written to a temp file in its own directory (same file system), flushed, given the mode the
umask allows (``mkstemp`` creates 0600) and renamed over its target: ``rename(2)`` is atomic, so a
reader sees the old file or the new one, never half of one, and a killed writer leaves only a
``*.inprogress`` temp file behind. Locks are ``flock(2)`` on a lock file: released by the kernel when
the holder dies, so a killed process never leaves a partition or registry locked.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

IN_PROGRESS_SUFFIX = ".inprogress"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # what a plain open() would have created


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temp path beside ``path`` to write to; renamed over ``path`` when the block succeeds, removed if not."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=IN_PROGRESS_SUFFIX)
    os.close(handle)
    try:
        yield Path(temporary)
        replace_atomically(Path(temporary), path)
    finally:
        Path(temporary).unlink(missing_ok=True)


def replace_atomically(temporary: Path, target: Path) -> None:
    """Flush ``temporary`` to disk, give it the umask's mode and rename it over ``target``."""
    with open(temporary, "rb+") as stream:
        os.fsync(stream.fileno())
    os.chmod(temporary, FILE_MODE)
    os.replace(temporary, target)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path``, whole or not at all."""
    with atomic_path(path) as temporary:
        temporary.write_text(text)


@contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive lock (flock) on the lock file ``path``, held for the block, shared across processes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# names a writer's temp file or spool folder ``<HOST>-<pid>-...``, so that one of a dead writer can be told apart
HOST = socket.gethostname().replace("-", "_")


def written_by_dead_writer(name: str) -> bool:
    """Is ``name`` (``<host>-<pid>-...``: a writer's temp file or spool folder, its own prefix removed) one of a writer
    on this machine whose process is gone? One from another machine sharing the folder is never judged dead."""
    host, _, rest = name.partition("-")
    pid = rest.split("-", 1)[0]
    return host == HOST and pid.isdigit() and not process_alive(int(pid))


def process_alive(pid: int) -> bool:
    """Is there a process ``pid`` on this machine (one we may not signal counts)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
