"""The community stage's gamma scan, coarse to fine (the default) against every seed at every gamma, on a real
partition's graphs, side by side in one process (a benchmark, not a test).

    python benchmarks/communities_scan.py --warehouse DIR --partition MODEL@CHECKPOINT [--partition ...]
                                          [--observations N] [--seeds 5]

For every graph of each partition (one per layer and boundary), rebuilt from its published activations as the
``graph_edges`` asset builds it (first ``--observations`` rows of each activation matrix: 128 is the demo's n),
both scans run one after the other in this process, serially (their order alternating from graph to graph so
that neither always runs on a warmer machine): ``scan_gamma(..., refine=None)``, today's 12 gammas x 5 seeds,
and ``scan_gamma(...)``, the coarse pass's first seed at every gamma and every seed at its best three. Recorded per
partition: the Leiden seconds of each and their ratio, how many graphs chose the same gamma and how many a
neighbouring grid point (the scan's resolution), the smallest adjusted Rand index between the two chosen
partitions, and the worst grid distance. Writes benchmarks/results/communities_scan.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "communities_scan.json"


def graphs(warehouse: Path, partition: str, observations: int | None, activations: Path | None = None):
    """((layer, boundary), SignedEdges, observations) of every graph of the partition, as the graph_edges asset
    makes them, from its published activations (or the activations file given: a run's staged table)."""
    import pyarrow.parquet as pq

    from resdyn import topology
    from resdyn.dagster_project.configuration.settings import BY_NAME
    from resdyn.dagster_project.store.arrow_tables import matrix_rows
    from resdyn.dagster_project.store.warehouse import Warehouse

    model, checkpoint = partition.split("@", 1)
    assert BY_NAME["graph_k"].default == 0 and BY_NAME["graph_construction"].default == "knn"
    source = pq.ParquetFile(activations or Warehouse(warehouse).table_path("activations", model, checkpoint))
    for group in range(source.num_row_groups):
        data = source.read_row_group(group, columns=["layer", "boundary", "values"])
        matrix = matrix_rows(data.column("values"))
        matrix = matrix[:observations] if observations else matrix
        k = min(30, max(5, matrix.shape[1] // 4))  # the default kNN graph (settings: --graph-k 0)
        key = (data.column("layer")[0].as_py(), data.column("boundary")[0].as_py())
        yield key, topology.signed_graph(topology.correlation_matrix(matrix), "knn", k=k), len(matrix)


def compare(warehouse: Path, partition: str, observations: int | None, seeds: tuple[int, ...],
            activations: Path | None = None) -> dict:
    from resdyn import topology

    grid = list(topology.DEFAULT_GAMMAS)
    rows, seconds = [], {"full": 0.0, "coarse_to_fine": 0.0}
    started = time.perf_counter()
    for number, (key, edges, n_observations) in enumerate(graphs(warehouse, partition, observations,
                                                                               activations)):
        counted = n_observations
        order = ("full", "coarse_to_fine") if number % 2 == 0 else ("coarse_to_fine", "full")
        scans = {}
        for kind in order:
            scans[kind] = topology.scan_gamma(edges, seeds=seeds, refine=None if kind == "full" else
                                              topology.REFINED_GAMMAS)
            seconds[kind] += scans[kind].leiden_seconds
        full, fast = scans["full"], scans["coarse_to_fine"]
        steps = abs(grid.index(fast.gamma) - grid.index(full.gamma)) if np.isfinite(full.gamma) else 0
        rows.append({"graph": f"{key[0]}/{key[1]}", "steps": steps,
                     "adjusted_rand": topology.adjusted_rand_index(fast.membership, full.membership),
                     "communities_full": int(full.membership.max()) + 1,
                     "communities_coarse_to_fine": int(fast.membership.max()) + 1,
                     "runs_full": len(full.memberships), "runs_coarse_to_fine": len(fast.memberships)})
        print(f"{partition} {key}: gamma step {steps}, ARI {rows[-1]['adjusted_rand']:.3f}, "
              f"{rows[-1]['runs_coarse_to_fine']}/{rows[-1]['runs_full']} runs", flush=True)
    return {"partition": partition, "observations": counted, "graphs": len(rows),
            "leiden_seconds_full": round(seconds["full"], 1),
            "leiden_seconds_coarse_to_fine": round(seconds["coarse_to_fine"], 1),
            "speedup": round(seconds["full"] / seconds["coarse_to_fine"], 2),
            "same_gamma": sum(row["steps"] == 0 for row in rows),
            "neighbouring_gamma": sum(row["steps"] == 1 for row in rows),
            "worst_grid_steps": max(row["steps"] for row in rows),
            "smallest_adjusted_rand": round(min(row["adjusted_rand"] for row in rows), 3),
            "median_adjusted_rand": round(float(np.median([row["adjusted_rand"] for row in rows])), 3),
            "wall_minutes": round((time.perf_counter() - started) / 60, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", type=Path, required=True)
    parser.add_argument("--partition", action="append", required=True, help="MODEL@CHECKPOINT (repeatable)")
    parser.add_argument("--observations", type=int, default=None, help="first N observations of each graph")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--activations", type=Path, help="an activations Parquet file to read instead of the "
                        "published one (one --partition)")
    parser.add_argument("--conditions", default="", help="what else ran on the machine (recorded as said)")
    arguments = parser.parse_args()
    from resdyn.threads import limit_blas_threads

    limit_blas_threads(1)
    results = [compare(arguments.warehouse, partition, arguments.observations, tuple(range(arguments.seeds)),
                       arguments.activations) for partition in arguments.partition]
    RESULTS.write_text(json.dumps({"command": " ".join(sys.argv[1:]), "conditions": arguments.conditions,
                                   "partitions": results}, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
