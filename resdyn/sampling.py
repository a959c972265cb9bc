"""Sampling uncertainty of the mean Jacobians: the delete-a-group (block) jackknife over fold means.

The measurement stage keeps, beside each sublayer's mean Jacobian J = (1/n) sum_i J_i, the means J_k of
K contiguous blocks of the samples (``jacobian_folds``; the closed form makes each a partial sum).
Leaving block k out gives

    J_(-k) = (n J - n_k J_k) / (n - n_k),

and for any statistic theta of the mean Jacobians (a sublayer's metric, a mean over sublayers, a rank of
the product through depth) the replicates theta_(-k) give the jackknife standard error

    se = sqrt((K - 1) / K * sum_k (theta_(-k) - mean_k theta_(-k))^2)

(Quenouille 1956; Efron & Stein 1981; the grouped form: Shao & Tu 1995, "The Jackknife and Bootstrap",
sec. 5.2). The 95% interval is theta(J) +- t_{K-1, 0.975} se (K - 1 degrees of freedom: the blocks are
the independent units). Blocks are contiguous windows of text, so their spread includes the correlation
of neighbouring windows (a block jackknife: Kunsch 1989, Ann. Stat. 17, 1217). Blocks differ in size by
at most one sample; the equal-size formula is used (the weighted one, Busing, Meijer & van der Leeden
1999, differs by O(1/n)). Because every sublayer's blocks hold the same samples, a statistic of many
sublayers has exact replicates: evaluate it on the K leave-one-out sets of matrices (:func:`replicate`).

Cost: K more analyses per sublayer (each fold's Schur form, SVD and the alpha = 0 surgery under three
orderings), i.e. about K times the spectral stage; at d = 4096 that is hours on two cores, so the folds
run by default up to d = 1024 (settings ``folds``, ``fold_max_width``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.stats

CONFIDENCE = 0.95


def cumulative_quantity(rank: str) -> str:
    """The ``sampling_intervals.quantity`` of a rank of the cumulative product."""
    return f"cumulative_{rank}"


def surgery_quantity(ordering: str, rank: str) -> str:
    """The ``sampling_intervals.quantity`` of a rank of the alpha = 0 surgery product under ``ordering``."""
    return f"surgery_alpha0_{ordering}_{rank}"


def leave_one_out_means(mean: np.ndarray, fold_means: Sequence[np.ndarray], fold_counts: Sequence[int]) -> list[np.ndarray]:
    """J_(-k) = (n J - n_k J_k) / (n - n_k) for every fold k (float64), n = sum_k n_k."""
    mean = np.asarray(mean, dtype=np.float64)
    n = float(sum(fold_counts))
    return [(n * mean - count * np.asarray(fold, dtype=np.float64)) / (n - count)
            for fold, count in zip(fold_means, fold_counts)]


@dataclass(frozen=True)
class JackknifeInterval:
    value: float  # the statistic of the full-sample means
    standard_error: float
    low: float
    high: float
    n_folds: int


def jackknife(value: float, replicates: Sequence[float], confidence: float = CONFIDENCE) -> JackknifeInterval:
    """The interval value +- t_{K-1} se from the K leave-one-fold-out replicates (module docstring). NaN when
    fewer than two finite replicates exist (no spread can be measured) or the value is not finite."""
    replicates = np.asarray(replicates, dtype=np.float64)
    k = len(replicates)
    if k < 2 or not np.all(np.isfinite(replicates)) or not np.isfinite(value):
        return JackknifeInterval(float(value), float("nan"), float("nan"), float("nan"), k)
    se = float(np.sqrt((k - 1) / k * np.sum((replicates - replicates.mean()) ** 2)))
    half = float(scipy.stats.t.ppf(0.5 + confidence / 2, k - 1)) * se
    return JackknifeInterval(float(value), se, float(value) - half, float(value) + half, k)


def replicate(statistic: Callable[..., float], full: Sequence, leave_one_out: Sequence[Sequence]) -> JackknifeInterval:
    """The jackknife interval of ``statistic(*full)`` from ``statistic(*leave_one_out[k])`` for every fold k: the
    arguments are whatever the statistic needs (arrays over sublayers, say), once from the full-sample means and
    once per leave-one-fold-out set."""
    return jackknife(float(statistic(*full)), [float(statistic(*arguments)) for arguments in leave_one_out])


def noise_to_signal(mean: np.ndarray, leave_one_out: Sequence[np.ndarray]) -> float:
    """||se(J)||_F / ||J - I||_F: the jackknife standard error of the mean matrix (entrywise, in Frobenius norm)
    relative to the size of the update it estimates. 0.3 means the update is about a third noise."""
    mean = np.asarray(mean, dtype=np.float64)
    k = len(leave_one_out)
    if k < 2:
        return float("nan")
    stack = np.stack([np.asarray(m, dtype=np.float64) for m in leave_one_out])
    se = np.sqrt((k - 1) / k * np.sum((stack - stack.mean(axis=0)) ** 2))
    update = np.linalg.norm(mean - np.eye(len(mean)))
    return float(se / update) if update > 0 else float("nan")


def per_sample_noise_to_signal(mean: np.ndarray, samples: Iterable[np.ndarray], n_observations: int) -> float:
    """RMS_i ||J_i - J||_F / (sqrt(n) ||J - I||_F) from kept per-sample Jacobians J_i (any iterable: one matrix in
    memory at a time): the same ratio as :func:`noise_to_signal` under independent samples (the standard error of
    a mean of n is the per-sample spread over sqrt(n)). Blind to correlation between samples, which the block
    jackknife sees."""
    mean = np.asarray(mean, dtype=np.float64)
    squared = [float(np.linalg.norm(np.asarray(s, dtype=np.float64) - mean) ** 2) for s in samples]
    if not squared or n_observations <= 0:
        return float("nan")
    spread = np.sqrt(np.mean(squared))
    update = np.linalg.norm(mean - np.eye(len(mean)))
    return float(spread / (np.sqrt(n_observations) * update)) if update > 0 else float("nan")
