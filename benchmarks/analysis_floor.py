"""All the analysis of one sublayer beside its floor, per stage and width (a benchmark, not a test).

    python benchmarks/analysis_floor.py [--widths 1024 2048 4096] [--samples 128] [--per-sample 8]

For each width d, in one process and one after the other: a random near-identity mean Jacobian
J = I + G / (2 sqrt d) (G Gaussian), ``--per-sample`` per-sample matrices around it, and activations
of ``--samples`` observations with a planted community structure (a quarter of the units bridging two groups); then the stages the assets run for
one sublayer, timed separately:

    spectral      resdyn.spectra.analyse_sublayer (real Schur with vectors, svdvals, SVD of J - I), one
                  cumulative-product step and the five Schur-surgery alphas (resdyn.depth.SchurSurgery)
    transient     resdyn.transient.analyse_transient (no contour grid)
    per_sample    the per-sample metrics of the subsample (values-only Schur, svdvals, numerical abscissa)
    correlation   resdyn.topology.correlation_matrix of the boundary's activations
    graph         resdyn.topology.signed_graph (kNN)
    transient     also its parts alone: setup (the complex form from T, sigma_min at 0), the numerical radius,
                  the pseudospectral radii
    scan          the Leiden runs of resdyn.topology.scan_gamma (the default gammas x 5 seeds)
    stability     the rest of the scan: ARI, NMI and modularity of every seed's partition
    coupling      resdyn.coupling.coupling_test (1000 degree-stratified permutations), beside the same
                  permutations vectorised over permutations

and their floors, measured in the same process: one real Schur form with vectors (scipy.linalg.schur),
one svdvals, one Leiden run on the same graph (times the scan's runs), and the scan's statistics by
igraph's own C routines (compare_communities per pair, modularity per partition). Each stage's ratio to its floor and the whole sublayer
against one Schur form are reported (the issue's target: the whole sublayer within 8x one Schur form).

Writes benchmarks/results/analysis_floor.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import scipy.linalg

RESULTS = Path(__file__).resolve().parent / "results" / "analysis_floor.json"


def _timed(function, *arguments, **keywords):
    started = time.perf_counter()
    result = function(*arguments, **keywords)
    return result, time.perf_counter() - started


def planted_activations(n: int, d: int, groups: int, rng: np.random.Generator) -> np.ndarray:
    """n observations of d units in ``groups`` correlated blocks (what a layer's residual stream looks like
    to the community stage: a few co-active groups)."""
    labels, second = rng.integers(0, groups, d), rng.integers(0, groups, d)
    bridging = rng.random(d) < 0.25  # a quarter of the units load on a second group too: boundary units
    factors = rng.normal(size=(n, groups))
    return factors[:, labels] + bridging * factors[:, second] + 0.7 * rng.normal(size=(n, d))


def _stability_floor(memberships, seeds: int, positive) -> None:
    """What the scan reports beyond its Leiden runs, by the field's library: igraph's C comparison
    (adjusted Rand index, NMI) of every pair of seeds' partitions at each gamma, and igraph's modularity of
    every partition on the graph already built."""
    from itertools import combinations

    import igraph

    for start in range(0, len(memberships), seeds):
        group = [list(map(int, m)) for m in memberships[start:start + seeds]]
        for membership in group:
            positive.modularity(membership, weights="weight")
        for a, b in combinations(group, 2):
            igraph.compare_communities(a, b, method="adjusted_rand")
            igraph.compare_communities(a, b, method="nmi")


def _permutation_floor(amplification, is_boundary, degree, n_permutations: int, seed: int) -> None:
    """The coupling test's 1000 degree-stratified label permutations, vectorised over permutations: every
    stratum's labels permuted at once (numpy.Generator.permuted along rows), the rank sums one product."""
    import scipy.stats

    from resdyn.coupling import degree_strata

    ranks, strata = scipy.stats.rankdata(amplification), degree_strata(degree)
    rng, rank_sums = np.random.default_rng(seed), np.zeros(n_permutations)
    for stratum in np.unique(strata):
        members = np.flatnonzero(strata == stratum)
        labels = rng.permuted(np.tile(is_boundary[members], (n_permutations, 1)), axis=1)
        rank_sums += labels.astype(np.float64) @ ranks[members]


