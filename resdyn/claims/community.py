"""Community-level coupling: by operator type, its dependence on the operator's measures, and its learning."""

from __future__ import annotations

import numpy as np

from .. import coupling_power
from .checkpoint import CheckpointData, noise_gate
from .claim import Claim
from .operator_types import MEANING, operator_types
from .rules import (
    BOOTSTRAP_SEED,
    FAMILY_LEVEL,
    MIN_COMMUNITIES,
    MIN_MEASURE_SPREAD,
    MIN_POWER,
    N_PERMUTATIONS,
    RULES,
    STATED_COMMUNITY_RHO,
    TEST_LEVEL,
    UNDECIDED_POWER,
    rule,
    rule_version,
)
from .statistics import Estimate, bootstrap, finite, group_difference, holm, judged

COMMUNITY_READINGS = (("community_coupling_near_symmetric", "near_symmetric", True),
                      ("community_coupling_strongly_non_normal", "strongly_non_normal", False),
                      ("community_coupling_strongly_non_normal@rotation_dominated", "rotation_dominated", False))


def _mean_rho(data: CheckpointData, mask: np.ndarray | None) -> Estimate | None:
    keep = None if mask is None else mask & np.isfinite(data.community_rho)
    return bootstrap(np.mean, data.community_rho[keep]) if keep is not None and keep.any() else None


def _paired_rho_difference(trained: CheckpointData, null: CheckpointData, mask: np.ndarray) -> Estimate | None:
    """Mean over the masked sublayers of trained - null community rho at the same depth (bootstrap over them)."""
    difference = trained.community_rho - null.community_rho
    keep = mask & np.isfinite(difference)
    return bootstrap(np.mean, difference[keep]) if keep.any() else None


def community_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    """The paper's abstract states the coupling for communities: rho(position, gain) per sublayer
    (resdyn/community_coupling.py). v4: the operator type must set it, so each type (the trained model's, against
    the null model at the same depth) is judged against the other sublayers of the same model, the dependence on
    the operator's measured asymmetry and rotation is tested as a continuous relation across sublayers, and
    "learned" is a sign-free pooled test across sublayers with its power, against the null model's."""
    if trained.community_rho is None or null.community_rho is None:
        return []
    claims = []
    types = operator_types(trained, null)
    for key, kind, amplified in COMMUNITY_READINGS:
        meaning = MEANING[kind]
        of_kind = None if types is None else types.get(kind)
        words = kind.replace("_", "-")
        statement = (f"In {words} sublayers, communities in boundary positions are "
                     f"{'amplified' if amplified else 'de-amplified'}")
        measure = f"mean Spearman rho(community participation, log ||J P_C||_F / ||P_C||_F) over {kind} sublayers"
        others = None if of_kind is None else ~of_kind & np.isfinite(trained.community_rho)
        if of_kind is not None and others is not None and not others.any():
            # no other group to contrast with: the null model over the same sublayers is the comparison
            difference, label = _paired_rho_difference(trained, null, of_kind), f"trained - null mean rho, {kind}"
            against = "trained - null over the same sublayers (paired by depth): every sublayer is of the type"
        else:
            difference = None if of_kind is None else group_difference(trained.community_rho, of_kind, ~of_kind)
            label, against = f"trained mean rho, {kind} - other sublayers", "minus that over the other sublayers"
        verdict, why = judged(label, difference, RULES[key].bound, amplified)
        if of_kind is not None and not of_kind.any():
            why = f"no trained sublayer is {words} ({meaning})"
        # where the contrast is with the null model over the same sublayers, its graphs enter the effect too
        paired = of_kind is not None and others is not None and not others.any()
        verdict, why, note = noise_gate(verdict, why, *((null, trained) if paired else (trained,)))
        rest = None if of_kind is None else _mean_rho(trained, ~of_kind)
        count = 0 if of_kind is None else int(of_kind.sum())
        claims.append(Claim(
            key, statement, f"{measure} ({meaning}), {against}; the null model over the same sublayers",
            "> 0" if amplified else "< 0", rule(key), _mean_rho(null, of_kind), _mean_rho(trained, of_kind), verdict,
            f"{count} of {len(trained.depth)} trained sublayers of this type; the other {len(trained.depth) - count}: "
            f"mean rho {rest.text() if rest else 'n/a'}; {note}", "@" not in key, rule_version(key), why=why,
            effect=difference, direction=1 if amplified else -1))
    absolute = trained.operator_type == "near_symmetric"
    key = "community_coupling_near_symmetric@absolute"
    estimate = _mean_rho(trained, absolute)
    verdict, why = judged("trained mean rho", estimate, RULES[key].bound, True)
    verdict, why, note = noise_gate(verdict, why, trained)
    claims.insert(1, Claim(
        key, "In near-symmetric sublayers, communities in boundary positions are amplified", "mean Spearman rho("
        "community participation, log ||J P_C||_F / ||P_C||_F) over near_symmetric sublayers (operator_type, absolute "
        "bounds)", "> 0", rule(key), _mean_rho(null, absolute), estimate, verdict, note, False, rule_version(key),
        why=why, direction=1))
    claims.append(_operator_dependence_claim(null, trained))
    claims.append(_community_learned_claim(null, trained))
    return claims


