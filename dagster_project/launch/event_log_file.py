"""Every Dagster event and log line of a launch's runs, at DEBUG, in one text file: ``<Dagster home>/logs/<time>-<first
partition>.log``, whichever executor runs the steps.

Dagster builds a run's loggers from its run config in every process that executes part of it: the CLI's own (the
in-process executor), each partition's launching process and each step process of the multiprocess executor, a Ray
worker. :func:`run_config_loggers` names :func:`event_log_file` there with the file's path, so each of those processes
appends its own records, each record one ``os.write`` of whole lines on a descriptor opened with ``O_APPEND`` (lines
of several processes never cut into each other). A Ray worker on another machine, where the folder is absent, writes
nothing (best effort). ``resdyn run`` reads the file back as it grows (:mod:`.progress`).

One record per line, fields separated by `` | ``; a multi-line message (a stack trace) goes on indented lines below::

    2026-01-05T14:03:07.412 | DEBUG | m@local | 15e3bc5b | measurements | STEP_START | Started execution of step ...
    2026-01-05T14:03:09.020 | INFO | m@local | 15e3bc5b | spectral_analysis | - | m@local: spectra 1/4 (...) done, 0 s

(time, level, partition, the run's id in short, step, Dagster event type or ``-`` for a log message, message).
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import dagster as dg

EVENT_LOG_LOGGER = "event_log_file"  # its key in the jobs' loggers and in a run's config
SEPARATOR = " | "
CONTINUATION = "    "  # how the second and later lines of a record begin
NO_CONSOLE_LEVEL = "CRITICAL"  # Dagster logs nothing at CRITICAL: the console logger of a run without --log-level


class AppendedLines(logging.Handler):
    """Each record appended to ``path`` as whole lines in one write. The file is opened per record: a step process
    forked from a fork server, or ended by a signal, holds no descriptor that could outlive it or be shared."""

    def __init__(self, path: str) -> None:
        super().__init__(logging.DEBUG)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        data = (format_record(record) + "\n").encode("utf-8", "replace")
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:  # a Ray worker on a machine without this folder: the file is best effort there
            return
        try:
            while data:  # one write for a regular file; the loop only if the kernel took part of it
                data = data[os.write(descriptor, data):]
        except OSError:  # a full disk: the run goes on, its log is short
            pass
        finally:
            os.close(descriptor)


@dg.logger(config_schema={"path": dg.Field(str, description="The file every record of the run is appended to.")},
           description="Every event and log line of the run, at DEBUG, appended to one text file (resdyn run).")
def event_log_file(init_context) -> logging.Logger:
    # a Logger of its own, not registered with logging (no parent, no propagation): nothing else sees its records
    logger = logging.Logger(f"resdyn.event_log.{init_context.run_id}", logging.DEBUG)
    logger.addHandler(AppendedLines(init_context.logger_config["path"]))
    return logger


# the loggers of every job resdyn runs: Dagster's console logger (--log-level) and the file
LOGGERS = {"console": dg.colored_console_logger, EVENT_LOG_LOGGER: event_log_file}


def run_config_loggers(path: Path | None, console_level: str | None) -> dict:
    """The ``loggers`` of a run's config: the file at DEBUG (where ``path`` is given), and the console at
    ``console_level`` (None: silent, the launch draws its own progress). The console logger stays named either way:
    the process that launches a partition's run reads its level from there."""
    loggers = {"console": {"config": {"log_level": console_level or NO_CONSOLE_LEVEL}}}
    if path is not None:
        loggers[EVENT_LOG_LOGGER] = {"config": {"path": str(path)}}
    return loggers


def event_log_path(home: Path, keys: list[str]) -> Path:
    """A new launch's file under ``home``'s ``logs`` folder, named by its start time and its (first) partition."""
    first = re.sub(r"[^A-Za-z0-9@._+-]", "_", keys[0]) if keys else "none"
    more = f"-and-{len(keys) - 1}-more" if len(keys) > 1 else ""
    return Path(home) / "logs" / f"{time.strftime('%Y%m%d-%H%M%S')}-{first}{more}.log"


def format_record(record: logging.LogRecord) -> str:
    """One record as the file's text: a line of fields, then the message's further lines indented."""
    meta = getattr(record, "dagster_meta", None) or {}
    event = meta.get("dagster_event")
    message = meta.get("orig_message", record.getMessage())
    error = getattr(getattr(event, "event_specific_data", None), "error", None) if event is not None else None
    if error is not None:  # a failure's error with its stack trace, as Dagster's console shows it
        message = f"{message}\n\n{error.to_string()}"
    fields = [datetime.fromtimestamp(record.created).isoformat(timespec="milliseconds"), record.levelname,
              (meta.get("job_tags") or {}).get("dagster/partition") or "-", (meta.get("run_id") or "-")[:8],
              meta.get("step_key") or "-", event.event_type.name if event is not None else "-"]
    first, *rest = str(message).rstrip("\n").split("\n") or [""]
    return SEPARATOR.join([*fields, first]) + "".join(f"\n{CONTINUATION}{line}" for line in rest)


@dataclass(frozen=True)
class EventLine:
    """The fields of a record's first line (:func:`format_record`); ``step`` and ``event`` None where ``-``."""

    time: float  # seconds since the epoch
    level: str
    partition: str
    run: str
    step: str | None
    event: str | None
    message: str


def read_line(line: str) -> EventLine | None:
    """The :class:`EventLine` of a record's first line, or None for a continuation line or anything else."""
    parts = line.rstrip("\n").split(SEPARATOR, 6)
    if len(parts) != 7 or line.startswith(CONTINUATION):
        return None
    try:
        moment = datetime.fromisoformat(parts[0]).timestamp()
    except ValueError:
        return None
    level, partition, run, step, event, message = parts[1:]
    return EventLine(moment, level, partition, run, None if step == "-" else step, None if event == "-" else event,
                     message)
