"""Symmetry, rotation and the gradient through depth: the claims of PAPER.md's first headline result."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import scipy.stats

from .checkpoint import (
    EARLY_AND_MIDDLE_DEPTHS,
    EARLY_DEPTHS,
    EVERY_DEPTH,
    LATE_DEPTHS,
    CheckpointData,
    over_sublayers,
    paired_difference,
)
from .claim import Claim, guarded
from .references import ginibre_complex_fraction
from .rules import (
    BOOTSTRAP_SEED,
    FAMILY_LEVEL,
    MIN_GRADIENT_CHANGE,
    MIN_SHARE_EFFECT,
    N_BOOTSTRAP,
    NEAR_SYMMETRIC_ASYMMETRY,
    RANDOM_ASYMMETRY,
    RANDOM_ROTATION_SHARE,
    RULES,
    rule,
    rule_version,
)
from .statistics import (
    Estimate,
    finite,
    group_difference,
    holm,
    jackknife_bounds,
    judged,
    rank_correlations,
    spearman_with_permutation,
)


@dataclass(frozen=True)
class Gradient:
    """A measure's trend through depth over one sublayer type: Spearman's rho (with its own intervals and its
    permutation p) and the Theil-Sen change of the measure over the depth span (with its 95% interval)."""

    rho: Estimate
    change: Estimate


def depth_gradient(data: CheckpointData, name: str, sublayer: str) -> Gradient | None:
    """Spearman rho of measure ``name`` with depth over one sublayer type: its bootstrap interval over sublayers (the
    (depth, value) pairs resampled), its samples' interval (the jackknife of rho itself over the fold replicates: it
    may be narrow, rho being a step function of the values) and its permutation p; the Theil-Sen slope (Sen 1968,
    scipy.stats.theilslopes, its 95% interval) times the depth span, in the measure's own units."""
    mask = data.sublayer == sublayer
    if mask.sum() < 3:
        return None
    values = data.measure(name)
    keep = mask & np.isfinite(values)
    depth = data.depth[keep].astype(np.float64)
    rho, p = spearman_with_permutation(depth, values[keep])
    if not finite(rho):
        return Gradient(Estimate(rho), Estimate(float("nan")))
    index = np.random.default_rng(BOOTSTRAP_SEED).integers(0, len(depth), (N_BOOTSTRAP, len(depth)))
    draws = rank_correlations(depth[index], values[keep][index])
    draws = draws[np.isfinite(draws)]
    low, high = (np.percentile(draws, [2.5, 97.5]) if len(draws) >= N_BOOTSTRAP / 2 else (np.nan, np.nan))
    # a percentile interval can miss its own estimate (rho's bootstrap law is skewed near +-1): widened to hold it
    low, high = (float(min(low, rho)), float(max(high, rho))) if np.isfinite(low) else (float("nan"), float("nan"))
    replicates = data.replicates.get(name)
    sample_low = sample_high = None
    if replicates is not None:
        sample_low, sample_high = jackknife_bounds(rho, rank_correlations(
            np.broadcast_to(depth, (len(replicates), len(depth))), np.asarray(replicates)[:, keep]))
    slope, _, slope_low, slope_high = scipy.stats.theilslopes(values[keep], depth)
    span = float(np.ptp(depth))
    return Gradient(Estimate(rho, low, high, sample_low, sample_high, p_value=p),
                    Estimate(slope * span, slope_low * span, slope_high * span))


