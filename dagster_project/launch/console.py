"""What Dagster's console logger prints under ``resdyn run``: every event at ``--log-level debug``; otherwise no
step or run failure with its stack trace and no cascade of "Dependencies ... Not executing" lines, because ``resdyn
run`` prints each failed step in one line itself (with the level that shows the trace).

Dagster makes its console logger per run with ``logging.getLoggerClass()`` (dagster/_utils/log.py,
``create_console_logger``) and offers no other hook on it; :func:`quiet_failures` sets that class, in the CLI's
process and the processes it starts, to one that filters its own records, and filters the ``dagster`` logger that
reports the run's end.
"""

from __future__ import annotations

import logging

TRACE_LEVEL_HINT = "--log-level debug shows the stack trace"


class _FailureFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        event = (getattr(record, "dagster_meta", None) or {}).get("dagster_event")
        kind = getattr(getattr(event, "event_type", None), "name", None)  # RUN_FAILURE's value is PIPELINE_FAILURE
        if kind in ("STEP_FAILURE", "RUN_FAILURE"):
            return False
        message = record.getMessage()
        return not ("Dependencies for step" in message and "Not executing" in message)


class _ConsoleLogger(logging.Logger):
    def __init__(self, name: str, level: int | str = logging.NOTSET) -> None:
        super().__init__(name, level)
        if name == "dagster" and logging._checkLevel(level) > logging.DEBUG:
            self.addFilter(_FailureFilter())


def quiet_failures(log_level: str) -> None:
    """Above DEBUG: Dagster's console loggers made from now on leave failures to ``resdyn run``'s own lines."""
    if logging._checkLevel(str(log_level).upper()) > logging.DEBUG:
        logging.setLoggerClass(_ConsoleLogger)
        named = logging.getLogger("dagster")  # the one Dagster's instance reports a run's end through
        if not any(isinstance(kept, _FailureFilter) for kept in named.filters):
            named.addFilter(_FailureFilter())


LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"  # the CLI's warnings and worse on stderr


def configure_logging() -> None:
    """The CLI's logging (and that of each process it starts, which begins unconfigured): warnings and worse."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    # the commands name each file a view leaves out themselves, once (cli._warn_problems)
    logging.getLogger("resdyn.dagster_project.store.views").setLevel(logging.ERROR)
