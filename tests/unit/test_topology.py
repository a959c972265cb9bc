import json
import subprocess
import sys

import numpy as np
import pytest

from resdyn import topology

from ..synthetic import planted_activations


def test_correlation_matches_numpy_and_handles_constant_units(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    x = rng.normal(size=(50, 6))
    np.testing.assert_allclose(topology.correlation_matrix(x), np.corrcoef(x, rowvar=False), atol=1e-12)
    x[:, 2] = 3.0
    correlation = topology.correlation_matrix(x)
    assert np.isfinite(correlation).all() and correlation[2, 0] == 0.0 and correlation[2, 2] == 1.0


@pytest.mark.parametrize("construction", ["knn", "threshold", "dense"])
def test_planted_partition_is_recovered(construction, fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    activations, truth = planted_activations(rng)
    edges = topology.signed_graph(topology.correlation_matrix(activations), construction, k=10, threshold=0.2)
    result = topology.scan_gamma(edges, seeds=(0, 1, 2))
    gamma, scan = result.gamma, result.rows
    membership = topology.signed_leiden(edges, gamma, seed=0)
    assert topology.normalized_mutual_information(membership, truth) > 0.9, (gamma, scan)


def test_graph_constructions(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    correlation = topology.correlation_matrix(rng.normal(size=(40, 12)))
    knn = topology.signed_graph(correlation, "knn", k=3)
    assert np.all(knn.source < knn.target)
    degree = topology.unit_degree(knn)
    assert degree.min() >= 3  # every unit keeps its own 3 strongest links
    for unit in range(12):  # and those are its largest |r|
        row = np.abs(correlation[unit])
        row[unit] = 0.0
        strongest = np.argsort(-row)[:3]
        linked = set(knn.target[knn.source == unit].tolist()) | set(knn.source[knn.target == unit].tolist())
        assert set(strongest.tolist()) <= linked
    dense = topology.signed_graph(correlation, "dense")
    assert len(dense.weight) == 12 * 11 // 2
    threshold = topology.signed_graph(correlation, "threshold", threshold=0.2)
    assert np.all(np.abs(threshold.weight) > 0.2)
    assert len(threshold.weight) == np.sum(np.triu(np.abs(correlation) > 0.2, 1))
    with pytest.raises(ValueError, match="knn"):
        topology.signed_graph(correlation, "spectral")


def test_negative_correlations_separate_units():
    # two anti-correlated blocks: positive CPM alone at gamma 0 merges everything; the signed
    # negative layer keeps them apart
    rng = np.random.default_rng(7)
    factor = rng.normal(size=(400, 1))
    x = np.hstack([factor + 0.3 * rng.normal(size=(400, 6)), -factor + 0.3 * rng.normal(size=(400, 6))])
    edges = topology.signed_graph(topology.correlation_matrix(x), "dense")
    membership = topology.signed_leiden(edges, 0.0, seed=1)
    assert len(set(membership[:6])) == 1 and len(set(membership[6:])) == 1 and membership[0] != membership[6]


def test_participation_and_boundary_rules():
    # unit 0: strength 1 to community 0 and 1 to community 1 -> P = 0.5; unit 1: one community -> 0
    edges = topology.SignedEdges(5, np.array([0, 0, 1, 3]), np.array([1, 3, 2, 4]), np.array([1.0, 1.0, 0.5, 0.9]))
    membership = np.array([0, 0, 0, 1, 1])
    participation, share = topology.participation_coefficient(edges, membership)
    unit_3 = 1 - ((1 / 1.9) ** 2 + (0.9 / 1.9) ** 2)
    np.testing.assert_allclose(participation, [0.5, 0.0, 0.0, unit_3, 0.0], rtol=1e-12)
    # primary rule: above the 75th percentile of the five (numpy's linear interpolation: the 4th smallest, unit 3)
    assert list(topology.boundary_units(participation)) == [True, False, False, False, False]
    assert list(topology.absolute_boundary_units(participation)) == [True, False, False, True, False]
    assert not topology.robust_boundary_units(share, membership).any()  # only one *other* community each


def test_the_primary_boundary_rule_leaves_both_groups_whenever_participation_varies(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    for _ in range(50):
        n = int(rng.integers(4, 600))
        participation = rng.uniform(0.31, 0.95, n)  # every unit above the absolute threshold: all "boundary" by it
        participation[rng.uniform(size=n) < 0.2] = 0.0
        if np.ptp(participation) == 0:
            continue
        boundary = topology.boundary_units(participation)
        assert 0 < boundary.sum() < n
        assert boundary.sum() <= np.ceil(0.25 * n)
        assert participation[boundary].min() > participation[~boundary].max() - 1e-15
        assert topology.absolute_boundary_units(participation).sum() >= boundary.sum()
    assert not topology.boundary_units(np.zeros(10)).any()  # one community: nobody links communities
    # ties: at the top, the quantile is the tied maximum (nobody above it): the tied top is the boundary
    assert list(topology.boundary_units(np.array([0, .5, .5, .5, .5]))) == [False, True, True, True, True]
    tied = np.repeat(rng.uniform(0.3, 0.9, 7), rng.integers(1, 60, 7))
    boundary = topology.boundary_units(tied)
    assert 0 < boundary.sum() < len(tied) and tied[boundary].min() > tied[~boundary].max()


def test_scan_chooses_the_modularity_peak_not_the_fragmented_partition(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    activations, truth = planted_activations(rng, n_communities=6, size=30, n_observations=400)
    edges = topology.signed_graph(topology.correlation_matrix(activations), "knn", k=30)
    scan = topology.scan_gamma(edges, seeds=(0, 1, 2), refine=None)  # every seed at every gamma
    rows = {row.gamma: row for row in scan.rows}
    chosen = rows[scan.gamma]
    positive, _ = topology.layer_graphs(edges)
    assert chosen.modularity >= max(row.modularity for row in scan.rows if row.nontrivial) - topology.MODULARITY_TIE
    assert positive.modularity(list(scan.membership), weights="weight") >= chosen.modularity - 1e-12
    assert topology.normalized_mutual_information(scan.membership, truth) > 0.9
    # every run's partition is kept, gamma by gamma; a row's stability is the mean ARI of its seeds' pairs
    assert len(scan.memberships) == len(scan.rows) * 3
    for g, row in enumerate(scan.rows):
        group = scan.memberships[3 * g:3 * g + 3]
        pairs = [topology.adjusted_rand_index(a, b) for a, b in ((group[0], group[1]), (group[0], group[2]), (group[1], group[2]))]
        assert row.stability == pytest.approx(np.mean(pairs), nan_ok=True)
    assert any(np.array_equal(scan.membership, m) for m in scan.memberships)
    fragmented = max(scan.rows, key=lambda row: row.n_communities)
    assert fragmented.stability_nmi > chosen.stability_nmi - 0.3  # NMI barely tells them apart (its bias) ...
    assert chosen.n_communities < fragmented.n_communities / 3  # ... the rule does not take the fragments
    # the adjusted Rand index of two seeds' partitions equals its pair-counting definition
    a, b = (topology.signed_leiden(edges, scan.gamma, seed) for seed in (0, 1))
    pairs = np.triu_indices(len(a), 1)
    same_a, same_b = a[pairs[0]] == a[pairs[1]], b[pairs[0]] == b[pairs[1]]
    index = np.sum(same_a & same_b)
    expected = same_a.sum() * same_b.sum() / len(same_a)
    maximum = (same_a.sum() + same_b.sum()) / 2
    ari = (index - expected) / (maximum - expected) if maximum != expected else 1.0
    assert topology.adjusted_rand_index(a, b) == pytest.approx(ari, abs=1e-9)


def test_pair_statistics_equal_igraphs_on_random_partitions(fresh_seed):
    """The contingency-table ARI and NMI the scan uses equal igraph.compare_communities (independent C code)."""
    import igraph

    rng = np.random.default_rng(fresh_seed)
    for n, k_a, k_b in ((50, 2, 3), (300, 7, 7), (1000, 40, 3), (64, 1, 5)):
        a, b = rng.integers(0, k_a, n), rng.integers(0, k_b, n)
        b[: n // 2] = a[: n // 2] % k_b  # some agreement, so neither index sits at 0
        a, b = np.unique(a, return_inverse=True)[1], np.unique(b, return_inverse=True)[1]  # igraph wants 0..k-1
        for method, ours in (("adjusted_rand", topology.adjusted_rand_index),
                             ("nmi", topology.normalized_mutual_information)):
            reference = igraph.compare_communities(list(a), list(b), method=method)
            assert ours(a, b) == pytest.approx(reference, rel=1e-12, abs=1e-12), (method, n, k_a, k_b)
    same = rng.integers(0, 4, 100)
    assert topology.adjusted_rand_index(same, same) == 1.0 and topology.normalized_mutual_information(same, same) == pytest.approx(1.0)
    trivial = np.zeros(30, dtype=int)
    assert topology.adjusted_rand_index(trivial, trivial) == 1.0 and topology.normalized_mutual_information(trivial, trivial) == 1.0
    # two partitions into singletons: ARI is 0/0 (NaN, as igraph), NMI 1; labels need not be 0..k-1
    singletons = rng.permutation(200) * 7 + 3
    assert np.isnan(topology.adjusted_rand_index(singletons, singletons[::-1]))
    assert np.isnan(igraph.compare_communities(list(np.argsort(singletons)), list(np.arange(200)), method="adjusted_rand"))
    assert topology.normalized_mutual_information(singletons, singletons[::-1]) == pytest.approx(
        igraph.compare_communities(list(range(200)), list(range(200)), method="nmi"))
    relabelled = rng.integers(0, 5, 80)
    assert topology.adjusted_rand_index(relabelled * 10 - 4, relabelled) == 1.0
    with pytest.raises(ValueError, match="same units"):
        topology.adjusted_rand_index(np.array([0, 0, 1]), np.array([0]))
    with pytest.raises(ValueError, match="same units"):
        topology.normalized_mutual_information(np.array([0, 1]), np.array([0, 1, 1]))


def test_same_seed_same_membership_across_processes(fresh_seed):
    script = (
        "import numpy as np, json\n"
        "from resdyn import topology\n"
        "from tests.synthetic import planted_activations\n"
        f"x, _ = planted_activations(np.random.default_rng({fresh_seed % 1000}), n_boundary=6)\n"
        "e = topology.signed_graph(topology.correlation_matrix(x), 'knn', k=8)\n"
        "print(json.dumps(topology.signed_leiden(e, 0.05, seed=11).tolist()))\n"
    )
    runs = [json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                      check=True).stdout) for _ in range(2)]
    assert runs[0] == runs[1]
    assert len(set(runs[0])) > 1


def test_the_coarse_to_fine_scan_chooses_within_one_grid_step_of_the_full_scan_in_fewer_runs(fresh_seed):
    """The default scan (first seed everywhere, every seed at the coarse pass's best three) against every seed at
    every gamma, on graphs of planted communities of fresh sizes: the chosen gamma is the full scan's or its
    neighbour on the grid, the partitions agree, and the coarse rows say they rest on one run."""
    rng = np.random.default_rng(fresh_seed)
    grid = list(topology.DEFAULT_GAMMAS)
    seeds = (0, 1, 2, 3, 4)
    for _ in range(3):
        activations, _ = planted_activations(rng, n_communities=int(rng.integers(3, 9)), size=int(rng.integers(10, 40)),
                                             n_observations=int(rng.integers(150, 500)))
        edges = topology.signed_graph(topology.correlation_matrix(activations), "knn", k=int(rng.integers(5, 30)))
        full = topology.scan_gamma(edges, seeds=seeds, refine=None)
        fast = topology.scan_gamma(edges, seeds=seeds)
        assert abs(grid.index(fast.gamma) - grid.index(full.gamma)) <= 1, (fast.rows, full.rows)
        assert topology.adjusted_rand_index(fast.membership, full.membership) > 0.8
        refined = [row for row in fast.rows if row.n_seeds == len(seeds)]
        assert len(refined) >= topology.REFINED_GAMMAS and len(fast.memberships) < len(full.memberships)
        assert len(fast.memberships) == len(grid) + (len(seeds) - 1) * len(refined)
        for row in fast.rows:
            assert row.n_seeds in (1, len(seeds)) and np.isnan(row.stability) == (row.n_seeds == 1)
        # a refined row is the full scan's row at that gamma (the same seeds, run for run)
        for row in refined:
            same = next(r for r in full.rows if r.gamma == row.gamma)
            assert (row.modularity, row.stability, row.n_communities) == pytest.approx(
                (same.modularity, same.stability, same.n_communities))
