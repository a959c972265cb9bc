"""The statistics the rules use: estimates with their two intervals, the interval rule (``side``), the bootstrap
over sublayers, the jackknife over folds, rank correlations, Holm, ratio and group differences."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.stats

from ..coupling import rank_correlation_test
from ..sampling import jackknife
from .rules import BOOTSTRAP_SEED, N_BOOTSTRAP, N_PERMUTATIONS


def finite(value) -> bool:
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
        if not all(finite(lo) and finite(hi) for lo, hi in pairs):
            return float("nan"), float("nan")
        return min(lo for lo, _ in pairs), max(hi for _, hi in pairs)

    def text(self, digits: int = 3) -> str:
        if not finite(self.value):
            return "n/a"
        parts = [f"{self.value:.{digits}g}"]
        for label, lo, hi in (("", self.low, self.high), ("samples ", self.sample_low, self.sample_high)):
            if lo is None:
                continue
            parts.append(f"[{label}{lo:.{digits}g}, {hi:.{digits}g}]" if finite(lo) and finite(hi)
                         else f"[{label}no interval]")
        if self.p_value is not None:
            parts.append(f"(p = {self.p_value:.2g})")
        return " ".join(parts)


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
    if estimate is None or not finite(estimate.value):
        return "not testable"
    bounds = estimate.bounds()
    low, high = bounds if bounds is not None else (estimate.value, estimate.value)
    if not (np.isfinite(low) and np.isfinite(high)):
        return "undecided"  # an interval was wanted and could not be made
    if holds_above:
        return "holds" if low > bound else "does not hold" if high <= bound else "undecided"
    return "holds" if high < bound else "does not hold" if low >= bound else "undecided"


def jackknife_bounds(value: float, replicates: np.ndarray | list | None) -> tuple[float | None, float | None]:
    if replicates is None or len(replicates) == 0:
        return None, None
    interval = jackknife(value, replicates)
    return interval.low, interval.high


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



def why_in_words(label: str, estimate: Estimate | None, bound: float, holds_above: bool, verdict: str) -> str:
    """The verdict of ``side`` in words."""
    if estimate is None or not finite(estimate.value):
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


def judged(label: str, estimate: Estimate | None, bound: float, holds_above: bool) -> tuple[str, str]:
    verdict = side(estimate, bound, holds_above)
    return verdict, why_in_words(label, estimate, bound, holds_above, verdict)


def ratio_estimate(numerator: float, denominator: float, numerator_replicates, denominator_replicates) -> Estimate:
    """numerator / denominator with the samples' interval of the ratio from its log's jackknife: the replicates of
    both (sequences over folds, or None: that side held fixed) are paired fold by fold (the same windows, as in
    :func:`paired_difference`)."""
    value = numerator / denominator if denominator > 0 else float("nan")
    if not finite(value):
        return Estimate(value)
    if numerator_replicates is None and denominator_replicates is None:
        return Estimate(value)
    size = len(numerator_replicates if numerator_replicates is not None else denominator_replicates)
    top = np.full(size, numerator) if numerator_replicates is None else np.asarray(numerator_replicates, float)
    bottom = np.full(size, denominator) if denominator_replicates is None else np.asarray(denominator_replicates, float)
    if len(top) != len(bottom) or size < 2 or np.any(top <= 0) or np.any(bottom <= 0):
        return Estimate(value, sample_low=float("nan"), sample_high=float("nan"))
    interval = jackknife(np.log(value), np.log(top) - np.log(bottom))
    if not finite(interval.low):
        return Estimate(value, sample_low=float("nan"), sample_high=float("nan"))
    return Estimate(value, sample_low=float(np.exp(interval.low)), sample_high=float(np.exp(interval.high)))


def group_difference(values: np.ndarray, first: np.ndarray, second: np.ndarray) -> Estimate | None:
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


