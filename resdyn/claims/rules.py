"""The claims' rules as declared data: every size and every reading's rule, one entry per reading.

Pre-registration is the content of this data, not the source bytes of the code that applies it: ``rules_hash()``
is the sha256 of the canonical JSON of ``SIZES`` and ``RULES`` (sorted keys, floats written by ``repr``), and
``RULES_VERSION`` names the set. docs/study/rules-v<N>.json records each version's declared data and hash, committed
before its use; ``tests/unit/test_rules_registered.py`` refuses a changed rule under an old version, and the golden test
(``tests/unit/test_golden_judgment.py``) re-judges every kept input set and compares its verdicts exactly. A code
change that decides differently therefore shows up there, and a comment or a faster loop does not change the hash.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass

from .. import simex

RULES_VERSION = 6

# Sizes the rules decide with (all in the hash). Rules v4 fixed the effect sizes (docs/study.md, "Rules v4"); v5 adds
# the absolute near-symmetric bound to the types, the spread an operator-type arm needs and the SIMEX design; v6 the
# SIMEX set's pairing (draws against the file's own weights on their own samples, ratios of ranks in log) and the
# unit test's power over its degree strata.
SIZES = {
    "n_bootstrap": 2000,
    "bootstrap_seed": 0,
    "n_permutations": 10000,
    "noise_observations_cap": 2048,  # simulated observations of the noise level (d = 4096: a 2048 x 4096 draw)
    "topology_noise_factor": 1.5,  # graphs whose median kNN |r| is below this multiple of independent units' are noise
    "early_depth": 1 / 3,  # relative depth: the first third of the network
    "late_depth": 2 / 3,  # relative depth: the last third
    "min_share_effect": 0.05,  # rotation share / asymmetry index / Henrici: 1/20 of their [0, 1] range
    "min_gradient_change": 0.05,  # the Theil-Sen change of a measure over the depth span of a sublayer type
    "min_rank_biserial": 0.05,  # mean rank-biserial effect of boundary units (unit level)
    "min_community_rho_difference": 0.1,  # community rho, one group of sublayers against another (or the null's)
    "min_surgery_specificity": 0.1,  # alpha = 0 share restored, trained - null
    "near_symmetric_asymmetry": 1 / (2 * math.sqrt(2)),  # half a random map's asymmetry index
    "random_rotation_share": 2 / math.pi,  # the circular law: a random map's rotation share
    "random_asymmetry": 1 / math.sqrt(2),  # a random map's asymmetry index
    "stated_unit_effect": 0.2,  # the planted rank-biserial effect whose power an absence needs
    "stated_community_rho": 0.3,  # the planted community rho, in every sublayer, whose power an absence needs
    "min_power": 0.8,  # "absent" / "does not hold" for a coupling only at this power for the stated effect
    "family_level": 0.05,  # Holm's familywise level (the gradient family; the operator-type arms)
    "min_measure_spread": 0.01,  # an operator-type arm whose measure varies less across sublayers (sd) is not tested
    "strongly_non_normal_henrici": 0.5,  # dep/||J - I||_F above it: far from normal (v1's operator-type boundary)
    "test_level": 0.05,  # the level of a single test (the pooled community test, BH's q)
    "min_communities": 4,  # a sublayer's community test needs this many communities (4! = 24 orderings)
    "min_excess_difference": 0.01,  # community excess e (a mean squared rho beyond chance): 0.1^2, v4's RMS minimum
    "simex_min_doses": simex.MIN_DOSES_BEYOND_ZERO,  # doses of the file's own rounding beyond zero
    "simex_min_draws": simex.MIN_DRAWS_PER_DOSE,  # noise draws per dose
    "simex_primary_extrapolant": simex.PRIMARY_EXTRAPOLANT,
    # each draw a paired difference from the file's own weights measured on the same samples (the SIMEX set's
    # simex-x0), the extrapolated shift carried to the claim's own estimate; these claims' statistics (ratios of
    # ranks) paired and extrapolated in log and applied as a factor, the others' as a difference
    "simex_pairing": "the file's own weights on the same samples",
    "simex_log_scale_claims": ["cumulative_bottleneck", "bottleneck_learned"],
    # the unit test's power: its degree bins as observed (coupling_tests.stratum_*), one bin where not recorded
    "unit_power_strata": "observed degree bins",
}

UNDECIDED_ORDERING = "undecided (ordering-dependent)"
UNDECIDED_POWER = "undecided (no power)"
UNDECIDED_ROUNDING = "undecided (rounding)"
VERDICTS = ("holds", "does not hold", "undecided", UNDECIDED_ORDERING, UNDECIDED_POWER, UNDECIDED_ROUNDING,
            "not testable")

# the paper's sentences the claims read (../shared/docs/PAPER.md, "Headline results" and the abstract's paraphrase)
GRADIENT_SENTENCE = ("Monotone non-normality gradient: early layers non-normal and rotation-rich (about 98% of eigenvalues "
                     "in complex-conjugate pairs); late layers near-symmetric.")
INIT_SENTENCE = "At OLMo step 0 layers are already near-symmetric; training pulls early/middle layers toward rotation."
BOTTLENECK_SENTENCE = ("Llama 3.1 8B effective rank of the cumulative Jacobian falls from about 436 (one layer) to "
                       "about 7 (full depth). Not architectural (rank stays high at step 0); installed by training.")
SURGERY_SENTENCE = "Removing N_l while keeping the spectrum largely dissolves the bottleneck."
UNIT_SENTENCE = ("boundary units are preferentially amplified in near-symmetric layers and de-amplified in strongly "
                 "non-normal layers.")
ABSENT_SENTENCE = "Absent at init; FDR-significant layers in OLMo grow 0 (step 0) -> 14 (step 471k) -> 24 (step 1.41M)."
COMMUNITY_SENTENCE = ("\"the topological positioning of graph communities predicts whether the Jacobian amplifies or "
                      "suppresses them\", the sign set by the local operator type, absent at initialization.")


@dataclass(frozen=True)
class Rule:
    """One reading of one claim. ``key`` is the claim, or "claim@reading" for a reading beside the primary one.

    ``bound`` and ``holds_above`` decide readings judged by the interval rule (``statistics.side``); readings with a
    composite decision (the gradient, the coupling counts, the pooled tests) say it in ``decides`` and take their
    sizes from ``SIZES``. ``against_null`` says how the null model enters; ``correction`` the multiplicity family;
    ``power`` what an absence needs."""

    key: str
    version: int
    reads: str  # the paper's sentence
    decides: str  # the rule in words, printed in every table
    bound: float | None = None
    holds_above: bool | None = None
    against_null: str = ""
    correction: str = "none"
    power: str = "none"

    @property
    def claim(self) -> str:
        return self.key.split("@", 1)[0]


_S = SIZES
_RULES = (
    Rule("early_rotation", 4, GRADIENT_SENTENCE,
         "trained - null mean rotation_share over the first third of depth, paired by depth, > 0.05 (every interval "
         "above)", _S["min_share_effect"], True, "trained - null, paired by depth and fold"),
    Rule("early_rotation@absolute", 4, GRADIENT_SENTENCE,
         "trained mean rotation_share, first third of depth > 2/pi (a random map's)", _S["random_rotation_share"], True,
         "none: a random map's value"),
    Rule("early_rotation@frac_complex", 4, GRADIENT_SENTENCE,
         "trained - null mean complex fraction, first third, paired by depth > 0 (the count saturates: a random real "
         "matrix of width 640 has 0.968 of it)", 0.0, True, "trained - null, paired by depth and fold"),
    Rule("spectral_gradient", 4, GRADIENT_SENTENCE,
         "Spearman rho(depth, measure) per sublayer type: holds when rho < 0, its permutation p Holm-adjusted over the "
         "family (2 sublayer types x 3 readings) < 0.05, rho's intervals (bootstrap over sublayers, jackknife over "
         "folds) below 0 and the Theil-Sen change over the depth span below -0.05 (its 95% interval); does not hold on "
         "a significant rise or when the change's interval lies above -0.05 (a fall smaller than the minimum); no holds "
         "unless the trained rho is below the null model's", -_S["min_gradient_change"], False,
         "no holds unless the trained rho is below the null model's", "Holm over 2 sublayer types x 3 readings"),
    Rule("late_near_symmetric", 5, GRADIENT_SENTENCE,
         "the last third of depth is near-symmetric in absolute terms and more symmetric than both the null model and "
         "the early layers: holds when (a) the trained mean asymmetry_index over the last third < 1/(2 sqrt 2), (b) "
         "trained - null there < -0.05 (paired by depth) and (c) last third - first third of the trained model "
         "< -0.05, every interval on its side; does not hold when any of the three is on the other side",
         -_S["min_share_effect"], False, "trained - null, paired by depth and fold (part b)"),
    Rule("late_near_symmetric@relative", 4, GRADIENT_SENTENCE,
         "trained - null mean asymmetry_index over the last third, paired by depth, < -0.05 (v4's primary: 'less "
         "asymmetric than at init')", -_S["min_share_effect"], False, "trained - null, paired by depth and fold"),
    Rule("late_near_symmetric@late_minus_early", 5, GRADIENT_SENTENCE,
         "trained mean asymmetry_index, last third - first third < -0.05 (bootstrap within each third)",
         -_S["min_share_effect"], False, "none: within the trained model"),
    Rule("late_near_symmetric@absolute", 4, GRADIENT_SENTENCE,
         "trained mean asymmetry_index, last third < 1/(2 sqrt 2) (half a random map's)",
         _S["near_symmetric_asymmetry"], False, "none: half a random map's value"),
    Rule("late_near_symmetric@henrici", 1, GRADIENT_SENTENCE, "trained mean dep/||J - I||_F, last third < 0.5", 0.5,
         False, "none"),
    Rule("init_near_symmetric", 4, INIT_SENTENCE,
         "null model mean asymmetry_index over all sublayers < 1/(2 sqrt 2) (absolute: the null model is the "
         "reference itself)", _S["near_symmetric_asymmetry"], False, "the null model is the subject"),
    Rule("init_near_symmetric@random", 4, INIT_SENTENCE,
         "null model mean asymmetry_index - 1/sqrt 2 (a random map's) < -0.05", -_S["min_share_effect"], False,
         "the null model is the subject"),
    Rule("init_near_symmetric@henrici", 1, INIT_SENTENCE, "null model mean dep/||J - I||_F < 0.5", 0.5, False,
         "the null model is the subject"),
    Rule("training_adds_rotation", 4, INIT_SENTENCE,
         "trained - null rotation_share, first two thirds, paired by depth > 0.05 (samples' interval paired by fold)",
         _S["min_share_effect"], True, "trained - null, paired by depth and fold"),
    Rule("training_adds_rotation@frac_complex", 4, INIT_SENTENCE,
         "trained - null complex fraction, first two thirds > 0", 0.0, True, "trained - null, paired by depth and fold"),
    Rule("cumulative_bottleneck", 4, BOTTLENECK_SENTENCE,
         "(trained rank after the first map / after all maps) / (the null model's), paired by fold, > 2", 2.0, True,
         "trained / null, paired by fold"),
    Rule("cumulative_bottleneck@absolute", 2, BOTTLENECK_SENTENCE,
         "trained rank after the first map / after all maps > 2 (interval from the samples)", 2.0, True, "none"),
    Rule("bottleneck_learned", 3, BOTTLENECK_SENTENCE,
         "full-depth rank, null / trained > 2 (samples' interval paired by fold)", 2.0, True,
         "null / trained, paired by fold"),
    Rule("surgery_dissolves", 5, SURGERY_SENTENCE,
         "share of the rank lost through depth that alpha = 0 restores with the basis-free (polar) normal part > 0.5, "
         "in rank (linear: (r0 - r1) / (r_first - r1)); each reading is first guarded against the null model (no "
         "holds where the null model's rescue is as large: undecided), then the readings are compared: undecided "
         "(ordering-dependent) when, after the guard, one of the three Schur orderings and the polar reading holds and "
         "another does not hold (effective rank); the share in log-compression is shown beside it", 0.5, True,
         "no holds unless above the null model's share"),
    Rule("surgery_dissolves@log_compression", 5, SURGERY_SENTENCE,
         "share of the log-compression lost through depth that alpha = 0 restores, (log r0 - log r1) / (log r_first - "
         "log r1), polar normal part, > 0.5 (the collapse rule's own scale)", 0.5, True,
         "no holds unless above the null model's share"),
    Rule("surgery_installed_by_training", 4, SURGERY_SENTENCE,
         "surgery share (polar normal part), trained - null, paired by fold > 0.1", _S["min_surgery_specificity"],
         True, "trained - null, paired by fold"),
    Rule("coupling_near_symmetric", 5, UNIT_SENTENCE,
         "mean rank-biserial effect over near-symmetric sublayers > 0.05; near-symmetric: the trained asymmetry index "
         "below 1/(2 sqrt 2) and below the null model's at the same depth by 0.05; the null model over the same "
         "sublayers; undecided on noise graphs (trained)", _S["min_rank_biserial"], True,
         "no holds unless above the null model's over the same sublayers"),
    Rule("coupling_near_symmetric@relative", 4, UNIT_SENTENCE,
         "as the primary, with v4's relative type only (asymmetry below the null model's by 0.05)",
         _S["min_rank_biserial"], True, "no holds unless above the null model's over the same sublayers"),
    Rule("coupling_strongly_non_normal", 5, UNIT_SENTENCE,
         "mean rank-biserial effect over strongly non-normal sublayers < -0.05; strongly non-normal: Henrici's "
         "dep/||J - I||_F above 0.5 and not below the null model's at the same depth by more than 0.05 (as non-normal "
         "as the sublayer's own random map), and not near-symmetric; the null model over the same sublayers; "
         "undecided on noise graphs (trained)",
         -_S["min_rank_biserial"], False, "no holds unless below the null model's over the same sublayers"),
    Rule("coupling_strongly_non_normal@rotation_dominated", 4, UNIT_SENTENCE,
         "mean rank-biserial effect over rotation-dominated sublayers (rotation share above the null model's by 0.05) "
         "< -0.05 (v4's reading of 'strongly non-normal')", -_S["min_rank_biserial"], False,
         "no holds unless below the null model's over the same sublayers"),
    Rule("coupling_absent_at_init", 6, ABSENT_SENTENCE,
         "null model's BH-significant share (BH on the degree-stratified permutation p) < 0.05, with power >= 0.8 of "
         "the BH family (its sublayers' sizes and degree bins as observed) to reject any test when every sublayer has a rank-biserial effect of "
         "0.2; undecided (no power) below it; undecided on noise graphs (null model); the minimum detectable effect "
         "printed", 0.05, False, "the null model is the subject", "BH across sublayers",
         "BH family power >= 0.8 at rank-biserial 0.2"),
    Rule("coupling_learned", 6, ABSENT_SENTENCE,
         "BH-significant share (degree-stratified permutation p), trained - null > 0.1; does not hold only with power "
         ">= 0.8 of the trained BH family (its sizes and degree bins as observed) to exceed that share with an effect of 0.2 in every sublayer, otherwise "
         "undecided (no power); the noise gate applies to a checkpoint only where its graphs can change the verdict "
         "(a trained share <= 0.1 cannot exceed the null's by 0.1 whatever the null shows)", 0.1, True,
         "trained - null", "BH across sublayers", "BH family power >= 0.8 at rank-biserial 0.2"),
    Rule("community_coupling_near_symmetric", 5, COMMUNITY_SENTENCE,
         "mean community rho over near-symmetric sublayers (types as for the unit level) minus that over the other "
         "sublayers > 0.1; where every sublayer is of the type, trained - null over the same sublayers (paired by "
         "depth) > 0.1; no holds unless above the null model's; undecided on noise graphs (trained; both models "
         "where the contrast is with the null model)",
         _S["min_community_rho_difference"], True, "no holds unless above the null model's over the same sublayers"),
    Rule("community_coupling_near_symmetric@absolute", 2, COMMUNITY_SENTENCE,
         "mean Spearman rho(community position, log gain) over near-symmetric sublayers > 0", 0.0,
         True, "none"),
    Rule("community_coupling_strongly_non_normal", 5, COMMUNITY_SENTENCE,
         "mean community rho over strongly non-normal sublayers (Henrici, as for the unit level) minus that over the "
         "other sublayers < -0.1; where every sublayer is of the type, trained - null over the same sublayers (paired "
         "by depth) < -0.1; no holds unless below the null model's; undecided on noise graphs (trained; both models "
         "where the contrast is with the null model)",
         -_S["min_community_rho_difference"], False, "no holds unless below the null model's over the same sublayers"),
    Rule("community_coupling_strongly_non_normal@rotation_dominated", 4, COMMUNITY_SENTENCE,
         "the same over rotation-dominated sublayers (v4's reading)", -_S["min_community_rho_difference"], False,
         "no holds unless below the null model's over the same sublayers"),
    Rule("community_coupling_operator_dependence", 5, COMMUNITY_SENTENCE,
         "marginal Spearman rho of the trained community rho with asymmetry index and with rotation share across "
         "sublayers, whole layers permuted, Holm over the two arms; an arm whose measure's sd across sublayers is below "
         "0.01 is not testable; holds when one arm falls (Holm p < 0.05), none rises, and the least-squares line on a "
         "falling arm changes sign inside the observed range; does not hold when one rises (Holm p < 0.05)", None,
         None, "the null model's row shown beside", "Holm over the testable arms (at most 2)"),
    Rule("community_coupling_learned", 5, COMMUNITY_SENTENCE,
         "sign-free pooled community test (Q = sum (K - 1) rho^2 over sublayers with K >= 4) with its p calibrated for "
         "dependence between neighbouring sublayers (the exact permutation null stretched to the variance of Q under "
         "an AR(1) dependence in depth estimated from the data) < 0.05 on the trained model; its chance-corrected "
         "excess e = (Q - m) / sum (K - 1) above the null model's by 0.01 (0.1^2: a mean squared rho), the 95% chance "
         "band of the difference above 0.01; and the null model's p >= 0.05 with the power of the same calibrated test "
         ">= 0.8 for |rho| = 0.3 in every sublayer; does not hold when the null model's is significant, or the trained "
         "model's is not with power >= 0.8; otherwise undecided (no power)", _S["min_excess_difference"], True,
         "trained - null chance-corrected excess", "one pooled test per model", "pooled power >= 0.8 at |rho| = 0.3"),
)
RULES = {rule.key: rule for rule in _RULES}


def _canonical(value):
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    return value


def declared_rules() -> dict:
    """The rules as data: version, sizes and every reading's rule (what ``rules_hash`` is taken of)."""
    return {"version": RULES_VERSION, "sizes": _canonical(dict(SIZES)),
            "rules": [_canonical(asdict(rule)) for rule in _RULES]}