def _operator_regression(data: CheckpointData):
    return coupling_power.operator_type_regression(
        data.community_rho, data.measure("asymmetry_index"), data.measure("rotation_share"), data.layer,
        n_permutations=N_PERMUTATIONS, seed=BOOTSTRAP_SEED)


def _zero_crossing(coupling: np.ndarray, measure: np.ndarray) -> bool:
    """Does the least-squares line of coupling on measure change sign inside the measure's observed range?"""
    keep = np.isfinite(coupling) & np.isfinite(measure)
    if keep.sum() < 3 or np.ptp(measure[keep]) == 0:
        return False
    slope, intercept = np.polyfit(measure[keep], coupling[keep], 1)
    ends = intercept + slope * np.array([measure[keep].min(), measure[keep].max()])
    return bool(ends[0] * ends[1] < 0)


def _operator_arms(data: CheckpointData, fit) -> dict[str, tuple[float, float, float]]:
    """{measure: (marginal rho, raw layer-permutation p, Holm p)} over the arms whose measure varies across the
    sublayers with a rho (sd >= MIN_MEASURE_SPREAD); an arm that does not vary has NaN rho and p (not testable)."""
    keep = np.isfinite(data.community_rho)
    raw = {"asymmetry_index": (fit.rho_asymmetry, fit.p_rho_asymmetry),
           "rotation_share": (fit.rho_rotation, fit.p_rho_rotation)}
    testable = {name: value for name, value in raw.items()
                if keep.sum() >= 3 and float(np.nanstd(data.measure(name)[keep])) >= MIN_MEASURE_SPREAD}
    adjusted = dict(zip(testable, holm([p for _, p in testable.values()])))
    return {name: (*testable[name], float(adjusted[name])) if name in testable else (float("nan"),) * 3
            for name in raw}


