"""What a stage asks of where it runs: workers, progress, streamed tables, a figure folder, a stop.

:class:`StageTools` runs everything here, serially unless given workers, and logs its progress through
:mod:`logging`: what a test or a notebook hands a stage. The asset factory hands a subclass that logs into the
step's log (the lines ``resdyn run`` draws as bars), streams tables into the warehouse and chooses the worker count
from the run's settings (dagster_project/asset_layer/stage_tools.py).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from resdyn import interrupts
from resdyn.parallel import ordered_parallel_map

log = logging.getLogger(__name__)


class Progress:
    """One line per finished item of a stage: done / total and seconds so far (a partition's analysis runs for
    minutes at large d). Each item is also where a requested stop ends the stage (the one place that bounds how
    long a stop waits to the slowest item)."""

    def __init__(self, tools: StageTools, stage: str, total: int) -> None:
        self.tools, self.stage, self.total, self.done_count = tools, stage, total, 0
        self.started = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def done(self, what: str) -> None:
        self.done_count += 1
        self.tools.report(self.stage, self.done_count, self.total, what, self.seconds())
        self.tools.check(self.stage)


class CollectedStream:
    """A streamed table kept in memory: the column batches written to it (``batches``), in order."""

    def __init__(self, table: str, width: int | None) -> None:
        self.table, self.width, self.batches = table, width, []

    def write(self, columns: dict) -> None:
        self.batches.append(columns)

    def __enter__(self) -> CollectedStream:
        return self

    def __exit__(self, *exc) -> None:
        return None


class StageTools:
    """Where a stage runs: ``label`` (``model@checkpoint``, for messages and figure titles), ``figures`` (the folder
    its figures go to), ``workers`` (processes a parallel map may use)."""

    def __init__(self, label: str = "model@local", figures: Path | None = None, workers: int = 1) -> None:
        self.label, self.workers = label, max(1, int(workers))
        self._figures = Path(figures) if figures is not None else None

    @property
    def model(self) -> str:
        return self.label.split("@", 1)[0]

    @property
    def checkpoint(self) -> str:
        return self.label.split("@", 1)[-1]

    @property
    def figures(self) -> Path:
        if self._figures is None:
            self._figures = Path(tempfile.mkdtemp(prefix="resdyn-figures-"))
        self._figures.mkdir(parents=True, exist_ok=True)
        return self._figures

    def map(self, function: Callable, tasks: Iterable, *, parallel: bool = True, at_most: int | None = None) -> Iterator:
        """``function`` over ``tasks``, results in order (resdyn/parallel.py), over :attr:`workers` processes (no more
        than ``at_most``) when ``parallel`` (the stage's judgement: a pool pays only beyond some size)."""
        workers = min(self.workers, at_most or self.workers) if parallel else 1
        return ordered_parallel_map(function, tasks, workers=workers)

    def progress(self, stage: str, total: int) -> Progress:
        return Progress(self, stage, total)

    def report(self, stage: str, done: int, total: int, item: str, seconds: float) -> None:
        """Say that item ``done`` of ``total`` of ``stage`` is finished."""
        self.log(f"{stage} {done}/{total} ({item}) done, {seconds:.0f} s")

    def log(self, message: str) -> None:
        log.info("%s: %s", self.label, message)

    def check(self, where: str) -> None:
        """Stop here if a stop was asked for (resdyn/interrupts.py)."""
        interrupts.check(f"{where} of {self.label}")

    def stream(self, table: str, width: int | None = None) -> CollectedStream:
        """Where a stage writes a large table one batch at a time (a context manager with ``write(columns)``)."""
        return CollectedStream(table, width)


__all__ = ["CollectedStream", "Progress", "StageTools"]
