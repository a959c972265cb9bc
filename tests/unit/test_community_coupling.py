"""Community-level coupling (resdyn/community_coupling.py): formulas against direct computations, the permutation
p-value against exact enumeration and its false-positive rate under the null, planted couplings of either sign."""

import itertools

import numpy as np
import pytest
import scipy.stats

from resdyn import community_coupling as cc
from resdyn import topology
from resdyn.coupling import false_discovery


def _random_graph(rng, n_units, n_communities, density=0.3):
    """Signed edges i < j on a random subset of pairs, random membership using every label 0 .. K-1."""
    source, target = np.triu_indices(n_units, 1)
    keep = rng.uniform(size=len(source)) < density
    edges = topology.SignedEdges(n_units, source[keep].astype(np.int32), target[keep].astype(np.int32),
                                 rng.normal(size=int(keep.sum())))
    return edges, rng.permutation(np.arange(n_units) % n_communities)


def _noise_sublayer(rng, n_units=50, n_communities=10, n_observations=80):
    """kNN correlation graph of pure-noise activations, equal-size random communities, and a random J: position
    and gain are independent and the gains exchangeable over communities (the exact null)."""
    correlation = topology.correlation_matrix(rng.normal(size=(n_observations, n_units)))
    edges = topology.signed_graph(correlation, "knn", k=8)
    membership = rng.permutation(np.arange(n_units) % n_communities)
    position = cc.community_position(edges, membership)
    jacobian = np.eye(n_units) + rng.normal(size=(n_units, n_units)) / np.sqrt(n_units)
    return position, cc.community_log_gains(jacobian, membership)["jacobian"]


def _binomial_interval(n, p, level=1e-4):
    """Counts outside which a Binomial(n, p) falls with probability at most ``level`` (two-sided)."""
    return scipy.stats.binom.ppf(level / 2, n, p), scipy.stats.binom.isf(level / 2, n, p)


