"""Chains through depth in worker processes that keep their state: the same results as in this process, a
worker's failure raised here, and no worker left behind."""

import numpy as np
import pytest
import scipy.linalg

from resdyn.depth import SchurSurgery
from resdyn.parallel import ChainWorkers


class _RunningProduct:
    """A state of the kind ChainWorkers carries: P <- M P, and what the step saw (its BLAS threads)."""

    def __init__(self, scale: float) -> None:
        self.scale, self.product = scale, None

    def push(self, matrix: np.ndarray):
        from threadpoolctl import threadpool_info

        matrix = self.scale * matrix
        self.product = matrix if self.product is None else matrix @ self.product
        threads = {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}
        return scipy.linalg.svdvals(self.product), threads


class _FailsAtStep:
    def __init__(self, step: int) -> None:
        self.step, self.count = step, 0

    def push(self, _):
        self.count += 1
        if self.count == self.step:
            raise ValueError(f"step {self.step} fails")
        return self.count


def test_chains_in_workers_give_what_the_same_states_give_here_one_step_ahead(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    matrices = [rng.normal(size=(40, 40)) / 6 for _ in range(5)]
    scales = (1.0, 0.5, 2.0)
    here = [_RunningProduct(scale) for scale in scales]
    expected = [[state.push(m)[0] for state in here] for m in matrices]
    received = []
    with ChainWorkers([(_RunningProduct, (scale,)) for scale in scales], threads=1, where="a test") as chains:
        for matrix in matrices:
            chains.send(matrix)
            if chains.outstanding > 1:  # one step ahead, as the spectral stage sends them
                received.append(chains.receive())
        while chains.outstanding:
            received.append(chains.receive())
        processes = list(chains.processes)
    assert len(received) == len(matrices)
    for step, results in zip(expected, received):
        for value, (singular_values, threads) in zip(step, results):
            np.testing.assert_array_equal(singular_values, value)  # the same operations on one thread: the same bits
            assert threads == {1}
    assert not any(process.is_alive() for process in processes)


def test_a_failing_chain_raises_its_error_here_and_no_worker_is_left():
    with pytest.raises(RuntimeError, match="ValueError: step 2 fails"):
        with ChainWorkers([(_FailsAtStep, (2,)), (_FailsAtStep, (9,))], threads=1, where="a test") as chains:
            processes = list(chains.processes)
            for _ in range(3):
                chains.send(None)
                chains.receive()
    assert not any(process.is_alive() for process in processes)
    with pytest.raises(RuntimeError, match="without a step sent"):
        with ChainWorkers([(_FailsAtStep, (9,))], threads=1, where="a test") as chains:
            chains.receive()


class _KilledAtStep:
    def push(self, _):
        import os
        import signal

        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's out-of-memory killer would


def test_a_worker_killed_outright_is_named_with_its_exit_code_not_an_eof():
    with pytest.raises(RuntimeError, match=r"ended without a result \(exit code -9\)"):
        with ChainWorkers([(_KilledAtStep, ())], threads=1, where="a test") as chains:
            chains.send(None)
            chains.receive()


def test_the_spectral_stage_surgery_in_workers_equals_one_schur_surgery_bit_for_bit(fresh_seed):
    """One worker per normal part, rows reassembled in the order of one SchurSurgery: the same numbers."""
    from threadpoolctl import threadpool_limits

    from resdyn.spectra import analyse_sublayer
    from resdyn.stages.spectral import SURGERY_ALPHAS
    from resdyn.stages.spectral import surgery_chains as _surgery_chains
    from resdyn.stages.spectral import surgery_rows as _surgery_rows

    rng = np.random.default_rng(fresh_seed)
    spectra = [analyse_sublayer(np.eye(30) + rng.normal(size=(30, 30)) / 8) for _ in range(4)]
    with threadpool_limits(limits=1, user_api="blas"):  # the workers' one thread, here too
        serial = SchurSurgery(SURGERY_ALPHAS)
        expected = [row for spectrum in spectra for row in serial.push(spectrum.schur_form, spectrum.schur_basis)]
    for workers in (2, 1):  # in worker processes, and stepped in this process (on one thread, as they are)
        rows = []
        with _surgery_chains(workers=workers, where="a test") as chains, \
                threadpool_limits(limits=1, user_api="blas"):
            for spectrum in spectra:
                chains.send(spectrum.schur_form, spectrum.schur_basis)
            while chains.outstanding:
                rows += _surgery_rows(chains)
        assert rows == expected


def test_workers_end_when_their_consumer_is_killed_outright(tmp_path):
    """SIGKILL of the consumer runs no cleanup: each worker sees its parent gone and returns."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "consumer.py"
    script.write_text(
        "import time\n"
        "from resdyn.parallel import ChainWorkers\n"
        "from resdyn.depth import CumulativeProduct\n"
        "if __name__ == '__main__':\n"
        "    with ChainWorkers([(CumulativeProduct, ()), (CumulativeProduct, ())], threads=1, where='x') as chains:\n"
        "        print(*(process.pid for process in chains.processes), flush=True)\n"
        "        time.sleep(600)\n")
    consumer = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(pid) for pid in consumer.stdout.readline().split()]
        assert len(workers) == 2
        consumer.send_signal(signal.SIGKILL)
        consumer.wait(timeout=30)

        def running(pid: int) -> bool:  # a zombie nobody reaped has ended
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
            except FileNotFoundError:
                return False

        deadline = time.time() + 60  # they poll their parent each second; the bound only rules out a hang
        while any(running(pid) for pid in workers) and time.time() < deadline:
            time.sleep(0.2)
        assert not any(running(pid) for pid in workers)
    finally:
        consumer.kill()
        for pid in workers if "workers" in locals() else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
