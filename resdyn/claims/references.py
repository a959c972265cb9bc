"""Random references the verdicts are read against: the real Ginibre complex fraction, and the kNN graphs' edge
correlation when every unit is independent (the noise level of the topology verdicts)."""

from __future__ import annotations

import functools

import numpy as np
import scipy.special
import scipy.stats

from .rules import NOISE_OBSERVATIONS_CAP


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
    from ..topology import correlation_matrix, signed_graph

    if n_observations <= 3 or n_units <= 1 or k <= 0:
        return float("nan")
    simulated = min(n_observations, NOISE_OBSERVATIONS_CAP)
    noise = np.random.default_rng(seed).standard_normal((simulated, n_units))
    edges = signed_graph(correlation_matrix(noise), "knn", k=k)
    median = float(np.median(np.abs(edges.weight)))
    # beyond the cap, Fisher's z carries the level over: atanh(r) sqrt(n - 3) has the same law at every n
    return float(np.tanh(np.arctanh(median) * np.sqrt((simulated - 3) / (n_observations - 3))))


