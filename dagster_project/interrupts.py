"""A stop that a signal asked for, checked where a step can stop cleanly.

Dagster installs its own SIGINT handler while a run executes and, inside some analysis steps (worker
pools shutting down, generators closing), the interrupt it raises is swallowed ("Exception ignored
in ..."): the step ran on and the partition was published. The CLI therefore records every SIGINT /
SIGTERM through the interpreter's wakeup fd (``cli.SignalRecorder``, whatever handler runs), and the
steps call :func:`check` between sublayers and before publishing: a requested stop becomes a step
failure there, so the run fails, nothing of it is published, and the CLI exits 128 + the signal.
"""

from __future__ import annotations

import signal

_recorder = None


class StopRequested(RuntimeError):
    """Raised at a check point after SIGINT / SIGTERM (a failure Dagster records, not an interrupt it may drop)."""


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
    """Raise :class:`StopRequested` if a stop was requested (a no-op outside a CLI run)."""
    signum = requested()
    if signum is not None:
        raise StopRequested(f"{signal.Signals(signum).name} received during {where}: stopped; nothing of this run "
                            "is published")
