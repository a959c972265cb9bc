"""Worker processes get the BLAS thread limit for every BLAS their work loads (numpy's and scipy's OpenBLAS are
two libraries), not only for what was loaded when the pool started them."""

from resdyn.dagster_project.configuration.config import child_environment
from resdyn.parallel import ordered_parallel_map
from resdyn.threads import THREAD_VARIABLES, usable_cores


def _blas_threads_after_scipy(_item) -> dict[str, int]:
    import scipy.linalg  # noqa: F401 - what the spectral and transient work loads, after the pool's initializer ran
    from threadpoolctl import threadpool_info

    return {pool["filepath"]: pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


def test_every_blas_of_a_spawned_worker_keeps_the_pools_thread_limit(monkeypatch):
    for variable in THREAD_VARIABLES:  # the pool's limit, not one the suite set for its own workers (conftest)
        monkeypatch.delenv(variable, raising=False)
    workers = 2
    limit = max(1, usable_cores() // workers)  # what ordered_parallel_map gives each worker
    seen = list(ordered_parallel_map(_blas_threads_after_scipy, range(workers), workers=workers))
    assert all(len(pools) >= 1 for pools in seen), seen  # scipy's OpenBLAS at least
    assert all(threads == limit for pools in seen for threads in pools.values()), seen


def test_the_limit_holds_for_a_blas_loaded_after_it(tmp_path):
    import subprocess
    import sys

    # a fresh interpreter: the limit first, numpy's BLAS loaded only afterwards (through the environment)
    code = ("from resdyn.threads import limit_blas_threads\nlimit_blas_threads(1)\n"
            "import numpy, scipy.linalg\nfrom threadpoolctl import threadpool_info\n"
            "print(sorted({p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas'}))")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env=child_environment(drop=THREAD_VARIABLES)).stdout
    assert output.strip() == "[1]", output


def _caller_blas_threads() -> dict[str, int]:
    from threadpoolctl import threadpool_info

    return {pool["filepath"]: pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


def _nothing(item):
    return item


def _own_and_share(workers: int) -> tuple[int, int]:
    """(a thread count for the caller that is not its share, its share beside ``workers`` workers)."""
    share = max(1, usable_cores() // (workers + 1))  # the caller works beside the workers
    return (2 if share != 2 else 3), share


def test_the_caller_gets_its_share_of_the_blas_threads_while_the_pool_runs_and_its_own_for_the_last_result():
    import scipy.linalg  # noqa: F401 - the consumer's BLAS (the spectral stage's products through depth)
    from threadpoolctl import threadpool_limits

    workers = 2
    own, share = _own_and_share(workers)  # distinct, so that a limit that never came or stayed shows
    with threadpool_limits(limits=own, user_api="blas"):
        before = _caller_blas_threads()
        # zipped with a list of the same length, as the stages do: the generator is never asked past its last result
        during = [_caller_blas_threads() for _, _ in zip(range(4), ordered_parallel_map(_nothing, range(4),
                                                                                        workers=workers))]
        after = _caller_blas_threads()
    assert before and set(before.values()) == {own}, before
    assert all(set(seen.values()) == {share} for seen in during[:-1]), during
    assert during[-1] == before and after == before, (before, during[-1], after)  # no worker runs beside the last


def test_an_abandoned_pool_gives_the_caller_its_threads_back():
    import scipy.linalg  # noqa: F401
    from threadpoolctl import threadpool_limits

    own, share = _own_and_share(2)
    with threadpool_limits(limits=own, user_api="blas"):
        results = ordered_parallel_map(_nothing, range(10), workers=2)
        next(results)
        assert set(_caller_blas_threads().values()) == {share}
        results.close()  # the consumer stops early (a failure downstream, a stop)
        assert set(_caller_blas_threads().values()) == {own}


def _fails(item):
    raise ValueError(f"item {item}")


def test_a_failing_worker_gives_the_caller_its_threads_back():
    import pytest
    import scipy.linalg  # noqa: F401
    from threadpoolctl import threadpool_limits

    own, _ = _own_and_share(2)
    with threadpool_limits(limits=own, user_api="blas"):
        with pytest.raises(ValueError, match="item 0"):
            list(ordered_parallel_map(_fails, range(4), workers=2))
        assert set(_caller_blas_threads().values()) == {own}
