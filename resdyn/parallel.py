"""Work spread over processes, results in order, at most a few results in flight.

Spectral factorizations of large matrices (LAPACK's Hessenberg QR in particular) use several
cores poorly, so sublayers are analysed in separate processes, each with its share of the BLAS
threads. ``spawn`` processes: forking a process that holds torch and Dagster threads is unsafe.
Results come back in submission order and only ``workers + lookahead`` tasks are submitted ahead
of the consumer, so memory stays bounded when each result is large (a d x d Schur form). The consumer
works on each result while the pool computes the next (the spectral stage's products through depth), so
it too gets only its share of the BLAS threads while the pool runs: with OpenBLAS's default (every core)
its threads spun against the workers', and the spectral stage's work on 30 SmolLM2 sublayers (d = 576) took
1.82x as long (benchmarks/results/caller_blas_threads.json).
"""

from __future__ import annotations

import multiprocessing
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from itertools import islice

from threadpoolctl import threadpool_limits

from resdyn import interrupts
from resdyn.lifeline import die_with_parent
from resdyn.threads import limit_blas_threads, threads_per_part, usable_cores


def default_workers() -> int:
    return usable_cores()


def ordered_parallel_map(function: Callable, items: Iterable, *, workers: int, lookahead: int = 1) -> Iterator:
    """``map(function, items)`` over ``workers`` spawned processes (inline when workers <= 1). A stop the CLI was
    asked for (:mod:`.interrupts`) is checked before each item starts and each result is handed on; on a stop, or
    any early end, the workers are terminated rather than waited for, so a stop costs at most one item's wait.

    While the workers run, this process's BLAS has ``threads_per_part(workers + 1)`` threads (module docstring);
    it gets its own back, and the pool is shut down, before the last result is handed on (a consumer that zips
    the results with a list of the same length never asks for more), or at any early end."""
    where = f"the work items of {getattr(function, '__name__', 'a parallel stage')}"
    if workers <= 1:
        for item in items:
            interrupts.check(where)
            yield function(item)
        return
    caller = threadpool_limits(limits=threads_per_part(workers + 1), user_api="blas")
    pool, finished = None, False
    try:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_pool_worker_start, initargs=(threads_per_part(workers),))
        iterator = iter(items)
        pending = deque(pool.submit(function, item) for item in islice(iterator, workers + lookahead))
        while pending:
            result = _result_or_stop(pending.popleft(), where)
            for item in islice(iterator, 1):
                pending.append(pool.submit(function, item))
            if not pending:  # the last result: nothing runs beside the consumer's work on it
                finished = True
                pool.shutdown(wait=True)
                caller.restore_original_limits()
            yield result
        finished = True
    finally:
        try:
            if pool is not None and not finished:  # stopped, failed or abandoned: running items are not worth their wait
                workers_running = list((pool._processes or {}).values())  # no public way to stop a running task
                pool.shutdown(wait=False, cancel_futures=True)  # (it forgets its processes: taken above)
                for process in workers_running:
                    process.terminate()
                for process in workers_running:
                    process.join(timeout=5)
            elif pool is not None:
                pool.shutdown(wait=True)  # no items at all, or already done
        finally:
            caller.restore_original_limits()  # idempotent: the limits it found, again


def _pool_worker_start(threads: int) -> None:
    """A pool worker ends with the step that started it, however that ends (a worker blocked on its task queue never
    sees a SIGKILLed parent: resdyn/lifeline.py), and has ``threads`` BLAS threads."""
    die_with_parent()
    limit_blas_threads(threads)


def _result_or_stop(future, where: str):
    """The future's result, checking for a requested stop every half second while it runs."""
    while True:
        interrupts.check(where)
        try:
            return future.result(timeout=0.5)
        except FuturesTimeout:
            continue