def gradient_verdict(gradient: Gradient | None, adjusted_p: float) -> tuple[str, str]:
    """(verdict, why) by the v4 rule (RULES["spectral_gradient"]): a fall needs rho < 0 with every interval of rho
    below 0, a Holm-adjusted p below FAMILY_LEVEL and a change over the depth span whose interval lies below
    -MIN_GRADIENT_CHANGE; a significant rise, or a change whose interval lies above -MIN_GRADIENT_CHANGE (a fall, if
    any, smaller than the minimum), does not hold."""
    if gradient is None or not finite(gradient.rho.value):
        return "not testable", "no rank correlation (fewer than 3 sublayers, or a measure constant through depth)"
    rho, change = gradient.rho, gradient.change
    bounds = rho.bounds()
    low, high = bounds if bounds is not None else (rho.value, rho.value)
    significant = finite(adjusted_p) and adjusted_p < FAMILY_LEVEL
    facts = (f"rho {rho.value:.3g} (interval {low:.3g} to {high:.3g}, Holm p {adjusted_p:.2g}); change over depth "
             f"{change.value:.3g} [{change.low:.3g}, {change.high:.3g}] against the minimum fall {MIN_GRADIENT_CHANGE}")
    if not (np.isfinite(low) and np.isfinite(high)):
        return "undecided", f"{facts}: rho's interval could not be made"
    if rho.value < 0 and high < 0 and significant and finite(change.high) and change.high < -MIN_GRADIENT_CHANGE:
        return "holds", f"{facts}: a significant fall of at least the minimum size"
    if rho.value > 0 and low > 0 and significant:
        return "does not hold", f"{facts}: a significant rise"
    if finite(change.low) and change.low > -MIN_GRADIENT_CHANGE:
        return "does not hold", f"{facts}: any fall is smaller than the minimum"
    return "undecided", f"{facts}: " + ("not significant after Holm's correction" if not significant else
                                        "rho's interval or the change's interval straddles its bound")

def _relative_claim(key: str, statement: str, paper: str, null: CheckpointData, trained: CheckpointData, name: str,
                    depths, where: str, bound: float, holds_above: bool, primary: bool, note: str = "") -> Claim:
    """A claim judged by trained - null of a measure's mean over some depths, paired by depth (and by fold)."""
    effect = paired_difference(trained, null, name, depths)
    verdict, why = judged(f"trained - null {name}", effect, bound, holds_above)
    return Claim(key, statement, f"mean {name}, {where}; trained - null paired by depth", paper, rule(key),
                 over_sublayers(null, name, depths(null)), over_sublayers(trained, name, depths(trained)), verdict,
                 note, primary, rule_version(key), why=why, effect=effect)


def _absolute_claim(key: str, statement: str, paper: str, subject: CheckpointData, other: CheckpointData, name: str,
                    depths, where: str, bound: float, holds_above: bool, primary: bool, note: str = "",
                    subject_is_trained: bool = True) -> Claim:
    """A claim judged by one checkpoint's mean of a measure over some depths against a fixed bound."""
    estimate = over_sublayers(subject, name, depths(subject))
    verdict, why = judged(f"{'trained' if subject_is_trained else 'null model'} mean {name}", estimate, bound,
                           holds_above)
    others = over_sublayers(other, name, depths(other))
    null_side, trained_side = (others, estimate) if subject_is_trained else (estimate, others)
    return Claim(key, statement, f"mean {name}, {where}", paper, rule(key), null_side, trained_side, verdict, note,
                 primary, rule_version(key), why=why,
                 direction=(1 if holds_above else -1) if subject_is_trained else 0)