def measure(d: int, n_samples: int, per_sample: int, seed: int) -> dict:
    from resdyn import coupling, spectra, topology, transient
    from resdyn.depth import CumulativeProduct, SchurSurgery
    from resdyn.stages.workers import sample_metrics

    rng = np.random.default_rng(seed)
    jacobian = np.eye(d) + rng.normal(size=(d, d)) / (2 * np.sqrt(d))
    samples = [jacobian + rng.normal(size=(d, d)) / (4 * np.sqrt(d)) for _ in range(per_sample)]
    activations = planted_activations(n_samples, d, max(4, d // 128), rng)
    seconds, floors, parts = {}, {}, {}
    _, floors["schur_with_vectors"] = _timed(scipy.linalg.schur, jacobian, output="real")
    _, floors["svdvals"] = _timed(scipy.linalg.svdvals, jacobian)
    _, floors["schur_values_only"] = _timed(spectra.real_schur_form, jacobian, with_basis=False)

    def spectral():
        result = spectra.analyse_sublayer(jacobian)
        CumulativeProduct().push(jacobian)
        SchurSurgery((0.0, 0.25, 0.5, 0.75, 1.0)).push(result.schur_form, result.schur_basis)
        return result

    spectrum, seconds["spectral"] = _timed(spectral)
    # as the pipeline runs it: from the spectral stage's real Schur form and ||J||_2 (nothing factored again);
    # its parts timed on their own beside it (setup: the complex form from T and sigma_min at 0; the numerical
    # radius; the pseudospectral radii)
    _, seconds["transient"] = _timed(transient.analyse_transient, jacobian, contour_points=0,
                                     real_schur_form=spectrum.schur_form, spectral_norm=spectrum.singular_values[0])
    shifted, parts["transient_setup"] = _timed(transient.ShiftedSchur, jacobian,
                                                      real_schur_form=spectrum.schur_form,
                                                      spectral_norm=spectrum.singular_values[0])
    _, parts["transient_numerical_radius"] = _timed(transient.numerical_radius, jacobian)
    _, parts["transient_pseudospectral_radii"] = _timed(shifted.pseudospectral_radii, transient.PSEUDOSPECTRAL_EPSILONS)
    _, seconds["per_sample"] = _timed(lambda: [sample_metrics(m) for m in samples])  # what the asset's worker runs
    correlation, seconds["correlation"] = _timed(topology.correlation_matrix, activations)
    k = min(30, max(5, d // 4))
    edges, seconds["graph"] = _timed(topology.signed_graph, correlation, "knn", k=k)
    graphs = topology.layer_graphs(edges)
    _, floors["leiden_run"] = _timed(topology.signed_leiden, edges, 1.0, 0, graphs=graphs)
    scan, scan_seconds = _timed(topology.scan_gamma, edges, seeds=(0, 1, 2, 3, 4))
    # the scan's Leiden runs beside as many single runs; its stability (ARI, NMI, modularity of every seed's
    # partition) beside the cheapest correct count of the same (_stability_floor)
    seconds["scan"] = scan.leiden_seconds
    seconds["stability"] = scan_seconds - scan.leiden_seconds
    _, floors["stability_statistics"] = _timed(_stability_floor, scan.memberships, 5, graphs[0])
    participation, _ = topology.participation_coefficient(edges, scan.membership)
    is_boundary = topology.boundary_units(participation)
    amplification = coupling.unit_amplification(jacobian)["log_column_norm"]
    tested, seconds["coupling"] = _timed(coupling.coupling_test, amplification, is_boundary,
                                         topology.unit_degree(edges), n_permutations=1000, seed=seed)
    _, floors["vectorised_permutations"] = _timed(_permutation_floor, amplification, is_boundary,
                                                  topology.unit_degree(edges), 1000, seed)
    floors["per_sample_values_only_schur"] = per_sample * floors["schur_values_only"]
    floors["leiden_runs_of_the_scan"] = len(scan.rows) * 5 * floors["leiden_run"]
    floor_of = {"spectral": "schur_with_vectors", "transient": "schur_with_vectors",
                "per_sample": "per_sample_values_only_schur", "correlation": "svdvals", "graph": "svdvals",
                "scan": "leiden_runs_of_the_scan", "stability": "stability_statistics", "coupling": "vectorised_permutations"}
    stages = {stage: {"seconds": round(value, 4), "floor": floor_of[stage],
                      "floor_seconds": round(floors[floor_of[stage]], 4),
                      "ratio": round(value / floors[floor_of[stage]], 2)} for stage, value in seconds.items()}
    total = sum(seconds.values())
    return {"d": d, "samples": n_samples, "per_sample": per_sample, "k": k, "stages": stages,
            "floors": {name: round(value, 4) for name, value in floors.items()},
            "transient_parts": {name: round(value, 4) for name, value in parts.items()},
            "sublayer_seconds": round(total, 2),
            "sublayer_over_one_schur": round(total / floors["schur_with_vectors"], 1),
            "leiden_runs_in_scan": len(scan.rows) * 5, "boundary_units": int(is_boundary.sum()),
            "coupling_defined": bool(tested.defined), "peak_rss_gib": round(
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--widths", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--per-sample", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    records = []
    for d in arguments.widths:
        record = measure(d, arguments.samples, arguments.per_sample, arguments.seed)
        records.append(record)
        print(json.dumps(record), flush=True)
        RESULTS.write_text(json.dumps(records, indent=2) + "\n")  # after each width: a long run keeps its numbers
    return 0


if __name__ == "__main__":
    sys.exit(main())
