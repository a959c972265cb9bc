"""Controls of the trained file's quantization: the quantized null model, and each claim read at zero rounding
(SIMEX over draws of the file's own rounding noise, resdyn/simex.py)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np

from .. import simex
from .checkpoint import CheckpointData
from .claim import Claim, guarded
from .evaluation import evaluate, spectral_and_depth_claims
from .rules import SIZES, UNDECIDED_ROUNDING, rule_for
from .statistics import Estimate, finite, side


def with_quantization_control(claims: list[Claim], null_quantized: CheckpointData, trained: CheckpointData) -> list[Claim]:
    """``claims`` with each one's quantization control: the same claims evaluated with the quantized null model in
    the null model's place (the claim's effect against it where the claim has one, else its null-model measure)."""
    control = {claim.key: claim for claim in evaluate(null_quantized, trained)}
    result = []
    for claim in claims:
        other = control.get(claim.key)
        if other is None:
            result.append(claim)
        elif other.effect is not None:
            result.append(dataclasses.replace(claim, quantized_comparison=other.effect))
        else:
            result.append(dataclasses.replace(claim, quantized_null_model=other.null_model))
    return result


# the claims with a zero-rounding reading: a trained statistic judged against one bound (a mean, a paired difference,
# a ratio, one surgery reading). Not: a composite or an ordering check (late layers' primary, the surgery's primary),
# the gradient (Holm over a family), the coupling counts (BH with power), anything typed by operator masks or read off
# graphs (every draw re-derives its kNN graphs, communities and types: no smooth dose response), nor a claim about
# the null model itself (the file's rounding cannot move it)
EXTRAPOLATED = ("early_rotation", "training_adds_rotation", "cumulative_bottleneck", "bottleneck_learned",
                "surgery_installed_by_training")
EXTRAPOLATED_READINGS = ("late_near_symmetric@", "surgery_dissolves@")


def has_zero_rounding_reading(key: str) -> bool:
    return key.split("@", 1)[0] in EXTRAPOLATED or key.startswith(EXTRAPOLATED_READINGS)


def rounding_design_gap(doses: list[float]) -> str:
    """Why these draws (one dose per draw, > 0) cannot carry a zero-rounding reading under the rules, or ""."""
    counts = Counter(doses)
    enough = [dose for dose, count in counts.items() if count >= SIZES["simex_min_draws"]]
    if len(enough) >= SIZES["simex_min_doses"] and len(enough) == len(counts):
        return ""
    held = ", ".join(f"{count} at {dose:g}x" for dose, count in sorted(counts.items())) or "none"
    return (f"no zero-rounding reading: the rules need at least {SIZES['simex_min_draws']} draws at each of at least "
            f"{SIZES['simex_min_doses']} doses of the file's own rounding (draws held: {held})")


def _statistic(claim: Claim) -> Estimate | None:
    return claim.effect or claim.trained


def _multiplicative(key: str) -> bool:
    """A claim whose statistic is a ratio of ranks (> 0; declared in rules.SIZES): its rounding shift is one of
    log(statistic), paired and extrapolated on that scale and applied as a factor, so that a shift measured at the
    SIMEX set's level (another n) carries to the study's level as the same relative change."""
    return key.split("@", 1)[0] in SIZES["simex_log_scale_claims"]


def _extrapolated(estimate: Estimate, shift: simex.RoundingShift, multiplicative: bool = False) -> Estimate:
    """The estimate moved by the primary shift, each of its intervals widened by the shift's own (the hull of both
    extrapolants' 95% intervals, added end to end: conservative); ``multiplicative``: the shift is one of the log,
    so the estimate and its bounds are multiplied by exp(shift) and exp(its bounds)."""
    def move(value, by):
        return value * float(np.exp(by)) if multiplicative else value + by

    def moved(low, high):
        if low is None:
            return None, None
        return move(low, shift.combined_low), move(high, shift.combined_high)
    low, high = moved(estimate.low, estimate.high)
    sample_low, sample_high = moved(estimate.sample_low, estimate.sample_high)
    if low is None and sample_low is None:
        low, high = move(estimate.value, shift.combined_low), move(estimate.value, shift.combined_high)
    return Estimate(move(estimate.value, shift.shift), low, high, sample_low, sample_high)


def with_zero_rounding(claims: list[Claim], null: CheckpointData, draws: list[tuple[float, CheckpointData]],
                       baseline: CheckpointData | None = None) -> tuple[list[Claim], str]:
    """(``claims`` with their zero-rounding reading, a note). ``draws`` are (dose, checkpoint) pairs: the trained
    file's weights with ``dose`` times their own rounding variance added, one independent noise draw each, measured
    on the same samples as ``baseline``, the file's own weights (the SIMEX set, resdyn.models.registry; without a
    baseline, on the trained checkpoint's samples). Each claim's statistic (its effect, else its trained value) is
    recomputed on every draw and on the baseline; its paired differences draw - baseline (without one, draw - the
    claim's own value; for a ratio of ranks, rules.SIZES' simex_log_scale_claims, of the logs) are extrapolated to dose -1 (no rounding)
    by resdyn.simex, linear and quadratic side by side, the primary one declared in rules.SIZES, and the shift is
    added to the claim's own estimate (a ratio's multiplies it). The
    zero-rounding verdict is the claim's own rule (bound, direction, null guard) on the extrapolated estimate; where
    the two extrapolants give different verdicts it is "undecided (rounding)". A claim judged by more than one
    bound, or not a trained statistic (:func:`has_zero_rounding_reading`), has none. Without enough draws (rules.SIZES) no claim has one, and the note says
    why."""
    gap = rounding_design_gap([dose for dose, _ in draws])
    if gap:
        return claims, gap
    on_draws = [{claim.key: claim for claim in spectral_and_depth_claims(null, data)} for _, data in draws]
    paired_with = {claim.key: claim for claim in spectral_and_depth_claims(null, baseline)} \
        if baseline is not None else None
    doses = np.array([dose for dose, _ in draws], dtype=np.float64)
    result = []
    for claim in claims:
        rule = rule_for(claim.key)
        statistic = _statistic(claim)
        values = [_statistic(other[claim.key]) if claim.key in other else None for other in on_draws]
        origin = statistic if paired_with is None else \
            (_statistic(paired_with[claim.key]) if claim.key in paired_with else None)
        multiplicative = _multiplicative(claim.key)
        if not has_zero_rounding_reading(claim.key) or rule.bound is None or rule.holds_above is None or \
                statistic is None or not finite(statistic.value) or origin is None or not finite(origin.value) or \
                any(value is None or not finite(value.value) for value in values) or \
                (multiplicative and min(origin.value, *(value.value for value in values)) <= 0):
            result.append(claim)
            continue
        paired = [np.log(value.value / origin.value) if multiplicative else value.value - origin.value
                  for value in values]
        shift = simex.extrapolate_rounding_shift(doses, paired, primary=SIZES["simex_primary_extrapolant"])
        verdicts = {}
        for extrapolant in simex.EXTRAPOLANTS:
            fit = shift.fit(extrapolant)
            single = dataclasses.replace(shift, primary=extrapolant, combined_low=fit.low, combined_high=fit.high)
            moved = _extrapolated(statistic, single, multiplicative)
            verdict = side(moved, rule.bound, rule.holds_above)
            if claim.effect is None:  # the trained value itself: guarded against the null model's, moved
                verdict = guarded(dataclasses.replace(claim, verdict=verdict, trained=moved)).verdict
            verdicts[extrapolant] = verdict
        estimate = _extrapolated(statistic, shift, multiplicative)
        verdict = verdicts[shift.primary] if len(set(verdicts.values())) == 1 else UNDECIDED_ROUNDING
        result.append(dataclasses.replace(claim, zero_rounding=estimate, zero_rounding_verdict=verdict))
    paired = "each paired with the file's own weights on the same samples" if baseline is not None else \
        "each paired with the trained checkpoint"
    return result, (f"zero rounding by SIMEX over {len(draws)} draws at doses "
                    f"{', '.join(f'{dose:g}' for dose in sorted(set(doses.tolist())))} ({paired}; "
                    f"{SIZES['simex_primary_extrapolant']} extrapolant primary, the hull of both in the interval)")