def _operator_dependence_claim(null: CheckpointData, trained: CheckpointData) -> Claim:
    """The abstract: the sign of the community coupling is set by the local operator type. Judged on the marginal,
    layer-permuted Spearman rho of the coupling with each operator measure (the two measures are collinear across
    sublayers, so a partial slope's sign can contradict the marginal relation), Holm over the arms whose measure
    varies: holds where the coupling falls with asymmetry or rotation share (rho < 0, Holm p < 0.05), rises with
    neither, and the fitted line changes sign inside the observed range (the type sets the sign, not only the
    size). The two-predictor fit's R^2 is descriptive (note)."""
    key = "community_coupling_operator_dependence"
    fit, reference = _operator_regression(trained), _operator_regression(null)
    arms = _operator_arms(trained, fit)
    reference_arms = _operator_arms(null, reference) if finite(reference.r_squared) else {}

    falls = [name for name, (rho, _, p) in arms.items() if finite(rho) and rho < 0 and p < FAMILY_LEVEL]
    rises = [name for name, (rho, _, p) in arms.items() if finite(rho) and rho > 0 and p < FAMILY_LEVEL]
    testable = sorted((p, name) for name, (rho, _, p) in arms.items() if finite(rho))
    # the arm the verdict rests on: a rise, else a fall, else the testable arm with the smallest Holm p
    shown = (rises or falls or [name for _, name in testable] or ["asymmetry_index"])[0]

    def summary(result_arms) -> Estimate | None:
        rho, _, p = result_arms.get(shown, (float("nan"),) * 3)
        return Estimate(rho, p_value=p) if finite(rho) else None
    untested = [name for name, (rho, _, _) in arms.items() if not finite(rho)]
    facts = "; ".join(f"rho with {name} {rho:.3g} (layer-permutation p {raw:.2g}, Holm {p:.2g})" if finite(rho) else
                      f"{name} not testable (sd across sublayers below {MIN_MEASURE_SPREAD})"
                      for name, (rho, raw, p) in arms.items()) + f"; {fit.n_sublayers} sublayers"
    crossing = [name for name in falls if _zero_crossing(trained.community_rho, trained.measure(name))]
    if not finite(fit.r_squared):
        verdict, why = "not testable", f"no fit: {fit.reason or 'too few sublayers with a rho'}"
    elif len(untested) == len(arms):
        verdict, why = "not testable", f"{facts}: no operator measure varies across the sublayers"
    elif rises:
        verdict, why = "does not hold", f"{facts}: the coupling rises with {', '.join(rises)}"
    elif falls and crossing:
        verdict, why = "holds", f"{facts}: it falls with {', '.join(falls)} and changes sign inside the range"
    elif falls:
        verdict, why = "undecided", f"{facts}: it falls with {', '.join(falls)} but keeps one sign over the range"
    else:
        verdict, why = "undecided", f"{facts}: no significant dependence (its power is not computed: never 'absent')"
    verdict, why, note = noise_gate(verdict, why, trained)
    return Claim(key, "The operator type sets the sign of the community coupling",
                 f"marginal Spearman rho of community rho with {shown} across sublayers (whole layers permuted; "
                 "Holm p over the testable arms; both arms in why)",
                 "the sign set by the local operator type", rule(key), summary(reference_arms), summary(arms), verdict,
                 f"two-predictor fit R^2 {fit.r_squared:.3g} (p {fit.p_value:.2g}), descriptive; {note}", True,
                 rule_version(key), why=why)


def _tested(data: CheckpointData) -> np.ndarray:
    return np.isfinite(data.community_rho) & (data.n_communities >= MIN_COMMUNITIES)


def _omnibus(data: CheckpointData):
    """The pooled community test over the sublayers with at least MIN_COMMUNITIES communities, in depth order, its p
    calibrated for the dependence between neighbouring sublayers (coupling_power.dependence_calibrated_omnibus_test;
    a sublayer left out breaks the adjacency of its neighbours); None without K."""
    if data.n_communities is None:
        return None
    order = np.argsort(data.depth, kind="stable")
    rho = np.where(_tested(data), data.community_rho, np.nan)[order]
    return coupling_power.dependence_calibrated_omnibus_test(rho, np.maximum(data.n_communities[order], 2),
                                                             seed=BOOTSTRAP_SEED)


def _omnibus_power(data: CheckpointData, result) -> float:
    """The power of the calibrated pooled test, at the dependence it estimated on this checkpoint, for |rho| =
    STATED_COMMUNITY_RHO in every sublayer."""
    keep = _tested(data)
    if not keep.any():
        return float("nan")
    return float(coupling_power.omnibus_community_power(tuple(int(k) for k in data.n_communities[keep]),
                                                        STATED_COMMUNITY_RHO, level=TEST_LEVEL, seed=BOOTSTRAP_SEED,
                                                        variance_inflation=result.variance_inflation).power)


