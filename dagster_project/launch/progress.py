"""What ``resdyn run`` shows while its partitions run (without ``--log-level``): per partition the running step (step
i of n of the run's selection), its stage's items done / total, the time since the partition began, and the time
the stage has left at its own rate so far.

The steps run in the CLI's process, in a process per partition, in step processes or on Ray workers, so the display
reads what they all write: the launch's event-log file (:mod:`.event_log_file`), followed by a thread as it grows.
A stage's progress is the message of :mod:`~resdyn.dagster_project.asset_layer.stage_messages`.

- In a terminal, :class:`LiveBars`: one rich progress line per running partition, redrawn in place; resdyn's own lines
  (a partition's start and end) print above it.
- Otherwise (CI, ``nohup``, a pipe), :class:`StageLines`: a plain line as a step ends, with its seconds; one as it
  starts when it runs for more than a few seconds; and for a long stage a line at each quarter (at most three).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, ProgressColumn, TextColumn
from rich.progress_bar import ProgressBar

from resdyn.dagster_project.asset_layer.stage_messages import StageReport, read_stage_message
from resdyn.dagster_project.launch.event_log_file import EventLine, read_line

POLL_SECONDS = 0.25  # how often the file is read: well under a person's notice, nothing for the disk
START_LINE_AFTER = 2.0  # s: a step still running this long gets its start line (most checks end sooner)
QUARTER_LINE_AFTER = 10.0  # s since a step's last line before a quarter of its stage gets a line of its own
RUN_ENDS = ("RUN_SUCCESS", "RUN_FAILURE", "RUN_CANCELED")


@dataclass
class StepState:
    ordinal: int  # the step's place among the partition's steps, as they started
    started: float  # the time of its STEP_START line
    said: float  # the time of its last plain line (StageLines), or when it started
    announced: bool = False  # its start line printed (StageLines)
    stage: str = ""  # the stage it reported last, and how many quarters of it were said (StageLines)
    quarters: int = 0


@dataclass
class PartitionState:
    key: str
    started: float  # the time of its first line
    running: dict[str, StepState] = field(default_factory=dict)
    steps_started: int = 0
    stage: tuple[str, StageReport, float] | None = None  # (step, its latest report, that line's time)
    ended: bool = False

    def time_left(self, now: float) -> float | None:
        """The stage's time left at its own rate: seconds per item so far, times the items left, less the time
        since the last item finished."""
        if self.stage is None or self.stage[0] not in self.running:
            return None
        _, report, said = self.stage
        per_item = report.seconds / max(report.done, 1)
        return max(0.0, per_item * (report.total - report.done) - (now - said))


def describe_seconds(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class _FileTail:
    """The complete lines appended to a file since the last call (a line still being written waits)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.partial = Path(path), 0, b""

    def new_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as file:
                file.seek(self.offset)
                data = file.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines]


class RunDisplay:
    """The partitions' states from the event-log file, read by a thread every :data:`POLL_SECONDS` and on demand
    (:meth:`partition_ended`, so that a partition's last lines show before resdyn's line saying how it ended).
    Subclasses draw: :meth:`on_line` after each line is taken in, :meth:`on_tick` on each poll,
    :meth:`on_end` when a partition's run is over."""

    def __init__(self, path: Path, keys: list[str], n_steps: int) -> None:
        self.tail, self.keys, self.n_steps = _FileTail(path), set(keys), n_steps
        self.partitions: dict[str, PartitionState] = {}
        self.lock = threading.RLock()  # the thread and the run loop both read the file
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._follow, name="resdyn-progress", daemon=True)

    def start(self) -> RunDisplay:
        self.thread.start()
        return self

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        self.catch_up()

    def printing(self) -> threading.RLock:
        """Held while the run loop prints its own lines: none is cut by a line of the display's thread."""
        return self.lock

    def partition_ended(self, key: str) -> None:
        """Take in what the file holds now, then end ``key``'s display (its run is over, as the run loop knows)."""
        with self.lock:
            self.catch_up()
            state = self.partitions.get(key)
            if state is not None and not state.ended:
                state.ended = True
                self.on_end(state)

    def catch_up(self) -> None:
        with self.lock:
            for text in self.tail.new_lines():
                line = read_line(text)
                if line is not None and line.partition in self.keys:
                    self._take(line)

    def _follow(self) -> None:
        while not self.stopping.wait(POLL_SECONDS):
            try:
                with self.lock:
                    self.catch_up()
                    self.on_tick(time.time())
            except Exception:  # noqa: BLE001 - a display that fails must not end the run: it goes quiet
                return

    def _take(self, line: EventLine) -> None:
        state = self.partitions.get(line.partition)
        if state is None:
            state = self.partitions[line.partition] = PartitionState(line.partition, line.time)
        if state.ended:
            return
        if line.event in ("STEP_START", "STEP_RESTARTED") and line.step:
            if line.step not in state.running:
                state.steps_started += 1
                state.running[line.step] = StepState(state.steps_started, line.time, line.time)
        elif line.event in ("STEP_SUCCESS", "STEP_FAILURE") and line.step in state.running:
            step = state.running.pop(line.step)
            self.on_step_end(state, line.step, step, line.time - step.started, line.event == "STEP_SUCCESS")
        elif line.event is None and line.step in state.running:
            report = read_stage_message(line.message, line.partition)
            if report is not None:
                state.stage = (line.step, report, line.time)
                self.on_stage(state, line.step, state.running[line.step], report, line.time)
        elif line.event in RUN_ENDS:
            state.ended = True
            self.on_end(state)
            return
        self.on_line(state)

    # what subclasses draw ------------------------------------------------------------------------------------
    def on_line(self, state: PartitionState) -> None:
        pass

    def on_stage(self, state: PartitionState, step: str, running: StepState, report: StageReport, at: float) -> None:
        pass

    def on_step_end(self, state: PartitionState, step: str, running: StepState, seconds: float, ok: bool) -> None:
        pass

    def on_tick(self, now: float) -> None:
        pass

    def on_end(self, state: PartitionState) -> None:
        pass

    def step_label(self, state: PartitionState, step: str, running: StepState) -> str:
        return f"{state.key} step {running.ordinal}/{self.n_steps} {step}"


