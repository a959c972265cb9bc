"""What ``resdyn run`` shows a person: live bars in a terminal, a few plain lines per step without one, the event-log
file with every Dagster event (its path printed first), a table at the end, and no Dagster event line on the console
unless ``--log-level`` asks for them."""

from __future__ import annotations

import re
from pathlib import Path

from resdyn.dagster_project.launch.event_log_file import read_line
from resdyn.dagster_project.launch.run_loop import SHIPPED_INSTANCE

from ..cli_helpers import ANSI, QUICK, environment, run_in_a_terminal

DEFAULT_LEVEL = [argument for argument in QUICK if argument not in ("--log-level", "ERROR")]
DAGSTER_LINE = re.compile(r" - dagster - (DEBUG|INFO|WARNING|ERROR|CRITICAL) - ")  # Dagster's console format


def _event_log(output: str) -> Path:
    found = re.search(r"^resdyn: event log \(every Dagster event, DEBUG\): (.+\.log)$", output, re.M)
    assert found, output[:2000]
    return Path(found.group(1))


def _summary_row(output: str, key: str) -> list[str]:
    lines = output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split() == ["partition", "status", "checks", "seconds",
                                                                         "peak", "MB"])
    return next(line.split() for line in lines[header + 2:] if line.startswith(key))


def test_a_run_without_a_terminal_prints_a_line_per_step_an_event_log_and_a_table(built_run):
    """The session's warehouse was built as a script runs the CLI (no terminal, no --log-level): one line as each
    step ends with its step number and seconds, the event-log file (under the Dagster home beside the warehouse)
    holding every step's events at DEBUG and the stage messages, a table at the end, and no Dagster line at all."""
    _, root, completed = built_run
    output = completed.stdout
    steps = [part.rsplit(" ", 2)[0] for part in
             re.search(r"^    steps: (.+)$", output, re.M).group(1).split(", ")]
    assert len(steps) > 10 and "spectral_analysis" in steps, steps  # every asset's step and every check's
    ended = re.findall(r"^    m@local step (\d+)/(\d+) (\S+) done in (\d+\.\d) s$", output, re.M)
    assert sorted(name for _, _, name, _ in ended) == sorted(steps), output
    assert sorted(int(number) for number, _, _, _ in ended) == list(range(1, len(steps) + 1))
    assert {int(n) for _, n, _, _ in ended} == {len(steps)}
    assert output.index("    m@local step") > output.index("[1/1] m@local ...")
    assert output.rindex("    m@local step") < output.index("[1/1] m@local ok")  # a partition's steps, then its end
    assert not DAGSTER_LINE.search(output + completed.stderr) and "\x1b[" not in output, completed.stderr[-2000:]

    event_log = _event_log(output)
    assert event_log.parent == root / "_dagster_home" / "logs" and event_log.name.endswith("-m@local.log")
    records = [line for line in map(read_line, event_log.read_text().splitlines()) if line is not None]
    assert {line.partition for line in records} == {"m@local"} and len({line.run for line in records}) == 1
    for event in ("STEP_START", "STEP_SUCCESS"):
        assert sorted(line.step for line in records if line.event == event) == sorted(steps), event
    assert {line.level for line in records if line.event == "STEP_START"} == {"DEBUG"}
    assert [line.event for line in records if line.event and line.event.startswith("RUN_")] == ["RUN_START",
                                                                                               "RUN_SUCCESS"]
    assert any(line.step == "spectral_analysis" and line.message.startswith("m@local: spectra 4/4 (")
               for line in records)

    partition, status, checks, seconds, peak = _summary_row(output, "m@local")
    assert (status, checks) == ("ok", "6/6") and float(seconds) > 0 and float(peak) > 50, output[-600:]


def test_a_run_in_a_terminal_draws_live_bars_in_a_new_dagster_home_without_its_warning(warehouse_copy, tmp_path):
    """In a terminal the partition's line is drawn and redrawn in place (rich), with the running step among the
    selection's steps and its stage; no Dagster event line reaches the screen; a new DAGSTER_HOME gets the shipped
    instance settings first (no "No dagster instance configuration file" warning) and holds the event log."""
    model, root = warehouse_copy
    home = tmp_path / "new-dagster-home"  # not there yet
    code, screen = run_in_a_terminal(
        ["run", "--model", str(model), "--samples", "6", *DEFAULT_LEVEL, "--select", "key:layer_metrics",
         "--warehouse", str(root)], environment(DAGSTER_HOME=str(home), TERM="xterm-256color", COLUMNS="160"))
    text = ANSI.sub("", screen)
    assert code == 0, text[-3000:]
    assert "\x1b[2K" in screen and "\x1b[?25l" in screen  # lines erased and redrawn, the cursor hidden meanwhile
    frames = {frame.strip() for frame in re.split(r"[\r\n]", text) if frame.startswith("m@local ")}
    assert any(re.match(r"m@local step 1/3 spectral_analysis .*━.* \d+ s", frame) for frame in frames), frames
    assert not DAGSTER_LINE.search(text) and "No dagster instance configuration file" not in text, text[-3000:]
    assert (home / "dagster.yaml").read_text() == SHIPPED_INSTANCE.read_text()
    event_log = _event_log(text.replace("\r\n", "\n"))
    assert event_log.parent == home / "logs" and "spectral_analysis | STEP_SUCCESS" in event_log.read_text()
    assert "[1/1] m@local ok" in text and re.search(r"^m@local +ok +\d+/\d+ ", text, re.M), text[-1500:]
