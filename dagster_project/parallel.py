"""Work spread over processes, results in order, at most a few results in flight.

Spectral factorizations of large matrices (LAPACK's Hessenberg QR in particular) use several
cores poorly, so sublayers are analysed in separate processes, each with its share of the BLAS
threads. ``spawn`` processes: forking a process that holds torch and Dagster threads is unsafe.
Results come back in submission order and only ``workers + lookahead`` tasks are submitted ahead
of the consumer, so memory stays bounded when each result is large (a d x d Schur form).
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from itertools import islice


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def _limit_blas_threads(threads: int) -> None:
    from threadpoolctl import threadpool_limits

    global _LIMITS
    _LIMITS = threadpool_limits(limits=threads)  # kept alive for the worker's life


_LIMITS = None


def ordered_parallel_map(function: Callable, items: Iterable, *, workers: int, lookahead: int = 1) -> Iterator:
    """``map(function, items)`` over ``workers`` spawned processes (inline when workers <= 1)."""
    if workers <= 1:
        yield from map(function, items)
        return
    threads = max(1, default_workers() // workers)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_limit_blas_threads,
                             initargs=(threads,)) as pool:
        iterator = iter(items)
        pending = deque(pool.submit(function, item) for item in islice(iterator, workers + lookahead))
        while pending:
            result = pending.popleft().result()
            for item in islice(iterator, 1):
                pending.append(pool.submit(function, item))
            yield result
