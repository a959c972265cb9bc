"""Analysis cost at paper widths, as ratios measured in the same run (a benchmark, not a test).

    python benchmarks/scale.py [--spectral-d 2048] [--topology-d 4096] [--observations 1000] [--workers N]

Spectral: all spectral work of one sublayer exactly as the ``spectral_analysis`` asset does it
(one real Schur form, singular values of J, one SVD of J - I, then one step of each cumulative
product: the measured Jacobians and J(alpha) = Z T(alpha) Z^T for the five surgery alphas) against
one ``scipy.linalg.schur`` of the same matrix. Target: <= 6x. The matrix is I plus a random
non-normal perturbation (a stand-in for a mean sublayer Jacobian of that width).

Topology: one boundary's graph, gamma scan and communities exactly as the ``graph_edges`` and
``communities`` assets do them, on activations from a planted signed factor model (units load
positively or negatively on one of 16 factors, so the graph has negative edges like real residual
streams), against the summed time of the Leiden runs the scan performs. Target: <= 1.5x.

Writes benchmarks/results/scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.linalg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resdyn import spectra, topology  # noqa: E402
from resdyn.depth import CumulativeProduct, block_eigenvalue_drift, operated_schur_form  # noqa: E402

SURGERY_ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - started


def spectral_work(jacobian: np.ndarray, previous_products: dict) -> None:
    """One sublayer of the spectral asset: analyse_sublayer plus one step of every product chain."""
    result = spectra.analyse_sublayer(jacobian)
    previous_products["measured"].push(jacobian)
    for alpha in SURGERY_ALPHAS:
        operated = operated_schur_form(result.schur_form, alpha)
        block_eigenvalue_drift(result.schur_form, operated)
        previous_products[alpha].push(result.schur_basis @ operated @ result.schur_basis.T)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spectral-d", type=int, default=2048)
    parser.add_argument("--topology-d", type=int, default=4096)
    parser.add_argument("--observations", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    arguments = parser.parse_args()
    rng = np.random.default_rng(0)
    records = []

    d = arguments.spectral_d
    jacobian = np.eye(d) + rng.normal(size=(d, d)) / np.sqrt(d) + np.triu(rng.normal(size=(d, d)), 1) * 0.3 / np.sqrt(d)
    _, schur_seconds = timed(scipy.linalg.schur, jacobian, output="real")
    chains = {"measured": CumulativeProduct(), **{alpha: CumulativeProduct() for alpha in SURGERY_ALPHAS}}
    spectral_work(jacobian, chains)  # depth 0: the chains start
    _, work_seconds = timed(spectral_work, jacobian, chains)  # depth 1: a full step, products included
    records.append({"stage": "one scipy.linalg.schur", "d": d, "seconds": schur_seconds})
    records.append({"stage": "all spectral assets of one sublayer", "d": d, "seconds": work_seconds,
                    "ratio_to_schur": work_seconds / schur_seconds, "target": "<= 6"})

    d = arguments.topology_d
    factors = rng.normal(size=(arguments.observations, 16))
    membership = rng.integers(0, 16, d)
    signs = rng.choice([-1.0, 1.0], size=d)
    activations = signs * factors[:, membership] + 1.5 * rng.normal(size=(arguments.observations, d))
    started = time.perf_counter()
    correlation, seconds = timed(topology.correlation_matrix, activations)
    records.append({"stage": "correlation matrix", "d": d, "seconds": seconds})
    edges, seconds = timed(topology.signed_graph, correlation, "knn", k=30)
    records.append({"stage": "kNN graph (k = 30)", "d": d, "seconds": seconds, "edges": len(edges.weight),
                    "negative_edges": int((edges.weight < 0).sum())})
    scan = topology.scan_gamma(edges, seeds=tuple(range(5)), workers=arguments.workers)
    records.append({"stage": f"gamma scan (12 gammas x 5 seeds, {arguments.workers} workers)", "d": d,
                    "seconds": scan.wall_seconds, "leiden_seconds": scan.leiden_seconds,
                    "nmi_vs_planted": topology.normalized_mutual_information(scan.membership, membership)})
    participation, share = topology.participation_coefficient(edges, scan.membership)
    topology.boundary_units(participation), topology.robust_boundary_units(share, scan.membership)
    total = time.perf_counter() - started
    records.append({"stage": "one boundary's topology (graph, gamma scan, communities)", "d": d, "seconds": total,
                    "ratio_to_leiden_runs": total / scan.leiden_seconds, "target": "<= 1.5"})

    print(f"{'stage':62s} {'d':>6s} {'seconds':>9s}  ratio")
    for record in records:
        ratio = record.get("ratio_to_schur", record.get("ratio_to_leiden_runs"))
        extra = f"  {ratio:.2f} (target {record['target']})" if ratio is not None else ""
        print(f"{record['stage']:62s} {record['d']:6d} {record['seconds']:9.2f}{extra}")
    output = Path(__file__).with_name("results") / "scale.json"
    output.parent.mkdir(exist_ok=True)
    output.write_text(json.dumps({"cores": os.cpu_count(), "records": records}, indent=2))


if __name__ == "__main__":
    main()