def rules_hash() -> str:
    """sha256 (first 16 hex digits) of the canonical JSON of :func:`declared_rules`."""
    text = json.dumps(declared_rules(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def rule_for(key: str) -> Rule:
    """The declared rule of a claim row: its own entry, else its claim's (e.g. the surgery's other orderings, the
    gradient per sublayer type: ``spectral_gradient_attn@henrici`` reads ``spectral_gradient``)."""
    base = key.split("@", 1)[0]
    for candidate in (key, base, base.rsplit("_", 1)[0]):
        if candidate in RULES:
            return RULES[candidate]
    raise KeyError(f"no declared rule for {key!r}: add it to resdyn/claims/rules.py (and a new RULES_VERSION)")


def rule(key: str) -> str:
    return RULES[key].decides


def rule_version(key: str) -> int:
    return RULES[key].version


def rules_table() -> dict[str, list]:
    """{key: [version, text]} as claims.json has recorded it since rules v1."""
    return {rule.key: [rule.version, rule.decides] for rule in _RULES}


# the sizes under the names the evaluators use
N_BOOTSTRAP = SIZES["n_bootstrap"]
BOOTSTRAP_SEED = SIZES["bootstrap_seed"]
N_PERMUTATIONS = SIZES["n_permutations"]
NOISE_OBSERVATIONS_CAP = SIZES["noise_observations_cap"]
TOPOLOGY_NOISE_FACTOR = SIZES["topology_noise_factor"]
EARLY, LATE = SIZES["early_depth"], SIZES["late_depth"]
MIN_SHARE_EFFECT = SIZES["min_share_effect"]
MIN_GRADIENT_CHANGE = SIZES["min_gradient_change"]
MIN_RANK_BISERIAL = SIZES["min_rank_biserial"]
MIN_COMMUNITY_RHO_DIFFERENCE = SIZES["min_community_rho_difference"]
MIN_SURGERY_SPECIFICITY = SIZES["min_surgery_specificity"]
NEAR_SYMMETRIC_ASYMMETRY = SIZES["near_symmetric_asymmetry"]
RANDOM_ROTATION_SHARE = SIZES["random_rotation_share"]
RANDOM_ASYMMETRY = SIZES["random_asymmetry"]
STATED_UNIT_EFFECT = SIZES["stated_unit_effect"]
STATED_COMMUNITY_RHO = SIZES["stated_community_rho"]
MIN_POWER = SIZES["min_power"]
FAMILY_LEVEL = SIZES["family_level"]
MIN_MEASURE_SPREAD = SIZES["min_measure_spread"]
STRONGLY_NON_NORMAL_HENRICI = SIZES["strongly_non_normal_henrici"]
TEST_LEVEL = SIZES["test_level"]
MIN_COMMUNITIES = SIZES["min_communities"]
