"""The claims' statistics against closed forms, and their verdicts on checkpoints built to hold or fail each claim."""

import numpy as np
import pytest
import scipy.stats

from resdyn import claims


def test_bootstrap_interval_of_a_mean_matches_the_normal_theory_interval(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    values = rng.normal(3.0, 2.0, 400)
    estimate = claims.bootstrap(np.mean, values, n=4000, seed=fresh_seed)
    half_width = 1.96 * values.std(ddof=1) / np.sqrt(len(values))
    assert estimate.value == pytest.approx(values.mean())
    assert estimate.low == pytest.approx(values.mean() - half_width, abs=0.15 * half_width)
    assert estimate.high == pytest.approx(values.mean() + half_width, abs=0.15 * half_width)


def test_slope_equals_scipy_linregress(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    x, y = rng.uniform(size=30), rng.normal(size=30)
    assert claims.slope(x, y) == pytest.approx(scipy.stats.linregress(x, y).slope, rel=1e-10)
    assert np.isnan(claims.slope(np.ones(5), y[:5]))


def test_side_gives_the_four_verdicts():
    assert claims.side(claims.Estimate(0.8, 0.7, 0.9), 0.5, True) == "holds"
    assert claims.side(claims.Estimate(0.3, 0.2, 0.4), 0.5, True) == "does not hold"
    assert claims.side(claims.Estimate(0.55, 0.4, 0.7), 0.5, True) == "undecided"
    assert claims.side(claims.Estimate(-0.3, -0.5, -0.1), 0.0, False) == "holds"
    assert claims.side(claims.Estimate(float("nan")), 0.0, False) == "not testable"
    assert claims.side(None, 0.0, False) == "not testable"
    assert claims.side(claims.Estimate(3.0), 2.0, True) == "holds"  # no interval: the value decides
    assert claims.side(claims.bootstrap(np.mean, np.array([3.0])), 2.0, True) == "undecided"  # no interval possible
    assert claims.markdown_cell("dep/||J - I||_F") == "dep/\\|\\|J - I\\|\\|_F"


def _checkpoint(rng, *, henrici_start, henrici_end, complex_fraction, ranks, effects, significant, kinds):
    n = len(kinds)
    depth = np.arange(n)
    jitter = 0.01 * rng.normal(size=n) if henrici_start != henrici_end else np.zeros(n)  # a flat one stays flat
    return claims.CheckpointData(
        depth=depth, henrici=np.linspace(henrici_start, henrici_end, n) + jitter,
        complex_fraction=np.full(n, complex_fraction), operator_type=np.asarray(kinds),
        cumulative_rank=np.asarray(ranks, float), surgery_full_depth={0.0: ranks[0] * 0.9, 1.0: ranks[-1]},
        coupling_effect=np.asarray(effects, float), coupling_significant=np.asarray(significant), d_model=64)


def test_verdicts_on_checkpoints_built_to_hold_the_paper_and_a_null_built_to_fail_it(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    n = 24
    kinds = ["rotational_non_normal"] * 12 + ["near_symmetric"] * 12
    trained = _checkpoint(rng, henrici_start=0.9, henrici_end=0.2, complex_fraction=0.95,
                          ranks=np.geomspace(60, 3, n), significant=[True] * 10 + [False] * 14, kinds=kinds,
                          effects=np.r_[-0.3 - 0.05 * rng.uniform(size=12), 0.3 + 0.05 * rng.uniform(size=12)])
    null = _checkpoint(rng, henrici_start=0.3, henrici_end=0.3, complex_fraction=0.4,
                       ranks=np.linspace(62, 58, n), significant=[False] * n, kinds=["near_symmetric"] * n,
                       effects=0.02 * rng.normal(size=n))
    verdicts = {claim.key: claim.verdict for claim in claims.evaluate(null, trained)}
    assert verdicts["early_rotation"] == "holds"
    assert verdicts["nonnormality_gradient"] == "holds"
    assert verdicts["late_near_symmetric"] == "holds"
    assert verdicts["init_near_symmetric"] == "holds"
    assert verdicts["training_adds_rotation"] == "holds"
    assert verdicts["cumulative_bottleneck"] == "holds"  # 60 -> 3
    assert verdicts["bottleneck_learned"] == "holds"  # null keeps 58
    assert verdicts["surgery_dissolves"] == "holds"  # alpha = 0 keeps 0.9 of the one-layer rank
    assert verdicts["coupling_near_symmetric"] == "holds" and verdicts["coupling_rotational_non_normal"] == "holds"
    assert verdicts["coupling_absent_at_init"] == "holds" and verdicts["coupling_learned"] == "holds"

    # swapped roles: the untrained-looking checkpoint as "trained" fails the learned claims
    swapped = {claim.key: claim.verdict for claim in claims.evaluate(trained, null)}
    assert swapped["nonnormality_gradient"] == "does not hold"  # slope exactly 0: not below 0
    assert swapped["bottleneck_learned"] == "does not hold"
    assert swapped["coupling_learned"] == "does not hold"
    assert swapped["coupling_rotational_non_normal"] == "not testable"  # no such sublayer in that checkpoint
    assert swapped["coupling_absent_at_init"] == "does not hold"  # 10 of 24 significant "at init"


def test_ginibre_complex_fraction_matches_its_exact_small_cases_and_a_monte_carlo(fresh_seed):
    assert claims.ginibre_complex_fraction(1) == pytest.approx(0.0, abs=1e-12)  # a real 1 x 1 matrix
    # n = 2: E_2 = sqrt(2) real eigenvalues (Edelman, Kostlan & Shub 1994)
    assert claims.ginibre_complex_fraction(2) == pytest.approx(1 - 2 ** 0.5 / 2, rel=1e-12)
    rng = np.random.default_rng(fresh_seed)
    n, trials = 48, 400
    fractions = [np.mean(np.abs(np.linalg.eigvals(rng.normal(size=(n, n))).imag) > 1e-9) for _ in range(trials)]
    standard_error = np.std(fractions) / np.sqrt(trials)
    assert np.mean(fractions) == pytest.approx(claims.ginibre_complex_fraction(n), abs=5 * standard_error)


def test_fisher_knn_correlation_matches_simulated_independent_units(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    n, d, k = 128, 300, 20
    x = rng.normal(size=(n, d))
    correlation = np.abs(np.corrcoef(x, rowvar=False))
    np.fill_diagonal(correlation, 0.0)
    simulated = np.median(np.sort(correlation, axis=1)[:, -k:])
    assert claims.fisher_knn_correlation(n, d, k) == pytest.approx(simulated, rel=0.05)


def test_noise_level_of_the_knn_graph_tells_noise_from_structure(fresh_seed):
    from resdyn import topology

    from ..synthetic import planted_activations

    rng = np.random.default_rng(fresh_seed)
    n, d, k = 150, 120, 15
    noise_level = claims.noise_knn_correlation(n, d, k)
    assert noise_level > claims.fisher_knn_correlation(n, d, k) * 0.9  # the union adds weaker one-sided edges

    def median_edge(x):
        return np.median(np.abs(topology.signed_graph(topology.correlation_matrix(x), "knn", k=k).weight))
    assert median_edge(rng.normal(size=(n, d))) == pytest.approx(noise_level, rel=0.05)  # other draws, same level
    planted, _ = planted_activations(rng, n_communities=4, size=30, n_observations=n)
    assert median_edge(planted) > 1.5 * noise_level
    assert np.isnan(claims.noise_knn_correlation(n, d, 0))  # not a kNN graph: no level to compare with
