"""Checkpoint directories made in one piece: built beside their place under a lock, then renamed into it.

The model store holds imported GGUF checkpoints and null models (``<models>/<name>/<checkpoint>``).
Each is written into ``.<checkpoint>.staging-<pid>`` and swapped in with two renames, so a reader
sees the old directory or the new one, never half of one; a process killed mid-way leaves its
staging (or the old copy it was about to delete) behind, and the next holder of the lock sweeps it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..files import file_lock


@contextmanager
def locked(destination: Path) -> Iterator[None]:
    """An exclusive lock on ``destination`` (a ``.<name>.lock`` file beside it), shared across processes."""
    with file_lock(destination.parent / f".{destination.name}.lock"):
        yield


def sweep(destination: Path) -> None:
    """Remove what killed processes left beside ``destination`` (call with the lock held: no one else is writing)."""
    for pattern in (f".{destination.name}.staging-*", f".{destination.name}.replaced-*"):
        for leftover in destination.parent.glob(pattern):
            shutil.rmtree(leftover, ignore_errors=True)


@contextmanager
def replacing(destination: Path) -> Iterator[Path]:
    """A fresh staging directory that replaces ``destination`` when the block succeeds (call with the lock held);
    on an error it is removed and ``destination`` is left as it was."""
    sweep(destination)
    staging = destination.with_name(f".{destination.name}.staging-{os.getpid()}")
    staging.mkdir(parents=True)
    try:
        yield staging
        old = destination.with_name(f".{destination.name}.replaced-{os.getpid()}")
        if destination.exists():
            destination.rename(old)
        staging.rename(destination)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
