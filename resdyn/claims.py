"""The paper's claims, checked on one model: a null-model checkpoint beside a trained one.

Each claim of PAPER.md's headline results becomes one or more *readings*: a measure computed from the
warehouse's tables, an estimate for the null model and for the trained model, and a verdict by a rule
written down here (``RULES``: each rule has a version, and docs/study.md says which version was fixed
before which model's numbers were seen). The first reading of a claim is its primary one; the others
show which conclusions depend on the reading (e.g. "near-symmetric" by the asymmetry index, the primary,
or by Henrici's departure, which is 0 for rotations too).

Rules v4 (issue 41) judge every claim by an *effect of a stated minimum size* (``MIN_*``), against the null model
wherever the claim has one (trained - null paired by depth and by fold, or a ratio of the two); the paper's absolute
wording is kept as a non-primary ``@absolute`` reading beside it. Each claim says in words why (``Claim.why``).

- ``holds``: the effect is beyond its bound and every interval it has is on that side;
- ``does not hold``: every interval is on the other side (the effect, if any, is smaller than the minimum);
- ``undecided``: an interval straddles the bound, or the data cannot carry the test (the correlation graphs within
  ``TOPOLOGY_NOISE_FACTOR`` of independent units' noise level), or a trained value that a claim puts beyond the null
  model's is not (:func:`_guarded`);
- ``undecided (ordering-dependent)``: the surgery's verdict differs between definitions of the normal part
  (LAPACK's Schur ordering, the two modulus orderings, the basis-free polar normal part);
- ``undecided (no power)``: a coupling called absent by a test whose power for the stated effect
  (``STATED_UNIT_EFFECT``, ``STATED_COMMUNITY_RHO``) is below ``MIN_POWER`` (resdyn/coupling_power.py);
- ``not testable``: the measure is undefined here (e.g. no sublayer of an operator type).

Multiplicity: the gradient's six tests (two sublayer types x three readings) are Holm-adjusted as one family; the
unit-level tests are BH-corrected across sublayers on their degree-stratified permutation p; "learned" for the
community coupling is one pooled test across sublayers instead of a count of per-sublayer rejections.

Two intervals, and a verdict needs every interval it has on its side (their hull is what ``side`` reads).
Spectral and depth verdicts have the samples' interval whenever the folds ran (a note says when they did not);
topology verdicts rest on the bootstrap over sublayers, their tests' own p-values and the noise gate:
- **samples**: the block jackknife over the fold means (resdyn/sampling.py): how much the number moves
  with the samples behind each mean Jacobian. Every statistic, a mean over sublayers, a rank of the
  product through depth or a surgery share, is recomputed on each leave-one-fold-out set (the folds hold
  the same samples in every sublayer), so the replicates are exact;
- **sublayers**: a 95% percentile bootstrap over sublayers (Efron & Tibshirani 1993) for statistics that
  average sublayers: how much the number depends on which sublayers happened to be measured (resampled
  as if exchangeable; neighbouring ones are correlated, so this understates somewhat).

"Monotonic" is Spearman's rank correlation with depth, per sublayer type, with a permutation p-value.
Random baselines: the null model (the same architecture, freshly initialised) is every measure's
reference of the sublayer's own structure; resdyn/baselines.py simulates products of Gaussian factors
of the sublayer's shapes for the one-number references quoted in the notes.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.special
import scipy.stats

from . import coupling_power
from .coupling import rank_correlation_test
from .depth import POLAR_NORMAL  # the basis-free normal part: the surgery's primary reading
from .depth import RANK_DEFINITIONS as RANKS
from .depth import SCHUR_ORDERING as PRIMARY_ORDERING
from .depth import SCHUR_ORDERINGS as ORDERINGS
from .sampling import jackknife
from .spectra import NEAR_SYMMETRIC_ASYMMETRY

N_BOOTSTRAP = 2000
BOOTSTRAP_SEED = 0
N_PERMUTATIONS = 10000
EARLY, LATE = 1 / 3, 2 / 3  # relative depth: the first and last thirds of the network
NOISE_OBSERVATIONS_CAP = 2048  # simulated observations of the noise level (d = 4096: a 2048 x 4096 draw, 64 MB)
TOPOLOGY_NOISE_FACTOR = 1.5  # graphs whose median kNN |r| is below this multiple of independent units' are noise

# Rules v4: every verdict is an effect of a stated minimum size, judged against the null model where the claim has
# one. The sizes, fixed before any v4 verdict was computed (docs/study.md, "Rules v4"):
MIN_SHARE_EFFECT = 0.05  # rotation share / asymmetry index, trained - null: 1/20 of their [0, 1] range
MIN_GRADIENT_CHANGE = 0.05  # the Theil-Sen change of a measure over the depth span of a sublayer type
MIN_RANK_BISERIAL = 0.05  # mean rank-biserial effect of boundary units (unit level)
MIN_COMMUNITY_RHO_DIFFERENCE = 0.1  # mean community rho of one operator type minus that of the other sublayers
MIN_SURGERY_SPECIFICITY = 0.1  # alpha = 0 share restored, trained - null
RANDOM_ROTATION_SHARE = 2 / np.pi  # the circular law: a random map's rotation share (resdyn/spectra.py)
RANDOM_ASYMMETRY = 1 / np.sqrt(2)  # a random map's asymmetry index
STATED_UNIT_EFFECT = 0.2  # the planted rank-biserial effect whose power an absence needs (a small effect)
STATED_COMMUNITY_RHO = 0.3  # the planted community rho, in every sublayer, whose power an absence needs
MIN_POWER = 0.8  # "absent" / "does not hold" for a coupling only at this power for the stated effect
FAMILY_LEVEL = 0.05  # Holm's familywise level for the gradient family (2 sublayer types x 3 readings)
UNDECIDED_ORDERING = "undecided (ordering-dependent)"
UNDECIDED_POWER = "undecided (no power)"
VERDICTS = ("holds", "does not hold", "undecided", UNDECIDED_ORDERING, UNDECIDED_POWER, "not testable")

# Every rule, its version and when it was fixed (docs/study.md keeps the history): v1 rules are those of
# the first claims table (henrici / complex-fraction readings, slope), v2 those of issue 30 (commit 84afd5b),
# v3 the three whose samples' interval or decision changed after review (commits 323b2c8, 3c97167), v4 those of
# issue 41 (relative to the null model, sized, basis-free surgery, power before absence): docs/study.md records
# the content hash of this module's rules (``rules_hash``) as committed before they were used.
RULES = {
    "early_rotation": (4, "trained - null mean rotation_share over the first third of depth, paired by depth, "
                          "> 0.05 (every interval above)"),
    "early_rotation@absolute": (4, "trained mean rotation_share, first third of depth > 2/pi (a random map's)"),
    "early_rotation@frac_complex": (4, "trained - null mean complex fraction, first third, paired by depth > 0 (the "
                                       "count saturates: a random real matrix of width 640 has 0.968 of it)"),
    "spectral_gradient": (4, "Spearman rho(depth, measure) per sublayer type: holds when rho < 0, its permutation p "
                             "Holm-adjusted over the family (2 sublayer types x 3 readings) < 0.05, rho's intervals "
                             "(bootstrap over sublayers, jackknife over folds) below 0 and the Theil-Sen change over "
                             "the depth span below -0.05 (its 95% interval); does not hold on a significant rise or "
                             "when the change's interval lies above -0.05 (a fall smaller than the minimum); no "
                             "holds unless the trained rho is below the null model's"),
    "late_near_symmetric": (4, "trained - null mean asymmetry_index over the last third, paired by depth, < -0.05"),
    "late_near_symmetric@absolute": (4, "trained mean asymmetry_index, last third < 1/(2 sqrt 2) (half a random "
                                        "map's)"),
    "late_near_symmetric@henrici": (1, "trained mean dep/||J - I||_F, last third < 0.5"),
    "init_near_symmetric": (4, "null model mean asymmetry_index over all sublayers < 1/(2 sqrt 2) (absolute: the "
                               "null model is the reference itself)"),
    "init_near_symmetric@random": (4, "null model mean asymmetry_index - 1/sqrt 2 (a random map's) < -0.05"),
    "init_near_symmetric@henrici": (1, "null model mean dep/||J - I||_F < 0.5"),
    "training_adds_rotation": (4, "trained - null rotation_share, first two thirds, paired by depth > 0.05 (samples' "
                                  "interval paired by fold)"),
    "training_adds_rotation@frac_complex": (4, "trained - null complex fraction, first two thirds > 0"),
    "cumulative_bottleneck": (4, "(trained rank after the first map / after all maps) / (the null model's), paired "
                                 "by fold, > 2"),
    "cumulative_bottleneck@absolute": (2, "trained rank after the first map / after all maps > 2 (interval from the "
                                          "samples)"),
    "bottleneck_learned": (3, "full-depth rank, null / trained > 2 (samples' interval paired by fold)"),
    "surgery_dissolves": (4, "share of the rank lost through depth that alpha = 0 restores with the basis-free "
                             "(polar) normal part > 0.5; undecided (ordering-dependent) when one of the three Schur "
                             "orderings and the polar reading holds and another does not hold (effective rank); no "
                             "holds where the null model's rescue is as large"),
    "surgery_installed_by_training": (4, "surgery share (polar normal part), trained - null, paired by fold > 0.1"),
    "coupling_near_symmetric": (4, "mean rank-biserial effect over near-symmetric sublayers > 0.05, the types the "
                                   "trained model's against the null model at the same depth (asymmetry below it "
                                   "by 0.05; rotation-dominated: rotation share above it by 0.05); undecided on "
                                   "noise graphs"),
    "coupling_rotation_dominated": (4, "mean rank-biserial effect over rotation-dominated sublayers < -0.05; "
                                       "undecided on noise graphs"),
    "coupling_absent_at_init": (4, "null model's BH-significant share (BH on the degree-stratified permutation p) "
                                   "< 0.05, with power >= 0.8 of the BH family (its sublayers' sizes) to reject any "
                                   "test when every sublayer has a rank-biserial effect of 0.2; undecided (no power) "
                                   "below it; undecided on noise graphs"),
    "coupling_learned": (4, "BH-significant share (degree-stratified permutation p), trained - null > 0.1; does not "
                            "hold only with power >= 0.8 of the trained BH family to exceed that share with an "
                            "effect of 0.2 in every sublayer, otherwise undecided (no power)"),
    "community_coupling_near_symmetric": (4, "mean community rho over near-symmetric sublayers (relative types, as "
                                             "for the unit level) minus that over the other sublayers > 0.1; no holds "
                                             "unless above the null model's over the same sublayers; undecided on "
                                             "noise graphs"),
    "community_coupling_near_symmetric@absolute": (2, "mean Spearman rho(community position, log gain) over "
                                                      "near-symmetric sublayers > 0"),
    "community_coupling_rotation_dominated": (4, "mean community rho over rotation-dominated sublayers minus that "
                                                 "over the other sublayers < -0.1; undecided on noise graphs"),
    "community_coupling_rotation_dominated@absolute": (2, "the same over rotation-dominated sublayers < 0"),
    "community_coupling_operator_dependence": (4, "Spearman rho of the trained community rho with asymmetry index and "
                                                  "with rotation share across sublayers, whole layers permuted as "
                                                  "the null: holds when one is negative with p < 0.05, none positive "
                                                  "with p < 0.05, and the least-squares line on it changes sign "
                                                  "inside the observed range; does not hold when one is positive "
                                                  "with p < 0.05; the two-predictor fit's R^2 shown beside"),
    "community_coupling_learned": (4, "sign-free pooled community test (Q = sum (K - 1) rho^2, exact permutation "
                                      "null) p < 0.05 on the trained model, its weighted RMS rho above the null "
                                      "model's by 0.1, and the null model's p >= 0.05 with power >= 0.8 for |rho| = "
                                      "0.3 in every sublayer; does not hold when the null model's is significant, or "
                                      "the trained model's is not with power >= 0.8; otherwise undecided (no power)"),
}


def rules_hash() -> str:
    """sha256 (first 16 hex digits) of the sources of RULE_MODULES: the rules, their sizes and the code that applies
    them.
    docs/study.md records it as committed before the rules were used (tests/unit/test_claims.py keeps the two
    equal), so any change here after that shows as a new hash to record."""
    digest = hashlib.sha256()
    for module in RULE_MODULES:
        digest.update(module.encode() + b"\0" + (Path(__file__).parent / module).read_bytes())
    return digest.hexdigest()[:16]


# the modules whose code decides a verdict: this one, the power and pooled tests, the normal part and the surgery,
# the operator measures and types, the jackknife, the community test (their content makes rules_hash)
RULE_MODULES = ("claims.py", "coupling_power.py", "normal_part.py", "depth.py", "spectra.py", "sampling.py",
                "community_coupling.py", "coupling.py")


def rule(key: str) -> str:
    return RULES[key][1]


def rule_version(key: str) -> int:
    return RULES[key][0]


def ginibre_complex_fraction(n: int) -> float:
    """Expected fraction of non-real eigenvalues of an n x n matrix of independent N(0, 1) entries (real
    Ginibre): 1 - E_n / n with E_n = 1/2 + sqrt(2) 2F1(1, -1/2; n; 1/2) Gamma(n + 1/2) / (Gamma(n) sqrt(pi)) real
    ones (Edelman, Kostlan & Shub 1994, J. AMS 7, Theorem 5.1; E_n ~ sqrt(2 n / pi)). The complex fraction a
    non-symmetric matrix shows without any learned rotation."""
    ratio = np.exp(scipy.special.gammaln(n + 0.5) - scipy.special.gammaln(n))
    real = 0.5 + np.sqrt(2.0) * scipy.special.hyp2f1(1.0, -0.5, n, 0.5) * ratio / np.sqrt(np.pi)
    return float(1.0 - real / n)


def fisher_knn_correlation(n_observations: int, n_units: int, k: int) -> float:
    """The median |r| of one unit's k strongest correlations when all units are independent Gaussians: the
    (k/2)-th largest of n_units - 1 values |r|, with atanh(r) sqrt(n - 3) ~ N(0, 1) (Fisher 1921)."""
    if n_observations <= 3 or n_units <= 1:
        return float("nan")
    tail = (k / 2) / (n_units - 1)
    z = scipy.stats.norm.isf(tail / 2)
    return float(np.tanh(z / np.sqrt(n_observations - 3)))


@functools.lru_cache(maxsize=64)
def noise_knn_correlation(n_observations: int, n_units: int, k: int, *, seed: int = 0) -> float:
    """The median |r| over the edges of the platform's kNN graph (each unit's k largest |r|, symmetrised by
    union: resdyn.topology.signed_graph) built from n_observations draws of n_units independent Gaussian
    units: the same statistic as a measured graph's median edge |r|, where the data carry no correlation at
    all. (:func:`fisher_knn_correlation` is the per-unit closed form it sits slightly above: the union adds
    one-sided, weaker edges.)"""
    from .topology import correlation_matrix, signed_graph

    if n_observations <= 3 or n_units <= 1 or k <= 0:
        return float("nan")
    simulated = min(n_observations, NOISE_OBSERVATIONS_CAP)
    noise = np.random.default_rng(seed).standard_normal((simulated, n_units))
    edges = signed_graph(correlation_matrix(noise), "knn", k=k)
    median = float(np.median(np.abs(edges.weight)))
    # beyond the cap, Fisher's z carries the level over: atanh(r) sqrt(n - 3) has the same law at every n
    return float(np.tanh(np.arctanh(median) * np.sqrt((simulated - 3) / (n_observations - 3))))


def _finite(value) -> bool:
    return value is not None and bool(np.isfinite(value))


@dataclass(frozen=True)
class Estimate:
    """A number with up to two 95% intervals: over sublayers (``low``, ``high``: bootstrap) and from the samples
    (``sample_low``, ``sample_high``: block jackknife over folds). None: not made; NaN: wanted but impossible."""

    value: float
    low: float | None = None
    high: float | None = None
    sample_low: float | None = None
    sample_high: float | None = None
    p_value: float | None = None  # a permutation p where the rule asks for one

    def bounds(self) -> tuple[float, float] | None:
        """The hull of the intervals that were made (None when none was); NaN when one was wanted and failed."""
        pairs = [(lo, hi) for lo, hi in ((self.low, self.high), (self.sample_low, self.sample_high)) if lo is not None]
        if not pairs:
            return None
        if not all(_finite(lo) and _finite(hi) for lo, hi in pairs):
            return float("nan"), float("nan")
        return min(lo for lo, _ in pairs), max(hi for _, hi in pairs)

    def text(self, digits: int = 3) -> str:
        if not _finite(self.value):
            return "n/a"
        parts = [f"{self.value:.{digits}g}"]
        for label, lo, hi in (("", self.low, self.high), ("samples ", self.sample_low, self.sample_high)):
            if lo is None:
                continue
            parts.append(f"[{label}{lo:.{digits}g}, {hi:.{digits}g}]" if _finite(lo) and _finite(hi)
                         else f"[{label}no interval]")
        if self.p_value is not None:
            parts.append(f"(p = {self.p_value:.2g})")
        return " ".join(parts)


@dataclass
class CheckpointData:
    """What the claims need of one partition, one entry per sublayer in depth order (arrays of equal length).

    ``measures`` maps a layer_metrics column to its values; ``replicates`` maps it to a (folds x sublayers) array
    of its leave-one-fold-out values (absent without folds). ``cumulative`` and ``cumulative_replicates`` do the
    same per rank definition through depth; ``surgery_full_depth[(ordering, alpha, rank)]`` is the full-depth rank
    of the product of J(alpha) and ``surgery_replicates[(ordering, rank)]`` its alpha = 0 replicates."""

    depth: np.ndarray
    measures: dict[str, np.ndarray]
    operator_type: np.ndarray  # strings: resdyn.spectra.operator_type
    cumulative: dict[str, np.ndarray]  # rank definition -> rank of J_depth ... J_0, per depth
    surgery_full_depth: dict[tuple[str, float, str], float]
    coupling_effect: np.ndarray  # rank-biserial effect per sublayer, nan where the test is undefined
    coupling_significant: np.ndarray  # bool, False where undefined
    sublayer: np.ndarray | None = None  # "attn" / "mlp" per sublayer
    operator_type_henrici: np.ndarray | None = None
    replicates: dict[str, np.ndarray] = field(default_factory=dict)
    cumulative_replicates: dict[str, np.ndarray] = field(default_factory=dict)  # rank -> (folds x depths)
    surgery_replicates: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)  # (ordering, rank) -> folds
    community_rho: np.ndarray | None = None  # Spearman rho(position, log gain) per sublayer, nan where undefined
    community_significant: np.ndarray | None = None
    noise_to_signal: np.ndarray | None = None  # per sublayer (jackknife)
    d_model: int = 0
    n_samples: int = 0
    n_observations: int = 0  # (sample, position) pairs behind the correlation graphs
    median_edge_correlation: float = float("nan")  # median |r| over the kNN graphs' edges
    graph_k: int = 0  # 0 when the graphs are not kNN graphs (then there is no noise level to compare with)
    # What the power of the coupling tests depends on, per sublayer (None: inputs made before rules v4)
    n_boundary: np.ndarray | None = None  # boundary units of the unit-level test
    n_interior: np.ndarray | None = None
    n_communities: np.ndarray | None = None  # eligible communities of the community test
    n_permutations: int = 1000  # of each per-sublayer test (the run's settings)
    missing: tuple[str, ...] = ()  # input columns this checkpoint's frames lack (older inputs), named in notes

    def __post_init__(self) -> None:
        if self.sublayer is None:
            self.sublayer = np.asarray(["attn" if d % 2 == 0 else "mlp" for d in self.depth])
        if self.operator_type_henrici is None:
            self.operator_type_henrici = np.full(len(self.depth), "other")

    @property
    def relative_depth(self) -> np.ndarray:
        return self.depth / max(1, self.depth.max())

    @property
    def layer(self) -> np.ndarray:
        return np.asarray(self.depth) // 2  # depth = 2 layer + (sublayer = mlp): resdyn/naming.py

    @property
    def n_folds(self) -> int:
        return min((len(r) for r in self.replicates.values()), default=0)

    def measure(self, name: str) -> np.ndarray:
        return np.asarray(self.measures[name], dtype=np.float64)

    def graph_noise_ratio(self) -> float:
        """Median kNN edge |r| over that of independent units (NaN when not a kNN graph)."""
        noise = noise_knn_correlation(self.n_observations, self.d_model, self.graph_k)
        return self.median_edge_correlation / noise if _finite(noise) and noise > 0 else float("nan")


@dataclass(frozen=True)
class Claim:
    key: str
    statement: str
    measure: str
    paper: str
    rule: str
    null_model: Estimate | None
    trained: Estimate | None
    verdict: str
    note: str = ""
    primary: bool = True  # False: another reading of the same claim (``key`` is then "claim@reading")
    rule_version: int = 0
    # The quantization control (the null model rounded through the trained file's types): the claim's null-model
    # measure on it, or, for claims made of trained against null, that comparison against it
    quantized_null_model: Estimate | None = None
    quantized_comparison: Estimate | None = None
    why: str = ""  # the verdict in words: the bound, the effect, the power
    effect: Estimate | None = None  # what the verdict rests on where it is not ``trained`` itself (e.g. trained - null)
    direction: int = 0  # +1 / -1: the claim puts the trained value above / below the null model's; 0: no such order
    # the trained model extrapolated to no rounding (with_rounding_control): the verdict's statistic and verdict there
    zero_rounding: Estimate | None = None
    zero_rounding_verdict: str = ""

    def rounding_text(self) -> str:
        if not self.zero_rounding_verdict:
            return "n/a"
        value = self.zero_rounding.text() if self.zero_rounding else "n/a"
        decided = {"holds", "does not hold"}
        if self.verdict in decided and self.zero_rounding_verdict in decided and self.zero_rounding_verdict != \
                self.verdict:
            flag = ": quantization could explain the verdict"
        elif self.verdict in decided and self.zero_rounding_verdict != self.verdict:
            flag = ": weaker at zero rounding (the extrapolation widens every interval)"
        else:
            flag = ""
        return f"{value}, {self.zero_rounding_verdict}{flag}"

    def control_text(self) -> str:
        if self.quantized_null_model is not None:
            return self.quantized_null_model.text()
        if self.quantized_comparison is not None:
            return f"trained vs it: {self.quantized_comparison.text()}"
        return "n/a"

    @property
    def claim(self) -> str:
        return self.key.split("@", 1)[0]

    def row(self) -> dict:
        return {"claim": self.statement, "measure": self.measure, "paper": self.paper, "rule": self.rule,
                "null_model": self.null_model.text() if self.null_model else "n/a",
                "trained": self.trained.text() if self.trained else "n/a",
                "effect": self.effect.text() if self.effect else "n/a", "verdict": self.verdict, "note": self.note,
                "key": self.key, "primary": self.primary, "rule_version": self.rule_version, "why": self.why,
                "zero_rounding": self.rounding_text(),
                "quantized_null_model": self.control_text()}


def bootstrap(statistic: Callable[..., float], *arrays: np.ndarray, n: int = N_BOOTSTRAP,
              seed: int = BOOTSTRAP_SEED) -> Estimate:
    """The statistic of the arrays (resampled together, by index) and its 95% percentile interval; an interval
    that cannot be made (one value, or most resamples non-finite) is nan, which ``side`` calls undecided."""
    arrays = tuple(np.asarray(a) for a in arrays)
    size = len(arrays[0])
    value = float(statistic(*arrays))
    if size < 2:
        return Estimate(value, float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    draws = np.empty(n)
    for i in range(n):
        index = rng.integers(0, size, size)
        draws[i] = statistic(*(a[index] for a in arrays))
    draws = draws[np.isfinite(draws)]
    if len(draws) < n / 2:
        return Estimate(value, float("nan"), float("nan"))
    low, high = np.percentile(draws, [2.5, 97.5])
    return Estimate(value, float(low), float(high))


def spearman_with_permutation(x: np.ndarray, y: np.ndarray, *, n_permutations: int = N_PERMUTATIONS,
                              seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """(Spearman's rho, two-sided permutation p) of the finite pairs (resdyn.coupling.rank_correlation_test); NaN
    and p = 1 with fewer than three finite pairs or a constant variable."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), 1.0
    return rank_correlation_test(x, y, n_permutations=n_permutations, seed=seed)


def side(estimate: Estimate | None, bound: float, holds_above: bool) -> str:
    """The verdict of ``estimate`` against ``bound`` (module docstring): the hull of its intervals decides; without
    any interval the value does."""
    if estimate is None or not _finite(estimate.value):
        return "not testable"
    bounds = estimate.bounds()
    low, high = bounds if bounds is not None else (estimate.value, estimate.value)
    if not (np.isfinite(low) and np.isfinite(high)):
        return "undecided"  # an interval was wanted and could not be made
    if holds_above:
        return "holds" if low > bound else "does not hold" if high <= bound else "undecided"
    return "holds" if high < bound else "does not hold" if low >= bound else "undecided"


def _jackknife_bounds(value: float, replicates: np.ndarray | list | None) -> tuple[float | None, float | None]:
    if replicates is None or len(replicates) == 0:
        return None, None
    interval = jackknife(value, replicates)
    return interval.low, interval.high


def _over_sublayers(data: CheckpointData, name: str, mask: np.ndarray) -> Estimate | None:
    """Mean of measure ``name`` over the masked sublayers: bootstrap over them, jackknife over the folds."""
    values = data.measure(name)
    keep = mask & np.isfinite(values)
    if not keep.any():
        return None
    estimate = bootstrap(np.mean, values[keep])
    replicates = data.replicates.get(name)
    sample_low, sample_high = _jackknife_bounds(
        estimate.value, None if replicates is None else [float(np.mean(r[keep])) for r in replicates])
    return Estimate(estimate.value, estimate.low, estimate.high, sample_low, sample_high)


def _paired_difference(trained: CheckpointData, null: CheckpointData, name: str, mask_of) -> Estimate | None:
    """Mean over sublayers (of the trained model's mask) of trained - null at the same depth. The samples' interval
    jackknifes the difference fold by fold: both models draw the same windows (same seed, n and, within a model's
    checkpoints, tokenizer), so fold k holds the same text in both and the pairing is exact; were the folds
    unrelated, the paired jackknife would still be valid."""
    if len(trained.depth) != len(null.depth) or not np.array_equal(trained.depth, null.depth):
        return None
    mask = mask_of(trained)
    difference = trained.measure(name) - null.measure(name)
    keep = mask & np.isfinite(difference)
    if not keep.any():
        return None
    estimate = bootstrap(np.mean, difference[keep])
    ours, theirs = trained.replicates.get(name), null.replicates.get(name)
    if ours is None or theirs is None or len(ours) != len(theirs) or len(ours) < 2:
        return estimate
    low, high = _jackknife_bounds(estimate.value, [float(np.mean(a[keep] - b[keep])) for a, b in zip(ours, theirs)])
    return Estimate(estimate.value, estimate.low, estimate.high, low, high)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    return float(np.corrcoef(x, y)[0, 1]) if len(x) > 2 and np.ptp(x) > 0 and np.ptp(y) > 0 else float("nan")


def rank_correlations(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row of ``x`` with the same row of ``y`` (average ranks, scipy.stats.rankdata; the
    Pearson correlation of the ranks, Spearman 1904); NaN for a row in which either is constant."""
    rx = scipy.stats.rankdata(np.atleast_2d(x), axis=1)
    ry = scipy.stats.rankdata(np.atleast_2d(y), axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    scale = np.sqrt(np.sum(rx * rx, axis=1) * np.sum(ry * ry, axis=1))
    return np.divide(np.sum(rx * ry, axis=1), scale, out=np.full(len(scale), np.nan), where=scale > 0)


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979, Scand. J. Stat. 6:65): the k-th smallest of m times (m - k + 1),
    made monotone, at most 1; NaN entries are not tests and stay NaN. (scipy.stats offers BH and BY only.)"""
    p_values = np.asarray(p_values, dtype=np.float64)
    adjusted = np.full(len(p_values), np.nan)
    tested = np.flatnonzero(np.isfinite(p_values))
    order = tested[np.argsort(p_values[tested], kind="stable")]
    m = len(order)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(p_values[order] * (m - np.arange(m))))
    return adjusted


@dataclass(frozen=True)
class Gradient:
    """A measure's trend through depth over one sublayer type: Spearman's rho (with its own intervals and its
    permutation p) and the Theil-Sen change of the measure over the depth span (with its 95% interval)."""

    rho: Estimate
    change: Estimate


def _depth_gradient(data: CheckpointData, name: str, sublayer: str) -> Gradient | None:
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
    if not _finite(rho):
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
        sample_low, sample_high = _jackknife_bounds(rho, rank_correlations(
            np.broadcast_to(depth, (len(replicates), len(depth))), np.asarray(replicates)[:, keep]))
    slope, _, slope_low, slope_high = scipy.stats.theilslopes(values[keep], depth)
    span = float(np.ptp(depth))
    return Gradient(Estimate(rho, low, high, sample_low, sample_high, p_value=p),
                    Estimate(slope * span, slope_low * span, slope_high * span))


def _gradient_verdict(gradient: Gradient | None, adjusted_p: float) -> tuple[str, str]:
    """(verdict, why) by the v4 rule (RULES["spectral_gradient"]): a fall needs rho < 0 with every interval of rho
    below 0, a Holm-adjusted p below FAMILY_LEVEL and a change over the depth span whose interval lies below
    -MIN_GRADIENT_CHANGE; a significant rise, or a change whose interval lies above -MIN_GRADIENT_CHANGE (a fall, if
    any, smaller than the minimum), does not hold."""
    if gradient is None or not _finite(gradient.rho.value):
        return "not testable", "no rank correlation (fewer than 3 sublayers, or a measure constant through depth)"
    rho, change = gradient.rho, gradient.change
    bounds = rho.bounds()
    low, high = bounds if bounds is not None else (rho.value, rho.value)
    significant = _finite(adjusted_p) and adjusted_p < FAMILY_LEVEL
    facts = (f"rho {rho.value:.3g} (interval {low:.3g} to {high:.3g}, Holm p {adjusted_p:.2g}); change over depth "
             f"{change.value:.3g} [{change.low:.3g}, {change.high:.3g}] against the minimum fall {MIN_GRADIENT_CHANGE}")
    if not (np.isfinite(low) and np.isfinite(high)):
        return "undecided", f"{facts}: rho's interval could not be made"
    if rho.value < 0 and high < 0 and significant and _finite(change.high) and change.high < -MIN_GRADIENT_CHANGE:
        return "holds", f"{facts}: a significant fall of at least the minimum size"
    if rho.value > 0 and low > 0 and significant:
        return "does not hold", f"{facts}: a significant rise"
    if _finite(change.low) and change.low > -MIN_GRADIENT_CHANGE:
        return "does not hold", f"{facts}: any fall is smaller than the minimum"
    return "undecided", f"{facts}: " + ("not significant after Holm's correction" if not significant else
                                        "rho's interval or the change's interval straddles its bound")


def _why(label: str, estimate: Estimate | None, bound: float, holds_above: bool, verdict: str) -> str:
    """The verdict of ``side`` in words."""
    if estimate is None or not _finite(estimate.value):
        return f"{label} cannot be computed on these checkpoints"
    bounds = estimate.bounds()
    what = f"{label} {estimate.value:.3g}" + (f" (interval {bounds[0]:.3g} to {bounds[1]:.3g})" if bounds else "")
    claimed = f"{'above' if holds_above else 'below'} {bound:.3g}"
    if verdict == "holds":
        return f"{what}: {'every interval' if bounds else 'the value'} {claimed}"
    if verdict == "does not hold":
        return f"{what}: {'every interval' if bounds else 'the value'} on the other side of {bound:.3g}"
    return f"{what}: the interval straddles {bound:.3g}" if bounds and np.isfinite(bounds[0]) else \
        f"{what}: no interval could be made"


def _judged(label: str, estimate: Estimate | None, bound: float, holds_above: bool) -> tuple[str, str]:
    verdict = side(estimate, bound, holds_above)
    return verdict, _why(label, estimate, bound, holds_above, verdict)


def _cumulative(data: CheckpointData, rank: str, index: int) -> float:
    values = data.cumulative.get(rank)
    return float(values[index]) if values is not None and len(values) else float("nan")


def _ratio_estimate(numerator: float, denominator: float, numerator_replicates, denominator_replicates) -> Estimate:
    """numerator / denominator with the samples' interval of the ratio from its log's jackknife: the replicates of
    both (sequences over folds, or None: that side held fixed) are paired fold by fold (the same windows, as in
    :func:`_paired_difference`)."""
    value = numerator / denominator if denominator > 0 else float("nan")
    if not _finite(value):
        return Estimate(value)
    if numerator_replicates is None and denominator_replicates is None:
        return Estimate(value)
    size = len(numerator_replicates if numerator_replicates is not None else denominator_replicates)
    top = np.full(size, numerator) if numerator_replicates is None else np.asarray(numerator_replicates, float)
    bottom = np.full(size, denominator) if denominator_replicates is None else np.asarray(denominator_replicates, float)
    if len(top) != len(bottom) or size < 2 or np.any(top <= 0) or np.any(bottom <= 0):
        return Estimate(value, sample_low=float("nan"), sample_high=float("nan"))
    interval = jackknife(np.log(value), np.log(top) - np.log(bottom))
    if not _finite(interval.low):
        return Estimate(value, sample_low=float("nan"), sample_high=float("nan"))
    return Estimate(value, sample_low=float(np.exp(interval.low)), sample_high=float(np.exp(interval.high)))


def _noise_gate(verdict: str, *checkpoints: CheckpointData) -> tuple[str, str]:
    """(verdict, note): a topology verdict is undecided where a checkpoint's graphs are within
    TOPOLOGY_NOISE_FACTOR of the independent-unit noise level (module docstring)."""
    ratios = [data.graph_noise_ratio() for data in checkpoints]
    noisy = [r for r in ratios if _finite(r) and r < TOPOLOGY_NOISE_FACTOR]
    note = "graphs " + " / ".join(f"{r:.2f}x" if _finite(r) else "n/a" for r in ratios) + " the noise level"
    if noisy and verdict in ("holds", "does not hold"):
        return "undecided", note + f" (below {TOPOLOGY_NOISE_FACTOR}x: the graphs cannot carry the test)"
    return verdict, note


EARLY_DEPTHS = lambda d: d.relative_depth <= EARLY  # noqa: E731
LATE_DEPTHS = lambda d: d.relative_depth >= LATE  # noqa: E731
EARLY_AND_MIDDLE_DEPTHS = lambda d: d.relative_depth < LATE  # noqa: E731
EVERY_DEPTH = lambda d: np.ones(len(d.depth), bool)  # noqa: E731


def _relative_claim(key: str, statement: str, paper: str, null: CheckpointData, trained: CheckpointData, name: str,
                    depths, where: str, bound: float, holds_above: bool, primary: bool, note: str = "") -> Claim:
    """A claim judged by trained - null of a measure's mean over some depths, paired by depth (and by fold)."""
    effect = _paired_difference(trained, null, name, depths)
    verdict, why = _judged(f"trained - null {name}", effect, bound, holds_above)
    return Claim(key, statement, f"mean {name}, {where}; trained - null paired by depth", paper, rule(key),
                 _over_sublayers(null, name, depths(null)), _over_sublayers(trained, name, depths(trained)), verdict,
                 note, primary, rule_version(key), why=why, effect=effect)


def _absolute_claim(key: str, statement: str, paper: str, subject: CheckpointData, other: CheckpointData, name: str,
                    depths, where: str, bound: float, holds_above: bool, primary: bool, note: str = "",
                    subject_is_trained: bool = True) -> Claim:
    """A claim judged by one checkpoint's mean of a measure over some depths against a fixed bound."""
    estimate = _over_sublayers(subject, name, depths(subject))
    verdict, why = _judged(f"{'trained' if subject_is_trained else 'null model'} mean {name}", estimate, bound,
                           holds_above)
    others = _over_sublayers(other, name, depths(other))
    null_side, trained_side = (others, estimate) if subject_is_trained else (estimate, others)
    return Claim(key, statement, f"mean {name}, {where}", paper, rule(key), null_side, trained_side, verdict, note,
                 primary, rule_version(key), why=why,
                 direction=(1 if holds_above else -1) if subject_is_trained else 0)


def _symmetry_and_rotation_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
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
    claims += [
        _relative_claim("late_near_symmetric", late, "near-symmetric", null, trained, "asymmetry_index", LATE_DEPTHS,
                        "last third of depth", -MIN_SHARE_EFFECT, False, True),
        _absolute_claim("late_near_symmetric@absolute", late, "near-symmetric", trained, null, "asymmetry_index",
                        LATE_DEPTHS, "last third of depth", NEAR_SYMMETRIC_ASYMMETRY, False, False),
        _absolute_claim("late_near_symmetric@henrici", late, "near-symmetric", trained, null, "henrici_rel_j_minus_i",
                        LATE_DEPTHS, "last third of depth", 0.5, False, False)]
    random_note = ("a random matrix: asymmetry 0.707, dep/||A||_F 0.707 (one Ginibre matrix; products of random "
                   "factors sit higher, resdyn/baselines.py)")
    claims.append(_absolute_claim("init_near_symmetric", init, "near-symmetric at OLMo step 0", null, trained,
                                  "asymmetry_index", EVERY_DEPTH, "all sublayers", NEAR_SYMMETRIC_ASYMMETRY, False,
                                  True, random_note, subject_is_trained=False))
    below_random = _over_sublayers(null, "asymmetry_index", EVERY_DEPTH(null))
    below_random = None if below_random is None else Estimate(*(
        None if v is None else v - RANDOM_ASYMMETRY for v in dataclasses.astuple(below_random)[:5]))
    verdict, why = _judged("null model mean asymmetry_index - 1/sqrt 2", below_random, -MIN_SHARE_EFFECT, False)
    claims.append(Claim("init_near_symmetric@random", init, "mean asymmetry_index over all sublayers - 1/sqrt 2",
                        "near-symmetric at OLMo step 0", rule("init_near_symmetric@random"),
                        _over_sublayers(null, "asymmetry_index", EVERY_DEPTH(null)), None, verdict, "", False,
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


GRADIENT_READINGS = (("asymmetry_index", ""), ("henrici_rel_j_minus_i", "@henrici"), ("rotation_share", "@rotation_share"))


def _gradient_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    """The gradient per sublayer type and reading; the trained model's p-values Holm-adjusted over that family."""
    family = [(name, label, sublayer) for name, label in GRADIENT_READINGS for sublayer in ("attn", "mlp")]
    gradients = {entry: _depth_gradient(trained, entry[0], entry[2]) for entry in family}
    raw = [g.rho.p_value if g is not None and g.rho.p_value is not None and _finite(g.rho.value) else np.nan
           for g in gradients.values()]
    adjusted = dict(zip(family, holm(raw)))
    claims = []
    for entry in family:
        name, label, sublayer = entry
        gradient, reference = gradients[entry], _depth_gradient(null, name, sublayer)
        verdict, why = _gradient_verdict(gradient, adjusted[entry])
        if gradient is not None and _finite(adjusted[entry]):  # print the p the verdict used: Holm's
            gradient = Gradient(dataclasses.replace(gradient.rho, p_value=float(adjusted[entry])), gradient.change)
        claims.append(Claim(
            f"spectral_gradient_{sublayer}{label}", f"The spectral gradient is monotonic through depth ({sublayer} "
            "sublayers)", f"Spearman rho(depth, {name}): intervals of rho (sublayers, samples)", "falls with depth "
            "(non-normal, rotating early; near-symmetric late)", rule("spectral_gradient"),
            reference.rho if reference else None, gradient.rho if gradient else None, verdict,
            "" if gradient is None or not _finite(gradient.change.value) else
            f"Theil-Sen change of {name} over the depth span {gradient.change.text()}", label == "",
            rule_version("spectral_gradient"), why=why, effect=gradient.change if gradient else None, direction=-1))
    return claims


def _compression(data: CheckpointData, rank: str) -> Estimate:
    """Rank after the first map / after all maps, with the samples' interval from the replicates (paired by fold)."""
    replicates = data.cumulative_replicates.get(rank)
    return _ratio_estimate(_cumulative(data, rank, 0), _cumulative(data, rank, -1),
                           None if replicates is None else replicates[:, 0],
                           None if replicates is None else replicates[:, -1])


def _compression_replicates(data: CheckpointData, rank: str) -> np.ndarray | None:
    replicates = data.cumulative_replicates.get(rank)
    return None if replicates is None else replicates[:, 0] / replicates[:, -1]


def _full_depth_replicates(data: CheckpointData, rank: str) -> np.ndarray | None:
    replicates = data.cumulative_replicates.get(rank)
    return None if replicates is None else replicates[:, -1]


def _full_depth(data: CheckpointData, rank: str) -> Estimate:
    value = _cumulative(data, rank, -1)
    replicates = _full_depth_replicates(data, rank)
    low, high = _jackknife_bounds(value, replicates) if replicates is not None and len(replicates) > 1 else (None, None)
    return Estimate(value, sample_low=low, sample_high=high)


def _bottleneck_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    claims = []
    collapse = "The cumulative Jacobian's rank collapses through depth"
    for rank in RANKS:
        primary = rank == "effective_rank"
        suffix = "" if primary else f"@{rank}"
        ours, theirs = _compression(trained, rank), _compression(null, rank)
        relative = _ratio_estimate(ours.value, theirs.value, _compression_replicates(trained, rank),
                                   _compression_replicates(null, rank))
        verdict, why = _judged("trained / null compression", relative, 2.0, True)
        note = (f"trained: {_cumulative(trained, rank, 0):.1f} -> {_cumulative(trained, rank, -1):.1f}; null model: "
                f"{_cumulative(null, rank, 0):.1f} -> {_cumulative(null, rank, -1):.1f} (d = {trained.d_model})")
        claims.append(Claim(
            f"cumulative_bottleneck{suffix}", collapse, f"{rank} of the product after the first map / after all maps; "
            "trained / null", "about 436 / 7 = 62 (Llama 3.1 8B)", rule("cumulative_bottleneck"), theirs, ours,
            verdict, note, primary, rule_version("cumulative_bottleneck"), why=why, effect=relative))
        if primary:
            verdict, why = _judged("trained compression", ours, 2.0, True)
            claims.append(Claim(
                "cumulative_bottleneck@absolute", collapse, f"{rank} of the product after the first map / after all "
                "maps", "about 436 / 7 = 62 (Llama 3.1 8B)", rule("cumulative_bottleneck@absolute"), theirs, ours,
                verdict, note, False, rule_version("cumulative_bottleneck@absolute"), why=why, direction=1))
        installed = _ratio_estimate(_cumulative(null, rank, -1), _cumulative(trained, rank, -1),
                                    _full_depth_replicates(null, rank), _full_depth_replicates(trained, rank))
        verdict, why = _judged("full-depth rank null / trained", installed, 2.0, True)
        claims.append(Claim(
            f"bottleneck_learned{suffix}", "The bottleneck is installed by training, not the architecture",
            f"full-depth {rank}; null model / trained", "rank stays high at step 0", rule("bottleneck_learned"),
            _full_depth(null, rank), _full_depth(trained, rank), verdict, "", primary,
            rule_version("bottleneck_learned"), why=why, effect=installed))
    return claims + _surgery_claims(null, trained)


def _surgery_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    """The alpha = 0 rescue: the basis-free (polar) normal part primary, every Schur ordering beside it (a verdict
    that flips with the ordering is undecided), and the rescue of the trained model against the null model's."""
    statement = "Removing the non-normal part N (alpha = 0) largely dissolves the bottleneck"
    readings = [(POLAR_NORMAL, "effective_rank")] + [(o, "effective_rank") for o in ORDERINGS if o != POLAR_NORMAL] \
        + [(PRIMARY_ORDERING, r) for r in RANKS[1:]]
    claims = []
    for ordering, rank in readings:
        primary = (ordering, rank) == (POLAR_NORMAL, "effective_rank")
        key = "surgery_dissolves" + ("" if primary else f"@{ordering}/{rank}")
        recovered, note, _ = _surgery_share(trained, ordering, rank)
        verdict, why = _judged("share restored", recovered, 0.5, True)
        if recovered is None and ordering == POLAR_NORMAL:
            why = "no polar-normal surgery in these tables (made before rules v4): rerun the partitions"
        claims.append(Claim(
            key, statement, f"share of the {rank} lost through depth that alpha = 0 restores ("
            + ("basis-free polar normal part" if ordering == POLAR_NORMAL else f"{ordering} Schur ordering") + ")",
            "largely dissolved", rule("surgery_dissolves"), _surgery_share(null, ordering, rank)[0], recovered,
            verdict, note, primary, rule_version("surgery_dissolves"), why=why, direction=1))
    definitions = [c for c in claims if c.key == "surgery_dissolves" or c.key.endswith("/effective_rank")]
    decided = {c.verdict for c in definitions} & {"holds", "does not hold"}
    if len(decided) == 2 and claims[0].verdict != "not testable":
        split = ", ".join(f"{c.key.split('@')[-1].split('/')[0] if '@' in c.key else POLAR_NORMAL}: {c.verdict}"
                          for c in definitions)
        claims[0] = dataclasses.replace(claims[0], verdict=UNDECIDED_ORDERING,
                                        why=f"{claims[0].why}; but the definitions disagree ({split})")
    ours, note, our_replicates = _surgery_share(trained, POLAR_NORMAL, "effective_rank")
    theirs, _, their_replicates = _surgery_share(null, POLAR_NORMAL, "effective_rank")
    effect = None
    if ours is not None and theirs is not None:
        value = ours.value - theirs.value
        low = high = None
        if our_replicates is not None and their_replicates is not None and len(our_replicates) == len(their_replicates):
            low, high = _jackknife_bounds(value, np.asarray(our_replicates) - np.asarray(their_replicates))
        effect = Estimate(value, sample_low=low, sample_high=high)
    verdict, why = _judged("trained - null share restored", effect, MIN_SURGERY_SPECIFICITY, True)
    claims.append(Claim(
        "surgery_installed_by_training", "The rescue is specific to the trained model's non-normality",
        "share of the effective_rank restored at alpha = 0 (polar normal part); trained - null, paired by fold",
        "(implied: the bottleneck is installed by training)", rule("surgery_installed_by_training"), theirs, ours,
        verdict, "", True, rule_version("surgery_installed_by_training"), why=why, effect=effect))
    return claims


def _surgery_share(data: CheckpointData, ordering: str, rank: str) -> tuple[Estimate | None, str, np.ndarray | None]:
    """(rank_0 - rank_1) / (single - rank_1) at full depth, with its samples' interval from the replicates, and the
    replicates themselves (one share per fold; None without folds)."""
    rank_0 = data.surgery_full_depth.get((ordering, 0.0, rank))
    rank_1 = _cumulative(data, rank, -1)
    single = _cumulative(data, rank, 0)
    if rank_0 is None or not _finite(rank_0) or not _finite(rank_1) or not single > rank_1:
        return None, "", None
    value = (rank_0 - rank_1) / (single - rank_1)
    note = f"full-depth {rank} at alpha = 0 / 1: {rank_0:.1f} / {rank_1:.1f}"
    operated = data.surgery_replicates.get((ordering, rank))
    measured = data.cumulative_replicates.get(rank)
    if operated is None or measured is None or len(operated) < 2:
        return Estimate(value), note, None
    shares = (np.asarray(operated) - measured[:, -1]) / (measured[:, 0] - measured[:, -1])
    low, high = _jackknife_bounds(value, shares)
    return Estimate(value, sample_low=low, sample_high=high), note, shares


def unit_power(n_boundary: int, n_interior: int, level: float, n_permutations: int) -> float:
    """Power of one sublayer's unit-level test for a rank-biserial effect of STATED_UNIT_EFFECT at ``level``, by the
    normal law of the estimated effect (resdyn/coupling_power.py: the permutation simulation agrees within
    Monte-Carlo error and takes minutes at 20,000 permutations)."""
    p = coupling_power.unit_test_p_values_normal(n_boundary, n_interior, STATED_UNIT_EFFECT, 4000,
                                                 n_permutations=n_permutations,
                                                 rng=np.random.default_rng(BOOTSTRAP_SEED))
    return float(np.mean(p <= level))


@functools.lru_cache(maxsize=256)
def community_power(n_communities: int, level: float, n_permutations: int) -> float:
    """Power of one sublayer's community test for rho = STATED_COMMUNITY_RHO at ``level``, cached by size; 0 where
    no permutation p can reach the level (its floor, coupling_power.smallest_attainable_p)."""
    if level < coupling_power.smallest_attainable_p(n_communities, n_permutations):
        return 0.0
    return float(coupling_power.community_test_power(n_communities, STATED_COMMUNITY_RHO, level=level,
                                                     # enough permutations to resolve the level, no more
                                                     n_permutations=min(n_permutations, max(2000, int(20 / level))),
                                                     seed=BOOTSTRAP_SEED).power)


def _unit_family_power(data: CheckpointData, share_needed: float = 0.0) -> tuple[float, str]:
    """Power of the checkpoint's BH family of unit-level tests (its sublayers' own sizes) to reject more than
    ``share_needed`` of them when every sublayer has a rank-biserial effect of STATED_UNIT_EFFECT
    (coupling_power.bh_family_power), and a note; NaN when the sizes were not kept."""
    if data.n_boundary is None or data.n_interior is None:
        return float("nan"), "power unknown: the inputs lack n_boundary / n_interior (made before rules v4)"
    tested = np.isfinite(data.coupling_effect) & (data.n_boundary > 0) & (data.n_interior > 0)
    if not tested.any():
        return float("nan"), "no tested sublayer"
    power = coupling_power.bh_family_power(list(zip(data.n_boundary[tested], data.n_interior[tested])),
                                           STATED_UNIT_EFFECT, n_permutations=data.n_permutations,
                                           share_needed=share_needed, seed=BOOTSTRAP_SEED).power
    return power, (f"power {power:.2f} of BH over {int(tested.sum())} sublayers to find "
                   + ("any" if share_needed == 0 else f"more than {share_needed:.2g} of them") +
                   f" with a rank-biserial effect of {STATED_UNIT_EFFECT} in each")


def relative_operator_types(trained: CheckpointData, null: CheckpointData) -> np.ndarray | None:
    """The trained model's operator type per sublayer judged against the null model at the same depth (rules v4):
    ``near_symmetric`` where its asymmetry index is below the null model's by MIN_SHARE_EFFECT, else
    ``rotation_dominated`` where its rotation share is above the null model's by MIN_SHARE_EFFECT, else ``other``.
    (resdyn.spectra.operator_type's absolute 1/pi bound calls most trained sublayers rotation-dominated although
    they rotate less than a random map; the absolute types stay in the ``@absolute`` readings.) None when the two
    checkpoints' sublayers differ."""
    if len(trained.depth) != len(null.depth) or not np.array_equal(trained.depth, null.depth):
        return None
    less_asymmetric = trained.measure("asymmetry_index") - null.measure("asymmetry_index") < -MIN_SHARE_EFFECT
    more_rotation = trained.measure("rotation_share") - null.measure("rotation_share") > MIN_SHARE_EFFECT
    return np.where(less_asymmetric, "near_symmetric", np.where(more_rotation, "rotation_dominated", "other"))


def _absence_with_power(verdict: str, why: str, absence: str, power: float, power_note: str,
                        stale: list[str]) -> tuple[str, str]:
    """(verdict, why) of a unit-level count: not testable where the inputs lack the permutation q; a verdict of
    absence (``absence``) stands only with power >= MIN_POWER, else undecided (no power)."""
    if stale:
        return "not testable", (f"the inputs lack {', '.join(stale)} (made before rules v4, whose significance is BH on "
                                "the degree-stratified permutation p): save them again")
    if verdict != absence:
        return verdict, why
    if not (_finite(power) and power >= MIN_POWER):
        return UNDECIDED_POWER, f"{why}, but the tests' {power_note} (< {MIN_POWER})"
    return verdict, f"{why}; {power_note}"


def _coupling_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    claims = []
    relative = relative_operator_types(trained, null)
    readings = (("relative", {"near_symmetric": True, "rotation_dominated": False}, ""),
                ("operator_type_henrici", {"near_normal": True, "rotational_non_normal": False}, "@henrici"))
    for attribute, kinds, suffix in readings:
        types = relative if attribute == "relative" else getattr(trained, attribute)
        for kind, amplified in kinds.items():
            mask = None if types is None else types == kind

            def effect(data: CheckpointData, mask=mask):
                keep = None if mask is None else mask & np.isfinite(data.coupling_effect)
                return bootstrap(np.mean, data.coupling_effect[keep]) if keep is not None and keep.any() else None
            base = "coupling_near_symmetric" if amplified else "coupling_rotation_dominated"
            estimate = effect(trained)
            bound = MIN_RANK_BISERIAL if amplified else -MIN_RANK_BISERIAL
            verdict, why = _judged("trained mean rank-biserial effect", estimate, bound, amplified)
            verdict, note = _noise_gate(verdict, trained)
            count = 0 if mask is None else int(mask.sum())
            what = ("the trained model's type against the null model at the same depth" if attribute == "relative"
                    else attribute)
            claims.append(Claim(
                base + suffix, f"In {kind.replace('_', '-')} sublayers, boundary units are "
                f"{'amplified' if amplified else 'de-amplified'}",
                f"mean rank-biserial effect over {kind} sublayers ({what}); the null model over the same sublayers",
                "> 0" if amplified else "< 0", rule(base), effect(null), estimate, verdict,
                f"{count} trained sublayers of this type; {note}", suffix == "", rule_version(base), why=why,
                direction=1 if amplified else -1))

    def significant_share(data: CheckpointData) -> Estimate:
        tested = np.isfinite(data.coupling_effect)
        return Estimate(float(np.mean(data.coupling_significant[tested])) if tested.any() else float("nan"))
    null_share, trained_share = significant_share(null), significant_share(trained)
    counts = {name: (int(np.sum(d.coupling_significant)), int(np.sum(np.isfinite(d.coupling_effect))))
              for name, d in (("null", null), ("trained", trained))}
    stale = [c for c in ("coupling_q_permutation",) if c in null.missing or c in trained.missing]
    null_power, null_power_note = _unit_family_power(null)
    verdict, why = _absence_with_power(*_judged("null model's BH-significant share", null_share, 0.05, False),
                                       "holds", null_power, null_power_note, stale)
    verdict, note = _noise_gate(verdict, null)
    claims.append(Claim(
        "coupling_absent_at_init", "The coupling is absent at initialisation",
        "share of tested sublayers BH-significant (degree-stratified permutation p, q < 0.05)", "0 of 64 (OLMo step 0)",
        rule("coupling_absent_at_init"), null_share, None, verdict,
        f"null model: {counts['null'][0]} of {counts['null'][1]}; {note}", True, rule_version("coupling_absent_at_init"),
        why=why))
    learned = Estimate(trained_share.value - null_share.value)
    needed = 0.1 + (null_share.value if _finite(null_share.value) else 0.0)
    trained_power, trained_power_note = _unit_family_power(trained, share_needed=needed)
    verdict, why = _absence_with_power(*_judged("BH-significant share, trained - null", learned, 0.1, True),
                                       "does not hold", trained_power, trained_power_note, stale)
    verdict, note = _noise_gate(verdict, null, trained)
    claims.append(Claim(
        "coupling_learned", "Training makes the coupling significant in many sublayers",
        "BH-significant share (degree-stratified permutation p), trained - null", "0 -> 24 of 64 (0.375; OLMo 3 7B)",
        rule("coupling_learned"), null_share, trained_share, verdict, f"trained: {counts['trained'][0]} of "
        f"{counts['trained'][1]} tested sublayers; {note}", True, rule_version("coupling_learned"), why=why,
        effect=learned))
    return claims


def _group_difference(values: np.ndarray, first: np.ndarray, second: np.ndarray) -> Estimate | None:
    """mean(values[first]) - mean(values[second]) with a 95% percentile bootstrap resampling each group within
    itself (a stratified bootstrap over sublayers); None when a group is empty."""
    a, b = values[first & np.isfinite(values)], values[second & np.isfinite(values)]
    if not len(a) or not len(b):
        return None
    value = float(np.mean(a) - np.mean(b))
    if len(a) < 2 or len(b) < 2:
        return Estimate(value, float("nan"), float("nan"))
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    draws = (a[rng.integers(0, len(a), (N_BOOTSTRAP, len(a)))].mean(axis=1)
             - b[rng.integers(0, len(b), (N_BOOTSTRAP, len(b)))].mean(axis=1))
    low, high = np.percentile(draws, [2.5, 97.5])
    return Estimate(value, float(min(low, value)), float(max(high, value)))


def _community_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    """The paper's abstract states the coupling for communities: rho(position, gain) per sublayer
    (resdyn/community_coupling.py). v4: the operator type must set it, so each type (the trained model's, against
    the null model at the same depth) is judged against the other sublayers of the same model, the dependence on
    the operator's measured asymmetry and rotation is tested as a continuous relation across sublayers, and
    "learned" is a sign-free pooled test across sublayers with its power, against the null model's."""
    if trained.community_rho is None or null.community_rho is None:
        return []
    claims = []
    relative = relative_operator_types(trained, null)
    for kind, amplified in (("near_symmetric", True), ("rotation_dominated", False)):
        def mean_rho(data: CheckpointData, mask):
            keep = None if mask is None else mask & np.isfinite(data.community_rho)
            return bootstrap(np.mean, data.community_rho[keep]) if keep is not None and keep.any() else None
        of_kind = None if relative is None else relative == kind
        key = f"community_coupling_{kind}"
        statement = (f"In {kind.replace('_', '-')} sublayers, communities in boundary positions are "
                     f"{'amplified' if amplified else 'de-amplified'}")
        measure = f"mean Spearman rho(community participation, log ||J P_C||_F / ||P_C||_F) over {kind} sublayers"
        difference = None if of_kind is None else _group_difference(trained.community_rho, of_kind, ~of_kind)
        bound = MIN_COMMUNITY_RHO_DIFFERENCE if amplified else -MIN_COMMUNITY_RHO_DIFFERENCE
        verdict, why = _judged(f"trained mean rho, {kind} - other sublayers", difference, bound, amplified)
        verdict, note = _noise_gate(verdict, trained)
        rest = None if of_kind is None else mean_rho(trained, ~of_kind)
        count = 0 if of_kind is None else int(of_kind.sum())
        claims.append(Claim(
            key, statement, f"{measure} (the trained model's type against the null model at the same depth), minus "
            "that over the other sublayers; the null model over the same sublayers", "> 0" if amplified else "< 0",
            rule(key), mean_rho(null, of_kind), mean_rho(trained, of_kind), verdict,
            f"{count} trained sublayers of this type; the other {len(trained.depth) - count}: mean rho "
            f"{rest.text() if rest else 'n/a'}; {note}", True, rule_version(key), why=why, effect=difference,
            direction=1 if amplified else -1))
        absolute = trained.operator_type == kind
        estimate = mean_rho(trained, absolute)
        verdict, why = _judged("trained mean rho", estimate, 0.0, amplified)
        verdict, note = _noise_gate(verdict, trained)
        claims.append(Claim(
            f"{key}@absolute", statement, f"{measure} (operator_type, absolute bounds)", "> 0" if amplified else "< 0",
            rule(f"{key}@absolute"), mean_rho(null, absolute), estimate, verdict, note, False,
            rule_version(f"{key}@absolute"), why=why, direction=1 if amplified else -1))
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


def _operator_dependence_claim(null: CheckpointData, trained: CheckpointData) -> Claim:
    """The abstract: the sign of the community coupling is set by the local operator type. Judged on the marginal,
    layer-permuted Spearman rho of the coupling with each operator measure (the two measures are collinear across
    sublayers, so a partial slope's sign can contradict the marginal relation): holds where the coupling falls with
    asymmetry or rotation share (rho < 0, p < 0.05), rises with neither, and the fitted line changes sign inside the
    observed range (the type sets the sign, not only the size)."""
    key = "community_coupling_operator_dependence"
    fit, reference = _operator_regression(trained), _operator_regression(null)

    def summary(result) -> Estimate:
        return Estimate(float(result.r_squared), p_value=float(result.p_value))
    marginal = {"asymmetry_index": (fit.rho_asymmetry, fit.p_rho_asymmetry),
                "rotation_share": (fit.rho_rotation, fit.p_rho_rotation)}
    falls = [name for name, (rho, p) in marginal.items() if rho < 0 and p < 0.05]
    rises = [name for name, (rho, p) in marginal.items() if rho > 0 and p < 0.05]
    facts = (f"Spearman rho with asymmetry {fit.rho_asymmetry:.3g} (layer-permutation p {fit.p_rho_asymmetry:.2g}), "
             f"with rotation share {fit.rho_rotation:.3g} (p {fit.p_rho_rotation:.2g}); R^2 {fit.r_squared:.3g} "
             f"(p {fit.p_value:.2g}); {fit.n_sublayers} sublayers")
    crossing = [name for name in falls if _zero_crossing(trained.community_rho, trained.measure(name))]
    if not _finite(fit.r_squared):
        verdict, why = "not testable", f"no fit: {fit.reason or 'too few sublayers with a rho'}"
    elif rises:
        verdict, why = "does not hold", f"{facts}: the coupling rises with {', '.join(rises)}"
    elif falls and crossing:
        verdict, why = "holds", f"{facts}: it falls with {', '.join(falls)} and changes sign inside the range"
    elif falls:
        verdict, why = "undecided", f"{facts}: it falls with {', '.join(falls)} but keeps one sign over the range"
    else:
        verdict, why = "undecided", f"{facts}: no significant dependence (its power is not computed: never 'absent')"
    verdict, note = _noise_gate(verdict, trained)
    return Claim(key, "The operator type sets the sign of the community coupling",
                 "R^2 of community rho on asymmetry index and rotation share across sublayers (whole layers permuted); "
                 "the verdict on the marginal rho", "the sign set by the local operator type", rule(key),
                 summary(reference), summary(fit), verdict, note, True, rule_version(key), why=why)


def _omnibus(data: CheckpointData):
    if data.n_communities is None:
        return None
    keep = np.isfinite(data.community_rho) & (data.n_communities >= 4)
    return coupling_power.omnibus_rank_correlation_test(data.community_rho[keep], data.n_communities[keep],
                                                        seed=BOOTSTRAP_SEED)


def _omnibus_power(data: CheckpointData) -> float:
    keep = np.isfinite(data.community_rho) & (data.n_communities >= 4)
    if not keep.any():
        return float("nan")
    return float(coupling_power.omnibus_community_power(tuple(int(k) for k in data.n_communities[keep]),
                                                        STATED_COMMUNITY_RHO, level=0.05,
                                                        seed=BOOTSTRAP_SEED).power)


def _community_learned_claim(null: CheckpointData, trained: CheckpointData) -> Claim:
    key = "community_coupling_learned"
    ours, theirs = _omnibus(trained), _omnibus(null)

    def as_estimate(result) -> Estimate | None:
        return None if result is None else Estimate(float(result.statistic), p_value=float(result.p_value))
    effect = None
    if ours is None or theirs is None:
        verdict = "not testable"
        why = "the inputs lack n_communities (made before rules v4): rerun the partitions or save the inputs again"
    elif not _finite(ours.statistic) or not _finite(theirs.statistic):
        verdict, why = "not testable", "no defined community test in one of the checkpoints"
    else:
        effect = Estimate(ours.statistic - theirs.statistic)
        ours_power, theirs_power = _omnibus_power(trained), _omnibus_power(null)
        facts = (f"RMS rho trained {ours.statistic:.3g} (p {ours.p_value:.2g}, power {ours_power:.2f}), null "
                 f"{theirs.statistic:.3g} (p {theirs.p_value:.2g}, power {theirs_power:.2f}) for |rho| = "
                 f"{STATED_COMMUNITY_RHO} in every sublayer; difference {effect.value:.3g} against "
                 f"{MIN_COMMUNITY_RHO_DIFFERENCE}")
        if theirs.p_value < 0.05:
            verdict, why = "does not hold", f"{facts}: present in the null model already"
        elif ours.p_value < 0.05 and effect.value > MIN_COMMUNITY_RHO_DIFFERENCE and theirs_power >= MIN_POWER:
            verdict, why = "holds", f"{facts}: present after training, absent (with power) at initialisation"
        elif ours.p_value < 0.05 and effect.value > MIN_COMMUNITY_RHO_DIFFERENCE:
            verdict, why = UNDECIDED_POWER, f"{facts}: present after training; its absence at init has no power"
        elif ours.p_value >= 0.05 and ours_power >= MIN_POWER:
            verdict, why = "does not hold", f"{facts}: absent from the trained model, with power"
        elif ours.p_value >= 0.05:
            verdict, why = UNDECIDED_POWER, f"{facts}: not significant, and the test has power < {MIN_POWER}"
        else:
            verdict, why = "undecided", f"{facts}: significant, but not by the minimum over the null model"
    verdict, note = _noise_gate(verdict, null, trained)
    return Claim(key, "The community-level coupling is learned (absent at initialisation)",
                 "weighted RMS community rho over sublayers (weights K - 1), sign-free pooled test with an exact "
                 "permutation null; trained - null", "absent at initialization", rule(key), as_estimate(theirs),
                 as_estimate(ours), verdict, note, True, rule_version(key), why=why, effect=effect)


def coupling_power_table(null: CheckpointData, trained: CheckpointData) -> list[dict]:
    """Each coupling test's power, per checkpoint and sublayer: the unit-level test for a rank-biserial effect of
    STATED_UNIT_EFFECT and the community test for rho = STATED_COMMUNITY_RHO, each at level 0.05 and at BH's first
    level 0.05 / m, with the smallest p the community test can reach."""
    rows = []
    for label, data in (("null model", null), ("trained", trained)):
        tested = np.isfinite(data.coupling_effect)
        communities = np.isfinite(data.community_rho) if data.community_rho is not None else np.zeros(len(data.depth),
                                                                                                       bool)
        m_unit, m_community = max(int(tested.sum()), 1), max(int(communities.sum()), 1)
        for index, depth in enumerate(data.depth):
            row = {"checkpoint": label, "depth": int(depth), "sublayer": str(data.sublayer[index])}
            if data.n_boundary is not None and data.n_interior is not None and tested[index] and \
                    data.n_boundary[index] > 0 and data.n_interior[index] > 0:
                b, i = int(data.n_boundary[index]), int(data.n_interior[index])
                row.update(n_boundary=b, n_interior=i, unit_power=unit_power(b, i, 0.05, data.n_permutations),
                           unit_power_bh=unit_power(b, i, 0.05 / m_unit, data.n_permutations))
            if data.n_communities is not None and int(data.n_communities[index]) >= 4:
                k = int(data.n_communities[index])
                row.update(n_communities=k, community_power=community_power(k, 0.05, data.n_permutations),
                           community_power_bh=community_power(k, 0.05 / m_community, data.n_permutations),
                           community_smallest_p=coupling_power.smallest_attainable_p(k, data.n_permutations))
            rows.append(row)
    return rows


def _guarded(claim: Claim) -> Claim:
    """No "holds" for a trained value on the wrong side of its null model's: a claim that orders them (``direction``)
    is undecided when its trained estimate is not beyond the null model's in the claimed direction."""
    if claim.verdict != "holds" or not claim.direction or claim.null_model is None or claim.trained is None:
        return claim
    trained, null = claim.trained.value, claim.null_model.value
    if _finite(trained) and _finite(null) and claim.direction * (trained - null) <= 0:
        return dataclasses.replace(claim, verdict="undecided", why=f"{claim.why}; but the trained value {trained:.3g} "
                                   f"is not {'above' if claim.direction > 0 else 'below'} the null model's {null:.3g}")
    return claim


def evaluate(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    """Every claim of PAPER.md's headline results on this pair of checkpoints, every reading of each. A spectral
    or depth claim without the samples' interval (folds off: ``--folds 0`` or wider than ``--fold-max-width``)
    says so in its note: its verdict then rests on the bootstrap over sublayers or on the bare number."""
    spectral = _symmetry_and_rotation_claims(null, trained) + _bottleneck_claims(null, trained)
    marked = []
    for claim in spectral:
        estimate = claim.effect or claim.trained or claim.null_model
        if estimate is not None and estimate.sample_low is None and _finite(estimate.value) and \
                not claim.key.startswith("spectral_gradient") and "modulus" not in claim.key:
            claim = dataclasses.replace(claim, note="; ".join(filter(None, [claim.note, "no samples interval (folds off)"])))
        marked.append(claim)
    return [_guarded(claim) for claim in marked + _coupling_claims(null, trained) + _community_claims(null, trained)]


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


SIMEX_WEIGHTS = (3.0, -3.0, 1.0)  # the quadratic through lambda = 0, 1, 2, evaluated at lambda = -1 (Lagrange)


def extrapolate_to_zero_rounding(trained: CheckpointData, dose_1: CheckpointData, dose_2: CheckpointData
                                 ) -> CheckpointData:
    """The trained checkpoint's measures extrapolated to no rounding at all (SIMEX; Cook & Stefanski 1994, J. Am.
    Stat. Assoc. 89:1314): each per-sublayer number (measures, their fold replicates, the cumulative ranks, the
    surgery ranks, the coupling effects and community rho) measured on the file (lambda = 0) and on its weights with
    1x and 2x their own rounding variance added (resdyn/models/rounding_noise.py), and the quadratic through the three
    evaluated at lambda = -1: f(-1) = 3 f(0) - 3 f(1) + f(2). Fold replicates are combined fold by fold (every dose
    sees the same windows). Not extrapolated: categories (operator types, significance) and the community rho (an
    extrapolated rank correlation can leave [-1, 1] and has no permutation null; Leiden partitions each dose anew),
    so the claims that rest on them have no zero-rounding reading (:data:`NOT_EXTRAPOLATED`)."""
    doses = (trained, dose_1, dose_2)
    if any(len(d.depth) != len(trained.depth) or not np.array_equal(d.depth, trained.depth) for d in doses):
        raise ValueError("the rounding-noise doses and the trained checkpoint have different sublayers: rerun them")

    def combine(*values):
        return sum(weight * np.asarray(value, dtype=np.float64) for weight, value in zip(SIMEX_WEIGHTS, values))

    def common(mapping_of):
        maps = [mapping_of(d) for d in doses]
        return {key: combine(*(m[key] for m in maps)) for key in maps[0] if all(key in m for m in maps[1:])
                and all(np.shape(m[key]) == np.shape(maps[0][key]) for m in maps[1:])}

    return dataclasses.replace(
        trained, measures=common(lambda d: d.measures), replicates=common(lambda d: d.replicates),
        cumulative=common(lambda d: d.cumulative), cumulative_replicates=common(lambda d: d.cumulative_replicates),
        surgery_full_depth={key: float(value) for key, value in common(lambda d: d.surgery_full_depth).items()},
        surgery_replicates=common(lambda d: d.surgery_replicates),
        coupling_effect=combine(*(d.coupling_effect for d in doses)), community_rho=None)


# claims whose inputs are not extrapolated to no rounding (significance counts): no zero-rounding reading
NOT_EXTRAPOLATED = ("coupling_absent_at_init", "coupling_learned")


def with_rounding_control(claims: list[Claim], null: CheckpointData, zero_rounding: CheckpointData) -> list[Claim]:
    """``claims`` with what each says of the trained model extrapolated to no rounding (:func:`extrapolate_to_zero_
    rounding`): the statistic its verdict rests on and the verdict the same rule gives it. Where the two decided
    verdicts differ, the trained model's own quantization could explain the verdict (:meth:`Claim.rounding_text`)."""
    control = {claim.key: claim for claim in evaluate(null, zero_rounding)}
    result = []
    for claim in claims:
        other = control.get(claim.key)
        if other is None or claim.claim in NOT_EXTRAPOLATED:
            result.append(claim)
            continue
        result.append(dataclasses.replace(claim, zero_rounding=other.effect or other.trained,
                                          zero_rounding_verdict=other.verdict))
    return result


def diagnostics(null: CheckpointData, trained: CheckpointData) -> list[dict]:
    """What the data says about the measurements behind the claims (not claims of the paper)."""
    rows = []
    for label, data in (("null model", null), ("trained", trained)):
        noise = noise_knn_correlation(data.n_observations, data.d_model, data.graph_k)
        rows.append({"checkpoint": label, "measure": "median |r| of the kNN graphs' edges vs independent units",
                     "value": data.median_edge_correlation, "noise": noise,
                     "ratio": data.median_edge_correlation / noise if noise and np.isfinite(noise) else float("nan"),
                     "observations": data.n_observations, "units": data.d_model, "k": data.graph_k,
                     "median_noise_to_signal": float(np.nanmedian(data.noise_to_signal))
                     if data.noise_to_signal is not None and np.isfinite(data.noise_to_signal).any() else float("nan"),
                     "n_folds": data.n_folds})
    return rows


def markdown_cell(text) -> str:
    """A table cell's text with its pipes escaped (``||J - I||_F`` would split the cell)."""
    return str(text).replace("|", "\\|")


@dataclass
class ClaimsReport:
    model: str
    null_checkpoint: str
    trained_checkpoint: str
    claims: list[Claim] = field(default_factory=list)
    diagnostics: list[dict] = field(default_factory=list)
    quantized_checkpoint: str | None = None  # the quantization control's checkpoint, when there is one
    power: list[dict] = field(default_factory=list)  # coupling_power_table: each coupling test's power

    def markdown(self) -> str:
        control = self.quantized_checkpoint is not None
        doses = any(claim.zero_rounding_verdict for claim in self.claims)
        lines = [f"Rules v{max(version for version, _ in RULES.values())} (content hash {rules_hash()}).", "",
                 "| claim (PAPER.md) | measure | paper | rule | null model | trained | effect | " +
                 ("quantization control | " if control else "") + ("at zero rounding (SIMEX) | " if doses else "")
                 + "verdict | why |",
                 "|---|---|---|---|---|---|---|" + ("---|" if control else "") + ("---|" if doses else "") + "---|---|"]
        for claim in self.claims:
            if not claim.primary:
                continue
            row = {key: markdown_cell(value) for key, value in claim.row().items()}
            note = f" ({row['note']})" if row["note"] else ""
            quantized = f"{row['quantized_null_model']} | " if control else ""
            quantized += f"{row['zero_rounding']} | " if doses else ""
            lines.append(f"| {row['claim']} | {row['measure']}{note} | {row['paper']} | {row['rule']} | "
                         f"{row['null_model']} | {row['trained']} | {row['effect']} | {quantized}**{row['verdict']}** | "
                         f"{row['why']} |")
        lines += ["", "Every reading of the claims that depend on one (the first of each claim is the primary):", "",
                  "| claim | reading (measure) | rule version | null model | trained | effect | verdict | why |",
                  "|---|---|---|---|---|---|---|---|"]
        by_claim: dict[str, list[Claim]] = {}
        for claim in self.claims:
            by_claim.setdefault(claim.claim, []).append(claim)
        for group in by_claim.values():
            if len(group) < 2:
                continue
            for claim in group:
                row = {key: markdown_cell(value) for key, value in claim.row().items()}
                lines.append(f"| {row['claim']} | {row['measure']} | v{claim.rule_version} | {row['null_model']} | "
                             f"{row['trained']} | {row['effect']} | "
                             f"{'**' + row['verdict'] + '**' if claim.primary else row['verdict']} | {row['why']} |")
        if self.power:
            columns = ("checkpoint", "depth", "sublayer", "n_boundary", "n_interior", "unit_power", "unit_power_bh",
                       "n_communities", "community_power", "community_power_bh", "community_smallest_p")
            lines += ["", f"Power of each coupling test (unit level: rank-biserial effect {STATED_UNIT_EFFECT}; "
                      f"community level: rho {STATED_COMMUNITY_RHO}; at 0.05 and at BH's first level 0.05 / m):", "",
                      "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            for row in self.power:
                cells = [row.get(column) for column in columns]
                lines.append("| " + " | ".join("" if c is None else f"{c:.3g}" if isinstance(c, float) else str(c)
                                               for c in cells) + " |")
        for row in self.diagnostics:
            if np.isfinite(row["noise"]):
                lines.append(f"\nGraphs ({row['checkpoint']}): median kNN edge |r| {row['value']:.3f} against "
                             f"{row['noise']:.3f} for independent units ({row['observations']} observations, "
                             f"{row['units']} units, k = {row['k']}): {row['ratio']:.2f}x the noise level.")
            if np.isfinite(row.get("median_noise_to_signal", float("nan"))):
                lines.append(f"\nMean Jacobians ({row['checkpoint']}): median noise-to-signal "
                             f"||se(J)||_F / ||J - I||_F = {row['median_noise_to_signal']:.3f} over sublayers "
                             f"({row['n_folds']} folds).")
        return "\n".join(lines)
