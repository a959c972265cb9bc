"""Driving the real CLI on a small random-init Llama saved to disk (shared by the pipeline and system tiers)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from resdyn.dagster_project.store.warehouse import Warehouse
from resdyn.models.byte_tokenizer import build_byte_tokenizer
from resdyn.models.tiny_configs import tiny_config

REPOSITORY = Path(__file__).resolve().parents[1]
RESDYN = [sys.executable, "-m", "resdyn"]
QUICK = ["--seq-len", "12", "--per-sample", "2", "--leiden-seeds", "2", "--permutations", "50", "--log-level", "ERROR"]


def save_model(directory: Path, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(tiny_config("llama", hidden_size=32, n_layers=2)).save_pretrained(directory)
    build_byte_tokenizer().save_pretrained(directory)
    return directory


def environment(**extra) -> dict:
    values = {key: value for key, value in os.environ.items() if not key.startswith("RESDYN_") or
              key in ("RESDYN_WIKITEXT_DIR", "RESDYN_WIKITEXT_TOKENIZED_DIR")}
    values.pop("DAGSTER_HOME", None)
    return {**values, **extra}


def run_cli(*arguments, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([*RESDYN, *arguments], cwd=REPOSITORY, env=env or environment(), capture_output=True,
                          text=True, timeout=timeout)


def run_cli_in_process(*arguments, env=None, cwd=REPOSITORY) -> subprocess.CompletedProcess:
    """:func:`run_cli` for the commands that read or refuse (``sql``, ``check``, ``claims``, ``forget``, a run that
    stops before its first step) and for runs no test kills or signals: the CLI's ``main`` in this process, with
    ``env`` as the whole environment, ``cwd`` (the repository) as the working directory, and stdout, stderr and the
    log records (warnings and worse, as the CLI's own logging writes them) captured, so that the answer reads as a
    subprocess' does. A subprocess would spend seconds importing what this process already holds. What it cannot
    show: a Python warning (pytest records those) and output a module prints when first imported; a check of a
    one-line answer keeps one subprocess per kind of refusal (:func:`run_cli`)."""
    import contextlib
    import io
    import logging

    from resdyn.dagster_project.interface.cli import main
    from resdyn.dagster_project.launch.console import LOG_FORMAT

    saved_environment, saved_directory = dict(os.environ), os.getcwd()
    environment_of_the_run = env or environment()  # (read before this process's is cleared)
    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)  # what configure_logging's basicConfig gives a fresh process
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    try:
        root.addHandler(handler)
        os.environ.clear()
        os.environ.update(environment_of_the_run)
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(argument) for argument in arguments])
            except SystemExit as stop:  # argparse's refusals
                code = stop.code if isinstance(stop.code, int) else 1
    finally:
        root.removeHandler(handler)
        os.chdir(saved_directory)
        os.environ.clear()
        os.environ.update(saved_environment)
    return subprocess.CompletedProcess(["resdyn", *map(str, arguments)], code, out.getvalue(), err.getvalue())


def partition_state(root: Path, model: str = "m") -> dict:
    rows = Warehouse(root).query(f"SELECT * FROM partitions WHERE model = '{model}'").to_pylist()
    return rows[0] if rows else {}


def run_ids_by_table(root: Path, model: str = "m") -> dict:
    store = Warehouse(root)
    manifest = store.manifest(model, "local")
    return {table: entry["run_id"] for table, entry in manifest["tables"].items()}


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def published_side_files(root: Path) -> set:
    """Files outside a run's staging and the Dagster instance (whose SQLite journal churns)."""
    return {path for path in root.rglob("*") if path.is_file() and not {"_staging", "_dagster_home"} & set(path.parts)}


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # a terminal's control sequences (rich's redraws, colours)


def run_in_a_terminal(arguments: list[str], env: dict, timeout: float = 300) -> tuple[int, str]:
    """The CLI with a pseudo-terminal as its stdin, stdout and stderr (160 columns); what it wrote, as text."""
    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    process = subprocess.Popen([*RESDYN, *arguments], cwd=REPOSITORY, env=env, stdin=terminal, stdout=terminal,
                               stderr=terminal, close_fds=True)
    os.close(terminal)
    written, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([main], [], [], 0.5)[0]:
                try:
                    data = os.read(main, 65536)
                except OSError:  # the terminal's last holder closed it
                    break
                if not data:
                    break
                written += data
            elif process.poll() is not None:
                break
        return process.wait(timeout=max(1.0, deadline - time.monotonic())), written.decode("utf-8", "replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(main)
