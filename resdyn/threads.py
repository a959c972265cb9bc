"""BLAS threads in worker processes: a limit that holds for libraries loaded before and after it.

``threadpoolctl.threadpool_limits`` only reaches the thread pools of libraries already loaded. In a spawned
worker neither numpy's nor scipy's OpenBLAS (two separate libraries in current wheels) is loaded when a pool's
initializer runs, so a limit set there reached nothing: each of two workers ran scipy's LAPACK on two threads
on a 2-core machine, and OpenBLAS threads that spin on oversubscribed cores made the transient stage of one
SmolLM2 partition take over 50 minutes instead of about 2 (measured 2026-12-02, tests/unit/test_threads.py).
"""

from __future__ import annotations

import os

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_LIMITS = None


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the system says, else every core)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def threads_per_part(parts: int) -> int:
    """The threads each of ``parts`` processes sharing :func:`usable_cores` gets (at least one)."""
    return max(1, usable_cores() // parts)


def limit_blas_threads(threads: int) -> None:
    """Give this process's BLAS/OpenMP pools ``threads`` threads each: the environment for libraries loaded
    later (each reads its variable when it loads), then numpy and scipy.linalg loaded and limited now."""
    global _LIMITS
    for variable in THREAD_VARIABLES:
        os.environ[variable] = str(threads)
    import numpy  # noqa: F401 - loaded so that the limit below reaches its BLAS
    import scipy.linalg  # noqa: F401 - scipy ships its own OpenBLAS
    from threadpoolctl import threadpool_limits

    _LIMITS = threadpool_limits(limits=threads)  # kept alive for the worker's life