class StageLines(RunDisplay):
    """Plain lines, for a log file or a pipe: a few per step, none redrawn."""

    def __init__(self, path: Path, keys: list[str], n_steps: int, out=None) -> None:
        super().__init__(path, keys, n_steps)
        self.out = out

    def _say(self, text: str) -> None:
        out = self.out or sys.stdout  # (read when written: a test or a notebook may have swapped it)
        out.write(f"    {text}\n")  # one write: a whole line beside the run loop's own
        out.flush()

    def _announce(self, state: PartitionState, step: str, running: StepState) -> None:
        if not running.announced:
            running.announced = True
            self._say(f"{self.step_label(state, step, running)} ...")

    def on_stage(self, state, step, running, report, at) -> None:
        if report.stage != running.stage:
            running.stage, running.quarters = report.stage, 0
        quarter = 4 * report.done // report.total
        if quarter <= running.quarters or report.done == report.total:
            return
        running.quarters = quarter
        if at - running.said < QUARTER_LINE_AFTER:
            return
        self._announce(state, step, running)
        left = state.time_left(at)
        running.said = at
        self._say(f"{self.step_label(state, step, running)}: {report.stage} {report.done}/{report.total} "
                  f"({report.item}), {describe_seconds(report.seconds)}"
                  + (f", about {describe_seconds(left)} left" if left is not None else ""))

    def on_step_end(self, state, step, running, seconds, ok) -> None:
        self._say(f"{self.step_label(state, step, running)} {'done in' if ok else 'FAILED after'} "
                  f"{seconds:.1f} s")

    def on_tick(self, now: float) -> None:
        for state in self.partitions.values():
            for step, running in state.running.items():
                if not state.ended and now - running.started >= START_LINE_AFTER:
                    self._announce(state, step, running)


class LiveBars(RunDisplay):
    """A rich progress line per running partition, in a terminal. It draws on its own copy of the terminal's
    descriptor: Dagster points descriptor 1 at a step's compute-log file while an in-process step runs (a persistent
    instance), and the bar belongs on the screen, not in that log."""

    def __init__(self, path: Path, keys: list[str], n_steps: int, stream=None) -> None:
        super().__init__(path, keys, n_steps)
        stream = stream or sys.stdout
        self.screen = open(os.dup(stream.fileno()), "w", encoding="utf-8", errors="replace", closefd=True)
        self.progress = Progress(TextColumn("[bold]{task.fields[key]}"), TextColumn("{task.fields[step]}"),
                                 TextColumn("{task.fields[stage]}"), StageBar(), TextColumn("{task.fields[elapsed]}"),
                                 TextColumn("[dim]{task.fields[left]}"),
                                 console=Console(file=self.screen, force_terminal=True), transient=True)
        self.tasks: dict[str, int] = {}

    def start(self) -> LiveBars:
        self.progress.start()
        return super().start()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.progress.stop()
            self.screen.close()

    def on_line(self, state: PartitionState) -> None:
        self._draw(state, time.time())

    def on_tick(self, now: float) -> None:
        for state in self.partitions.values():
            if not state.ended:
                self._draw(state, now)

    def on_end(self, state: PartitionState) -> None:
        task = self.tasks.pop(state.key, None)
        if task is not None:
            self.progress.remove_task(task)

    def _draw(self, state: PartitionState, now: float) -> None:
        running = sorted(state.running.items(), key=lambda item: item[1].ordinal)
        if running:
            ordinal = running[-1][1].ordinal
            step = f"step {ordinal}/{self.n_steps} " + ", ".join(name for name, _ in running)
        else:  # between two steps, or before the first
            step = f"step {state.steps_started}/{self.n_steps}" if state.steps_started else "starting"
        stage, done, total = "", 0, None
        if state.stage is not None and state.stage[0] in state.running:
            _, report, _ = state.stage
            stage, done, total = f"{report.stage} {report.done}/{report.total}", report.done, report.total
        left = state.time_left(now)
        fields = {"key": state.key, "step": step, "stage": stage, "stage_done": done, "stage_total": total,
                  "elapsed": describe_seconds(max(0.0, now - state.started)),
                  "left": f"stage ~{describe_seconds(left)} left" if left is not None else ""}
        if state.key not in self.tasks:
            self.tasks[state.key] = self.progress.add_task(state.key, total=None, **fields)
        else:
            self.progress.update(self.tasks[state.key], **fields)


class StageBar(ProgressColumn):
    """The running stage's items done / total; a moving pulse while the running step reports no stage."""

    def render(self, task):
        total = task.fields.get("stage_total")
        return ProgressBar(total=total, completed=task.fields.get("stage_done", 0), width=30, pulse=total is None,
                           animation_time=task.get_time())


def open_display(path: Path, keys: list[str], n_steps: int, terminal: bool | None = None) -> RunDisplay:
    """The display of a launch writing ``path``, started: live bars where stdout is a terminal, else plain lines."""
    terminal = sys.stdout.isatty() if terminal is None else terminal
    return (LiveBars if terminal else StageLines)(path, keys, n_steps).start()
