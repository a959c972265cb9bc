"""Scale checks (not tests): spectral assets for one d = 1024 sublayer, kNN graph + Leiden at d = 4096.

    python benchmarks/scale.py [--spectral-d 1024] [--topology-d 4096]

Prints a table and writes benchmarks/results/scale.json. The d = 1024 Jacobian is I plus a random
non-normal perturbation (a stand-in for a mean sublayer Jacobian of that width); the d = 4096
activations come from a planted factor model with 4096 units and 2000 observations.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from resdyn import spectra, topology
from resdyn.depth import SchurDecomposition, cumulative_products, eigenvalue_drift


def timed(function, *args, **kwargs):
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spectral-d", type=int, default=1024)
    parser.add_argument("--topology-d", type=int, default=4096)
    parser.add_argument("--observations", type=int, default=2000)
    arguments = parser.parse_args()
    rng = np.random.default_rng(0)
    records = []

    d = arguments.spectral_d
    jacobian = np.eye(d) + rng.normal(size=(d, d)) / np.sqrt(d) + np.triu(rng.normal(size=(d, d)), 1) * 0.3 / np.sqrt(d)
    _, seconds = timed(spectra.spectrum, jacobian)
    records.append({"stage": "eigenvalues + singular_values", "d": d, "seconds": seconds})
    _, seconds = timed(spectra.sublayer_metrics, jacobian)
    records.append({"stage": "layer_metrics (all, incl. Schur and SVD of J - I)", "d": d, "seconds": seconds})
    _, seconds = timed(lambda: list(cumulative_products([jacobian, jacobian])))
    records.append({"stage": "cumulative_rank (2 steps)", "d": d, "seconds": seconds})
    decomposition, seconds_schur = timed(SchurDecomposition.of, jacobian)
    reference = np.linalg.eigvals(jacobian)
    _, seconds = timed(lambda: [eigenvalue_drift(reference, decomposition.operated(a))
                                for a in (0.0, 0.25, 0.5, 0.75, 1.0)])
    records.append({"stage": "schur_surgery (Schur + 5 alphas + eigenvalue drift)", "d": d,
                    "seconds": seconds_schur + seconds})

    d = arguments.topology_d
    n_communities = 16
    factors = rng.normal(size=(arguments.observations, n_communities))
    membership = rng.integers(0, n_communities, d)
    activations = factors[:, membership] + rng.normal(size=(arguments.observations, d))
    correlation, seconds = timed(topology.correlation_matrix, activations)
    records.append({"stage": "correlation matrix", "d": d, "seconds": seconds})
    edges, seconds = timed(topology.signed_graph, correlation, "knn", k=30)
    records.append({"stage": "kNN graph (k = 30)", "d": d, "seconds": seconds, "edges": len(edges.weight)})
    found, seconds = timed(topology.signed_leiden, edges, 0.01, 0)
    records.append({"stage": "signed Leiden CPM (one gamma, one seed)", "d": d, "seconds": seconds,
                    "nmi_vs_planted": topology.normalized_mutual_information(found, membership)})
    _, seconds = timed(topology.participation_coefficient, edges, found)
    records.append({"stage": "participation coefficients", "d": d, "seconds": seconds})
    (gamma, _), seconds = timed(topology.scan_gamma, edges)
    chosen = topology.signed_leiden(edges, gamma, 0)
    records.append({"stage": "gamma scan (12 gammas x 5 seeds)", "d": d, "seconds": seconds, "gamma": gamma,
                    "nmi_vs_planted": topology.normalized_mutual_information(chosen, membership)})

    print(f"{'stage':55s} {'d':>6s} {'seconds':>9s}")
    for record in records:
        extra = f"  NMI vs planted {record['nmi_vs_planted']:.3f}" if "nmi_vs_planted" in record else ""
        print(f"{record['stage']:55s} {record['d']:6d} {record['seconds']:9.2f}{extra}")
    output = Path(__file__).with_name("results") / "scale.json"
    output.parent.mkdir(exist_ok=True)
    output.write_text(json.dumps(records, indent=2))


if __name__ == "__main__":
    main()
