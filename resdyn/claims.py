"""The paper's claims, checked on one model: a null-model checkpoint beside a trained one.

Each claim of PAPER.md's headline results becomes a measure computed from the warehouse's tables,
an estimate for the null model and for the trained model, and a verdict by a rule written down
here before any real model was looked at (the ``RULES`` text of each claim):

- ``holds``: the rule's inequality holds and, where there is an interval, the whole 95% interval
  is on its side;
- ``does not hold``: the inequality fails, the interval entirely on the other side;
- ``undecided``: the interval straddles the rule's bound (more samples or sublayers are needed);
- ``not testable``: the measure is undefined here (e.g. no sublayer of an operator type).

Intervals are 95% percentile bootstraps over sublayers (Efron & Tibshirani 1993), ``N_BOOTSTRAP``
resamples from a fixed seed: they say how much a depth-aggregated number depends on which
sublayers happened to be measured, not how much each mean Jacobian depends on the samples (the
per-sample intervals of ``layer_metrics_per_sample`` do that). Sublayers are resampled as if
exchangeable; neighbouring ones are correlated (attention and MLP alternate), so the intervals
understate the uncertainty somewhat. Products through depth (the cumulative rank, surgery) are one
number per checkpoint: no interval, and the number decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.special
import scipy.stats

N_BOOTSTRAP = 2000
BOOTSTRAP_SEED = 0
EARLY, LATE = 1 / 3, 2 / 3  # relative depth: the first and last thirds of the network


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


def noise_knn_correlation(n_observations: int, n_units: int, k: int, *, seed: int = 0) -> float:
    """The median |r| over the edges of the platform's kNN graph (each unit's k largest |r|, symmetrised by
    union: resdyn.topology.signed_graph) built from n_observations draws of n_units independent Gaussian
    units: the same statistic as a measured graph's median edge |r|, where the data carry no correlation at
    all. (:func:`fisher_knn_correlation` is the per-unit closed form it sits slightly above: the union adds
    one-sided, weaker edges.)"""
    from .topology import correlation_matrix, signed_graph

    if n_observations <= 3 or n_units <= 1 or k <= 0:
        return float("nan")
    noise = np.random.default_rng(seed).standard_normal((n_observations, n_units))
    edges = signed_graph(correlation_matrix(noise), "knn", k=k)
    return float(np.median(np.abs(edges.weight)))


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float | None = None
    high: float | None = None

    def text(self, digits: int = 3) -> str:
        if self.value is None or not np.isfinite(self.value):
            return "n/a"
        main = f"{self.value:.{digits}g}"
        if self.low is None:
            return main
        if not (np.isfinite(self.low) and np.isfinite(self.high)):
            return f"{main} [no interval]"
        return f"{main} [{self.low:.{digits}g}, {self.high:.{digits}g}]"


@dataclass
class CheckpointData:
    """What the claims need of one partition, one entry per sublayer in depth order (arrays of equal length)."""

    depth: np.ndarray
    henrici: np.ndarray  # dep(J) / ||J - I||_F
    complex_fraction: np.ndarray
    operator_type: np.ndarray  # strings
    cumulative_rank: np.ndarray  # effective rank of J_depth ... J_0, per depth
    surgery_full_depth: dict[float, float]  # alpha -> effective rank of the full-depth product of J(alpha)
    coupling_effect: np.ndarray  # rank-biserial effect per sublayer, nan where the test is undefined
    coupling_significant: np.ndarray  # bool, False where undefined
    d_model: int = 0
    n_samples: int = 0
    n_observations: int = 0  # (sample, position) pairs behind the correlation graphs
    median_edge_correlation: float = float("nan")  # median |r| over the kNN graphs' edges
    graph_k: int = 0  # 0 when the graphs are not kNN graphs (then there is no noise level to compare with)

    @property
    def relative_depth(self) -> np.ndarray:
        return self.depth / max(1, self.depth.max())


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

    def row(self) -> dict:
        return {"claim": self.statement, "measure": self.measure, "paper": self.paper, "rule": self.rule,
                "null_model": self.null_model.text() if self.null_model else "n/a",
                "trained": self.trained.text() if self.trained else "n/a", "verdict": self.verdict, "note": self.note,
                "key": self.key}


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


def slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of y on x, sum (x - mean x)(y - mean y) / sum (x - mean x)^2 (nan when x does not
    vary; exactly 0 when y does not)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    dx = x - x.mean()
    denominator = float(np.sum(dx * dx))
    return float(np.sum(dx * (y - y.mean())) / denominator) if denominator > 0 else float("nan")


def side(estimate: Estimate | None, bound: float, holds_above: bool) -> str:
    """The verdict of ``estimate`` against ``bound`` (module docstring)."""
    if estimate is None or estimate.value is None or not np.isfinite(estimate.value):
        return "not testable"
    low = estimate.low if estimate.low is not None else estimate.value  # None: a number without an interval
    high = estimate.high if estimate.high is not None else estimate.value
    if not (np.isfinite(low) and np.isfinite(high)):
        return "undecided"  # an interval was wanted and could not be made
    if holds_above:
        return "holds" if low > bound else "does not hold" if high <= bound else "undecided"
    return "holds" if high < bound else "does not hold" if low >= bound else "undecided"


def _mean_where(mask_of: Callable[[CheckpointData], np.ndarray], values_of: Callable[[CheckpointData], np.ndarray]):
    def estimate(data: CheckpointData) -> Estimate | None:
        values = values_of(data)[mask_of(data)]
        values = values[np.isfinite(values)]
        return bootstrap(np.mean, values) if len(values) else None
    return estimate


def _paired_difference(trained: CheckpointData, null: CheckpointData, values_of, mask_of) -> Estimate | None:
    """Mean over sublayers (of the trained model's mask) of trained - null at the same depth."""
    if len(trained.depth) != len(null.depth) or not np.array_equal(trained.depth, null.depth):
        return None
    mask = mask_of(trained)
    difference = values_of(trained)[mask] - values_of(null)[mask]
    difference = difference[np.isfinite(difference)]
    return bootstrap(np.mean, difference) if len(difference) else None


def _single_layer_rank(data: CheckpointData) -> float:
    return float(data.cumulative_rank[0])


def _full_depth_rank(data: CheckpointData) -> float:
    return float(data.cumulative_rank[-1])


def evaluate(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    """Every claim of PAPER.md's headline results on this pair of checkpoints."""
    claims = []
    early = _mean_where(lambda d: d.relative_depth <= EARLY, lambda d: d.complex_fraction)
    claims.append(Claim(
        "early_rotation", "Early layers are rotation-rich", "mean complex fraction, first third of depth",
        "about 0.98", "trained > 0.5 (most eigenvalues in complex pairs)", early(null), early(trained),
        side(early(trained), 0.5, True),
        f"a random real matrix of this size: {ginibre_complex_fraction(max(trained.d_model, 1)):.3f}"
        if trained.d_model else ""))
    gradient = lambda d: bootstrap(slope, d.relative_depth, d.henrici)  # noqa: E731
    claims.append(Claim(
        "nonnormality_gradient", "Non-normality falls monotonically with depth",
        "slope of dep/||J - I||_F against relative depth", "negative (non-normal early, near-symmetric late)",
        "trained slope < 0", gradient(null), gradient(trained), side(gradient(trained), 0.0, False)))
    late = _mean_where(lambda d: d.relative_depth >= LATE, lambda d: d.henrici)
    claims.append(Claim(
        "late_near_symmetric", "Late layers are near-symmetric", "mean dep/||J - I||_F, last third of depth",
        "near-symmetric", "trained < 0.5 (the operator-type boundary)", late(null), late(trained),
        side(late(trained), 0.5, False)))
    overall = _mean_where(lambda d: np.ones(len(d.depth), bool), lambda d: d.henrici)
    claims.append(Claim(
        "init_near_symmetric", "At initialisation layers are already near-symmetric",
        "mean dep/||J - I||_F over all sublayers", "near-symmetric at OLMo step 0", "null model < 0.5",
        overall(null), overall(trained), side(overall(null), 0.5, False),
        "a random real matrix: 0.71 (sum |lambda|^2 ~ ||A||_F^2 / 2)"))
    rotation_gain = _paired_difference(trained, null, lambda d: d.complex_fraction, lambda d: d.relative_depth < LATE)
    claims.append(Claim(
        "training_adds_rotation", "Training pulls early and middle layers toward rotation",
        "trained - null complex fraction, first two thirds, paired by depth", "positive",
        "difference > 0", None, rotation_gain, side(rotation_gain, 0.0, True)))

    def ratio(numerator: float, denominator: float) -> float:
        return numerator / denominator if denominator > 0 else float("nan")

    single, full = _single_layer_rank(trained), _full_depth_rank(trained)
    compression = Estimate(ratio(single, full))
    null_compression = Estimate(ratio(_single_layer_rank(null), _full_depth_rank(null)))
    claims.append(Claim(
        "cumulative_bottleneck", "The cumulative Jacobian's effective rank collapses through depth",
        "effective rank of the product after the first map / after all maps", "about 436 / 7 = 62 (Llama 3.1 8B)",
        "trained ratio > 2", null_compression, compression, side(compression, 2.0, True),
        f"trained: {single:.1f} -> {full:.1f}; null model: {_single_layer_rank(null):.1f} -> {_full_depth_rank(null):.1f}"
        f" (d = {trained.d_model})"))
    installed = Estimate(ratio(_full_depth_rank(null), full))
    claims.append(Claim(
        "bottleneck_learned", "The bottleneck is installed by training, not the architecture",
        "full-depth effective rank, null model / trained", "rank stays high at step 0", "ratio > 2",
        None, installed, side(installed, 2.0, True)))
    recovered = None
    if 0.0 in trained.surgery_full_depth and 1.0 in trained.surgery_full_depth:
        rank_0, rank_1 = trained.surgery_full_depth[0.0], trained.surgery_full_depth[1.0]
        recovered = Estimate(ratio(rank_0 - rank_1, single - rank_1)) if single > rank_1 else None
    claims.append(Claim(
        "surgery_dissolves", "Removing the non-normal part N (alpha = 0) largely dissolves the bottleneck",
        "share of the rank lost through depth that alpha = 0 restores", "largely dissolved",
        "share > 0.5", None, recovered, side(recovered, 0.5, True),
        "full-depth rank at alpha = 0 / 1: " + " / ".join(
            f"{trained.surgery_full_depth.get(a, float('nan')):.1f}" for a in (0.0, 1.0))))

    def effect_of(kind: str):
        return _mean_where(lambda d: (d.operator_type == kind) & np.isfinite(d.coupling_effect),
                           lambda d: d.coupling_effect)
    for kind, sign, expected in (("near_symmetric", True, "boundary units amplified"),
                                 ("rotational_non_normal", False, "boundary units de-amplified")):
        estimate = effect_of(kind)(trained)
        claims.append(Claim(
            f"coupling_{kind}", f"In {kind.replace('_', ' ')} sublayers, {expected}",
            f"mean rank-biserial effect over {kind} sublayers", "> 0" if sign else "< 0",
            "effect > 0" if sign else "effect < 0", effect_of(kind)(null), estimate, side(estimate, 0.0, sign),
            f"{int(np.sum(trained.operator_type == kind))} trained sublayers of this type"))

    def significant_share(data: CheckpointData) -> Estimate:
        tested = np.isfinite(data.coupling_effect)
        return Estimate(float(np.mean(data.coupling_significant[tested])) if tested.any() else float("nan"))
    null_share, trained_share = significant_share(null), significant_share(trained)
    counts = {name: (int(np.sum(d.coupling_significant)), int(np.sum(np.isfinite(d.coupling_effect))))
              for name, d in (("null", null), ("trained", trained))}
    claims.append(Claim(
        "coupling_absent_at_init", "The coupling is absent at initialisation",
        "share of tested sublayers FDR-significant (BH q < 0.05)", "0 of 64 (OLMo step 0)", "null model < 0.05",
        null_share, None, side(null_share, 0.05, False), f"null model: {counts['null'][0]} of {counts['null'][1]}"))
    learned = Estimate(trained_share.value - null_share.value)
    claims.append(Claim(
        "coupling_learned", "Training makes the coupling significant in many sublayers",
        "FDR-significant share, trained - null", "0 -> 24 of 64 (0.375; OLMo 3 7B)", "difference > 0.1",
        null_share, trained_share, side(learned, 0.1, True),
        f"trained: {counts['trained'][0]} of {counts['trained'][1]} tested sublayers"))
    return claims


def diagnostics(null: CheckpointData, trained: CheckpointData) -> list[dict]:
    """What the data says about the measurements behind the claims (not claims of the paper)."""
    rows = []
    for label, data in (("null model", null), ("trained", trained)):
        noise = noise_knn_correlation(data.n_observations, data.d_model, data.graph_k)
        rows.append({"checkpoint": label, "measure": "median |r| of the kNN graphs' edges vs independent units",
                     "value": data.median_edge_correlation, "noise": noise,
                     "ratio": data.median_edge_correlation / noise if noise and np.isfinite(noise) else float("nan"),
                     "observations": data.n_observations, "units": data.d_model, "k": data.graph_k})
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

    def markdown(self) -> str:
        lines = ["| claim (PAPER.md) | measure | paper | rule | null model | trained | verdict |",
                 "|---|---|---|---|---|---|---|"]
        for claim in self.claims:
            row = {key: markdown_cell(value) for key, value in claim.row().items()}
            note = f" ({row['note']})" if row["note"] else ""
            lines.append(f"| {row['claim']} | {row['measure']}{note} | {row['paper']} | {row['rule']} | "
                         f"{row['null_model']} | {row['trained']} | **{row['verdict']}** |")
        for row in self.diagnostics:
            if not np.isfinite(row["noise"]):
                continue
            lines.append(f"\nGraphs ({row['checkpoint']}): median kNN edge |r| {row['value']:.3f} against "
                         f"{row['noise']:.3f} for independent units ({row['observations']} observations, "
                         f"{row['units']} units, k = {row['k']}): {row['ratio']:.2f}x the noise level.")
        return "\n".join(lines)
