"""The paper's claims, checked on one model: a null-model checkpoint beside a trained one.

Each claim of PAPER.md's headline results becomes one or more *readings*: a measure computed from the
warehouse's tables, an estimate for the null model and for the trained model, and a verdict by a rule
written down here (``RULES``: each rule has a version, and docs/study.md says which version was fixed
before which model's numbers were seen). The first reading of a claim is its primary one; the others
show which conclusions depend on the reading (e.g. "near-symmetric" by the asymmetry index, the primary,
or by Henrici's departure, which is 0 for rotations too).

- ``holds``: the rule's inequality holds and the whole 95% interval is on its side;
- ``does not hold``: the interval is entirely on the other side;
- ``undecided``: the interval straddles the rule's bound, or the data cannot carry the test (the
  correlation graphs within ``TOPOLOGY_NOISE_FACTOR`` of independent units' noise level);
- ``not testable``: the measure is undefined here (e.g. no sublayer of an operator type).

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
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.special
import scipy.stats

from .coupling import rank_correlation_test
from .depth import RANK_DEFINITIONS as RANKS
from .depth import SCHUR_ORDERING as PRIMARY_ORDERING
from .depth import SCHUR_ORDERINGS as ORDERINGS
from .sampling import jackknife
from .spectra import NEAR_SYMMETRIC_ASYMMETRY, ROTATION_DOMINATED_SHARE

N_BOOTSTRAP = 2000
BOOTSTRAP_SEED = 0
N_PERMUTATIONS = 10000
EARLY, LATE = 1 / 3, 2 / 3  # relative depth: the first and last thirds of the network
NOISE_OBSERVATIONS_CAP = 2048  # simulated observations of the noise level (d = 4096: a 2048 x 4096 draw, 64 MB)
TOPOLOGY_NOISE_FACTOR = 1.5  # graphs whose median kNN |r| is below this multiple of independent units' are noise

# Every rule, its version and when it was fixed (docs/study.md keeps the history): v1 rules are those of
# the first claims table (henrici / complex-fraction readings, slope), v2 those of issue 30 (commit 84afd5b),
# v3 the three whose samples' interval or decision changed after review (commits 323b2c8, 3c97167): all before
# any v2 claim on SmolLM2's trained model or any number of Gemma 3 270M had been seen.
RULES = {
    "early_rotation": (2, "trained mean rotation_share, first third of depth > 1/pi (half a random matrix's 2/pi)"),
    "early_rotation@frac_complex": (1, "trained mean complex fraction, first third > 0.5"),
    "spectral_gradient": (3, "Spearman rho(depth, measure) < 0 per sublayer type: permutation p < 0.05 and the "
                             "samples' interval (of Pearson's r, on Fisher's z) below 0; does not hold only on a "
                             "significant rise"),
    "late_near_symmetric": (2, "trained mean asymmetry_index, last third < 1/(2 sqrt 2) (half a random matrix's)"),
    "late_near_symmetric@henrici": (1, "trained mean dep/||J - I||_F, last third < 0.5"),
    "init_near_symmetric": (2, "null model mean asymmetry_index over all sublayers < 1/(2 sqrt 2)"),
    "init_near_symmetric@henrici": (1, "null model mean dep/||J - I||_F < 0.5"),
    "training_adds_rotation": (3, "trained - null rotation_share, first two thirds, paired by depth > 0 (samples' "
                                  "interval paired by fold)"),
    "training_adds_rotation@frac_complex": (1, "trained - null complex fraction, first two thirds > 0"),
    "cumulative_bottleneck": (2, "trained rank after the first map / after all maps > 2 (interval from the samples)"),
    "bottleneck_learned": (3, "full-depth rank, null / trained > 2 (samples' interval paired by fold)"),
    "surgery_dissolves": (2, "share of the rank lost through depth that alpha = 0 restores > 0.5"),
    "coupling_near_symmetric": (2, "mean rank-biserial effect over near-symmetric sublayers > 0; undecided on noise "
                                   "graphs"),
    "coupling_rotation_dominated": (2, "mean rank-biserial effect over rotation-dominated sublayers < 0; undecided on "
                                       "noise graphs"),
    "coupling_absent_at_init": (2, "null model's FDR-significant share < 0.05; undecided on noise graphs"),
    "coupling_learned": (2, "FDR-significant share, trained - null > 0.1; undecided on noise graphs"),
    "community_coupling_near_symmetric": (2, "mean Spearman rho(community position, log gain) over near-symmetric "
                                             "sublayers > 0; undecided on noise graphs"),
    "community_coupling_rotation_dominated": (2, "the same over rotation-dominated sublayers < 0"),
    "community_coupling_learned": (2, "BH-significant share of community tests, trained - null > 0.1"),
}


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

    def __post_init__(self) -> None:
        if self.sublayer is None:
            self.sublayer = np.asarray(["attn" if d % 2 == 0 else "mlp" for d in self.depth])
        if self.operator_type_henrici is None:
            self.operator_type_henrici = np.full(len(self.depth), "other")

    @property
    def relative_depth(self) -> np.ndarray:
        return self.depth / max(1, self.depth.max())

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
                "trained": self.trained.text() if self.trained else "n/a", "verdict": self.verdict, "note": self.note,
                "key": self.key, "primary": self.primary, "rule_version": self.rule_version,
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


def _by_depth_gradient(data: CheckpointData, name: str, sublayer: str) -> Estimate | None:
    """Spearman rho of measure ``name`` with depth over one sublayer type and its permutation p; the samples' interval
    is that of Pearson's r of the same pairs (jackknife over folds): rho is a step function of the values, so its
    own replicates are often all equal, while r moves smoothly with them and has rho's sign wherever the trend is
    clear. The note says which correlation the interval is of."""
    mask = data.sublayer == sublayer
    if mask.sum() < 3:
        return None
    values = data.measure(name)
    keep = mask & np.isfinite(values)
    rho, p = spearman_with_permutation(data.depth[keep], values[keep])
    if not _finite(rho):
        return Estimate(rho)
    replicates = data.replicates.get(name)
    sample_low = sample_high = None
    if replicates is not None:  # on Fisher's z = atanh r, so that the interval stays inside (-1, 1)
        z = np.arctanh(np.clip(pearson(data.depth[keep], values[keep]), -1 + 1e-12, 1 - 1e-12))
        low, high = _jackknife_bounds(z, [np.arctanh(np.clip(pearson(data.depth[keep], rep[keep]), -1 + 1e-12,
                                                                1 - 1e-12)) for rep in replicates])
        sample_low, sample_high = (np.tanh(low), np.tanh(high)) if _finite(low) and _finite(high) else (low, high)
    return Estimate(rho, sample_low=sample_low, sample_high=sample_high, p_value=p)


def _gradient_verdict(estimate: Estimate | None) -> str:
    """holds: rho < 0 with permutation p < 0.05 and the samples' interval (of r) below 0; does not hold: rho > 0
    with p < 0.05 (a significant rise) and the interval above 0; undecided otherwise (no trend distinguishable from
    a random order of the sublayers, or one the samples do not carry)."""
    verdict = side(estimate, 0.0, False)
    significant = estimate is not None and estimate.p_value is not None and estimate.p_value < 0.05
    if verdict in ("holds", "does not hold") and not significant:
        return "undecided"
    if verdict == "does not hold" and not estimate.value > 0:
        return "undecided"  # rho = 0 exactly: no trend either way
    return verdict


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


def _symmetry_and_rotation_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    claims = []
    early = lambda d: d.relative_depth <= EARLY  # noqa: E731
    late = lambda d: d.relative_depth >= LATE  # noqa: E731
    everywhere = lambda d: np.ones(len(d.depth), bool)  # noqa: E731
    for key, name, bound, primary in (("early_rotation", "rotation_share", ROTATION_DOMINATED_SHARE, True),
                                      ("early_rotation@frac_complex", "frac_complex", 0.5, False)):
        estimate = _over_sublayers(trained, name, early(trained))
        claims.append(Claim(key, "Early layers are rotation-dominated", f"mean {name}, first third of depth",
                            "about 0.98 complex", rule(key), _over_sublayers(null, name, early(null)), estimate,
                            side(estimate, bound, True),
                            "a random matrix: 2/pi = 0.637" if primary else
                            f"a random real matrix of this size: {ginibre_complex_fraction(max(trained.d_model, 1)):.3f}"
                            if trained.d_model else "", primary, rule_version(key)))
    for name, label, primary in (("asymmetry_index", "", True), ("henrici_rel_j_minus_i", "@henrici", False),
                                 ("rotation_share", "@rotation_share", False)):
        for sublayer in ("attn", "mlp"):
            key = f"spectral_gradient_{sublayer}{label}"
            estimate = _by_depth_gradient(trained, name, sublayer)
            claims.append(Claim(key, f"The spectral gradient is monotonic through depth ({sublayer} sublayers)",
                                f"Spearman rho(depth, {name})", "falls with depth (non-normal, rotating early; "
                                "near-symmetric late)", rule("spectral_gradient"), _by_depth_gradient(null, name, sublayer),
                                estimate, _gradient_verdict(estimate), "the samples' interval is of Pearson's r "
                                "(rho is a step function of the values)", primary, rule_version("spectral_gradient")))
    for key, name, bound, primary in (("late_near_symmetric", "asymmetry_index", NEAR_SYMMETRIC_ASYMMETRY, True),
                                      ("late_near_symmetric@henrici", "henrici_rel_j_minus_i", 0.5, False)):
        estimate = _over_sublayers(trained, name, late(trained))
        claims.append(Claim(key, "Late layers are near-symmetric", f"mean {name}, last third of depth",
                            "near-symmetric", rule(key), _over_sublayers(null, name, late(null)), estimate,
                            side(estimate, bound, False), "", primary, rule_version(key)))
    for key, name, bound, primary in (("init_near_symmetric", "asymmetry_index", NEAR_SYMMETRIC_ASYMMETRY, True),
                                      ("init_near_symmetric@henrici", "henrici_rel_j_minus_i", 0.5, False)):
        estimate = _over_sublayers(null, name, everywhere(null))
        claims.append(Claim(key, "At initialisation layers are already near-symmetric",
                            f"mean {name} over all sublayers", "near-symmetric at OLMo step 0", rule(key), estimate,
                            _over_sublayers(trained, name, everywhere(trained)), side(estimate, bound, False),
                            "a random matrix: asymmetry 0.707, dep/||A||_F 0.707 (one Ginibre matrix; products of "
                            "random factors sit higher, resdyn/baselines.py)", primary, rule_version(key)))
    for key, name, primary in (("training_adds_rotation", "rotation_share", True),
                               ("training_adds_rotation@frac_complex", "frac_complex", False)):
        gain = _paired_difference(trained, null, name, lambda d: d.relative_depth < LATE)
        claims.append(Claim(key, "Training pulls early and middle layers toward rotation",
                            f"trained - null {name}, first two thirds, paired by depth", "positive", rule(key), None,
                            gain, side(gain, 0.0, True), "", primary, rule_version(key)))
    return claims


def _compression(data: CheckpointData, rank: str) -> Estimate:
    """Rank after the first map / after all maps, with the samples' interval from the replicates (paired by fold)."""
    replicates = data.cumulative_replicates.get(rank)
    return _ratio_estimate(_cumulative(data, rank, 0), _cumulative(data, rank, -1),
                           None if replicates is None else replicates[:, 0],
                           None if replicates is None else replicates[:, -1])


