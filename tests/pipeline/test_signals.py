"""A run started in the background (SIGINT ignored, as by ``nohup`` or ``cmd &`` in a script) still stops on
SIGTERM after an in-process Dagster run, and the processes it spawns afterwards can still be terminated."""

import os
import signal
import subprocess
import sys
import textwrap

from ..cli_helpers import REPOSITORY

CHILD = textwrap.dedent("""
    import multiprocessing, os, signal, time

    import dagster as dg

    from resdyn.dagster_project.launch.run_loop import SignalRecorder

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job's shell leaves it
    recorder = SignalRecorder()

    @dg.asset
    def one():
        return 1

    assert dg.materialize([one]).success
    print("after dagster:", "ignored" if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN else "handled")
    recorder.listen()  # what the run loop does after each partition's in-process run
    with multiprocessing.get_context("spawn").Pool(2) as pool:  # its __exit__ terminates the idle workers
        assert pool.map(abs, [-1, -2]) == [1, 2]
    print("pool ended")
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
        print("SIGTERM lost")
    except KeyboardInterrupt:
        print("interrupted by", signal.Signals(recorder.poll()).name)
    recorder.close()
""")


def test_sigterm_interrupts_after_an_in_process_dagster_run_when_sigint_is_ignored():
    environment = {name: value for name, value in os.environ.items() if name != "DAGSTER_HOME"}
    # without the listen() the SIGTERM is discarded ("SIGTERM lost"), and the pool's workers inherit the ignore,
    # so its exit can wait on them for ever (it did in the suite; here it depends on the race): hence the timeout
    completed = subprocess.run([sys.executable, "-c", CHILD], cwd=REPOSITORY, capture_output=True, text=True,
                               timeout=240, env=environment)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    assert "pool ended" in lines and "interrupted by SIGTERM" in lines, completed.stdout


WAITING = textwrap.dedent("""
    import os, signal, threading, time

    import polars  # noqa: F401 - installs signal-hook's SIGINT handler, which restarts an interrupted wait

    from resdyn.dagster_project.launch.run_loop import SignalRecorder

    recorder = SignalRecorder()
    done = threading.Event()
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    threading.Timer(30, done.set).start()  # what ended the wait before: the runs finishing
    started = time.monotonic()
    try:
        done.wait()  # as the multiprocess run loop waits for its run processes (concurrent.futures.as_completed)
        time.sleep(0.1)
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted by", signal.Signals(recorder.poll()).name, "after", round(time.monotonic() - started, 1))
    os._exit(0)
""")


def test_a_sigint_to_the_run_loop_alone_interrupts_its_wait_although_polars_is_imported():
    """Before, a SIGINT sent to the CLI's pid alone (not its process group, as Ctrl-C does) went unseen while the
    multiprocess run loop waited for its runs, which went on to publish: polars' handler restarts the wait."""
    environment = {name: value for name, value in os.environ.items() if name != "DAGSTER_HOME"}
    # started as from a terminal: a child inherits an ignored SIGINT (the test worker's, where an earlier in-process
    # test or a background launch left it ignored), and the CLI rightly keeps an ignore it was started with
    completed = subprocess.run([sys.executable, "-c", WAITING], cwd=REPOSITORY, capture_output=True, text=True,
                               timeout=120, env=environment,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert completed.returncode == 0, completed.stderr[-3000:]
    said = completed.stdout.split()
    assert said[:3] == ["interrupted", "by", "SIGINT"] and float(said[-1]) < 10, completed.stdout


def _runs_row(store, status: str) -> None:
    import socket

    from resdyn.dagster_project.store.schema import table_spec

    row = {name: None for name in table_spec("runs").column_names}
    store.record_run("m", "c", {**row, "run_id": store.run_id, "settings_hash": "s", "status": status,
                                "host": socket.gethostname(), "pid": os.getpid(), "started_at": "2026-01-01T00:00:00"})


def test_a_stopped_run_is_said_and_recorded_as_it_is_published_or_not(tmp_path):
    """What the launch says of a partition whose run a signal stopped, and what the runs table records, follow the
    manifest: a run whose generation was published before the stop (the signal landed between the manifest swap and
    its record) is `success` and said to have published; a run that had only staged is `failed`, its files removed
    and its lease freed. Before, both were "nothing half-written is published" and `failed`."""
    import numpy as np

    from resdyn.dagster_project.launch.stops import settle_stopped_runs
    from resdyn.dagster_project.store.schema import rows_table
    from resdyn.dagster_project.store.warehouse import Warehouse

    rng = np.random.default_rng()
    table = rows_table("singular_values", [{"layer": 0, "sublayer": "mlp", "depth": int(depth), "idx": i,
                                            "sigma": 1.0} for i, depth in enumerate(rng.integers(0, 4, 20))])
    published = Warehouse(tmp_path, run_id="run-published", settings_hash="s")
    published.acquire_lease("m", "c", single_process=True)
    _runs_row(published, "started")
    published.write("singular_values", "m", "c", table)
    published.publish("m", "c")
    said = settle_stopped_runs(published, "m@c", ["run-published"], "SIGTERM")
    assert said == ("m@c stopped by SIGTERM after its run run-published had published its generation (the runs table "
                    "records it `success`).")
    assert [(row["status"], row["error"]) for row in published.run_records("m", "c")] == \
        [("success", "published; then stopped by SIGTERM")]
    assert not published.lease_path("m", "c").exists()

    staged = Warehouse(tmp_path, run_id="run-staged", settings_hash="s")
    staged.acquire_lease("m", "c", single_process=True)
    _runs_row(staged, "started")
    written = staged.write("singular_values", "m", "c", table)
    said = settle_stopped_runs(staged, "m@c", ["run-staged"], "SIGINT")
    assert said.startswith("m@c stopped by SIGINT before it published; nothing of it is published. Removed its 2 "
                           "unpublished file(s)"), said  # the table and its staging entry
    assert {row["run_id"]: (row["status"], row["error"]) for row in staged.run_records("m", "c")}["run-staged"] == \
        ("failed", "stopped by SIGINT")
    assert not written.path.exists() and not staged.lease_path("m", "c").exists()
    assert staged.manifest("m", "c")["tables"]["singular_values"]["run_id"] == "run-published"
