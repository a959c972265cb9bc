"""A run started in the background (SIGINT ignored, as by ``nohup`` or ``cmd &`` in a script) still stops on
SIGTERM after an in-process Dagster run, and the processes it spawns afterwards can still be terminated."""

import os
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