def _full_depth_replicates(data: CheckpointData, rank: str) -> np.ndarray | None:
    replicates = data.cumulative_replicates.get(rank)
    return None if replicates is None else replicates[:, -1]


def _bottleneck_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    claims = []
    for rank in RANKS:
        primary = rank == "effective_rank"
        suffix = "" if primary else f"@{rank}"

        estimate = _compression(trained, rank)
        claims.append(Claim(
            f"cumulative_bottleneck{suffix}", "The cumulative Jacobian's rank collapses through depth",
            f"{rank} of the product after the first map / after all maps", "about 436 / 7 = 62 (Llama 3.1 8B)",
            rule("cumulative_bottleneck"), _compression(null, rank), estimate, side(estimate, 2.0, True),
            f"trained: {_cumulative(trained, rank, 0):.1f} -> {_cumulative(trained, rank, -1):.1f}; null model: "
            f"{_cumulative(null, rank, 0):.1f} -> {_cumulative(null, rank, -1):.1f} (d = {trained.d_model})",
            primary, rule_version("cumulative_bottleneck")))
        installed = _ratio_estimate(_cumulative(null, rank, -1), _cumulative(trained, rank, -1),
                                    _full_depth_replicates(null, rank), _full_depth_replicates(trained, rank))
        claims.append(Claim(
            f"bottleneck_learned{suffix}", "The bottleneck is installed by training, not the architecture",
            f"full-depth {rank}, null model / trained", "rank stays high at step 0", rule("bottleneck_learned"),
            None, installed, side(installed, 2.0, True), "", primary, rule_version("bottleneck_learned")))
    readings = [(PRIMARY_ORDERING, "effective_rank")] + [(o, "effective_rank") for o in ORDERINGS[1:]] + \
               [(PRIMARY_ORDERING, r) for r in RANKS[1:]]
    for ordering, rank in readings:
        primary = (ordering, rank) == (PRIMARY_ORDERING, "effective_rank")
        key = "surgery_dissolves" + ("" if primary else f"@{ordering}/{rank}")
        recovered, note = _surgery_share(trained, ordering, rank)
        claims.append(Claim(
            key, "Removing the non-normal part N (alpha = 0) largely dissolves the bottleneck",
            f"share of the {rank} lost through depth that alpha = 0 restores ({ordering} Schur ordering)",
            "largely dissolved", rule("surgery_dissolves"), _surgery_share(null, ordering, rank)[0], recovered,
            side(recovered, 0.5, True), note, primary, rule_version("surgery_dissolves")))
    return claims


