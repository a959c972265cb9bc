"""Rules v5's readings and decisions, each on inputs built to show it (and, for the surgery, on Gemma's kept ones)."""

from pathlib import Path

import numpy as np
import pytest

from resdyn import claims

from .test_claims import _checkpoint

STUDY = Path(__file__).resolve().parents[2] / "docs" / "study"


def _pair(rng, n=24, **trained):
    kinds = ["other"] * n
    null = _checkpoint(rng, asymmetry_start=0.7, asymmetry_end=0.7, rotation=0.6, ranks=np.linspace(62, 58, n),
                       significant=[False] * n, kinds=kinds, effects=np.zeros(n))
    made = {"asymmetry_start": 0.7, "asymmetry_end": 0.6, "rotation": 0.4, "ranks": np.geomspace(60, 3, n),
            "significant": [False] * n, "kinds": kinds, "effects": np.zeros(n), **trained}
    return null, _checkpoint(rng, **made)


def test_late_layers_near_symmetric_needs_the_absolute_bound_and_the_contrast_with_early_layers(fresh_seed):
    """0.1 below the null model everywhere (v4: holds) is not "late layers near-symmetric": the asymmetry must be
    below 1/(2 sqrt 2) late and fall from the early layers to the late ones."""
    rng = np.random.default_rng(fresh_seed)
    null, flat = _pair(rng, asymmetry_start=0.6, asymmetry_end=0.6)
    judged = {c.key: c for c in claims.evaluate(null, flat)}
    assert judged["late_near_symmetric@relative"].verdict == "holds"
    assert judged["late_near_symmetric"].verdict == "does not hold"
    assert "absolute (< 1/(2 sqrt 2)): does not hold" in judged["late_near_symmetric"].why
    null, falling = _pair(rng, asymmetry_start=0.7, asymmetry_end=0.1)
    judged = {c.key: c for c in claims.evaluate(null, falling)}
    assert judged["late_near_symmetric"].verdict == "holds", judged["late_near_symmetric"].why
    assert judged["late_near_symmetric@late_minus_early"].effect.value < -0.3
    null, low_everywhere = _pair(rng, asymmetry_start=0.2, asymmetry_end=0.2)
    judged = {c.key: c for c in claims.evaluate(null, low_everywhere)}  # symmetric early too: not a late property
    assert judged["late_near_symmetric@absolute"].verdict == "holds"
    assert judged["late_near_symmetric"].verdict == "does not hold"


def test_the_surgery_guard_comes_before_the_ordering_check(fresh_seed):
    """Gemma's v4 bug: LAPACK's reading 'held' at 0.507 only because its null model rescues 0.961; guarded first it
    is undecided, and the polar reading's 0.431 decides: does not hold (v4: undecided, ordering-dependent)."""
    rng = np.random.default_rng(fresh_seed)
    null, trained = _pair(rng)
    first, last = trained.cumulative["effective_rank"][0], trained.cumulative["effective_rank"][-1]
    null_first, null_last = null.cumulative["effective_rank"][0], null.cumulative["effective_rank"][-1]
    for data, share_polar, share_lapack, top, bottom in ((trained, 0.431, 0.507, first, last),
                                                        (null, 0.96, 0.961, null_first, null_last)):
        data.surgery_full_depth[("polar-normal", 0.0, "effective_rank")] = bottom + share_polar * (top - bottom)
        data.surgery_full_depth[("lapack-default", 0.0, "effective_rank")] = bottom + share_lapack * (top - bottom)
    judged = {c.key: c for c in claims.evaluate(null, trained)}
    assert judged["surgery_dissolves@lapack-default/effective_rank"].verdict == "undecided"
    assert judged["surgery_dissolves"].verdict == "does not hold"
    log_share = judged["surgery_dissolves@log_compression"].trained.value
    rank_0 = last + 0.431 * (first - last)
    assert log_share == pytest.approx((np.log(rank_0) - np.log(last)) / (np.log(first) - np.log(last)), rel=1e-12)


def test_gemmas_kept_inputs_give_a_rescue_that_does_not_hold():
    from resdyn.dagster_project.study.claims import checkpoint_data
    from resdyn.dagster_project.study.claims_inputs import load_claims_inputs

    data, _ = checkpoint_data(load_claims_inputs(STUDY / "gemma3-270m" / "inputs", "gemma3-270m"))
    judged = {c.key: c for c in claims.evaluate(data["init"], data["trained"])}
    assert judged["surgery_dissolves"].verdict == "does not hold"
    assert judged["surgery_dissolves"].trained.value == pytest.approx(0.431, abs=0.001)