def symmetry_and_rotation_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    rotation = "Early layers are rotation-dominated"
    random_complex = (f"a random real matrix of this size: {ginibre_complex_fraction(max(trained.d_model, 1)):.3f}"
                      if trained.d_model else "")
    claims = [
        _relative_claim("early_rotation", rotation, "about 0.98 complex", null, trained, "rotation_share", EARLY_DEPTHS,
                        "first third of depth", MIN_SHARE_EFFECT, True, True, "a random map: 2/pi = 0.637"),
        _absolute_claim("early_rotation@absolute", rotation, "about 0.98 complex", trained, null, "rotation_share",
                        EARLY_DEPTHS, "first third of depth", RANDOM_ROTATION_SHARE, True, False),
        _relative_claim("early_rotation@frac_complex", rotation, "about 0.98 complex", null, trained, "frac_complex",
                        EARLY_DEPTHS, "first third of depth", 0.0, True, False, random_complex)]
    claims += _gradient_claims(null, trained)
    late, init = "Late layers are near-symmetric", "At initialisation layers are already near-symmetric"
    claims += late_near_symmetric_claims(null, trained, late)
    random_note = ("a random matrix: asymmetry 0.707, dep/||A||_F 0.707 (one Ginibre matrix; products of random "
                   "factors sit higher, resdyn/baselines.py)")
    claims.append(_absolute_claim("init_near_symmetric", init, "near-symmetric at OLMo step 0", null, trained,
                                  "asymmetry_index", EVERY_DEPTH, "all sublayers", NEAR_SYMMETRIC_ASYMMETRY, False,
                                  True, random_note, subject_is_trained=False))
    below_random = over_sublayers(null, "asymmetry_index", EVERY_DEPTH(null))
    below_random = None if below_random is None else Estimate(*(
        None if v is None else v - RANDOM_ASYMMETRY for v in dataclasses.astuple(below_random)[:5]))
    verdict, why = judged("null model mean asymmetry_index - 1/sqrt 2", below_random, -MIN_SHARE_EFFECT, False)
    claims.append(Claim("init_near_symmetric@random", init, "mean asymmetry_index over all sublayers - 1/sqrt 2",
                        "near-symmetric at OLMo step 0", rule("init_near_symmetric@random"),
                        over_sublayers(null, "asymmetry_index", EVERY_DEPTH(null)), None, verdict, "", False,
                        rule_version("init_near_symmetric@random"), why=why, effect=below_random))
    claims.append(_absolute_claim("init_near_symmetric@henrici", init, "near-symmetric at OLMo step 0", null, trained,
                                  "henrici_rel_j_minus_i", EVERY_DEPTH, "all sublayers", 0.5, False, False,
                                  subject_is_trained=False))
    pulls = "Training pulls early and middle layers toward rotation"
    claims += [_relative_claim("training_adds_rotation", pulls, "positive", null, trained, "rotation_share",
                               EARLY_AND_MIDDLE_DEPTHS, "first two thirds of depth", MIN_SHARE_EFFECT, True, True),
               _relative_claim("training_adds_rotation@frac_complex", pulls, "positive", null, trained, "frac_complex",
                               EARLY_AND_MIDDLE_DEPTHS, "first two thirds of depth", 0.0, True, False)]
    return claims


def _late_minus_early(data: CheckpointData, name: str) -> Estimate | None:
    """Mean of measure ``name`` over the last third minus over the first third of one model: the bootstrap resamples
    each third within itself (statistics.group_difference), the samples' interval jackknifes it fold by fold."""
    late, early = LATE_DEPTHS(data), EARLY_DEPTHS(data)
    values = data.measure(name)
    estimate = group_difference(values, late, early)
    replicates = data.replicates.get(name)
    if estimate is None or replicates is None or len(replicates) < 2:
        return estimate
    keep_late, keep_early = late & np.isfinite(values), early & np.isfinite(values)
    low, high = jackknife_bounds(estimate.value, [float(np.mean(r[keep_late]) - np.mean(r[keep_early]))
                                                  for r in replicates])
    return dataclasses.replace(estimate, sample_low=low, sample_high=high)


