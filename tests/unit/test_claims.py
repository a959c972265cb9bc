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


def test_spearman_with_permutation_matches_scipy(fresh_seed):
    """rho is scipy's; the permutation p agrees with scipy.stats.permutation_test's two-sided p (same statistic,
    both Monte Carlo), and a strong monotone trend gets p near its floor 1 / (1 + permutations)."""
    rng = np.random.default_rng(fresh_seed)
    x, y = np.arange(20.0), rng.normal(size=20)
    rho, p = claims.spearman_with_permutation(x, y, n_permutations=4000, seed=fresh_seed)
    assert rho == pytest.approx(scipy.stats.spearmanr(x, y).statistic, rel=1e-12)
    reference = scipy.stats.permutation_test((y,), lambda v: scipy.stats.spearmanr(x, v).statistic,
                                             permutation_type="pairings", n_resamples=4000, random_state=fresh_seed)
    assert p == pytest.approx(reference.pvalue, abs=0.04)
    _, p_trend = claims.spearman_with_permutation(x, x + 0.01 * rng.normal(size=20), n_permutations=999)
    assert p_trend == pytest.approx(1 / 1000)
    assert claims.spearman_with_permutation(x, np.ones(20)) == (pytest.approx(np.nan, nan_ok=True), 1.0)


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


def _checkpoint(rng, *, asymmetry_start, asymmetry_end, rotation, ranks, effects, significant, kinds,
                folds: int = 0, fold_noise: float = 0.0, graph_ratio_units: int = 0, surgery_share: float = 0.9,
                n_boundary: int = 400, n_interior: int = 1200):
    """A checkpoint whose measures follow a linear trend in depth; with ``folds`` its replicates scatter around the
    values by ``fold_noise`` (a sampling spread); ``graph_ratio_units`` > 0: kNN graphs at that many units whose
    median edge sits at 3x the noise level (clearly above it)."""
    n = len(kinds)
    depth = np.arange(n)
    jitter = 0.01 * rng.normal(size=n) if asymmetry_start != asymmetry_end else np.zeros(n)  # a flat one stays flat
    asymmetry = np.linspace(asymmetry_start, asymmetry_end, n) + jitter
    measures = {"asymmetry_index": asymmetry, "henrici_rel_j_minus_i": asymmetry, "rotation_share": np.full(n, rotation),
                "frac_complex": np.full(n, rotation), "henrici_rel_j": asymmetry, "update_size": np.full(n, 0.5),
                "mean_absolute_argument": np.full(n, 0.1)}
    ranks = np.asarray(ranks, float)
    replicates, cumulative_replicates = {}, {}
    if folds:
        replicates = {name: values + fold_noise * rng.normal(size=(folds, n)) for name, values in measures.items()}
        cumulative_replicates = {"effective_rank": ranks * np.exp(fold_noise * rng.normal(size=(folds, n)))}
    data = claims.CheckpointData(
        depth=depth, measures=measures, operator_type=np.asarray(kinds),
        cumulative={"effective_rank": ranks, "participation_ratio": ranks, "stable_rank": ranks},
        surgery_full_depth={(ordering, alpha, "effective_rank"): rank for ordering in ("lapack-default", "polar-normal")
                            for alpha, rank in ((0.0, ranks[-1] + surgery_share * (ranks[0] - ranks[-1])),
                                                (1.0, ranks[-1]))},
        coupling_effect=np.asarray(effects, float), coupling_significant=np.asarray(significant), d_model=64,
        replicates=replicates, cumulative_replicates=cumulative_replicates,
        n_boundary=np.full(n, n_boundary), n_interior=np.full(n, n_interior))
    if graph_ratio_units:
        data.d_model, data.n_observations, data.graph_k = graph_ratio_units, 128, 10
        data.median_edge_correlation = 3 * claims.noise_knn_correlation(128, graph_ratio_units, 10)
    return data


