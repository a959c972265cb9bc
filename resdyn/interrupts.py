"""A stop that a signal asked for, checked where a step can stop cleanly.

Dagster installs its own SIGINT handler while a run executes and, inside some analysis steps (worker
pools shutting down, generators closing), the interrupt it raises is swallowed ("Exception ignored
in ..."): the step ran on and the partition was published. The CLI therefore records every SIGINT /
SIGTERM through the interpreter's wakeup fd (``run_loop.SignalRecorder``, whatever handler runs), and the
steps call :func:`check` between sublayers and before publishing: a requested stop raises
:class:`StopRequested` there, which the partition's run turns into a step failure that is not retried
(dagster_project/asset_layer/partition_run.py), so the run fails, nothing of it is published, and the CLI exits
128 + the signal. This module knows no Dagster: the stages and the worker pools (resdyn/parallel.py) check it.
"""

from __future__ import annotations

import signal

_recorder = None


class StopRequested(Exception):
    """A signal asked the run to stop (raised by :func:`check`)."""


def watch(recorder) -> None:
    """Let :func:`check` see the signals ``recorder`` (with a ``poll() -> int | None``) has recorded."""
    global _recorder
    _recorder = recorder


def unwatch() -> None:
    global _recorder
    _recorder = None


def requested() -> int | None:
    return _recorder.poll() if _recorder is not None else None


def check(where: str) -> None:
    """Raise :class:`StopRequested` if a stop was requested (an exception of its own: an interrupt Dagster may drop,
    a plain error its retry policy would rerun). A no-op outside a CLI run, and in step processes of the
    multiprocess and Ray executors, which do not see the CLI's signals (their runs stop as Dagster stops them)."""
    signum = requested()
    if signum is not None:
        raise StopRequested(f"{signal.Signals(signum).name} received during {where}: stopped; nothing of this run is "
                            "published")