def late_near_symmetric_claims(null: CheckpointData, trained: CheckpointData, statement: str) -> list[Claim]:
    """"Late layers near-symmetric" as the paper means it (rules v5): near-symmetric in absolute terms, and more so
    than at initialisation and than the early layers; each part is a reading of its own beside the primary."""
    name, where = "asymmetry_index", "last third of depth"
    relative = _relative_claim("late_near_symmetric@relative", statement, "near-symmetric", null, trained, name,
                               LATE_DEPTHS, where, RULES["late_near_symmetric@relative"].bound, False, False)
    absolute = _absolute_claim("late_near_symmetric@absolute", statement, "near-symmetric", trained, null, name,
                               LATE_DEPTHS, where, RULES["late_near_symmetric@absolute"].bound, False, False)
    key = "late_near_symmetric@late_minus_early"
    contrast = _late_minus_early(trained, name)
    verdict, why = judged("trained asymmetry_index, last - first third", contrast, RULES[key].bound, False)
    against_early = Claim(key, statement, f"mean {name}, last third - first third of depth (each model's own)",
                          "near-symmetric", rule(key), _late_minus_early(null, name), contrast, verdict, "",
                          False, rule_version(key), why=why, effect=contrast)
    # each part as the table will show it (guarded against the null model), so the composite cannot disagree with it
    absolute, relative = guarded(absolute), guarded(relative)
    parts = (absolute, relative, against_early)
    verdicts = [part.verdict for part in parts]
    if all(v == "holds" for v in verdicts):
        verdict = "holds"
    elif "does not hold" in verdicts:
        verdict = "does not hold"
    elif "not testable" in verdicts:
        verdict = "not testable"
    else:
        verdict = "undecided"
    labels = ("absolute (< 1/(2 sqrt 2))", "against the null model", "against the early layers")
    why = "; ".join(f"{label}: {part.verdict} ({part.why})" for label, part in zip(labels, parts))
    primary = Claim("late_near_symmetric", statement, f"mean {name}, {where}: absolute, trained - null (paired by "
                    "depth) and last - first third", "near-symmetric", rule("late_near_symmetric"), relative.null_model,
                    relative.trained, verdict, "", True, rule_version("late_near_symmetric"), why=why)
    henrici = _absolute_claim("late_near_symmetric@henrici", statement, "near-symmetric", trained, null,
                              "henrici_rel_j_minus_i", LATE_DEPTHS, where, RULES["late_near_symmetric@henrici"].bound,
                              False, False)
    return [primary, relative, against_early, absolute, henrici]


GRADIENT_READINGS = (("asymmetry_index", ""), ("henrici_rel_j_minus_i", "@henrici"), ("rotation_share", "@rotation_share"))


def _gradient_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    """The gradient per sublayer type and reading; the trained model's p-values Holm-adjusted over that family."""
    family = [(name, label, sublayer) for name, label in GRADIENT_READINGS for sublayer in ("attn", "mlp")]
    gradients = {entry: depth_gradient(trained, entry[0], entry[2]) for entry in family}
    raw = [g.rho.p_value if g is not None and g.rho.p_value is not None and finite(g.rho.value) else np.nan
           for g in gradients.values()]
    adjusted = dict(zip(family, holm(raw)))
    claims = []
    for entry in family:
        name, label, sublayer = entry
        gradient, reference = gradients[entry], depth_gradient(null, name, sublayer)
        verdict, why = gradient_verdict(gradient, adjusted[entry])
        if gradient is not None and finite(adjusted[entry]):  # print the p the verdict used: Holm's
            gradient = Gradient(dataclasses.replace(gradient.rho, p_value=float(adjusted[entry])), gradient.change)
        claims.append(Claim(
            f"spectral_gradient_{sublayer}{label}", f"The spectral gradient is monotonic through depth ({sublayer} "
            "sublayers)", f"Spearman rho(depth, {name}): intervals of rho (sublayers, samples)", "falls with depth "
            "(non-normal, rotating early; near-symmetric late)", rule("spectral_gradient"),
            reference.rho if reference else None, gradient.rho if gradient else None, verdict,
            "" if gradient is None or not finite(gradient.change.value) else
            f"Theil-Sen change of {name} over the depth span {gradient.change.text()}", label == "",
            rule_version("spectral_gradient"), why=why, effect=gradient.change if gradient else None, direction=-1))
    return claims