def _excess_difference(ours, theirs, trained: CheckpointData, null: CheckpointData) -> Estimate:
    """trained - null chance-corrected excess e = (Q - m) / sum (K - 1) (unbiased: 0 in expectation without coupling
    in either model, whatever their K), with the 95% band of that difference where neither model is coupled (normal,
    from each model's exact null variance of e, inflated for its neighbouring sublayers)."""
    value = float(ours.excess - theirs.excess)
    spread = float(np.hypot(
        coupling_power.chance_excess_standard_error(trained.n_communities[_tested(trained)], ours.variance_inflation),
        coupling_power.chance_excess_standard_error(null.n_communities[_tested(null)], theirs.variance_inflation)))
    return Estimate(value, value - 1.96 * spread, value + 1.96 * spread)


def _community_learned_claim(null: CheckpointData, trained: CheckpointData) -> Claim:
    """Learned = present after training (the calibrated pooled p), beyond the null model's by the minimum on the
    chance-corrected excess e (the RMS rho's chance level sqrt(m / sum (K - 1)) depends on the number of
    communities, and sqrt(max(0, e)) is positive by chance, so the difference is judged on e itself with its chance
    band), and absent at init with the power of the same calibrated test."""
    key = "community_coupling_learned"
    ours, theirs = _omnibus(trained), _omnibus(null)

    def as_estimate(result) -> Estimate | None:
        return None if result is None else Estimate(float(result.excess), p_value=float(result.p_value))
    effect = None
    margin = RULES[key].bound
    checkpoints = (null, trained)
    if ours is None or theirs is None:
        verdict = "not testable"
        why = "the inputs lack n_communities (made before rules v4): rerun the partitions or save the inputs again"
    elif not finite(ours.statistic) or not finite(theirs.statistic):
        verdict, why = "not testable", "no defined community test in one of the checkpoints"
    else:
        effect = _excess_difference(ours, theirs, trained, null)
        ours_power, theirs_power = _omnibus_power(trained, ours), _omnibus_power(null, theirs)

        def described(result, power) -> str:
            return (f"excess {result.excess:.3g} (RMS rho {result.statistic:.3g}, chance level "
                    f"{np.sqrt(max(result.statistic ** 2 - result.excess, 0.0)):.3g}; p {result.p_value:.2g} "
                    f"calibrated for neighbouring sublayers, {result.p_independent:.2g} as if independent; "
                    f"{result.n_effective:.1f} effective of {result.n_sublayers} sublayers; power {power:.2f})")
        facts = (f"trained {described(ours, ours_power)}, null {described(theirs, theirs_power)} for |rho| = "
                 f"{STATED_COMMUNITY_RHO} in every sublayer; difference of the excess {effect.value:.3g} (chance band "
                 f"{effect.low:.3g} to {effect.high:.3g}) against {margin:.3g}")
        beyond = effect.low > margin
        if ours.p_value >= TEST_LEVEL and ours_power >= MIN_POWER:
            verdict, why = "does not hold", f"{facts}: absent from the trained model, with power"
            checkpoints = (trained,)  # the null model's graphs cannot change an absence after training
        elif theirs.p_value < TEST_LEVEL:
            verdict, why = "does not hold", f"{facts}: present in the null model already"
        elif ours.p_value < TEST_LEVEL and beyond and theirs_power >= MIN_POWER:
            verdict, why = "holds", f"{facts}: present after training, absent (with power) at initialisation"
        elif ours.p_value < TEST_LEVEL and beyond:
            verdict, why = UNDECIDED_POWER, f"{facts}: present after training; its absence at init has no power"
        elif ours.p_value >= TEST_LEVEL:
            verdict, why = UNDECIDED_POWER, f"{facts}: not significant, and the test has power < {MIN_POWER}"
        else:
            verdict, why = "undecided", (f"{facts}: significant, but the difference from the null model is not "
                                         "beyond the minimum and chance")
    verdict, why, note = noise_gate(verdict, why, *checkpoints)
    return Claim(key, "The community-level coupling is learned (absent at initialisation)",
                 "chance-corrected excess e = (Q - m) / sum (K - 1) of the sign-free pooled community test "
                 "(Q = sum (K - 1) rho^2; p calibrated for neighbouring sublayers); trained - null",
                 "absent at initialization", rule(key), as_estimate(theirs), as_estimate(ours), verdict, note, True,
                 rule_version(key), why=why, effect=effect)
