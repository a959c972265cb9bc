"""The pieces of ``resdyn run``'s display: the event-log file's lines (written by several processes at once, read
back), the stage messages the steps log, the plain lines drawn from a file, and the table at the end."""

from __future__ import annotations

import io
import logging
import multiprocessing
from datetime import datetime

from resdyn.dagster_project.asset_layer.stage_messages import read_stage_message, stage_message
from resdyn.dagster_project.launch.event_log_file import AppendedLines, format_record, read_line
from resdyn.dagster_project.launch.progress import StageLines
from resdyn.dagster_project.launch.summary_table import summary_rows, summary_table


def _record(message: str, **meta) -> logging.LogRecord:
    record = logging.makeLogRecord({"msg": message, "levelname": "INFO", "levelno": logging.INFO})
    if meta:
        record.dagster_meta = {"orig_message": message, "dagster_event": None, **meta}
    return record


def test_a_stage_message_reads_back_whatever_its_stage_and_item_hold():
    for stage, item in [("spectra", "depth 16, 8/attn"), ("sampling intervals (folds through depth)", "fold 3"),
                        ("jacobian batches", "layer 2/4, batch 8/10"), ("communities", "")]:
        message = stage_message("m@local", stage, 17, 60, item, 412.4)
        report = read_stage_message(message, "m@local")
        assert (report.stage, report.done, report.total, report.item, report.seconds) == (stage, 17, 60, item, 412)
    assert read_stage_message("m@local: communities of 0/pre_attn: gamma 0.09, 5 communities", "m@local") is None
    assert read_stage_message(stage_message("other@x", "spectra", 1, 2, "a", 0), "m@local") is None


def test_event_log_lines_read_back_and_a_multi_line_message_stays_in_its_record():
    line = format_record(_record("m@local: spectra 1/4 (depth 0) done, 0 s", run_id="15e3bc5b-204d",
                                 step_key="spectral_analysis", job_tags={"dagster/partition": "m@local"}))
    read = read_line(line)
    assert (read.level, read.partition, read.run, read.step, read.event) == ("INFO", "m@local", "15e3bc5b",
                                                                             "spectral_analysis", None)
    assert read.message == "m@local: spectra 1/4 (depth 0) done, 0 s"
    first, *rest = format_record(_record("failed | here\nTraceback:\n  line 3")).split("\n")
    assert read_line(first).message == "failed | here" and read_line(first).partition == "-"
    assert rest == ["    Traceback:", "      line 3"] and all(read_line(text) is None for text in rest)


def _append(path: str, writer: int, count: int) -> None:
    handler = AppendedLines(path)
    for number in range(count):
        handler.emit(_record(f"writer {writer} record {number} " + "x" * 300 + "\nsecond line"))


def test_processes_appending_to_one_event_log_never_cut_each_others_lines(tmp_path):
    path = tmp_path / "run.log"
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_append, args=(str(path), writer, 300)) for writer in range(4)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(30)
    lines = path.read_text().split("\n")[:-1]
    firsts = [read_line(line) for line in lines if not line.startswith("    ")]
    assert len(firsts) == 1200 and all(first is not None for first in firsts)
    assert sorted(first.message.split(" x")[0] for first in firsts) == sorted(
        f"writer {w} record {n}" for w in range(4) for n in range(300))
    assert all(lines[i + 1] == "    second line" for i, line in enumerate(lines) if not line.startswith("    "))


def test_plain_lines_follow_the_file_a_step_at_a_time(tmp_path):
    """A line at a quarter of a stage (10 s or more after the step's last line); a step's start line before its
    first such line (or after a few seconds: the thread, not started here); its end with its seconds; lines of
    partitions that are not the launch's ignored."""
    path = tmp_path / "run.log"

    def write(at: float, step, event, message="", partition="m@local"):  # a line as event_log_file writes it
        moment = datetime.fromtimestamp(at).isoformat(timespec="milliseconds")
        with open(path, "a") as file:
            file.write(" | ".join([moment, "DEBUG" if event else "INFO", partition, "abcdef12", step or "-",
                                   event or "-", message]) + "\n")

    out = io.StringIO()
    display = StageLines(path, ["m@local"], 3, out=out)
    write(1000.0, None, "RUN_START")
    write(1000.0, "samples", "STEP_START")
    write(1001.5, "samples", "STEP_SUCCESS")
    write(1002.0, "spectral_analysis", "STEP_START")
    for done in range(1, 9):
        write(1002.0 + 5 * done, "spectral_analysis", None, stage_message("m@local", "spectra", done, 8, f"{done}", 5 * done))
    write(1050.0, "spectral_analysis", "STEP_SUCCESS")
    write(1050.0, "spectral_analysis", "STEP_START", partition="other@x")
    display.partition_ended("m@local")
    assert out.getvalue().splitlines() == [
        "    m@local step 1/3 samples done in 1.5 s",
        "    m@local step 2/3 spectral_analysis ...",
        "    m@local step 2/3 spectral_analysis: spectra 2/8 (2), 10 s, about 30 s left",
        "    m@local step 2/3 spectral_analysis: spectra 4/8 (4), 20 s, about 20 s left",
        "    m@local step 2/3 spectral_analysis: spectra 6/8 (6), 30 s, about 10 s left",
        "    m@local step 2/3 spectral_analysis done in 48.0 s"]


def test_the_summary_table_gives_each_partition_its_peak_memory_or_a_dash():
    summary = {"a@x": {"seconds": 12.34, "success": True, "failing_checks": [], "n_checks": 6, "peak_rss_mb": 870.4},
               "b@y": {"seconds": 3.0, "success": False, "failing_checks": ["c"], "n_checks": 2, "peak_rss_mb": None}}
    assert summary_rows(summary, ["a@x", "b@y"]) == [("a@x", "ok", "6/6", "12.3", "870"),
                                                     ("b@y", "FAILED", "1/2", "3.0", "-")]
    assert summary_rows(summary, ["a@x", "c@z", "d@w"], stopped=130)[1:] == [("c@z", "stopped", "-", "-", "-"),
                                                                           ("d@w", "not run", "-", "-", "-")]
    table = summary_table(summary, ["a@x", "b@y"]).splitlines()
    assert table[0].split() == ["partition", "status", "checks", "seconds", "peak", "MB"] and len(table) == 4
    assert summary_table({}, ["a@x"]) == ""
