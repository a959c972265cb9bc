"""Kill drills: runs killed (SIGKILL) or stopped (SIGINT / SIGTERM) at random moments, concurrent runs of one
partition, a writer killed mid-write. After each the warehouse is complete from one run, or unchanged, never
half-written; every test drives real processes.
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from resdyn.dagster_project.interface.cli import main
from resdyn.dagster_project.store.leases import acquire_lease, release_lease
from resdyn.dagster_project.store.warehouse import Warehouse, new_run_id

from ..cli_helpers import (
    QUICK,
    REPOSITORY,
    RESDYN,
    environment,
    partition_state,
    published_side_files,
    run_cli_in_process,
    run_ids_by_table,
    save_model,
    snapshot,
)

TABLE = "training_loss"  # any table of dagster_project/store/schema.py; this one is small


def _table(n, seed):
    rng = np.random.default_rng(seed)
    return pa.table({"step": pa.array(rng.integers(0, 4, n), pa.int32()), "loss": rng.normal(size=n),
                     "training_corpus": pa.repeat(pa.scalar("c"), n)})


def _alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie, dead and not yet reaped by its parent, is not)."""
    from pathlib import Path

    def running(pid):
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    return [pid for pid in pids if running(pid)]


def _multiprocess_run(model, root, home):
    """`resdyn run` of the inputs and measurements on the multiprocess executor: three steps, each a process forked
    from a fork server that a run process of its own started."""
    return subprocess.Popen([*RESDYN, "run", "--model", str(model), "--samples", "6", *QUICK, "--executor",
                             "multiprocess", "--select", "group:inputs or group:measurements", "--warehouse", str(root)],
                            cwd=REPOSITORY, env=environment(DAGSTER_HOME=str(home)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _when_staged(root, process, table: str, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not list(root.glob(f"_staging/*/model=m/checkpoint=local/{table}.json")) and time.time() < deadline:
        assert process.poll() is None, process.communicate()[0][-3000:]
        time.sleep(0.02)


@pytest.fixture(scope="module")
def killed_multiprocess_run(built, tmp_path_factory):
    """A `resdyn run --executor multiprocess` SIGKILLed once its first table is staged, when its run process, fork
    server and a step are alive: the warehouse, the CLI's pid, the processes below it at the kill, and when."""
    from resdyn.lifeline import descendants

    model, _ = built
    base = tmp_path_factory.mktemp("killed-multiprocess-run")
    root, home = base / "warehouse", base / "home"
    home.mkdir()
    process = _multiprocess_run(model, root, home)
    _when_staged(root, process, "model_checkpoints")
    time.sleep(1.0)  # the next step's process has been forked
    tree = descendants(process.pid)
    process.kill()
    process.communicate()
    return {"model": model, "root": root, "home": home, "pid": process.pid, "tree": tree,
            "killed_at": time.monotonic()}


def test_kill_9_of_a_multiprocess_run_ends_every_process_of_it_within_seconds(killed_multiprocess_run):
    """Before, the run process, its fork server and steps outlived a SIGKILLed CLI and published a generation 1 min
    45 s later. Every process of the run ends within seconds (the parent-death signal, resdyn/lifeline.py); the last
    test of this file checks the warehouse 3 minutes after the kill."""
    tree = killed_multiprocess_run["tree"]
    assert len(tree) >= 3, tree  # the run process, its fork server and a step, at least
    deadline = killed_multiprocess_run["killed_at"] + 10
    while _alive(tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(tree), f"alive 10 s after the kill: {_alive(tree)} of {tree}"
    killed_multiprocess_run["listing"] = snapshot(killed_multiprocess_run["root"])


def test_the_next_run_closes_a_killed_runs_dagster_run_and_gives_back_its_pool_slot(killed_multiprocess_run):
    """Before, the killed run stayed STARTED in its Dagster home holding the model_runner slot, and every later
    multiprocess run on that home waited for the slot without end (seen: 10 minutes, no word). What the next
    `resdyn run` calls first closes it: recorded failed, its slot given back, one line naming it."""
    import dagster as dg

    from resdyn.dagster_project.asset_layer.steps import MODEL_RUNNER_POOL
    from resdyn.dagster_project.launch.stops import close_abandoned_runs

    deadline = killed_multiprocess_run["killed_at"] + 10
    while _alive(killed_multiprocess_run["tree"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    with dg.DagsterInstance.from_config(str(killed_multiprocess_run["home"])) as instance:
        (killed,) = instance.get_runs(filters=dg.RunsFilter(tags={"resdyn/cli": "run"}))
        assert killed.status == dg.DagsterRunStatus.STARTED, killed.status
        storage = instance.event_log_storage
        if killed.run_id not in storage.get_concurrency_info(MODEL_RUNNER_POOL).active_run_ids:
            storage.claim_concurrency_slot(MODEL_RUNNER_POOL, killed.run_id, "measurements")  # killed between steps
        assert killed.run_id in storage.get_concurrency_run_ids()
        lines = close_abandoned_runs(instance)
        assert lines == [f"resdyn: Dagster run {killed.run_id} of {killed.tags['dagster/partition']} was left STARTED "
                         f"by a resdyn run that ended outright (pid {killed_multiprocess_run['pid']}): recorded it "
                         "failed and freed its pool slots"], lines
        assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE
        info = storage.get_concurrency_info(MODEL_RUNNER_POOL)
        assert not info.claimed_slots and not info.pending_steps, info
        assert close_abandoned_runs(instance) == []  # closed once


MODEL_STEP_TABLES = ("model_checkpoints", "training_loss")


def test_kill_drill_never_leaves_a_partition_complete_with_mixed_runs(warehouse_copy):
    """SIGKILL reruns of a partition at other sample sizes at random moments: after each the partition is complete,
    every table current and every table from the samples on made by one run (the old one, or the new one if the kill
    came after publication; the model step reads no sample and is kept from the first), or not complete; a rerun
    completes it."""
    model, root = warehouse_copy
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    state = partition_state(root)
    known_runs = {state["run_id"]}
    started = time.perf_counter()
    duration = 0.0
    for attempt in range(4):
        process = subprocess.Popen([*RESDYN, "run", "--model", str(model), "--samples", str(8 + attempt), *QUICK,
                                    "--warehouse", str(root)], cwd=REPOSITORY, env=environment(),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if attempt == 0:  # learn how long a run takes, then kill at random moments within it
            process.wait(timeout=300)
            duration = time.perf_counter() - started
        else:
            time.sleep(rng.uniform(0.05, 1.05) * duration)
            process.send_signal(signal.SIGKILL)
            process.wait()
        state = partition_state(root)
        tables = {table: run for table, run in run_ids_by_table(root).items() if table not in MODEL_STEP_TABLES}
        if state["status"] == "complete":
            assert set(tables.values()) == {state["run_id"]}, (attempt, tables)
            assert Warehouse(root).query("SELECT count(*) AS n FROM published_tables WHERE NOT current").to_pylist() \
                == [{"n": 0}]
            if state["run_id"] not in known_runs:  # only this attempt's run may be new (killed after publishing)
                record = Warehouse(root).query(f"SELECT settings FROM runs WHERE run_id = '{state['run_id']}'")
                assert json.loads(record.to_pylist()[0]["settings"])["n_samples"] == 8 + attempt, (attempt, state)
            known_runs.add(state["run_id"])
            samples = Warehouse(root).query("SELECT count(DISTINCT sample_id) AS n, count(DISTINCT run_id) AS r "
                                            "FROM samples").to_pylist()[0]
            observations = Warehouse(root).query("SELECT DISTINCT n_observations AS n FROM jacobians").to_pylist()
            assert samples["r"] == 1 and observations == [{"n": samples["n"]}]
        else:
            assert state["status"] in ("incomplete", "inconsistent", "failed")
            assert state["run_id"] is None or len(set(tables.values())) == 1
    completed = run_cli_in_process("run", "--model", str(model), "--samples", "7", *QUICK, "--warehouse", str(root))
    assert completed.returncode == 0, completed.stdout[-2000:]
    state = partition_state(root)
    assert state["status"] == "complete" and state["run_id"] not in known_runs
    statuses = [r["status"] for r in Warehouse(root).query("SELECT status FROM runs ORDER BY started_at").to_pylist()]
    assert statuses[-1] == "success" and "started" not in statuses[:-1]  # killed runs were found and marked


def test_figures_are_published_with_their_generation_and_a_killed_rerun_changes_none(warehouse_copy):
    model, root = warehouse_copy
    store = Warehouse(root)
    published = store.published_figures("m", "local")
    assert len([name for name in published if not name.endswith(".inline")]) >= 6
    assert all(path.is_file() for path in published.values())
    first_run = store.manifest("m", "local")["tables"]["jacobians"]["run_id"]
    assert {path.parent.name for path in published.values()} == {first_run}
    before = {name: path.read_bytes() for name, path in published.items()}
    process = subprocess.Popen([*RESDYN, "run", "--model", str(model), "--samples", "6", *QUICK, "--seed", "1",
                                "--warehouse", str(root)], cwd=REPOSITORY, env=environment(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180  # killed after its spectral and transient steps have drawn their figures
    while not list(root.glob("_staging/*/model=m/checkpoint=local/transient_dynamics.json")) and time.time() < deadline:
        time.sleep(0.02)
    process.kill()
    process.wait()
    killed = [path for path in (root / "_artefacts" / "figures" / "m" / "local").glob("*/*.png")
              if path.parent.name != first_run]
    assert killed, "the killed run drew figures of its own"
    assert store.published_figures("m", "local") == published
    assert {name: path.read_bytes() for name, path in published.items()} == before
    # what the killed run left (tables, staging entries, figures) is listed by path and size, then swept by the rerun
    killed_run = killed[0].parent.name
    left = {path for path in root.rglob("*") if path.is_file() and "runs" not in path.relative_to(root).parts
            and (killed_run in str(path.relative_to(root)) or path.name.endswith(".inprogress"))}  # its temp files
    assert {".parquet", ".json", ".png"} <= {path.suffix for path in left}, left
    check = run_cli_in_process("check", "--warehouse", str(root))
    listed = [line for line in check.stdout.splitlines() if line.startswith("unpublished: ")]
    assert check.returncode == 1 and {line.split(" ")[1] for line in listed} == {str(path) for path in left}
    assert all(f"{path} ({path.stat().st_size} bytes, " in check.stdout for path in left)
    assert all(f"run {killed_run} of m@local" in line or "a dead writer of m@local" in line for line in listed)
    assert "`resdyn check --reclaim` removes it" in listed[0]
    # a rerun that completes publishes its own figures, and its generation's tables with them
    assert main(["run", "--model", str(model), "--samples", "6", *QUICK, "--seed", "1", "--warehouse", str(root)]) == 0
    now = store.published_figures("m", "local")
    second_run = store.manifest("m", "local")["tables"]["jacobians"]["run_id"]
    assert set(now) == set(published) and {path.parent.name for path in now.values()} == {second_run}
    assert all(path.is_file() for path in now.values()) and not any(path.exists() for path in left)
    assert run_cli_in_process("check", "--warehouse", str(root)).returncode == 0


def test_a_second_run_of_a_busy_partition_stops_with_a_clear_message(warehouse_copy):
    """A live run holds the partition's lease (taken here by this test process, so the overlap does not depend on
    timing): a second run stops with a message naming it and changes nothing; once it is released a rerun works."""
    model, root = warehouse_copy
    holder = Warehouse(root, run_id=new_run_id())
    acquire_lease(holder, "m", "local", single_process=True)
    before = snapshot(root)
    default_level = [argument for argument in QUICK if argument not in ("--log-level", "ERROR")]
    try:
        second = run_cli_in_process("run", "--model", str(model), "--samples", "10", *default_level, "--warehouse",
                                    str(root))
        traced = run_cli_in_process("run", "--model", str(model), "--samples", "10", *default_level, "--log-level",
                                    "debug", "--warehouse", str(root))
    finally:
        after = snapshot(root)
        release_lease(holder, "m", "local")
    assert second.returncode == 1, second.stdout[-3000:]
    assert f"is being materialized by run {holder.run_id}" in second.stdout
    assert "wait for it to finish" in second.stdout
    # at the default level: the failure in one line and how to see its trace; no trace, no retry of a conflict
    failure = [line for line in second.stdout.splitlines() if "is being materialized by run" in line]
    assert len(failure) == 1 and "(--log-level debug shows the stack trace)" in second.stdout
    assert "Stack Trace" not in second.stdout + second.stderr and "Not executing" not in second.stderr
    assert "Stack Trace" in traced.stderr and traced.returncode == 1
    assert "STEP_UP_FOR_RETRY" not in traced.stderr and "Exceeded max_retries" not in traced.stderr
    assert {k: v for k, v in after.items() if not k.startswith("_")} == \
        {k: v for k, v in before.items() if not k.startswith("_")}
    third = run_cli_in_process("run", "--model", str(model), "--samples", "10", *QUICK, "--warehouse", str(root))
    assert third.returncode == 0, third.stdout[-3000:]
    assert partition_state(root)["status"] == "complete"
    assert Warehouse(root).query("SELECT count(DISTINCT sample_id) AS n FROM samples").to_pylist() == [{"n": 10}]


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_whole_command(built, tmp_path, signum, code):
    model, _ = built
    other = save_model(tmp_path / "other", seed=1)
    root = tmp_path / "warehouse"
    process = subprocess.Popen([*RESDYN, "run", "--model", str(model), "--model", str(other), "--samples", "6",
                                *QUICK, "--warehouse", str(root)], cwd=REPOSITORY, env=environment(),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120  # signal once `samples` is staged: the first partition is mid-run, unpublished
    while not list(root.glob("_staging/*/model=m/checkpoint=local/samples.json")) and time.time() < deadline:
        time.sleep(0.02)
    process.send_signal(signum)
    output = process.communicate(timeout=120)[0]
    assert process.returncode == code, output[-3000:]
    assert "[2/2]" not in output, output[-3000:]
    store = Warehouse(root)
    complete = store.query("SELECT model FROM partitions WHERE status = 'complete'").to_pylist()
    name = signal.Signals(signum).name
    if f"{name} arrived as m@local finished" in output:
        # the signal landed where Dagster caught and dropped it (seen under heavy load): the run finished and
        # published, and the CLI must say so, not claim it stopped the partition
        assert "[1/2] m@local ok" in output and complete == [{"model": "m"}], output[-3000:]
        return
    assert f"[1/2] m@local stopped by {name}" in output and complete == [], output[-3000:]
    assert store.query("SELECT status FROM runs").to_pylist() == [{"status": "failed"}]


def test_a_signal_during_an_analysis_step_stops_it_within_seconds_and_publishes_nothing(built, tmp_path):
    """SIGTERM (SIGINT takes the same path: Dagster's handler, the wakeup fd; test_13 sends both)."""
    signum, code = signal.SIGTERM, 143
    model, _ = built
    root = tmp_path / "warehouse"
    process = subprocess.Popen([*RESDYN, "run", "--model", str(model), "--samples", "6", *QUICK, "--warehouse",
                                str(root)], cwd=REPOSITORY, env=environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 180  # once the spectral step has staged its tables, the analysis steps are running
    while not list(root.glob("_staging/*/model=m/checkpoint=local/layer_metrics.json")) and time.time() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before the analysis steps"
    sent = time.time()
    process.send_signal(signum)
    output = process.communicate(timeout=120)[0]
    # generous enough for a loaded machine; the tight figure (3.6-5.5 s) is benchmarks/stop_latency.py's
    assert time.time() - sent < 60, f"{time.time() - sent:.1f} s after the signal"
    assert process.returncode == code, output[-3000:]
    assert f"m@local stopped by {signal.Signals(signum).name}" in output, output[-3000:]
    assert not (root / "_published" / "model=m" / "checkpoint=local.json").exists(), "nothing may be published"
    store = Warehouse(root)
    assert store.query("SELECT count(*) AS n FROM partitions WHERE status = 'complete'").to_pylist() == [{"n": 0}]
    assert store.query("SELECT status FROM runs").to_pylist() == [{"status": "failed"}]
    # the stop removed what the run wrote and did not publish, and said so: nothing is left for `check` to list
    assert "unpublished file(s)" in output and "Removed its" in output, output[-3000:]
    checked = run_cli_in_process("check", "--warehouse", str(root))
    assert checked.returncode == 0 and "unpublished" not in checked.stdout, checked.stdout[-3000:]


def test_a_writer_killed_mid_write_leaves_no_partial_file_visible(tmp_path):
    store = Warehouse(tmp_path)
    store.write(TABLE, "m", "c", _table(5, 0))  # the partition as it was before the crash
    writer = textwrap.dedent(f"""
        import numpy as np, pyarrow as pa, sys
        sys.path.insert(0, {str(os.getcwd())!r})
        from resdyn.dagster_project.store.warehouse import Warehouse
        n = 40_000_000
        table = pa.table({{"step": pa.array(np.zeros(n, np.int32)), "loss": np.random.default_rng(0).normal(size=n),
                          "training_corpus": pa.repeat(pa.scalar("c"), n)}})
        print("writing", flush=True)
        Warehouse({str(tmp_path)!r}).write({TABLE!r}, "m", "c", table)
    """)
    process = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "writing"
    directory = store.partition_directory(TABLE, "m", "c")
    deadline = time.time() + 60
    while not list(directory.glob(".*.inprogress")) and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert list(directory.glob(".*.inprogress")), "the writer died before it began writing; nothing was tested"
    visible = store.query("SELECT count(*) AS n FROM training_loss").to_pylist()
    assert visible == [{"n": 5}]  # the old partition, whole; the half-written file is invisible
    store.write(TABLE, "m", "c", _table(2, 1))
    assert not list(directory.glob(".*.inprogress"))  # the next write sweeps the debris
    assert store.read(TABLE, "m", "c").num_rows == 2


def _sleep_then_return(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


class _StopAfter:
    """A signal recorder (interrupts.watch) that reports SIGTERM once ``seconds`` have passed."""

    def __init__(self, seconds: float) -> None:
        self.at = time.perf_counter() + seconds

    def poll(self):
        return signal.SIGTERM if time.perf_counter() >= self.at else None


def test_a_stop_inside_a_worker_pool_ends_it_long_before_its_items_and_terminates_its_workers():
    """Worker items of 60 s each: the stop is seen while they compute, and their processes are terminated rather
    than waited for (before, a stop waited for every running item). The bound is half an item, so that a busy
    machine (both cores loaded: 12 s seen) cannot fail it; the tight figure (about 1 s after the stop is asked)
    is benchmarks/stop_latency.py's."""
    import multiprocessing

    from resdyn import interrupts
    from resdyn.parallel import ordered_parallel_map

    children_before = set(multiprocessing.active_children())  # other tests' children are not this pool's
    interrupts.watch(_StopAfter(2.0))
    started = time.perf_counter()
    try:
        with pytest.raises(interrupts.StopRequested, match="SIGTERM received during the work items of _sleep_then_return"):
            for _ in ordered_parallel_map(_sleep_then_return, [60.0] * 4, workers=2):
                pass
    finally:
        interrupts.unwatch()
    assert time.perf_counter() - started < 2.0 + 28.0, f"{time.perf_counter() - started:.1f} s"  # asked at 2 s

    def pool_workers_alive():
        return set(multiprocessing.active_children()) - children_before

    deadline = time.time() + 30
    while pool_workers_alive() and time.time() < deadline:
        time.sleep(0.1)
    assert not pool_workers_alive()


def test_forget_refuses_a_live_multiprocess_run_and_sigterm_stops_it_before_it_publishes(built, tmp_path):
    """The lease names the run; forget judges it by the process that owns the run and its Dagster status, not by the
    pid of a step process that has long exited. Then SIGTERM: before, with tables staged it printed that the runs were
    stopped while the run went on for 96 s, published and was recorded `success`. Every process of the run now ends
    at once, and the line, the runs table and the warehouse agree; once it has ended, forget works."""
    from resdyn.lifeline import descendants

    model, _ = built
    root, home = tmp_path / "warehouse", tmp_path / "home"
    home.mkdir()
    process = _multiprocess_run(model, root, home)
    try:
        _when_staged(root, process, "samples")  # a step finished: its process (the lease's pid) has exited
        lease = json.loads((root / "_locks" / "m@local.json").read_text())
        assert lease["dagster_home"] and not lease["single_process"] and lease["owner_pid"] == process.pid
        before = published_side_files(root)
        forgotten = run_cli_in_process("forget", "m@local", "--yes", "--warehouse", str(root))
        assert forgotten.returncode == 1 and "being materialized by run" in forgotten.stderr, forgotten.stderr
        assert forgotten.stderr.strip().count("\n") == 0
        after = published_side_files(root)
        assert before <= after, sorted(map(str, before - after))[:5]
        tree = descendants(process.pid)
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=120)[0]
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, output[-3000:]
    log = re.search(r"^resdyn: event log \(every Dagster event, DEBUG\): (.+\.log)$", output, re.M)
    assert log and log.group(1).startswith(str(home / "logs")), output[:2000]  # the steps' processes wrote there
    assert " | samples | STEP_SUCCESS | " in Path(log.group(1)).read_text()
    deadline = time.time() + 10  # the CLI's resource tracker ends on its own once the CLI has: give it a moment
    while _alive(tree) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(tree), _alive(tree)
    store = Warehouse(root)
    (run,) = store.query("SELECT run_id, status, error FROM runs").to_pylist()
    if "after its run" in output:  # the signal came as the last step published: said so, and recorded so
        assert run["status"] == "success" and store.manifest("m", "local")["tables"], output[-3000:]
    else:
        assert "[1/1] m@local stopped by SIGTERM before it published; nothing of it is published" in output, \
            output[-3000:]
        assert run["status"] == "failed" and run["error"] == "stopped by SIGTERM", run
        assert not (root / "_published" / "model=m" / "checkpoint=local.json").exists()
        assert run_cli_in_process("check", "--warehouse", str(root)).returncode == 0  # its files were removed
    assert not (root / "_locks" / "m@local.json").exists()
    assert run_cli_in_process("forget", "m@local", "--yes", "--warehouse", str(root)).returncode == 0  # it has ended
    assert partition_state(root) == {}


def test_three_minutes_after_a_kill_9_nothing_of_the_run_was_written_and_a_rerun_takes_its_lease_over(
        killed_multiprocess_run):
    """The warehouse of the SIGKILLed multiprocess run (the first test of this file) is unchanged 3 minutes after the
    kill (the other tests ran meanwhile); its lease names the CLI that owned the run, so `check` lists what it left at
    once and a rerun takes the lease over."""
    root = killed_multiprocess_run["root"]
    listing = killed_multiprocess_run.get("listing") or snapshot(root)  # taken after every process had ended
    time.sleep(max(0.0, killed_multiprocess_run["killed_at"] + 180 - time.monotonic()))
    assert not _alive(killed_multiprocess_run["tree"])
    assert snapshot(root) == listing  # nothing of the killed run wrote or published later
    assert not (root / "_published" / "model=m" / "checkpoint=local.json").exists()
    lease = json.loads((root / "_locks" / "m@local.json").read_text())
    assert lease["owner_pid"] == killed_multiprocess_run["pid"]  # the CLI that owned the run: it is gone
    checked = run_cli_in_process("check", "--warehouse", str(root))
    assert checked.returncode == 1 and f"run {lease['run_id']} of m@local" in checked.stdout, checked.stdout[-3000:]
    rerun = Warehouse(root, run_id=new_run_id())  # a rerun's first step, as partition_run takes the lease
    acquire_lease(rerun, "m", "local", single_process=True)
    assert json.loads((root / "_locks" / "m@local.json").read_text())["run_id"] == rerun.run_id
    assert [row["status"] for row in rerun.run_records("m", "local")] == ["killed"]  # found dead, recorded so
    release_lease(rerun, "m", "local")