def test_strongly_non_normal_sublayers_are_typed_by_henrici_against_the_null_model(fresh_seed):
    """A sublayer as far from normal as the null model's (Henrici within 0.05 of it) is strongly non-normal, one
    much nearer normal is not; with every sublayer of the type, the community contrast is with the null model."""
    rng = np.random.default_rng(fresh_seed)
    null, trained = _pair(rng)
    null.measures["henrici_rel_j_minus_i"] = np.full(24, 0.9)
    trained.measures["henrici_rel_j_minus_i"] = np.r_[np.full(12, 0.88), np.full(12, 0.5)]
    types = claims.operator_types.operator_types(trained, null)
    assert types["strongly_non_normal"].tolist() == [True] * 12 + [False] * 12
    trained.coupling_effect = np.where(types["strongly_non_normal"], -0.3, 0.0) + 0.01 * rng.normal(size=24)
    judged = {c.key: c for c in claims.evaluate(null, trained)}
    assert judged["coupling_strongly_non_normal"].verdict == "holds", judged["coupling_strongly_non_normal"].why
    trained.measures["henrici_rel_j_minus_i"] = np.full(24, 0.88)
    for data in (null, trained):
        data.n_communities, data.community_significant = np.full(24, 8), np.zeros(24, bool)
    null.community_rho, trained.community_rho = 0.02 * rng.normal(size=24), -0.5 + 0.02 * rng.normal(size=24)
    community = {c.key: c for c in claims.evaluate(null, trained)}["community_coupling_strongly_non_normal"]
    assert "trained - null" in community.why and community.effect.value == pytest.approx(
        np.mean(trained.community_rho - null.community_rho))


def test_the_noise_gate_says_why_and_spares_a_verdict_the_null_models_graphs_cannot_change(fresh_seed):
    """Noise graphs in the null model only: 'coupling learned' with no trained sublayer significant does not hold
    whatever the null model shows (v4: undecided); the absence at init, which rests on the null model's graphs,
    is undecided and its why says so."""
    rng = np.random.default_rng(fresh_seed)
    null, trained = _pair(rng)
    for data, ratio in ((null, 1.0), (trained, 3.0)):
        data.d_model, data.n_observations, data.graph_k = 40, 128, 10
        data.median_edge_correlation = ratio * claims.noise_knn_correlation(128, 40, 10)
    judged = {c.key: c for c in claims.evaluate(null, trained)}
    assert judged["coupling_learned"].verdict == "does not hold", judged["coupling_learned"].why
    assert judged["coupling_absent_at_init"].verdict == "undecided"
    assert "independent-unit noise level" in judged["coupling_absent_at_init"].why
    assert "it would have been 'holds'" in judged["coupling_absent_at_init"].why
    assert "minimum detectable effect" in judged["coupling_learned"].why


def test_the_minimum_detectable_effect_is_where_the_family_reaches_its_power():
    sizes = [(40, 120)] * 20
    effect = claims.power.minimum_detectable_unit_effect(sizes, 1000)
    power = claims.power.coupling_power.bh_family_power
    assert power(sizes, effect, n_permutations=1000, seed=0).power >= 0.8
    assert power(sizes, effect - 0.01, n_permutations=1000, seed=0).power < 0.8


def test_an_operator_arm_without_variation_is_not_tested_and_holm_covers_the_rest(fresh_seed):
    """Gemma's asymmetry varies by 0.003 across sublayers: its arm is not testable; the rotation arm alone decides,
    with its Holm p (one arm: the raw p)."""
    rng = np.random.default_rng(fresh_seed)
    n = 36
    null, trained = _pair(rng, n=n)
    for data in (null, trained):
        data.n_communities, data.community_significant = np.full(n, 12), np.zeros(n, bool)
    null.community_rho = 0.05 * rng.normal(size=n)
    trained.measures["asymmetry_index"] = 0.704 + 0.003 * rng.uniform(-1, 1, n)
    trained.measures["rotation_share"] = rng.uniform(0.2, 0.6, n)
    trained.community_rho = 0.6 - 2.0 * trained.measures["rotation_share"] + 0.05 * rng.normal(size=n)
    claim = {c.key: c for c in claims.evaluate(null, trained)}["community_coupling_operator_dependence"]
    assert "asymmetry_index not testable" in claim.why and claim.verdict == "holds", claim.why
    trained.measures["rotation_share"] = 0.4 + 0.003 * rng.uniform(-1, 1, n)
    claim = {c.key: c for c in claims.evaluate(null, trained)}["community_coupling_operator_dependence"]
    assert claim.verdict == "not testable"