def _surgery_share(data: CheckpointData, ordering: str, rank: str) -> tuple[Estimate | None, str]:
    """(rank_0 - rank_1) / (single - rank_1) at full depth, with its samples' interval from the replicates."""
    rank_0 = data.surgery_full_depth.get((ordering, 0.0, rank))
    rank_1 = _cumulative(data, rank, -1)
    single = _cumulative(data, rank, 0)
    if rank_0 is None or not _finite(rank_1) or not single > rank_1:
        return None, ""
    value = (rank_0 - rank_1) / (single - rank_1)
    note = f"full-depth {rank} at alpha = 0 / 1: {rank_0:.1f} / {rank_1:.1f}"
    operated = data.surgery_replicates.get((ordering, rank))
    measured = data.cumulative_replicates.get(rank)
    if operated is None or measured is None or len(operated) < 2:
        return Estimate(value), note
    shares = (np.asarray(operated) - measured[:, -1]) / (measured[:, 0] - measured[:, -1])
    low, high = _jackknife_bounds(value, shares)
    return Estimate(value, sample_low=low, sample_high=high), note


def _coupling_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    claims = []
    readings = (("operator_type", {"near_symmetric": True, "rotation_dominated": False}, ""),
                ("operator_type_henrici", {"near_normal": True, "rotational_non_normal": False}, "@henrici"))
    for attribute, kinds, suffix in readings:
        for kind, amplified in kinds.items():
            def effect(data: CheckpointData, kind=kind, attribute=attribute):
                mask = (getattr(data, attribute) == kind) & np.isfinite(data.coupling_effect)
                return bootstrap(np.mean, data.coupling_effect[mask]) if mask.any() else None
            base = "coupling_near_symmetric" if amplified else "coupling_rotation_dominated"
            estimate = effect(trained)
            verdict, note = _noise_gate(side(estimate, 0.0, amplified), trained)
            count = int(np.sum(getattr(trained, attribute) == kind))
            claims.append(Claim(
                base + suffix, f"In {kind.replace('_', '-')} sublayers, boundary units are "
                f"{'amplified' if amplified else 'de-amplified'}",
                f"mean rank-biserial effect over {kind} sublayers ({attribute})", "> 0" if amplified else "< 0",
                rule(base), effect(null), estimate, verdict, f"{count} trained sublayers of this type; {note}",
                suffix == "", rule_version(base)))

    def significant_share(data: CheckpointData) -> Estimate:
        tested = np.isfinite(data.coupling_effect)
        return Estimate(float(np.mean(data.coupling_significant[tested])) if tested.any() else float("nan"))
    null_share, trained_share = significant_share(null), significant_share(trained)
    counts = {name: (int(np.sum(d.coupling_significant)), int(np.sum(np.isfinite(d.coupling_effect))))
              for name, d in (("null", null), ("trained", trained))}
    verdict, note = _noise_gate(side(null_share, 0.05, False), null)
    claims.append(Claim(
        "coupling_absent_at_init", "The coupling is absent at initialisation",
        "share of tested sublayers FDR-significant (BH q < 0.05)", "0 of 64 (OLMo step 0)",
        rule("coupling_absent_at_init"), null_share, None, verdict,
        f"null model: {counts['null'][0]} of {counts['null'][1]}; {note}", True, rule_version("coupling_absent_at_init")))
    learned = Estimate(trained_share.value - null_share.value)
    verdict, note = _noise_gate(side(learned, 0.1, True), null, trained)
    claims.append(Claim(
        "coupling_learned", "Training makes the coupling significant in many sublayers",
        "FDR-significant share, trained - null", "0 -> 24 of 64 (0.375; OLMo 3 7B)", rule("coupling_learned"),
        null_share, trained_share, verdict, f"trained: {counts['trained'][0]} of {counts['trained'][1]} tested "
        f"sublayers; {note}", True, rule_version("coupling_learned")))
    return claims


