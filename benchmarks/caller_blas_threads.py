"""The spectral stage's work with the consumer's BLAS at its share of the cores against at every core, side by side.

    python benchmarks/caller_blas_threads.py [--jacobians PARQUET] [--width 576] [--sublayers 20] [--rounds 2]

spectral_analysis factors each sublayer in a worker pool (resdyn.dagster_project.asset_layer.ordered_parallel_map)
while its own process carries the products through depth (CumulativeProduct, SchurSurgery: a matrix product and
the singular values of every chain at every depth). Before, that process kept OpenBLAS's default, one thread per
core, beside workers that use every core already; now the pool limits it to its share while it runs. This runs
both, alternating: "share" as the stage runs now, "every_core" with the caller's limit lifted to every core
inside the loop (what it was). The matrices: a jacobians partition's Parquet file (``--jacobians``, e.g.
warehouse/jacobians/model=smollm2-135m/checkpoint=trained/*.parquet) or random near-identity ones, I + G / (2
sqrt(d)) with G standard normal (seed 0).

Writes benchmarks/results/caller_blas_threads.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from threadpoolctl import threadpool_limits

from resdyn.dagster_project.store.matrices import matrix_of
from resdyn.depth import CumulativeProduct, SchurSurgery, rank_summary
from resdyn.parallel import ordered_parallel_map
from resdyn.stages.spectral import SURGERY_ALPHAS
from resdyn.threads import usable_cores

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "caller_blas_threads.json"


def _matrices(jacobians: str | None, width: int, count: int) -> list[np.ndarray]:
    if jacobians:
        parquet = pq.ParquetFile(jacobians)
        return [matrix_of(parquet.read_row_group(index, columns=["row", "values"]))
                for index in range(min(count, parquet.num_row_groups))]
    rng = np.random.default_rng(0)
    return [np.eye(width) + rng.standard_normal((width, width)) / (2 * np.sqrt(width)) for _ in range(count)]


def _analyse(matrix: np.ndarray):
    from resdyn.spectra import analyse_sublayer

    return analyse_sublayer(matrix)


def _stage(matrices: list[np.ndarray], every_core: bool) -> float:
    """Seconds of the pool's analyses and the caller's products through depth, as resdyn/stages/spectral.py runs them."""
    started = time.perf_counter()
    measured, surgery = CumulativeProduct(), SchurSurgery(SURGERY_ALPHAS)
    for matrix, result in zip(matrices, ordered_parallel_map(_analyse, matrices, workers=usable_cores())):
        with threadpool_limits(limits=usable_cores() if every_core else None, user_api="blas"):
            rank_summary(measured.push(matrix))
            surgery.push(result.schur_form, result.schur_basis)
    return round(time.perf_counter() - started, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jacobians", help="a jacobians partition's Parquet file (default: random matrices)")
    parser.add_argument("--width", type=int, default=576, help="of the random matrices (SmolLM2-135M's d)")
    parser.add_argument("--sublayers", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--label", default="", help="what the --jacobians file is, for the record")
    arguments = parser.parse_args()
    matrices = _matrices(arguments.jacobians, arguments.width, arguments.sublayers)
    seconds: dict[str, list[float]] = {"share": [], "every_core": []}
    for _ in range(arguments.rounds):  # alternating, so that the machine's load falls on both alike
        for label in seconds:
            seconds[label].append(_stage(matrices, every_core=label == "every_core"))
            print(label, seconds[label][-1], "s", flush=True)
    medians = {label: statistics.median(values) for label, values in seconds.items()}
    result = {"matrices": arguments.label or arguments.jacobians or f"random I + G / (2 sqrt(d)), d = {arguments.width}, seed 0",
              "width": len(matrices[0]), "sublayers": len(matrices), "cores": usable_cores(),
              "workers": usable_cores(), "seconds": seconds, "median_seconds": medians,
              "ratio_every_core_over_share": round(medians["every_core"] / medians["share"], 2)}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
