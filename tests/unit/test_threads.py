"""Worker processes get the BLAS thread limit for every BLAS their work loads (numpy's and scipy's OpenBLAS are
two libraries), not only for what was loaded when the pool started them."""

from resdyn.dagster_project.asset_layer.parallel import ordered_parallel_map
from resdyn.dagster_project.configuration.config import child_environment
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