def _community_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    """The paper's abstract states the coupling for communities: rho(position, gain) per sublayer
    (resdyn/community_coupling.py), averaged by operator type; its significant share trained vs null."""
    if trained.community_rho is None or null.community_rho is None:
        return []
    claims = []
    for kind, amplified in (("near_symmetric", True), ("rotation_dominated", False)):
        def mean_rho(data: CheckpointData, kind=kind):
            mask = (data.operator_type == kind) & np.isfinite(data.community_rho)
            return bootstrap(np.mean, data.community_rho[mask]) if mask.any() else None
        key = f"community_coupling_{kind}"
        estimate = mean_rho(trained)
        verdict, note = _noise_gate(side(estimate, 0.0, amplified), trained)
        claims.append(Claim(
            key, f"In {kind.replace('_', '-')} sublayers, communities in boundary positions are "
            f"{'amplified' if amplified else 'de-amplified'}",
            f"mean Spearman rho(community participation, log ||J P_C||_F / ||P_C||_F) over {kind} sublayers",
            "> 0" if amplified else "< 0", rule(key), mean_rho(null), estimate, verdict,
            f"{int(np.sum(trained.operator_type == kind))} trained sublayers of this type; {note}", True,
            rule_version(key)))

    def share(data: CheckpointData) -> Estimate:
        tested = np.isfinite(data.community_rho)
        return Estimate(float(np.mean(data.community_significant[tested])) if tested.any() else float("nan"))
    null_share, trained_share = share(null), share(trained)
    verdict, note = _noise_gate(side(Estimate(trained_share.value - null_share.value), 0.1, True), null, trained)
    claims.append(Claim(
        "community_coupling_learned", "The community-level coupling is learned (absent at initialisation)",
        "BH-significant share of community tests, trained - null", "absent at initialization",
        rule("community_coupling_learned"), null_share, trained_share, verdict, note, True,
        rule_version("community_coupling_learned")))
    return claims


