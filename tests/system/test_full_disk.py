"""Drill: a warehouse on a small tmpfs, filled between runs. A rerun that runs out of room (ENOSPC) publishes
nothing and leaves nothing behind; once room is made the next rerun publishes. Where this machine cannot mount a
tmpfs, the same drill with the run's file size capped (RLIMIT_FSIZE: its writes fail with EFBIG)."""

import os
import resource
import subprocess
from pathlib import Path

from resdyn.dagster_project.store.leftovers import unpublished_files
from resdyn.dagster_project.store.warehouse import Warehouse

from ..cli_helpers import QUICK, REPOSITORY, RESDYN, environment, partition_state, run_cli_in_process, save_model

ARGUMENTS = ["--name", "m", "--samples", "8", "--folds", "2", *QUICK]


def _mounted_tmpfs(directory: Path, megabytes: int) -> bool:
    directory.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(directory)],
                             capture_output=True)
    return mounted.returncode == 0


def _run(model: Path, root: Path, *extra, file_size_cap: int | None = None) -> subprocess.CompletedProcess:
    """A run of ``model`` into ``root``: in this process, or a process of its own whose file size is capped."""
    arguments = ["run", "--model", str(model), *ARGUMENTS, *extra, "--warehouse", str(root)]
    if file_size_cap is None:
        return run_cli_in_process(*arguments)

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_cap, file_size_cap))

    return subprocess.run([*RESDYN, *arguments],
                          cwd=REPOSITORY, env=environment(), capture_output=True, text=True, timeout=600,
                          preexec_fn=cap)


def _files(root: Path) -> dict[str, int]:
    """Every file but the run records, leases and the launch's event log under the Dagster instance folder (a failed
    run adds its record and its log; that is the point of them)."""
    return {str(path.relative_to(root)): path.stat().st_size for path in root.rglob("*")
            if path.is_file() and not {"runs", "_locks", "_dagster_home"} & set(path.relative_to(root).parts)}


def _the_failed_run_left_nothing(root: Path, before: dict, published_run: str, result) -> None:
    assert result.returncode != 0
    assert partition_state(root)["status"] == "complete" and partition_state(root)["run_id"] == published_run
    assert unpublished_files(Warehouse(root)) == [], result.stdout[-4000:] + result.stderr[-3000:]
    assert _files(root) == before, sorted(set(_files(root)) ^ set(before))
    failed = Warehouse(root).query("SELECT status, error FROM runs ORDER BY started_at").to_pylist()[-1]
    assert failed["status"] == "failed"


def test_a_rerun_that_runs_out_of_room_leaves_nothing_and_the_next_one_publishes(tmp_path):
    model = save_model(tmp_path / "model")
    disk = tmp_path / "disk"
    if _mounted_tmpfs(disk, 12):
        try:
            root = disk / "warehouse"
            first = _run(model, root)
            assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
            published_run = partition_state(root)["run_id"]
            used = sum(_files(root).values())
            free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
            filler = disk / "filler"
            filler.write_bytes(b"\0" * max(0, free - used // 3))  # room for a third of what a run writes
            before = _files(root)
            for _ in range(2):  # and again: a failed run must not leave what blocks the next
                _the_failed_run_left_nothing(root, before, published_run, _run(model, root, "--seed", "1"))
            assert "No space left on device" in Warehouse(root).query(
                "SELECT error FROM runs WHERE status = 'failed'").to_pylist()[-1]["error"]
            filler.unlink()
            again = _run(model, root, "--seed", "1")
            assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
            assert partition_state(root)["status"] == "complete" and partition_state(root)["run_id"] != published_run
        finally:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)
        return
    # no tmpfs here: cap the size of every file the rerun writes instead
    root = tmp_path / "warehouse"
    first = _run(model, root)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    published_run = partition_state(root)["run_id"]
    before = _files(root)
    for _ in range(2):
        _the_failed_run_left_nothing(root, before, published_run, _run(model, root, "--seed", "1",
                                                                       file_size_cap=max(before.values()) // 2))
    again = _run(model, root, "--seed", "1")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert partition_state(root)["status"] == "complete" and partition_state(root)["run_id"] != published_run