class ChainWorkers:
    """Chains of work carried through depth, each by a spawned process that keeps its state between steps.

    ``factories`` is a list of (callable, arguments): chain i builds ``state = callable(*arguments)`` once, then
    for every step :meth:`send` starts it runs ``state.push(*inputs)``; :meth:`receive` gives the oldest step's
    results, in the order of ``factories``. Inputs go through a queue (pickled by a feeder thread), so a consumer
    can start the next step before it takes the last one's results and no worker waits for it between steps. A
    cumulative product through depth is one such chain; chains that share nothing run side by side on the cores a
    single consumer left idle (the spectral stage's Schur surgery: docs/performance.md). Each worker has
    ``threads`` BLAS threads. A stop (:mod:`.interrupts`) is checked while results are awaited; a failure in a
    worker is raised here with its traceback; leaving the ``with`` block ends every worker (terminated when the
    block ends early or leaves steps unreceived). ``in_processes=False``: the same states stepped in this process
    at :meth:`send` (as ``ordered_parallel_map`` runs inline for one worker), where a process costs more than it
    saves."""

    def __init__(self, factories: list[tuple[Callable, tuple]], *, threads: int, where: str,
                 in_processes: bool = True) -> None:
        self.factories, self.threads, self.where, self.in_processes = factories, threads, where, in_processes
        self.inputs, self.connections, self.processes = [], [], []
        self.states, self.pending = [], deque()  # in this process: the states, and results not yet received
        self.outstanding = 0  # steps sent whose results have not been received

    def __enter__(self) -> ChainWorkers:
        if not self.in_processes:
            self.states = [factory(*arguments) for factory, arguments in self.factories]
            return self
        context = multiprocessing.get_context("spawn")
        try:
            for factory, arguments in self.factories:
                inputs, (ours, theirs) = context.Queue(), context.Pipe(duplex=False)
                process = context.Process(target=_chain_worker, args=(inputs, theirs, factory, arguments,
                                                                      self.threads), daemon=True)
                process.start()
                theirs.close()
                self.inputs.append(inputs)
                self.connections.append(ours)
                self.processes.append(process)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def send(self, *inputs) -> None:
        """Start every chain's next step on ``inputs`` (:meth:`receive` gives the results, oldest step first)."""
        if self.in_processes:
            for queue in self.inputs:
                queue.put(inputs)
        else:
            self.pending.append([state.push(*inputs) for state in self.states])
        self.outstanding += 1

    def receive(self) -> list:
        """The results of the oldest step :meth:`send` started and :meth:`receive` has not given, in the order of
        ``factories``."""
        if not self.outstanding:
            raise RuntimeError("receive() without a step sent")
        self.outstanding -= 1
        if not self.in_processes:
            return self.pending.popleft()
        results = []
        for connection, process in zip(self.connections, self.processes):
            while not connection.poll(0.5):  # a worker that ends closes its end of the pipe: poll sees it
                interrupts.check(self.where)
            try:
                status, value = connection.recv()
            except (EOFError, OSError):  # killed outright (out of memory, a signal) before it sent a result
                process.join(timeout=5)
                raise RuntimeError(f"a worker of {self.where} ended without a result (exit code "
                                   f"{process.exitcode})") from None
            if status == "error":
                raise RuntimeError(f"a worker of {self.where} failed:\n{value}")
            results.append(value)
        return results

    def __exit__(self, kind, value, traceback) -> None:
        # stopped, failed, or left with steps not received: what a worker still computes is not worth its wait
        abandoned = kind is not None or self.outstanding > 0
        for queue, process in zip(self.inputs, self.processes):
            if abandoned:
                process.terminate()
            else:
                queue.put(None)  # done: the worker returns
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
        for queue in self.inputs:
            queue.close()
            queue.cancel_join_thread()  # a terminated worker reads nothing more: the feeder must not wait for it
        for connection in self.connections:
            connection.close()


def _chain_worker(inputs, connection, factory: Callable, arguments: tuple, threads: int) -> None:
    import signal
    import traceback

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the consumer stops the run (interrupts); it ends this worker
    # a consumer killed outright ends this worker, computing or waiting (the queue's write end is ours too, so its
    # death sends no EOF that a read would see)
    die_with_parent()
    limit_blas_threads(threads)
    try:
        state = factory(*arguments)
        while True:
            step = inputs.get()
            if step is None:
                return
            connection.send(("ok", state.push(*step)))
    except BaseException:
        try:
            connection.send(("error", traceback.format_exc()))
        except OSError:  # the consumer is gone
            pass