def evaluate(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    """Every claim of PAPER.md's headline results on this pair of checkpoints, every reading of each. A spectral
    or depth claim without the samples' interval (folds off: ``--folds 0`` or wider than ``--fold-max-width``)
    says so in its note: its verdict then rests on the bootstrap over sublayers or on the bare number."""
    spectral = _symmetry_and_rotation_claims(null, trained) + _bottleneck_claims(null, trained)
    marked = []
    for claim in spectral:
        estimate = claim.trained or claim.null_model
        if estimate is not None and estimate.sample_low is None and _finite(estimate.value):
            claim = dataclasses.replace(claim, note="; ".join(filter(None, [claim.note, "no samples interval (folds off)"])))
        marked.append(claim)
    return marked + _coupling_claims(null, trained) + _community_claims(null, trained)


COMPARISONS = {"training_adds_rotation", "bottleneck_learned"}  # claims whose trained estimate is trained vs null


def with_quantization_control(claims: list[Claim], null_quantized: CheckpointData, trained: CheckpointData) -> list[Claim]:
    """``claims`` with each one's quantization control: the same claims evaluated with the quantized null model in
    the null model's place (its null-model measure where the claim has one, else its trained-vs-null estimate)."""
    control = {claim.key: claim for claim in evaluate(null_quantized, trained)}
    result = []
    for claim in claims:
        other = control.get(claim.key)
        if other is None:
            result.append(claim)
        elif claim.claim in COMPARISONS:
            result.append(dataclasses.replace(claim, quantized_comparison=other.trained))
        else:
            result.append(dataclasses.replace(claim, quantized_null_model=other.null_model))
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

    def markdown(self) -> str:
        control = self.quantized_checkpoint is not None
        lines = ["| claim (PAPER.md) | measure | paper | rule | null model | " + ("null model, quantized | " if control
                                                                                  else "") + "trained | verdict |",
                 "|---|---|---|---|---|" + ("---|" if control else "") + "---|---|"]
        for claim in self.claims:
            if not claim.primary:
                continue
            row = {key: markdown_cell(value) for key, value in claim.row().items()}
            note = f" ({row['note']})" if row["note"] else ""
            quantized = f"{row['quantized_null_model']} | " if control else ""
            lines.append(f"| {row['claim']} | {row['measure']}{note} | {row['paper']} | {row['rule']} | "
                         f"{row['null_model']} | {quantized}{row['trained']} | **{row['verdict']}** |")
        lines += ["", "Every reading of the claims that depend on one (the first of each claim is the primary):", "",
                  "| claim | reading (measure) | rule version | null model | trained | verdict |", "|---|---|---|---|---|---|"]
        by_claim: dict[str, list[Claim]] = {}
        for claim in self.claims:
            by_claim.setdefault(claim.claim, []).append(claim)
        for group in by_claim.values():
            if len(group) < 2:
                continue
            for claim in group:
                row = {key: markdown_cell(value) for key, value in claim.row().items()}
                lines.append(f"| {row['claim']} | {row['measure']} | v{claim.rule_version} | {row['null_model']} | "
                             f"{row['trained']} | {'**' + row['verdict'] + '**' if claim.primary else row['verdict']} |")
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
