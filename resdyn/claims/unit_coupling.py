"""Unit-level coupling: boundary units amplified or de-amplified by operator type, absent at init, learned."""

from __future__ import annotations

import numpy as np

from .checkpoint import CheckpointData, noise_gate
from .claim import Claim
from .operator_types import MEANING, operator_types
from .power import unit_family_power
from .rules import MIN_POWER, RULES, UNDECIDED_POWER, rule, rule_version
from .statistics import Estimate, bootstrap, finite, judged


def absence_with_power(verdict: str, why: str, absence: str, power: float, power_note: str,
                        stale: list[str]) -> tuple[str, str]:
    """(verdict, why) of a unit-level count: not testable where the inputs lack the permutation q; a verdict of
    absence (``absence``) stands only with power >= MIN_POWER, else undecided (no power)."""
    if stale:
        return "not testable", (f"the inputs lack {', '.join(stale)} (made before rules v4, whose significance is BH on "
                                "the degree-stratified permutation p): save them again")
    if verdict != absence:
        return verdict, why
    if not (finite(power) and power >= MIN_POWER):
        return UNDECIDED_POWER, f"{why}, but the tests' {power_note} (< {MIN_POWER})"
    return verdict, f"{why}; {power_note}"


# (key, type, amplified): the primary reading of each claim first
UNIT_READINGS = (("coupling_near_symmetric", "near_symmetric", True),
                 ("coupling_near_symmetric@relative", "near_symmetric_relative", True),
                 ("coupling_strongly_non_normal", "strongly_non_normal", False),
                 ("coupling_strongly_non_normal@rotation_dominated", "rotation_dominated", False))


def _mean_effect(data: CheckpointData, mask: np.ndarray | None) -> Estimate | None:
    keep = None if mask is None else mask & np.isfinite(data.coupling_effect)
    return bootstrap(np.mean, data.coupling_effect[keep]) if keep is not None and keep.any() else None


def coupling_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    claims = []
    types = operator_types(trained, null)
    for key, kind, amplified in UNIT_READINGS:
        meaning = MEANING[kind]
        mask = None if types is None else types.get(kind)
        estimate = _mean_effect(trained, mask)
        verdict, why = judged("trained mean rank-biserial effect", estimate, RULES[key].bound, amplified)
        if mask is not None and not mask.any():
            why = f"no trained sublayer is {kind.replace('_', '-')} ({meaning})"
        verdict, why, note = noise_gate(verdict, why, trained)
        count = 0 if mask is None else int(mask.sum())
        words = kind.replace("_relative", "").replace("_", "-")
        claims.append(Claim(
            key, f"In {words} sublayers, boundary units are {'amplified' if amplified else 'de-amplified'}",
            f"mean rank-biserial effect over {kind} sublayers ({meaning}); the null model over the same sublayers",
            "> 0" if amplified else "< 0", rule(key), _mean_effect(null, mask), estimate, verdict,
            f"{count} of {len(trained.depth)} trained sublayers of this type; {note}", "@" not in key,
            rule_version(key), why=why, direction=1 if amplified else -1))

    def significant_share(data: CheckpointData) -> Estimate:
        tested = np.isfinite(data.coupling_effect)
        return Estimate(float(np.mean(data.coupling_significant[tested])) if tested.any() else float("nan"))
    null_share, trained_share = significant_share(null), significant_share(trained)
    counts = {name: (int(np.sum(d.coupling_significant)), int(np.sum(np.isfinite(d.coupling_effect))))
              for name, d in (("null", null), ("trained", trained))}
    stale = [c for c in ("coupling_q_permutation",) if c in null.missing or c in trained.missing]
    null_power, null_power_note = unit_family_power(null)
    verdict, why = absence_with_power(*judged("null model's BH-significant share", null_share,
                                              RULES["coupling_absent_at_init"].bound, False),
                                      "holds", null_power, null_power_note, stale)
    verdict, why, note = noise_gate(verdict, why, null)
    claims.append(Claim(
        "coupling_absent_at_init", "The coupling is absent at initialisation",
        "share of tested sublayers BH-significant (degree-stratified permutation p, q < 0.05)", "0 of 64 (OLMo step 0)",
        rule("coupling_absent_at_init"), null_share, None, verdict,
        f"null model: {counts['null'][0]} of {counts['null'][1]}; {note}", True, rule_version("coupling_absent_at_init"),
        why=why))
    learned = Estimate(trained_share.value - null_share.value)
    margin = RULES["coupling_learned"].bound
    # the null model's share is >= 0, so a trained share <= the margin cannot exceed it by the margin whatever the
    # null model shows: the verdict and its power (to exceed the margin itself) rest on the trained model alone
    null_matters = not (finite(trained_share.value) and trained_share.value <= margin)
    needed = margin + (null_share.value if null_matters and finite(null_share.value) else 0.0)
    trained_power, trained_power_note = unit_family_power(trained, share_needed=needed)
    verdict, why = absence_with_power(*judged("BH-significant share, trained - null", learned, margin, True),
                                      "does not hold", trained_power, trained_power_note, stale)
    verdict, why, note = noise_gate(verdict, why, *((null, trained) if null_matters else (trained,)))
    claims.append(Claim(
        "coupling_learned", "Training makes the coupling significant in many sublayers",
        "BH-significant share (degree-stratified permutation p), trained - null", "0 -> 24 of 64 (0.375; OLMo 3 7B)",
        rule("coupling_learned"), null_share, trained_share, verdict, f"trained: {counts['trained'][0]} of "
        f"{counts['trained'][1]} tested sublayers; {note}", True, rule_version("coupling_learned"), why=why,
        effect=learned))
    return claims
