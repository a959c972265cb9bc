import numpy as np
import pytest
import scipy.stats

from resdyn import coupling, topology

from ..synthetic import jacobian_with_boundary_gain, planted_activations


def _benjamini_hochberg(p):
    """Step-up BH from its definition: q_(i) = min_{j >= i} p_(j) m / j."""
    order = np.argsort(p)
    m = len(p)
    ranked = p[order] * m / np.arange(1, m + 1)
    q = np.minimum.accumulate(ranked[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(q, 1.0)
    return out


def test_fdr_equals_scipy_and_the_definition(fresh_seed):
    p = np.random.default_rng(fresh_seed).uniform(size=57) ** 2
    np.testing.assert_allclose(coupling.false_discovery(p), scipy.stats.false_discovery_control(p), rtol=1e-12)
    np.testing.assert_allclose(coupling.false_discovery(p), _benjamini_hochberg(p), rtol=1e-12)
    harmonic = np.sum(1.0 / np.arange(1, 58))
    np.testing.assert_allclose(coupling.false_discovery(p, "by"), np.minimum(_benjamini_hochberg(p) * harmonic, 1),
                               rtol=1e-12)


def test_rank_biserial_matches_its_definition(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    a, b = rng.normal(0.5, 1, 15), rng.normal(0, 1, 40)
    u, effect, p = coupling.rank_biserial(a, b)
    pairs = (a[:, None] > b[None, :]).mean() - (a[:, None] < b[None, :]).mean()
    assert effect == pytest.approx(pairs, abs=1e-12)
    assert p == pytest.approx(scipy.stats.mannwhitneyu(a, b).pvalue)


def test_an_empty_group_makes_the_test_undefined_not_insignificant():
    result = coupling.coupling_test(np.arange(10.0), np.zeros(10, bool), np.ones(10))
    assert (result.p_value, result.p_permutation, result.n_boundary) == (1.0, 1.0, 0)  # p = 1 (METHODS.md) ...
    assert np.isnan(result.effect) and not result.defined and result.direction == "undefined"  # ... but undefined
    assert "no boundary units" in result.reason
    result = coupling.coupling_test(np.arange(10.0), np.ones(10, bool))
    assert result.p_value == 1.0 and "no interior units" in result.reason
    assert coupling.coupling_test(np.arange(10.0), np.arange(10) < 3).defined
    nothing = coupling.coupling_test(np.full(10, np.nan), np.arange(10) < 3, np.arange(10.0))  # degree given
    assert not nothing.defined and nothing.p_permutation == 1.0 and nothing.stratum_boundary == ()
    # FDR over the defined tests only: undefined ones stay null and do not count as tests
    p = np.array([0.01, np.nan, 0.04, 0.03, np.nan])
    q = coupling.false_discovery(p)
    assert np.isnan(q[[1, 4]]).all()
    np.testing.assert_allclose(q[[0, 2, 3]], scipy.stats.false_discovery_control([0.01, 0.04, 0.03]), rtol=1e-12)


def _stratified_permutations(amplification, is_boundary, degree, n_permutations, seed):
    """(p, boundary rank sum of each permutation) by the definition, one permutation at a time: within every degree
    bin the labels shuffled by rng.permutation, the rank-biserial effect recomputed by scipy's Mann-Whitney U."""
    rng = np.random.default_rng(seed)
    strata = coupling.degree_strata(degree)
    ranks = scipy.stats.rankdata(amplification)
    _, effect, _ = coupling.rank_biserial(amplification[is_boundary], amplification[~is_boundary])
    extreme, sums = 0, []
    for _ in range(n_permutations):
        labels = is_boundary.copy()
        for stratum in np.unique(strata):
            members = np.flatnonzero(strata == stratum)
            labels[members] = rng.permutation(is_boundary[members])
        _, permuted, _ = coupling.rank_biserial(amplification[labels], amplification[~labels])
        extreme += abs(permuted) >= abs(effect) - 1e-12
        sums.append(ranks[labels].sum())
    return (1 + extreme) / (1 + n_permutations), np.array(sums)


def test_the_permutation_p_is_the_one_of_its_definition_draw_for_draw(fresh_seed, monkeypatch):
    """The vectorised rank sums (in chunks) make the same draws as shuffling each stratum's labels permutation by
    permutation: the same rank sum in every permutation and the same p, ties and a chunk boundary included."""
    rng = np.random.default_rng(fresh_seed)
    monkeypatch.setattr(coupling, "PERMUTATION_CHUNK", 37)  # 150 permutations: four full chunks and a partial one
    for n_units in (23, 90):
        amplification = np.round(rng.normal(size=n_units), 1)  # ties: average ranks
        is_boundary = rng.random(n_units) < 0.3
        degree = rng.integers(1, 12, n_units).astype(float)
        seed = int(rng.integers(0, 2**31))
        p, sums = _stratified_permutations(amplification, is_boundary, degree, 150, seed)
        result = coupling.coupling_test(amplification, is_boundary, degree, n_permutations=150, seed=seed)
        assert result.p_permutation == p
        np.testing.assert_array_equal(coupling._permuted_rank_sums(
            scipy.stats.rankdata(amplification), is_boundary, coupling.degree_strata(degree), 150,
            np.random.default_rng(seed)), sums)


def test_unit_amplification_columns(fresh_seed):
    jacobian = np.random.default_rng(fresh_seed).normal(size=(5, 5))
    amplification = coupling.unit_amplification(jacobian)
    assert amplification["log_column_norm"][2] == pytest.approx(np.log(np.linalg.norm(jacobian[:, 2])))
    assert amplification["row_norm"][1] == pytest.approx(np.linalg.norm(jacobian[1]))
    assert amplification["deviation_column_norm"][0] == pytest.approx(np.linalg.norm(jacobian[:, 0] - np.eye(5)[0]))


def _synthetic_study(rng, gains):
    """Communities from planted activations, then one Jacobian per layer with the given boundary gains."""
    activations, _ = planted_activations(rng, n_communities=4, size=25, n_boundary=20)
    # k = 30 (the default) reaches past a boundary unit's few siblings into both of its communities; at k = 12
    # the sampling noise shared by all units of one community tipped the nearest 12 towards one side, and about
    # 1 seed in 30 found fewer than 4 boundary units (measured over 200 seeds).
    edges = topology.signed_graph(topology.correlation_matrix(activations), "knn", k=30)
    gamma = topology.scan_gamma(edges, seeds=(0, 1, 2)).gamma
    membership = topology.signed_leiden(edges, gamma, seed=0)
    participation, _ = topology.participation_coefficient(edges, membership)
    is_boundary = topology.boundary_units(participation)
    degree = topology.unit_degree(edges)
    results = []
    for gain in gains:
        jacobian = jacobian_with_boundary_gain(rng, is_boundary, gain)
        results.append(coupling.coupling_test(coupling.unit_amplification(jacobian)["log_column_norm"],
                                              is_boundary, degree, n_permutations=300, seed=1))
    return results, is_boundary


def test_planted_amplification_and_suppression_are_found_with_their_signs(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    gains = [1.4, 0.6, 1.5, 0.7, 1.3, 0.5]
    results, is_boundary = _synthetic_study(rng, gains)
    assert 4 <= is_boundary.sum() <= 40
    assert is_boundary[-20:].mean() > 4 * is_boundary[:-20].mean()  # enriched in the 20 planted mixers
    q = coupling.false_discovery([r.p_value for r in results])
    assert np.all(q < 0.05)
    assert [r.direction for r in results] == ["amplified" if g > 1 else "suppressed" for g in gains]


def test_null_model_flags_almost_nothing(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    results, _ = _synthetic_study(rng, [1.0] * 20)
    q = coupling.false_discovery([r.p_value for r in results])
    # BH at 5% over 20 true nulls: >= 1 discovery in 5.0% of draws, >= 2 in 0.47%, >= 3 in 0.04% (simulated,
    # 400,000 draws of 20 uniform p-values); <= 1 failed 2 fresh seeds in 360
    assert np.sum(q < 0.05) <= 2
    assert np.mean([r.p_permutation for r in results]) > 0.2


def test_family_decisions_are_bh_over_the_defined_tests_only(fresh_seed):
    """q against a step-up Benjamini-Hochberg written here from its definition (q_(i) = min_{j >= i} m p_(j) / j),
    over the defined tests only; the decision on the second p; undefined tests get None."""
    from resdyn.coupling import SIGNIFICANCE, family_decisions

    rng = np.random.default_rng(fresh_seed)
    p = rng.uniform(0, 0.2, size=40)
    decided_on = rng.uniform(0, 0.1, size=40)
    defined = rng.uniform(size=40) > 0.2

    def bh(values):
        order = np.argsort(values)
        m = len(values)
        adjusted = np.minimum.accumulate((np.asarray(values)[order] * m / np.arange(1, m + 1))[::-1])[::-1]
        out = np.empty(m)
        out[order] = np.minimum(adjusted, 1.0)
        return out

    decisions = family_decisions(p, defined, decided_on=decided_on)
    expected_q, expected_decided = bh(p[defined]), bh(decided_on[defined])
    got = [d for d, known in zip(decisions, defined) if known]
    np.testing.assert_allclose([d["q_value"] for d in got], expected_q, rtol=1e-12)
    assert [d["significant"] for d in got] == [bool(q < SIGNIFICANCE) for q in expected_decided]
    assert all(d == {"q_value": None, "q_value_by": None, "q_value_decided": None, "significant": None}
               for d, known in zip(decisions, defined) if not known)
    assert all(d["q_value_by"] >= d["q_value"] for d in got)  # BY pays the dependence factor sum 1/i >= 1
