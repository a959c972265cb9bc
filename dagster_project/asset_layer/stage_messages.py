"""The one form of a step's progress message, written by the assets and read back by ``resdyn run``'s display.

A long step logs, as each item of one of its stages finishes, ``<partition>: <stage> <done>/<total> (<item>) done,
<seconds> s`` (``m@local: spectra 17/60 (depth 16, 8/attn) done, 412 s``): what the UI's run log shows a person, and
what :mod:`resdyn.dagster_project.launch.progress` reads from the run's event-log file to draw a bar and estimate the
time left from the stage's own rate. The writer and the reader live here together, so that neither changes alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# the stage name is the shortest prefix followed by " done/total (": names may hold parentheses themselves
# ("sampling intervals (folds through depth) 3/10 (fold 3) done, 5 s")
_STAGE_MESSAGE = re.compile(r"^(?P<stage>.+?) (?P<done>\d+)/(?P<total>\d+) \((?P<item>.*)\) done, (?P<seconds>\d+) s$")


@dataclass(frozen=True)
class StageReport:
    """One finished item of a stage: ``done`` of ``total``, ``seconds`` since the stage began."""

    stage: str
    done: int
    total: int
    item: str
    seconds: float


def stage_message(partition_key: str, stage: str, done: int, total: int, item: str, seconds: float) -> str:
    """The message a step logs as item ``done`` of ``total`` of ``stage`` finishes, ``seconds`` into the stage."""
    return f"{partition_key}: {stage} {done}/{total} ({item}) done, {seconds:.0f} s"


def read_stage_message(message: str, partition_key: str) -> StageReport | None:
    """The :class:`StageReport` a message of :func:`stage_message` holds, or None for any other message."""
    prefix = f"{partition_key}: "
    if not message.startswith(prefix):
        return None
    found = _STAGE_MESSAGE.match(message[len(prefix):])
    if found is None or int(found["total"]) <= 0:
        return None
    return StageReport(found["stage"], int(found["done"]), int(found["total"]), found["item"],
                       float(found["seconds"]))