def test_gain_equals_the_projector_norm_of_each_operator(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    d = int(rng.integers(8, 30))
    jacobian = np.eye(d) + rng.normal(size=(d, d)) * rng.uniform(0.1, 2.0)
    membership = rng.integers(0, 5, size=d)
    membership[0] = 5  # a community of one unit
    _, membership = np.unique(membership, return_inverse=True)
    gains = cc.community_log_gains(jacobian, membership)
    operators = {"jacobian": jacobian, "symmetric": (jacobian + jacobian.T) / 2, "update": jacobian - np.eye(d)}
    for name, matrix in operators.items():
        for community in range(membership.max() + 1):
            projector = np.diag((membership == community).astype(float))
            direct = np.linalg.norm(matrix @ projector) / np.linalg.norm(projector)
            assert gains[name][community] == pytest.approx(np.log(direct), rel=1e-12, abs=1e-12), (name, community)


def test_inter_share_and_mean_participation_against_loops(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    n, k = int(rng.integers(15, 40)), int(rng.integers(2, 6))
    edges, membership = _random_graph(rng, n, k)
    membership = np.append(membership, k)  # one more unit, alone in its community and without edges
    edges = topology.SignedEdges(n + 1, edges.source, edges.target, edges.weight)
    position = cc.community_position(edges, membership)
    outside, total = np.zeros(k + 1), np.zeros(k + 1)
    strength = np.zeros((n + 1, k + 1))
    for i, j, w in zip(edges.source, edges.target, edges.weight):
        if w <= 0:
            continue
        for unit, other in ((i, j), (j, i)):
            total[membership[unit]] += w
            strength[unit, membership[other]] += w
            if membership[other] != membership[unit]:
                outside[membership[unit]] += w
    expected_share = np.where(total > 0, outside / np.where(total > 0, total, 1), 0.0)
    np.testing.assert_allclose(position.inter_share, expected_share, rtol=1e-12, atol=1e-15)
    assert position.inter_share[k] == 0.0
    unit_strength = strength.sum(axis=1)
    participation = [1 - np.sum((strength[u] / unit_strength[u]) ** 2) if unit_strength[u] > 0 else 0.0
                     for u in range(n + 1)]
    for community in range(k + 1):
        members = membership == community
        assert position.size[community] == members.sum()
        assert position.mean_participation[community] == pytest.approx(np.mean(np.array(participation)[members]),
                                                                        abs=1e-12)


def test_rho_is_scipys_spearman_over_the_eligible_communities(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    k = int(rng.integers(8, 40))
    position = np.round(rng.uniform(size=k), 1)  # ties included
    gain = 0.5 * position + rng.normal(size=k)
    size = rng.integers(1, 8, size=k)
    size[:4] = 3  # at least four eligible
    gain[4] = np.nan  # not finite: not eligible
    result = cc.community_coupling_test(position, gain, size, n_permutations=50, seed=fresh_seed)
    eligible = (size >= 3) & np.isfinite(gain)
    assert result.n_communities == eligible.sum()
    assert result.rho == pytest.approx(scipy.stats.spearmanr(position[eligible], gain[eligible]).statistic, abs=1e-12)
    bigger = cc.community_coupling_test(position, gain, size, min_size=5, n_permutations=50)
    assert bigger.n_communities == ((size >= 5) & np.isfinite(gain)).sum()


def test_permutation_p_matches_exact_enumeration(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    position, gain = rng.normal(size=6), rng.normal(size=6)
    gain += rng.uniform(0, 2) * position
    observed = abs(scipy.stats.spearmanr(position, gain).statistic)
    permuted = [abs(scipy.stats.spearmanr(position, gain[list(order)]).statistic)
                for order in itertools.permutations(range(6))]
    exact = np.mean(np.array(permuted) >= observed - 1e-12)
    n_permutations = 20000
    result = cc.community_coupling_test(position, gain, np.full(6, 5), n_permutations=n_permutations, seed=fresh_seed)
    tolerance = 5 * np.sqrt(exact * (1 - exact) / n_permutations) + 2 / n_permutations
    assert result.p_permutation == pytest.approx(exact, abs=tolerance)
    # seeded: the same seed gives the same p
    again = cc.community_coupling_test(position, gain, np.full(6, 5), n_permutations=n_permutations, seed=fresh_seed)
    assert again.p_permutation == result.p_permutation


def test_false_positive_rate_under_the_null_and_after_bh_over_sublayers(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    n_models, n_sublayers, n_permutations = 300, 6, 200
    p = np.empty((n_models, n_sublayers))
    for model in range(n_models):
        for sublayer in range(n_sublayers):
            position, gain = _noise_sublayer(rng)
            result = cc.community_coupling_test(position.mean_participation, gain, position.size,
                                                n_permutations=n_permutations, seed=int(rng.integers(2**31)))
            assert result.defined, result.reason
            p[model, sublayer] = result.p_permutation
    low, high = _binomial_interval(p.size, 0.05)
    false_positives = int(np.sum(p < 0.05))
    assert low <= false_positives <= high, f"{false_positives} of {p.size} tests at p < 0.05"
    # under the global null BH rejects anything with probability alpha at most (Simes 1986); less here, as the
    # permutation p lives on the grid 1/201, 2/201, ... and |rho| of 10 communities has ties (about 0.02 measured)
    any_rejection = int(sum(np.any(false_discovery(row) < 0.05) for row in p))
    _, high = _binomial_interval(n_models, 0.05)
    assert any_rejection <= high, f"BH rejected something in {any_rejection} of {n_models} null models"


@pytest.mark.parametrize("sign", [1, -1])
def test_planted_coupling_is_found_with_its_sign(sign, fresh_seed):
    """Communities with more cross-community edges sit higher in participation; their columns of J are scaled
    by exp(sign * z(position)), so the gain rises (sign 1) or falls (sign -1) with the position."""
    rng = np.random.default_rng(fresh_seed)
    n_communities, size = 10, 6
    n = n_communities * size
    membership = np.repeat(np.arange(n_communities), size)
    source, target = np.triu_indices(n, 1)
    inside = membership[source] == membership[target]
    bridging = rng.uniform(size=len(source)) < 0.02 + 0.04 * np.maximum(membership[source], membership[target])
    keep = inside | bridging
    edges = topology.SignedEdges(n, source[keep].astype(np.int32), target[keep].astype(np.int32),
                                 rng.uniform(0.3, 1.0, size=int(keep.sum())))
    position = cc.community_position(edges, membership)
    z = (position.mean_participation - position.mean_participation.mean()) / position.mean_participation.std()
    jacobian = np.eye(n) + 0.05 * rng.normal(size=(n, n))
    jacobian *= np.exp(sign * 0.5 * z + 0.05 * rng.normal(size=n_communities))[membership]
    gains = cc.community_log_gains(jacobian, membership)
    for name in ("jacobian", "symmetric"):
        result = cc.community_coupling_test(position.mean_participation, gains[name], position.size,
                                            n_permutations=500, seed=fresh_seed)
        assert result.defined and result.p_permutation < 0.05, (name, result)
        assert np.sign(result.rho) == sign and abs(result.rho) > 0.6, (name, result)
        assert result.direction == ("amplified" if sign > 0 else "suppressed")


def test_too_few_communities_or_a_constant_position_is_undefined(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    position, gain = rng.uniform(size=7), rng.normal(size=7)
    size = np.array([3, 9, 4, 2, 2, 1, 2])  # three communities of 3+ units
    result = cc.community_coupling_test(position, gain, size)
    assert not result.defined and result.direction == "undefined" and result.n_communities == 3
    assert result.p_permutation == 1.0 and np.isnan(result.rho) and "needs 4" in result.reason
    size[3] = 3  # a fourth: defined
    assert cc.community_coupling_test(position, gain, size, n_permutations=20).defined
    constant = cc.community_coupling_test(np.zeros(7), gain, size)
    assert not constant.defined and "position" in constant.reason and constant.p_permutation == 1.0
    # one community (every unit in it): position and gains exist, the test does not
    edges, _ = _random_graph(rng, 12, 1)
    single = cc.community_position(edges, np.zeros(12, int))
    assert single.mean_participation.tolist() == [0.0] and single.inter_share.tolist() == [0.0]
    assert not cc.community_coupling_test(single.mean_participation, [0.1], single.size).defined
    # undefined tests stay out of the BH correction
    q = false_discovery([0.01, np.nan, 0.04, 0.03])
    assert np.isnan(q[1])
    np.testing.assert_allclose(q[[0, 2, 3]], scipy.stats.false_discovery_control([0.01, 0.04, 0.03]), rtol=1e-12)