def test_verdicts_on_checkpoints_built_to_hold_the_paper_and_a_null_built_to_fail_it(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    n = 24
    kinds = ["rotation_dominated"] * 12 + ["near_symmetric"] * 12
    trained = _checkpoint(rng, asymmetry_start=0.9, asymmetry_end=0.0, rotation=0.6,
                          ranks=np.geomspace(60, 3, n), significant=[True] * 10 + [False] * 14, kinds=kinds,
                          effects=np.r_[-0.3 - 0.05 * rng.uniform(size=12), 0.3 + 0.05 * rng.uniform(size=12)])
    null = _checkpoint(rng, asymmetry_start=0.3, asymmetry_end=0.3, rotation=0.3, surgery_share=0.05,
                       ranks=np.linspace(62, 58, n), significant=[False] * n, kinds=["near_symmetric"] * n,
                       effects=0.02 * rng.normal(size=n))
    # the sublayers less asymmetric than the null model's (by 0.05) amplify their boundary units, the others (more
    # rotation than the null model's) suppress them: the operator types rules v4 compare
    near = trained.measures["asymmetry_index"] < 0.3 - claims.MIN_SHARE_EFFECT
    trained.coupling_effect = np.where(near, 0.3, -0.3) + 0.05 * rng.uniform(size=n)
    verdicts = {claim.key: claim.verdict for claim in claims.evaluate(null, trained)}
    assert verdicts["early_rotation"] == "holds"
    assert verdicts["spectral_gradient_attn"] == "holds" and verdicts["spectral_gradient_mlp"] == "holds"
    assert verdicts["late_near_symmetric"] == "holds"
    assert verdicts["init_near_symmetric"] == "holds"
    assert verdicts["training_adds_rotation"] == "holds"
    assert verdicts["cumulative_bottleneck"] == "holds"  # 60 -> 3
    assert verdicts["bottleneck_learned"] == "holds"  # null keeps 58
    assert verdicts["surgery_dissolves"] == "holds"  # alpha = 0 restores 0.9 of the lost rank
    assert verdicts["surgery_installed_by_training"] == "holds"  # the null model's rescue: 0.05
    assert verdicts["coupling_near_symmetric"] == "holds" and verdicts["coupling_strongly_non_normal"] == "holds"
    assert verdicts["coupling_absent_at_init"] == "holds" and verdicts["coupling_learned"] == "holds"
    # the Henrici reading of the same data is reported beside the primary one
    assert verdicts["late_near_symmetric@henrici"] == "holds"
    assert {claim.key for claim in claims.evaluate(null, trained) if not claim.primary} >= {
        "early_rotation@frac_complex", "early_rotation@absolute", "spectral_gradient_attn@henrici",
        "init_near_symmetric@henrici", "late_near_symmetric@absolute", "cumulative_bottleneck@absolute"}
    assert all(claim.why for claim in claims.evaluate(null, trained))  # every verdict says why

    # swapped roles: the untrained-looking checkpoint as "trained" fails the learned claims
    swapped = {claim.key: claim.verdict for claim in claims.evaluate(trained, null)}
    assert swapped["spectral_gradient_attn"] == "not testable"  # a flat measure has no rank correlation
    assert swapped["bottleneck_learned"] == "does not hold"
    assert swapped["coupling_learned"] == "does not hold"
    assert swapped["coupling_strongly_non_normal@rotation_dominated"] == "not testable"  # no such sublayer in that checkpoint
    assert swapped["coupling_absent_at_init"] == "does not hold"  # 10 of 24 significant "at init"


def test_sampling_intervals_decide_and_noise_graphs_leave_topology_undecided(fresh_seed):
    """With fold replicates the verdict needs the samples' interval on its side too: a late asymmetry 0.2 below the
    null model's holds with a small sampling spread and is undecided with a large one; topology verdicts on
    graphs at the independent-unit noise level are undecided, above it they stand."""
    rng = np.random.default_rng(fresh_seed)
    n = 24
    kinds = ["rotation_dominated"] * 12 + ["near_symmetric"] * 12
    effects = np.r_[-0.3 - 0.05 * rng.uniform(size=12), 0.3 + 0.05 * rng.uniform(size=12)]

    def pair(fold_noise, graph_units):
        common = dict(ranks=np.geomspace(60, 3, n), significant=[True] * 10 + [False] * 14, kinds=kinds,
                      effects=effects, folds=8, fold_noise=fold_noise, graph_ratio_units=graph_units)
        trained = _checkpoint(rng, asymmetry_start=0.30, asymmetry_end=0.30, rotation=0.6, **common)
        null = _checkpoint(rng, asymmetry_start=0.2, asymmetry_end=0.5, rotation=0.3, **{
            **common, "significant": [False] * n, "effects": 0.02 * rng.normal(size=n)})
        # the first half far from normal (Henrici 0.8, as the null model's random maps): strongly non-normal
        trained.measures["henrici_rel_j_minus_i"] = np.r_[np.full(12, 0.8), np.full(12, 0.3)]
        null.measures["henrici_rel_j_minus_i"] = np.full(n, 0.8)
        return {claim.key: claim for claim in claims.evaluate(null, trained)}
    quiet = pair(0.001, 40)
    assert quiet["late_near_symmetric@relative"].verdict == "holds"
    assert quiet["late_near_symmetric@relative"].effect.sample_low is not None
    noisy = pair(0.5, 40)
    assert noisy["late_near_symmetric@relative"].verdict == "undecided"
    assert noisy["cumulative_bottleneck"].effect.sample_high > noisy["cumulative_bottleneck"].effect.value
    assert quiet["coupling_near_symmetric"].verdict == "holds"
    at_noise = pair(0.001, 40)
    for data_key in ("coupling_near_symmetric", "coupling_strongly_non_normal", "coupling_learned"):
        assert at_noise[data_key].verdict == "holds"
    trained = _checkpoint(rng, asymmetry_start=0.3, asymmetry_end=0.3, rotation=0.6, ranks=np.geomspace(60, 3, n),
                          significant=[True] * 10 + [False] * 14, kinds=kinds, effects=effects)
    trained.d_model, trained.n_observations, trained.graph_k = 40, 128, 10
    trained.median_edge_correlation = 1.05 * claims.noise_knn_correlation(128, 40, 10)  # 1.05x: noise
    null = _checkpoint(rng, asymmetry_start=0.2, asymmetry_end=0.5, rotation=0.3, ranks=np.linspace(62, 58, n),
                       significant=[False] * n, kinds=["near_symmetric"] * n, effects=0.02 * rng.normal(size=n))
    gated = {claim.key: claim for claim in claims.evaluate(null, trained)}
    assert gated["coupling_near_symmetric"].verdict == "undecided"
    assert "cannot carry the test" in gated["coupling_near_symmetric"].note


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


def test_the_quantization_control_is_the_claims_with_the_quantized_null_model_in_the_null_models_place(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    n = 24
    kinds = ["rotation_dominated"] * 12 + ["near_symmetric"] * 12
    trained = _checkpoint(rng, asymmetry_start=0.9, asymmetry_end=0.1, rotation=0.6, ranks=np.geomspace(60, 3, n),
                          significant=[False] * n, kinds=kinds, effects=0.02 * rng.normal(size=n))
    null = _checkpoint(rng, asymmetry_start=0.2, asymmetry_end=0.2, rotation=0.3, ranks=np.linspace(62, 58, n),
                       significant=[False] * n, kinds=["near_symmetric"] * n, effects=0.02 * rng.normal(size=n))
    quantized = _checkpoint(rng, asymmetry_start=0.25, asymmetry_end=0.25, rotation=0.35, ranks=np.linspace(61, 57, n),
                            significant=[False] * n, kinds=["near_symmetric"] * n, effects=0.02 * rng.normal(size=n))
    plain = claims.evaluate(null, trained)
    controlled = {c.key: c for c in claims.with_quantization_control(plain, quantized, trained)}
    assert [c.key for c in plain] == list(controlled)
    assert controlled["init_near_symmetric"].quantized_null_model.value == pytest.approx(0.25, abs=0.02)
    assert controlled["init_near_symmetric"].null_model.value == pytest.approx(0.2, abs=0.02)  # unchanged
    assert controlled["training_adds_rotation"].quantized_comparison.value == pytest.approx(0.6 - 0.35)
    assert controlled["bottleneck_learned"].quantized_comparison.value == pytest.approx(57 / 3)
    assert all(c.verdict == p.verdict for c, p in zip(controlled.values(), plain))  # the control decides nothing
    report = claims.ClaimsReport("m", "init", "trained", list(controlled.values()), [], "init-quantized")
    assert "quantization control" in report.markdown().splitlines()[2]


def test_the_noise_level_beyond_the_simulation_cap_follows_fishers_z(monkeypatch):
    """Above the cap the level is carried over by Fisher's z; it agrees with a full simulation at that n."""
    full = claims.noise_knn_correlation.__wrapped__(600, 80, 10)
    monkeypatch.setattr(claims.references, "NOISE_OBSERVATIONS_CAP", 200)
    assert claims.noise_knn_correlation.__wrapped__(600, 80, 10) == pytest.approx(full, rel=0.05)


def test_differences_between_models_pair_their_folds(fresh_seed):
    """Both models' fold k holds the same windows: when the trained model's replicates move with the null model's
    (shared sampling noise), the paired difference is as precise as the shift itself, where adding the two standard
    errors in quadrature would call a clear gain undecided."""
    rng = np.random.default_rng(fresh_seed)
    n = 24
    kinds = ["rotation_dominated"] * n
    null = _checkpoint(rng, asymmetry_start=0.7, asymmetry_end=0.7, rotation=0.3, ranks=np.linspace(62, 58, n),
                       significant=[False] * n, kinds=kinds, effects=np.zeros(n), folds=8, fold_noise=0.3)
    trained = _checkpoint(rng, asymmetry_start=0.7, asymmetry_end=0.7, rotation=0.4, ranks=np.geomspace(60, 3, n),
                          significant=[False] * n, kinds=kinds, effects=np.zeros(n), folds=8, fold_noise=0.3)
    trained.replicates["rotation_share"] = null.replicates["rotation_share"] + 0.1  # the same noise, shifted
    gain = {c.key: c for c in claims.evaluate(null, trained)}["training_adds_rotation"]
    assert gain.effect.value == pytest.approx(0.1)
    assert gain.effect.sample_low == pytest.approx(0.1) and gain.effect.sample_high == pytest.approx(0.1)
    assert gain.verdict == "holds"


def test_a_gradient_holds_only_on_a_fall_its_intervals_carry():
    """The sign check: rho = +0.5 beside an interval of [-0.3, -0.1] and p = 0.01 is no fall (v3 called it "holds")."""
    fall = claims.Estimate(-0.2, -0.3, -0.1)
    inconsistent = claims.Gradient(claims.Estimate(0.5, sample_low=-0.3, sample_high=-0.1, p_value=0.01), fall)
    assert claims.gradient_verdict(inconsistent, 0.01)[0] != "holds"
    good = claims.Gradient(claims.Estimate(-0.6, -0.8, -0.3, -0.65, -0.55, p_value=0.001), fall)
    assert claims.gradient_verdict(good, 0.006)[0] == "holds"
    assert claims.gradient_verdict(good, 0.2)[0] == "undecided"  # not significant after Holm
    tiny = claims.Gradient(good.rho, claims.Estimate(-0.01, -0.012, -0.008))  # Gemma's 0.01 over depth
    verdict, why = claims.gradient_verdict(tiny, 0.006)
    assert verdict == "does not hold" and "smaller than the minimum" in why


def test_the_gradients_intervals_are_rhos_own(fresh_seed):
    """The bootstrap interval is of Spearman's rho (against scipy.stats.bootstrap's percentile interval of
    scipy.stats.spearmanr over the same pairs) and contains it; the samples' interval is the jackknife of rho itself
    (each fold replicate's rho by scipy), so no printed interval excludes its printed value."""
    rng = np.random.default_rng(fresh_seed)
    n = 40
    kinds = ["rotation_dominated"] * n
    data = _checkpoint(rng, asymmetry_start=0.8, asymmetry_end=0.6, rotation=0.5, ranks=np.geomspace(60, 3, n),
                       significant=[False] * n, kinds=kinds, effects=np.zeros(n), folds=8, fold_noise=0.02)
    data.measures["asymmetry_index"] = data.measures["asymmetry_index"] + 0.05 * rng.normal(size=n)
    gradient = claims.depth_gradient(data, "asymmetry_index", "attn")
    mask = data.sublayer == "attn"
    x, y = data.depth[mask].astype(float), data.measures["asymmetry_index"][mask]
    assert gradient.rho.value == pytest.approx(scipy.stats.spearmanr(x, y).statistic, rel=1e-12)
    reference = scipy.stats.bootstrap((x, y), lambda a, b: scipy.stats.spearmanr(a, b).statistic, paired=True,
                                      vectorized=False, n_resamples=2000, method="percentile", random_state=fresh_seed)
    assert gradient.rho.low == pytest.approx(min(reference.confidence_interval.low, gradient.rho.value), abs=0.08)
    assert gradient.rho.high == pytest.approx(max(reference.confidence_interval.high, gradient.rho.value), abs=0.08)
    replicates = [scipy.stats.spearmanr(x, r[mask]).statistic for r in data.replicates["asymmetry_index"]]
    from resdyn.sampling import jackknife
    interval = jackknife(gradient.rho.value, np.asarray(replicates))
    assert (gradient.rho.sample_low, gradient.rho.sample_high) == pytest.approx((interval.low, interval.high))
    low, high = gradient.rho.bounds()
    assert low <= gradient.rho.value <= high
    slope = scipy.stats.theilslopes(y, x)
    assert gradient.change.value == pytest.approx(slope.slope * np.ptp(x))


def test_holm_matches_its_step_down_definition(fresh_seed):
    """Holm's adjusted p against the step-down procedure run at every level: H_i is rejected at level a iff its
    adjusted p <= a; NaN entries are not tests."""
    rng = np.random.default_rng(fresh_seed)
    p = rng.uniform(0, 0.1, 9)
    p[3] = np.nan
    adjusted = claims.holm(p)
    assert np.isnan(adjusted[3])
    tested = np.flatnonzero(np.isfinite(p))
    for level in np.r_[np.sort(adjusted[tested]) * (1 + 1e-9), 0.01, 0.05]:  # just above each adjusted p
        rejected, m = set(), len(tested)
        for k, index in enumerate(tested[np.argsort(p[tested])]):
            if p[index] * (m - k) > level:
                break
            rejected.add(int(index))
        assert rejected == {int(i) for i in tested if adjusted[i] <= level}


def _rotating_pair(fresh_seed, n: int = 24):
    """(rng, trained, null): a trained model that loses asymmetry and collapses its rank through depth, rotation
    dominated everywhere, and a null model that keeps both (the surgery restores 0.9 of the rank in each)."""
    rng = np.random.default_rng(fresh_seed)
    kinds = ["rotation_dominated"] * n
    trained = _checkpoint(rng, asymmetry_start=0.7, asymmetry_end=0.5, rotation=0.4, ranks=np.geomspace(60, 3, n),
                          significant=[False] * n, kinds=kinds, effects=np.zeros(n))
    null = _checkpoint(rng, asymmetry_start=0.7, asymmetry_end=0.7, rotation=0.6, ranks=np.linspace(62, 58, n),
                       significant=[False] * n, kinds=kinds, effects=np.zeros(n))
    return rng, trained, null


def test_the_surgery_verdict_that_flips_with_the_ordering_is_undecided(fresh_seed):
    _, trained, null = _rotating_pair(fresh_seed)
    verdicts = {c.key: c for c in claims.evaluate(null, trained)}
    assert verdicts["surgery_installed_by_training"].verdict == "does not hold"  # the null model rescues as much
    assert verdicts["surgery_dissolves"].verdict == "undecided" and "null model's" in verdicts["surgery_dissolves"].why
    null.surgery_full_depth[("polar-normal", 0.0, "effective_rank")] = 59.0  # the null model rescues little
    verdicts = {c.key: c for c in claims.evaluate(null, trained)}
    assert verdicts["surgery_dissolves"].verdict == "holds"
    trained.surgery_full_depth[("modulus-ascending", 0.0, "effective_rank")] = 3.0  # restores nothing
    flipped = {c.key: c for c in claims.evaluate(null, trained)}["surgery_dissolves"]
    assert flipped.verdict == claims.UNDECIDED_ORDERING and "modulus-ascending: does not hold" in flipped.why
    del trained.surgery_full_depth[("polar-normal", 0.0, "effective_rank")]
    assert {c.key: c for c in claims.evaluate(null, trained)}["surgery_dissolves"].verdict == "not testable"


def test_no_holds_for_a_trained_value_on_the_wrong_side_of_its_null_models(fresh_seed):
    """Late asymmetry 0.30 is below the absolute bound 0.354, but above a null model at 0.2: the absolute reading is
    undecided (and the relative one, the primary, does not hold)."""
    rng = np.random.default_rng(fresh_seed)
    n = 24
    kinds = ["rotation_dominated"] * n
    trained = _checkpoint(rng, asymmetry_start=0.3, asymmetry_end=0.3, rotation=0.4, ranks=np.geomspace(60, 3, n),
                          significant=[False] * n, kinds=kinds, effects=np.zeros(n))
    null = _checkpoint(rng, asymmetry_start=0.2, asymmetry_end=0.2, rotation=0.6, ranks=np.linspace(62, 58, n),
                       significant=[False] * n, kinds=kinds, effects=np.zeros(n))
    verdicts = {c.key: c for c in claims.evaluate(null, trained)}
    assert verdicts["late_near_symmetric@absolute"].verdict == "undecided"
    assert "not below the null model's" in verdicts["late_near_symmetric@absolute"].why
    assert verdicts["late_near_symmetric"].verdict == "does not hold"
    assert verdicts["early_rotation"].verdict == "does not hold"  # 0.4 against a null model at 0.6


def test_absence_needs_power(fresh_seed):
    """No significant sublayer at init is "absent" only where the tests could have seen the stated effect: with
    1600 units a sublayer it is (power near 1), with 40 it is undecided (no power)."""
    rng = np.random.default_rng(fresh_seed)
    n = 24
    kinds = ["rotation_dominated"] * n

    def verdicts(n_boundary, n_interior):
        trained = _checkpoint(rng, asymmetry_start=0.7, asymmetry_end=0.5, rotation=0.4, ranks=np.geomspace(60, 3, n),
                              significant=[False] * n, kinds=kinds, effects=np.zeros(n), n_boundary=n_boundary,
                              n_interior=n_interior)
        null = _checkpoint(rng, asymmetry_start=0.7, asymmetry_end=0.7, rotation=0.6, ranks=np.linspace(62, 58, n),
                           significant=[False] * n, kinds=kinds, effects=np.zeros(n), n_boundary=n_boundary,
                           n_interior=n_interior)
        return {c.key: c for c in claims.evaluate(null, trained)}
    large, small = verdicts(400, 1200), verdicts(10, 30)
    assert large["coupling_absent_at_init"].verdict == "holds"
    assert large["coupling_learned"].verdict == "does not hold"
    assert small["coupling_absent_at_init"].verdict == claims.UNDECIDED_POWER
    assert small["coupling_learned"].verdict == claims.UNDECIDED_POWER and "power" in small["coupling_learned"].why


def test_the_operator_type_must_set_the_community_coupling(fresh_seed):
    """Communities de-amplified in rotation-dominated sublayers *and* in the others (Gemma's -0.30 against -0.28) do
    not show that the type sets the sign; a coupling that falls with the rotation share does."""
    rng = np.random.default_rng(fresh_seed)
    n = 36
    kinds = np.asarray(["rotation_dominated"] * 28 + ["other"] * 8)
    null = _checkpoint(rng, asymmetry_start=0.7, asymmetry_end=0.7, rotation=0.6, ranks=np.linspace(62, 58, n),
                       significant=[False] * n, kinds=list(kinds), effects=np.zeros(n))
    trained = _checkpoint(rng, asymmetry_start=0.7, asymmetry_end=0.6, rotation=0.4, ranks=np.geomspace(60, 3, n),
                          significant=[False] * n, kinds=list(kinds), effects=np.zeros(n))
    for data in (null, trained):
        data.n_communities = np.full(n, 12)
        data.community_significant = np.zeros(n, bool)
    null.community_rho = 0.05 * rng.normal(size=n)
    # the same sign everywhere, varying only within layers (attn vs mlp) where the operator measures, constant
    # within a layer, cannot follow it: no dependence, exactly
    layer = trained.depth // 2
    trained.measures["rotation_share"] = 0.4 + 0.1 * rng.permutation(np.r_[np.ones(9), -np.ones(9)])[layer]
    trained.measures["asymmetry_index"] = rng.uniform(0.6, 0.7, n // 2)[layer]
    trained.community_rho = -0.6 + 0.05 * np.where(trained.depth % 2 == 0, 1.0, -1.0)
    same = {c.key: c for c in claims.evaluate(null, trained)}
    # some sublayers are as non-normal as the null model's (Henrici), some not: the same rho in both groups
    assert 0 < same["community_coupling_strongly_non_normal"].note.count("of 36") and \
        same["community_coupling_strongly_non_normal"].verdict != "holds"
    assert same["community_coupling_operator_dependence"].verdict == "undecided"
    learned = same["community_coupling_learned"]
    assert learned.verdict == "holds", learned.why  # pooled: strongly present, absent (with power) at init
    null.community_rho = trained.community_rho.copy()  # present at init already
    assert {c.key: c for c in claims.evaluate(null, trained)}["community_coupling_learned"].verdict == "does not hold"
    null.community_rho = 0.05 * rng.normal(size=n)
    trained.measures["rotation_share"] = rng.uniform(0.2, 0.6, n)
    # both operator measures move together, as they do in a model (an asymmetry left at random correlates with the
    # coupling by chance now and then, p < 0.01 for seed 2272991202, which the rule rightly reads as a contradiction)
    trained.measures["asymmetry_index"] = 0.4 + 0.5 * trained.measures["rotation_share"] + 0.01 * rng.normal(size=n)
    trained.community_rho = 0.6 - 2.0 * trained.measures["rotation_share"] + 0.05 * rng.normal(size=n)
    set_by_type = {c.key: c for c in claims.evaluate(null, trained)}
    assert set_by_type["community_coupling_operator_dependence"].verdict == "holds"


def test_the_rules_hash_is_the_one_docs_study_recorded():
    """Rules are fixed in git before they are used: docs/study.md records the hash of the declared rules in force."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "study.md").read_text()
    assert f"rules v{claims.RULES_VERSION} hash of the declared rules: `{claims.rules_hash()}`" in text


def test_the_surgery_prints_the_largest_eigenvector_condition_number_or_that_it_was_not_recorded(fresh_seed):
    """The polar normal part's conditioning: the largest kappa(V) over each model's sublayers and its depth, taken
    from per-sublayer values drawn here, in the surgery's note, the diagnostics and claims.md; inputs kept before
    it was recorded say so instead of printing a number."""
    rng, trained, null = _rotating_pair(fresh_seed)
    n = len(trained.depth)
    note = {c.key: c for c in claims.evaluate(null, trained)}["surgery_dissolves"].note
    assert "trained not recorded" in note and "null model not recorded" in note
    trained.eigenvector_condition = rng.uniform(1.0, 50.0, n)
    trained.eigenvector_condition[rng.integers(n)] = np.nan  # a sublayer without a value is skipped, not fatal
    largest = int(np.nanargmax(trained.eigenvector_condition))
    note = {c.key: c for c in claims.evaluate(null, trained)}["surgery_dissolves"].note
    assert f"trained {trained.eigenvector_condition[largest]:.3g} (depth {largest})" in note
    assert "null model not recorded" in note
    rows = claims.diagnostics(null, trained)
    assert rows[1]["largest_eigenvector_condition"] == np.nanmax(trained.eigenvector_condition)
    assert np.isnan(rows[0]["largest_eigenvector_condition"])
    report = claims.ClaimsReport("m", "init", "trained", claims.evaluate(null, trained), rows)
    assert f"kappa(V) = {np.nanmax(trained.eigenvector_condition):.3g}" in report.markdown()


def test_the_unit_tests_power_uses_the_degree_strata_kept_and_says_which_law_it_used(fresh_seed):
    """Kept strata with boundary shares that differ by degree bin lower the BH family's power and raise its minimum
    detectable effect against the one-stratum law of inputs kept before the strata were recorded; bins of one
    share change nothing."""
    from resdyn.claims.power import unit_family_power

    rng = np.random.default_rng(fresh_seed)
    n = 24
    kinds = ["rotation_dominated"] * n
    data = _checkpoint(rng, asymmetry_start=0.7, asymmetry_end=0.5, rotation=0.4, ranks=np.geomspace(60, 3, n),
                       significant=[False] * n, kinds=kinds, effects=rng.normal(0, 0.05, n),
                       n_boundary=160, n_interior=416)
    power, note = unit_family_power(data)
    assert "over one stratum per test" in note
    even = ((40, 104),) * 4
    data.unit_strata = [even] * n
    assert unit_family_power(data) == (power, note.replace(
        "over one stratum per test: the inputs lack the degree strata, kept before they were recorded",
        "over the degree strata as observed"))
    skewed = ((4, 140), (6, 138), (20, 124), (130, 14))
    data.unit_strata = [skewed] * n
    stratified, stratified_note = unit_family_power(data)
    assert "over the degree strata as observed" in stratified_note and stratified <= power
    detectable = [float(text.rsplit(" ", 1)[-1]) for text in (note, stratified_note)]
    assert detectable[1] > detectable[0] + 0.02
