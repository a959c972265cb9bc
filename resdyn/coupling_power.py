"""Power of the coupling tests, pooled tests across sublayers, and the operator-type regression.

Per sublayer, the community test (:mod:`resdyn.community_coupling`) ranks K communities, often 4 to 10: its exact
two-sided permutation p cannot fall below 2/K! (no ties), its Monte-Carlo p not below 1/(1 + B), and
Benjamini-Hochberg over m sublayers rejects nothing unless some p <= 0.05/m (0.0014 at m = 36). A coupling the
tests do not find is then a statement about the tests. This module gives

(a) power by planted-effect simulation: :func:`community_test_power`, :func:`unit_test_power` (one sublayer's
    test, by permutations; :func:`unit_test_p_values_normal` by the normal law, what the claims use),
    :func:`bh_family_power` (a BH family of unit tests) and :func:`omnibus_community_power`, with
    :func:`smallest_attainable_p` and :func:`bh_first_rejection_level` for the levels a family of tests needs;
(b) pooled tests across the sublayers of one checkpoint from each sublayer's rho and K (what the warehouse keeps):
    :func:`omnibus_rank_correlation_test` (sign-free, what the claims use) and :func:`pooled_rank_correlation_test`
    (the signed weighted mean, for a coupling of one sign everywhere);
(c) :func:`operator_type_regression`: the coupling regressed on the asymmetry index and the rotation share
    (:mod:`resdyn.spectra`) across sublayers, with a null that permutes whole layers (:func:`layer_permutations`);
(e) :func:`dependence_calibrated_omnibus_test`, the sign-free pooled test with a null that allows for dependent
    neighbouring sublayers, and :func:`chance_corrected_community_excess`, its effect net of the chance level that
    depends on the numbers of communities (what to compare between models).

The power simulations test many simulated data sets at once (:func:`rank_correlation_p_values`,
:func:`coupling_p_values`) with the statistic, the degree strata (:func:`resdyn.coupling.degree_strata`), the
tie tolerance and the p = (1 + #)/(1 + B) of :func:`resdyn.coupling.rank_correlation_test` and
:func:`resdyn.coupling.coupling_test`, each data set with its own B permutations; ``method="direct"`` runs those
two functions themselves, one data set at a time (slower; tests/unit/test_coupling_power.py checks that both
ways give the same p's within their Monte-Carlo error).

Only numpy and scipy (and the project's own numpy code) are imported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.stats

from resdyn.community_coupling import MIN_COMMUNITIES
from resdyn.coupling import coupling_test, degree_strata, rank_correlation_test

__all__ = ["CalibratedOmnibusResult", "CommunityExcess", "OperatorTypeRegression", "PooledTestResult",
           "PowerEstimate", "bh_family_power", "bh_first_rejection_level", "chance_corrected_community_excess",
           "chance_excess_standard_error",
           "community_test_power", "coupling_p_values", "dependence_calibrated_omnibus_test",
           "expected_sample_spearman", "gaussian_copula_pearson", "layer_permutations", "null_spearman_draws",
           "omnibus_community_power", "omnibus_rank_correlation_test", "operator_type_regression",
           "pooled_rank_correlation_test", "rank_biserial_shift", "rank_correlation_p_values",
           "smallest_attainable_p", "unit_test_p_values_normal", "unit_test_power"]

ALTERNATIVES = ("two-sided", "less", "greater")
METHODS = ("vectorised", "direct")
_TOLERANCE = 1e-12  # as resdyn.coupling: a permuted statistic within this of the observed one counts as extreme
_CELLS = 1 << 23  # elements of one working array (64 MiB of float64) in the chunked simulations


# --------------------------------------------------------------------------------------------------------------
# planted effects


def gaussian_copula_pearson(spearman_rho):
    """Pearson r of the bivariate normal whose (population) Spearman correlation is ``spearman_rho``.

        r = 2 sin(pi rho_S / 6),    the inverse of    rho_S = (6 / pi) arcsin(r / 2)

    (Kruskal 1958, J. Am. Stat. Assoc. 53:814, sec. 4: the grade correlation of a bivariate normal). A Gaussian
    copula with this r has Spearman correlation rho_S; r = rho_S at 0 and +-1 and |r| > |rho_S| between.
    """
    return 2.0 * np.sin(np.pi * np.asarray(spearman_rho, dtype=np.float64) / 6.0)


def expected_sample_spearman(spearman_rho, n: int):
    """Expected sample Spearman rho of ``n`` pairs from the bivariate normal of population Spearman ``spearman_rho``.

        E[r_S] = (6 / pi) [ (n - 2) / (n + 1) arcsin(r / 2) + 1 / (n + 1) arcsin(r) ],    r = 2 sin(pi rho_S / 6)

    (Moran 1948, Biometrika 35:203: E[r_S] = ((n - 2) rho_S + 3 tau) / (n + 1) with Kendall's tau = (2 / pi)
    arcsin r). The planted rho of :func:`community_test_power` is rho_S; over few communities the sample rho
    is smaller on average: 0.51 for rho_S = 0.58 at n = 6.
    """
    r = gaussian_copula_pearson(spearman_rho)
    return 6.0 / np.pi * ((n - 2) / (n + 1) * np.arcsin(r / 2.0) + np.arcsin(r) / (n + 1))


def rank_biserial_shift(effect):
    """Normal location shift delta that gives the rank-biserial effect ``effect`` (Kerby 2014).

    For X_b ~ N(delta, 1) and X_i ~ N(0, 1) independent, the common-language effect size is
    P(X_b > X_i) = Phi(delta / sqrt 2) (McGraw & Wong 1992, Psychol. Bull. 111:361), and the population
    rank-biserial effect r = 2 P(X_b > X_i) - 1 (the limit of 2 U / (n_b n_i) - 1), so

        r = 2 Phi(delta / sqrt 2) - 1,    delta = sqrt 2 Phi^{-1}((r + 1) / 2),    |r| < 1.
    """
    effect = np.asarray(effect, dtype=np.float64)
    if np.any(np.abs(effect) >= 1):
        raise ValueError(f"a planted rank-biserial effect must lie in (-1, 1), not {effect}")
    return np.sqrt(2.0) * scipy.stats.norm.ppf((effect + 1.0) / 2.0)


def _bivariate_normal(rng: np.random.Generator, spearman_rho: float, shape: tuple[int, int]):
    """(x, y) of ``shape``: pairs from the standard bivariate normal of Spearman correlation ``spearman_rho``."""
    if not -1.0 <= spearman_rho <= 1.0:
        raise ValueError(f"a planted Spearman rho must lie in [-1, 1], not {spearman_rho}")
    r = float(gaussian_copula_pearson(spearman_rho))
    x = rng.standard_normal(shape)
    return x, r * x + np.sqrt(max(0.0, 1.0 - r * r)) * rng.standard_normal(shape)


# --------------------------------------------------------------------------------------------------------------
# levels


def smallest_attainable_p(n_communities: int, n_permutations: int, *, alternative: str = "two-sided") -> float:
    """The smallest p the community test can be relied on to reach, without ties:

        max(1 / (1 + B), 2 / K!)    (two-sided),    max(1 / (1 + B), 1 / K!)    (one-sided).

    The exact permutation p of K communities is the share of the K! orderings of the gains whose rho is at least as
    extreme as the observed one; the observed ordering and, two-sided, its reverse always are, hence 2/K! (4
    communities: 2/24 = 0.083; 6: 0.0028). The Monte-Carlo p = (1 + #)/(1 + B) (Phipson & Smyth 2010) estimates
    it and is never below 1/(1 + B). (For a perfect ordering it reaches 1/(1 + B) by luck, when none of the B
    permutations hits an extreme ordering: probability (1 - 2/K!)^B, 0.06 at K = 6, B = 1000.) With ties the floor
    is higher: permutations that only move tied gains give the same rho, so it is at least 2 prod_j t_j! / K! for
    tie groups of sizes t_j.
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, not {alternative!r}")
    extreme_orderings = 2 if alternative == "two-sided" else 1
    return max(1.0 / (1 + n_permutations), extreme_orderings / math.factorial(int(n_communities)))


def bh_first_rejection_level(n_tests: int, fdr: float = 0.05) -> float:
    """The level q/m that a single test's p must reach for Benjamini-Hochberg at FDR q over m tests to reject it when
    no other test's p is small.

    BH rejects the k smallest p's for the largest k with p_(k) <= k q / m (Benjamini & Hochberg 1995, J. R. Stat. Soc.
    B 57:289); its first rejection, p_(1) <= q / m, is the hardest (0.05 / 36 = 0.0014). The power of one sublayer's
    test at this level is the power to find an effect carried by that sublayer alone.
    """
    if n_tests < 1:
        raise ValueError(f"a family needs at least one test, not {n_tests}")
    return fdr / n_tests


# --------------------------------------------------------------------------------------------------------------
# the two tests, for many data sets at once


def _standardised_ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis, centred and scaled to unit norm (their inner product is Spearman's rho)."""
    ranks = scipy.stats.rankdata(values, axis=-1)
    ranks -= ranks.mean(axis=-1, keepdims=True)
    norm = np.linalg.norm(ranks, axis=-1, keepdims=True)
    if np.any(norm == 0):
        raise ValueError("a rank correlation needs non-constant samples")
    return ranks / norm


def _rank_correlation_p_values(x, y, n_permutations: int, rng: np.random.Generator):
    rx, ry = _standardised_ranks(np.atleast_2d(x)), _standardised_ranks(np.atleast_2d(y))
    if rx.shape != ry.shape:
        raise ValueError(f"x and y differ in shape: {rx.shape} and {ry.shape}")
    n_sets, n = rx.shape
    rho = np.einsum("sk,sk->s", rx, ry)
    extreme = np.zeros(n_sets, dtype=np.int64)
    chunk = max(1, _CELLS // (n_permutations * n))
    for start in range(0, n_sets, chunk):
        block = slice(start, min(start + chunk, n_sets))
        size = block.stop - block.start
        order = rng.permuted(np.broadcast_to(np.arange(n), (size * n_permutations, n)), axis=1)
        permuted = np.take_along_axis(ry[block, None, :], order.reshape(size, n_permutations, n), axis=2)
        permuted_rho = np.einsum("sbk,sk->sb", permuted, rx[block])
        extreme[block] = np.sum(np.abs(permuted_rho) >= np.abs(rho[block, None]) - _TOLERANCE, axis=1)
    return rho, (1.0 + extreme) / (1.0 + n_permutations)


def rank_correlation_p_values(x: np.ndarray, y: np.ndarray, *, n_permutations: int = 1000,
                              seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(rho, p) of :func:`resdyn.coupling.rank_correlation_test` for every row of ``x`` and ``y`` (data sets of n
    pairs, shape (S, n)), all at once.

    rho is Spearman's rank correlation (the inner product of the standardised average ranks; Spearman 1904) and

        p = (1 + #{b : |rho_b| >= |rho| - 1e-12}) / (1 + B)

    over B permutations of y drawn for each row separately (Phipson & Smyth 2010, Stat. Appl. Genet. Mol. Biol.
    9:39): the test of :func:`~resdyn.coupling.rank_correlation_test` with a different seed per row, so a row's p
    differs from that function's by Monte-Carlo error only. Rows must be non-constant.
    """
    return _rank_correlation_p_values(x, y, n_permutations, np.random.default_rng(seed))


def _random_subset_sums(values: np.ndarray, size: int, n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """(rows, n_draws): sums of ``size`` entries drawn without replacement from each row of ``values`` (rows, n),
    an independent uniformly random subset per draw, by Floyd's algorithm (Bentley & Floyd 1987, Commun. ACM
    30:754: for j = n - k, ..., n - 1 take t uniform on {0, ..., j}, or j if t is taken), run on the smaller of the
    subset and its complement: min(k, n - k) random numbers per draw where a full shuffle takes n."""
    values = np.asarray(values, dtype=np.float64)
    rows, n = values.shape
    total = values.sum(axis=1)[:, None]
    if size <= 0 or size >= n:
        return np.broadcast_to(total if size >= n else np.zeros((rows, 1)), (rows, n_draws)).copy()
    complement = size > n - size
    k = n - size if complement else size
    sums = np.empty(rows * n_draws)
    chunk = max(1, _CELLS // n)
    for start in range(0, rows * n_draws, chunk):
        stop = min(start + chunk, rows * n_draws)
        owner = np.arange(start, stop) // n_draws
        line = np.arange(stop - start)
        taken = np.zeros((stop - start, n), dtype=bool)
        subtotal = np.zeros(stop - start)
        for j in range(n - k, n):
            pick = rng.integers(0, j + 1, size=stop - start)
            pick = np.where(taken[line, pick], j, pick)
            taken[line, pick] = True
            subtotal += values[owner, pick]
        sums[start:stop] = subtotal
    sums = sums.reshape(rows, n_draws)
    return total - sums if complement else sums


def _coupling_p_values(amplification, is_boundary, degree, n_permutations: int, rng: np.random.Generator):
    amplification = np.atleast_2d(np.asarray(amplification, dtype=np.float64))
    is_boundary = np.asarray(is_boundary, dtype=bool)
    if amplification.shape[1] != len(is_boundary) or not np.all(np.isfinite(amplification)):
        raise ValueError("amplification must be finite, one column per unit of is_boundary")
    n_boundary, n_interior = int(is_boundary.sum()), int((~is_boundary).sum())
    if n_boundary == 0 or n_interior == 0:
        raise ValueError(f"both groups must be non-empty: {n_boundary} boundary, {n_interior} interior units")
    ranks = scipy.stats.rankdata(amplification, axis=1)
    scale, offset = 2.0 / (n_boundary * n_interior), n_boundary * (n_boundary + 1) / 2.0
    effect = scale * (ranks[:, is_boundary].sum(axis=1) - offset) - 1.0
    strata = (degree_strata(np.asarray(degree, dtype=np.float64)) if degree is not None
              else np.zeros(len(is_boundary), dtype=int))
    permuted_sum = np.zeros((len(ranks), n_permutations))
    for stratum in np.unique(strata):
        members = np.flatnonzero(strata == stratum)
        permuted_sum += _random_subset_sums(ranks[:, members], int(is_boundary[members].sum()), n_permutations, rng)
    permuted = scale * (permuted_sum - offset) - 1.0
    extreme = np.sum(np.abs(permuted) >= np.abs(effect)[:, None] - _TOLERANCE, axis=1)
    return effect, (1.0 + extreme) / (1.0 + n_permutations)


def coupling_p_values(amplification: np.ndarray, is_boundary: np.ndarray, degree: np.ndarray | None = None, *,
                      n_permutations: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(rank-biserial effect, degree-stratified permutation p) of :func:`resdyn.coupling.coupling_test` for every row
    of ``amplification`` (S data sets of the same units, shape (S, n_units); finite), all at once.

    r = 2 U_b / (n_b n_i) - 1 with U_b = R_b - n_b (n_b + 1) / 2, R_b the boundary units' rank sum (Mann & Whitney
    1947; Kerby 2014), and

        p = (1 + #{b : |r_b| >= |r| - 1e-12}) / (1 + B),

    r_b with the boundary labels shuffled within the quantile bins of ``degree``
    (:func:`resdyn.coupling.degree_strata`; one bin without ``degree``), B shuffles per row. A shuffle within a bin
    of n_g units, b_g of them boundary, makes the bin's share of R_b the sum of a uniformly random b_g-subset of its
    ranks, which is what is drawn (:func:`_random_subset_sums`). The test of
    :func:`~resdyn.coupling.coupling_test` with a different seed per row.
    """
    return _coupling_p_values(amplification, is_boundary, degree, n_permutations, np.random.default_rng(seed))


# --------------------------------------------------------------------------------------------------------------
# (a) power of one sublayer's test


@dataclass(frozen=True)
class PowerEstimate:
    """Share of simulated data sets whose test rejects at ``level`` (p <= level), and its Monte-Carlo standard error
    sqrt(power (1 - power) / n_simulations) (binomial; at most 0.5 / sqrt(n_simulations))."""

    power: float
    standard_error: float
    level: float
    n_simulations: int


def _power(p_values: np.ndarray, level: float) -> PowerEstimate:
    power = float(np.mean(p_values <= level))
    return PowerEstimate(power, math.sqrt(power * (1.0 - power) / len(p_values)), level, len(p_values))


def _check(level: float, n_simulations: int, method: str = "vectorised") -> None:
    if not 0.0 < level <= 1.0:
        raise ValueError(f"level must lie in (0, 1], not {level}")
    if n_simulations < 1:
        raise ValueError(f"n_simulations must be positive, not {n_simulations}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, not {method!r}")


def community_test_power(n_communities: int, planted_rho: float, *, level: float = 0.05,
                         n_permutations: int = 1000, n_simulations: int = 2000, seed: int = 0,
                         method: str = "vectorised") -> PowerEstimate:
    """Power of one sublayer's community test (:func:`resdyn.community_coupling.community_coupling_test`): the share
    of simulated sublayers whose two-sided permutation p is <= ``level``.

    Each simulation draws K (position, log gain) pairs from the standard bivariate normal with Pearson
    r = 2 sin(pi planted_rho / 6) (:func:`gaussian_copula_pearson`; Kruskal 1958), whose population Spearman
    correlation is ``planted_rho`` (its expected sample rho over K points is :func:`expected_sample_spearman`), and
    runs :func:`resdyn.coupling.rank_correlation_test` with B = ``n_permutations`` (``method="direct"``: that
    function, one simulation at a time) or the same test for all simulations at once
    (:func:`rank_correlation_p_values`, the default). Monte-Carlo standard error sqrt(power (1 - power) / S): at most
    0.011 at the default S = 2000 (B = 1000: about 0.25 s at K = 6, 0.4 s at K = 10; ``method="direct"``
    about 1 ms per simulation at K = 6). For a BH family pass ``level`` =
    :func:`bh_first_rejection_level`; a level below 1/(1 + B) cannot be reached (power 0, no simulation), and below
    :func:`smallest_attainable_p` only by the luck that function describes.
    """
    _check(level, n_simulations, method)
    if n_communities < MIN_COMMUNITIES:
        raise ValueError(f"the community test needs at least {MIN_COMMUNITIES} communities, not {n_communities}")
    if level < 1.0 / (1 + n_permutations):
        return PowerEstimate(0.0, 0.0, level, 0)
    rng = np.random.default_rng(seed)
    x, y = _bivariate_normal(rng, planted_rho, (n_simulations, n_communities))
    if method == "direct":
        seeds = rng.integers(0, 2 ** 63, size=n_simulations)
        p = np.array([rank_correlation_test(x[s], y[s], n_permutations=n_permutations, seed=int(seeds[s]))[1]
                      for s in range(n_simulations)])
    else:
        _, p = _rank_correlation_p_values(x, y, n_permutations, rng)
    return _power(p, level)


def unit_test_power(n_boundary: int, n_interior: int, planted_effect: float, *, level: float = 0.05,
                    n_permutations: int = 1000, degree: np.ndarray | None = None,
                    is_boundary: np.ndarray | None = None, n_simulations: int = 200, seed: int = 0,
                    method: str = "vectorised") -> PowerEstimate:
    """Power of one sublayer's unit-level test (:func:`resdyn.coupling.coupling_test`): the share of simulated
    sublayers whose degree-stratified permutation p is <= ``level``.

    Each simulation draws every unit's amplification from N(0, 1) and adds delta to the boundary units',
    delta = sqrt 2 Phi^{-1}((r + 1) / 2) (:func:`rank_biserial_shift`; McGraw & Wong 1992), so that the population
    rank-biserial effect is ``planted_effect`` = r, and runs :func:`~resdyn.coupling.coupling_test`
    (``method="direct"``, one simulation at a time: 30 to 50 ms each at 640 units and B = 1000) or the same test for
    all simulations at once (:func:`coupling_p_values`, the default: for S = 200, B = 1000 and 640 units about
    0.65 s with 64 boundary units, 1.9 s with 160; the time grows with the smaller group, or with each degree
    stratum's). ``degree`` (one value per unit), when given, sets the strata of the test as observed, and
    ``is_boundary`` places the boundary labels as observed (default: the first ``n_boundary`` units). Monte-Carlo
    standard error sqrt(power (1 - power) / S): at most 0.035 at S = 200, 0.015 at a power of 0.05. A ``level``
    below 1/(1 + B) cannot be reached (power 0, no simulation).
    """
    _check(level, n_simulations, method)
    n_units = n_boundary + n_interior
    if is_boundary is None:
        is_boundary = np.arange(n_units) < n_boundary
    is_boundary = np.asarray(is_boundary, dtype=bool)
    if len(is_boundary) != n_units or int(is_boundary.sum()) != n_boundary:
        raise ValueError(f"is_boundary must hold {n_units} units, {n_boundary} of them boundary")
    if degree is not None and len(degree) != n_units:
        raise ValueError(f"degree must hold one value per unit ({n_units}), not {len(degree)}")
    if n_boundary < 1 or n_interior < 1:
        raise ValueError(f"both groups must be non-empty: {n_boundary} boundary, {n_interior} interior units")
    if level < 1.0 / (1 + n_permutations):
        return PowerEstimate(0.0, 0.0, level, 0)
    rng = np.random.default_rng(seed)
    amplification = rng.standard_normal((n_simulations, n_units)) + rank_biserial_shift(planted_effect) * is_boundary
    if method == "direct":
        seeds = rng.integers(0, 2 ** 63, size=n_simulations)
        p = np.array([coupling_test(amplification[s], is_boundary, degree, n_permutations=n_permutations,
                                    seed=int(seeds[s])).p_permutation for s in range(n_simulations)])
    else:
        _, p = _coupling_p_values(amplification, is_boundary, degree, n_permutations, rng)
    return _power(p, level)


# --------------------------------------------------------------------------------------------------------------
# (b) pooled tests across sublayers


def null_spearman_draws(n_communities, n_draws: int, *, seed: int = 0) -> np.ndarray:
    """(n_draws, m): for each of m sublayers (K_s = ``n_communities[s]``), Spearman rho of a uniformly random
    permutation of 1..K_s against 1..K_s, independently across draws and sublayers:

        rho = 1 - 6 sum_k (pi(k) - k)^2 / (K (K^2 - 1)),

    the exact null distribution of Spearman's rho of K untied pairs under exchangeability (Spearman 1904), with
    mean 0 and variance 1 / (K - 1) (Hotelling & Pabst 1936, Ann. Math. Stat. 7:29).
    """
    sizes = np.asarray(n_communities, dtype=np.int64).reshape(-1)
    if np.any(sizes < 2):
        raise ValueError(f"a rank correlation needs at least 2 points per sublayer: {sizes}")
    rng = np.random.default_rng(seed)
    draws = np.empty((n_draws, len(sizes)))
    for size in np.unique(sizes):
        columns = np.flatnonzero(sizes == size)
        identity = np.arange(size)
        order = rng.permuted(np.broadcast_to(identity, (n_draws * len(columns), size)), axis=1)
        squared = np.sum((order - identity) ** 2, axis=1).reshape(n_draws, len(columns))
        draws[:, columns] = 1.0 - 6.0 * squared / (size * (size * size - 1.0))
    return draws



@dataclass(frozen=True)
class PooledTestResult:
    """A pooled test across sublayers: the weighted mean ``statistic``, its Monte-Carlo ``p_value`` under the
    ``alternative``, the ``n_sublayers`` it pooled and the standard deviation of the statistic under the null,
    1 / sqrt(sum_s w_s); undefined (statistic nan, p 1, ``reason`` set) without a defined sublayer."""

    statistic: float
    p_value: float
    n_sublayers: int
    null_standard_deviation: float
    alternative: str
    reason: str = ""

    @property
    def defined(self) -> bool:
        return not self.reason


def _monte_carlo_p(statistic, null: np.ndarray, alternative: str) -> np.ndarray:
    """p = (1 + #{b : T_b at least as extreme as T}) / (1 + B) (Phipson & Smyth 2010), for each T in ``statistic``."""
    statistic = np.asarray(statistic, dtype=np.float64)
    if alternative == "two-sided":
        statistic, null = np.abs(statistic), np.abs(null)
    elif alternative == "less":
        statistic, null = -statistic, -null
    ordered = np.sort(null)
    extreme = len(ordered) - np.searchsorted(ordered, statistic - _TOLERANCE, side="left")
    return (1.0 + extreme) / (1.0 + len(ordered))


def _pooled(values, weights, null_draws, alternative: str):
    """Weighted mean of ``values`` and its p against the (B, m) null draws; values (m,) or (S, m)."""
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, not {alternative!r}")
    statistic = values @ weights / weights.sum()
    return statistic, _monte_carlo_p(statistic, null_draws @ weights / weights.sum(), alternative)


def _undefined(alternative: str, what: str) -> PooledTestResult:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, not {alternative!r}")
    return PooledTestResult(float("nan"), 1.0, 0, float("nan"), alternative, f"no sublayer with a defined {what}")


def pooled_rank_correlation_test(rhos, n_communities, *, alternative: str = "two-sided",
                                 n_simulations: int = 10000, seed: int = 0) -> PooledTestResult:
    """Pooled test of the community coupling across the sublayers of one checkpoint, from each sublayer's Spearman
    rho and number of communities K (what the warehouse keeps).

        T = sum_s w_s rho_s / sum_s w_s,    w_s = K_s - 1,

    the inverse-variance weighted mean: under exchangeability of the gains, without ties, E rho_s = 0 and
    Var rho_s = 1 / (K_s - 1) (Hotelling & Pabst 1936), so Var T = 1 / sum_s (K_s - 1). The null distribution of
    T is simulated exactly: ``n_simulations`` draws of, for every sublayer independently, the rho of a random
    permutation of 1..K_s (:func:`null_spearman_draws`), and p = (1 + #{b : T_b at least as extreme})/(1 + B)
    (Phipson & Smyth 2010) in the direction of ``alternative`` ("less": coupling negative; "two-sided": |T_b| >=
    |T|). Sublayers with a NaN rho (undefined tests) are left out. The null treats the sublayers as independent
    (each sublayer's gains permuted separately) and the rho's as untied (ties make Var rho_s smaller, so the test
    conservative). It pools the effect: a small coupling of one sign in many sublayers, which BH over the
    per-sublayer tests cannot reject (:func:`smallest_attainable_p`), moves T by about 1 / sqrt(sum_s (K_s - 1)).
    """
    rhos = np.asarray(rhos, dtype=np.float64).reshape(-1)
    sizes = np.asarray(n_communities, dtype=np.float64).reshape(-1)
    if rhos.shape != sizes.shape:
        raise ValueError(f"one K per rho: {rhos.shape} and {sizes.shape}")
    defined = np.isfinite(rhos)
    if not defined.any():
        return _undefined(alternative, "rho")
    if np.any(np.abs(rhos[defined]) > 1.0 + 1e-12) or not np.all(np.isfinite(sizes[defined])):
        raise ValueError("a defined rho lies in [-1, 1] and has a finite K")
    sizes = sizes[defined].astype(np.int64)
    weights = (sizes - 1).astype(np.float64)
    statistic, p = _pooled(rhos[defined], weights, null_spearman_draws(sizes, n_simulations, seed=seed),
                           alternative)
    return PooledTestResult(float(statistic), float(p), int(defined.sum()), 1.0 / math.sqrt(weights.sum()),
                            alternative)


# --------------------------------------------------------------------------------------------------------------
# (c) operator-type dependence as a regression across sublayers


def layer_permutations(layer, n_permutations: int, *, seed: int = 0) -> np.ndarray:
    """(B, n) row indices: in permutation b, sublayer i takes the operator measures of sublayer ``out[b, i]``.

    Whole layers move: the layers are permuted among themselves and each carries all its rows along, so the
    attention and MLP sublayers of a decoder layer keep their pair (exchangeability blocks permuted as wholes,
    Winkler et al. 2014, NeuroImage 92:381). Layers holding different numbers of sublayers (one lost its other
    sublayer to an undefined test) are permuted only among layers of the same count, so that every row has a
    partner and no layer is split; within a layer, rows keep their order of appearance (pass the sublayers of every
    layer in the same order, e.g. attention then MLP, so that the k-th sublayer of one layer takes the k-th of
    another). The number of distinct permutations is prod_g L_g! over the groups of L_g layers.
    """
    layer = np.asarray(layer).reshape(-1)
    _, code = np.unique(layer, return_inverse=True)
    rows_of = [np.flatnonzero(code == index) for index in range(code.max() + 1)] if len(layer) else []
    source = np.tile(np.arange(len(layer)), (n_permutations, 1))
    rng = np.random.default_rng(seed)
    counts = np.array([len(rows) for rows in rows_of])
    for count in np.unique(counts):
        group = np.flatnonzero(counts == count)
        if len(group) < 2:
            continue
        block = np.stack([rows_of[index] for index in group])  # (layers in the group, rows per layer)
        order = rng.permuted(np.broadcast_to(np.arange(len(group)), (n_permutations, len(group))), axis=1)
        source[:, block.ravel()] = block[order].reshape(n_permutations, -1)
    return source


@dataclass(frozen=True)
class OperatorTypeRegression:
    """Coupling ~ intercept + asymmetry + rotation share over sublayers, standardised predictors, with layer-
    permutation p's (:func:`operator_type_regression`). Undefined: numbers nan, p's 1, ``reason`` set."""

    n_sublayers: int
    n_layers: int
    intercept: float  # the mean coupling (predictors centred)
    slope_asymmetry: float  # coupling per standard deviation of the asymmetry index
    slope_rotation: float  # coupling per standard deviation of the rotation share
    r_squared: float
    p_asymmetry: float  # layer-permutation p of the asymmetry slope (two-sided)
    p_rotation: float
    p_value: float  # layer-permutation p of R^2: the joint null that the coupling depends on neither measure
    rho_asymmetry: float  # Spearman rho of coupling with the asymmetry index
    p_rho_asymmetry: float  # its layer-permutation p (two-sided)
    rho_rotation: float
    p_rho_rotation: float
    sd_asymmetry: float  # the predictors' standard deviations (divide a slope by one to get it per unit)
    sd_rotation: float
    n_layer_orderings: int  # distinct layer permutations: p cannot fall much below 1 / this
    n_permutations: int
    reason: str = ""

    @property
    def defined(self) -> bool:
        return not self.reason


def _undefined_regression(n_sublayers: int, n_layers: int, n_permutations: int, reason: str):
    nan = float("nan")
    return OperatorTypeRegression(n_sublayers, n_layers, nan, nan, nan, nan, 1.0, 1.0, 1.0, nan, 1.0, nan, 1.0,
                                  nan, nan, 0, n_permutations, reason)


def _permutation_p(observed: np.ndarray, permuted: np.ndarray, two_sided: bool = True) -> np.ndarray:
    """(1 + #{b : |T_b| >= |T|}) / (1 + B) per column (two-sided), or T_b >= T; relative tolerance 1e-10."""
    if two_sided:
        observed, permuted = np.abs(observed), np.abs(permuted)
    extreme = np.sum(permuted >= observed - 1e-10 * (1.0 + np.abs(observed)), axis=0)
    return (1.0 + extreme) / (1.0 + len(permuted))


def operator_type_regression(coupling, asymmetry, rotation_share, layer, *, n_permutations: int = 10000,
                             seed: int = 0) -> OperatorTypeRegression:
    """Does the coupling depend on the operator's measured type, as a continuous relation across sublayers?

    Over the sublayers where coupling (a per-sublayer rho or rank-biserial effect), asymmetry index and rotation
    share (:func:`resdyn.spectra.asymmetry_index`, :func:`resdyn.spectra.rotation_share`) are all finite, ordinary
    least squares (numpy.linalg.lstsq) of

        c_s = b_0 + b_a z(a_s) + b_r z(q_s) + e_s,    z(v) = (v - mean v) / sd v    (sd with ddof 0),

    so the slopes are coupling per standard deviation of each measure and comparable between the two, b_0 is the
    mean coupling, and R^2 = 1 - sum e_s^2 / sum (c_s - mean c)^2. Also Spearman's rho of c with each measure
    (scipy.stats.spearmanr).

    Null: the coupling does not depend on the operator measures. Neighbouring sublayers are not independent, so
    the permutations move whole layers (:func:`layer_permutations`): the layers' predictor rows are permuted
    among the layers, each layer's attention and MLP rows together, and B = ``n_permutations`` permutations give
    p = (1 + #{b : |T_b| >= |T|}) / (1 + B) (Phipson & Smyth 2010) for each slope and each rho (two-sided) and
    for R^2 (T_b >= T). Both measures move together, so each slope's p tests the joint null with that slope as
    statistic, not the slope's partial effect given the other. Regressing c on the permuted design equals
    regressing the inversely permuted c on the fixed design, which is how the B fits are computed. Fewer than 4
    sublayers, or a constant measure or coupling, make the fit undefined (``reason``).
    """
    coupling, asymmetry, rotation_share = (np.asarray(values, dtype=np.float64).reshape(-1)
                                           for values in (coupling, asymmetry, rotation_share))
    layer = np.asarray(layer).reshape(-1)
    if not len(coupling) == len(asymmetry) == len(rotation_share) == len(layer):
        raise ValueError("coupling, asymmetry, rotation_share and layer need one entry per sublayer")
    finite = np.isfinite(coupling) & np.isfinite(asymmetry) & np.isfinite(rotation_share)
    c, layer = coupling[finite], layer[finite]
    n, n_layers = int(finite.sum()), len(np.unique(layer))
    if n < 4:
        return _undefined_regression(n, n_layers, n_permutations, f"{n} sublayers with finite values; the fit of "
                                                                  "3 coefficients needs at least 4")
    predictors = np.column_stack([asymmetry[finite], rotation_share[finite]])
    sd = predictors.std(axis=0)
    constant = [name for name, spread in (("asymmetry index", sd[0]), ("rotation share", sd[1]),
                                          ("coupling", float(np.ptp(c)))) if spread == 0]
    if constant:
        return _undefined_regression(n, n_layers, n_permutations, f"the {constant[0]} is the same in every sublayer")
    design = np.column_stack([np.ones(n), (predictors - predictors.mean(axis=0)) / sd])
    coefficients, _, rank, _ = np.linalg.lstsq(design, c, rcond=None)
    if rank < 3:
        return _undefined_regression(n, n_layers, n_permutations, "the two measures are collinear")
    total = float(np.sum((c - c.mean()) ** 2))
    r_squared = 1.0 - float(np.sum((c - design @ coefficients) ** 2)) / total
    rho = np.array([scipy.stats.spearmanr(c, predictors[:, k]).statistic for k in range(2)])

    source = layer_permutations(layer, n_permutations, seed=seed)
    rows = np.arange(n_permutations)[:, None]
    permuted_c = np.empty((n_permutations, n))
    permuted_c[rows, source] = c  # the pair (c_i, x_source[i]) becomes (permuted_c[source[i]], x_source[i])
    permuted_coefficients = permuted_c @ np.linalg.pinv(design).T
    permuted_r_squared = 1.0 - np.sum((permuted_c - permuted_coefficients @ design.T) ** 2, axis=1) / total
    ranks_c = _standardised_ranks(c)
    permuted_ranks = np.empty((n_permutations, n))
    permuted_ranks[rows, source] = ranks_c
    permuted_rho = permuted_ranks @ _standardised_ranks(predictors.T).T

    p_slopes = _permutation_p(coefficients[1:], permuted_coefficients[:, 1:])
    p_rho = _permutation_p(rho, permuted_rho)
    p_r_squared = float(_permutation_p(np.array([r_squared]), permuted_r_squared[:, None], two_sided=False)[0])
    counts = np.unique(np.unique(layer, return_counts=True)[1], return_counts=True)[1]
    orderings = math.prod(math.factorial(int(count)) for count in counts)
    return OperatorTypeRegression(n, n_layers, float(coefficients[0]), float(coefficients[1]), float(coefficients[2]),
                                  r_squared, float(p_slopes[0]), float(p_slopes[1]), p_r_squared, float(rho[0]),
                                  float(p_rho[0]), float(rho[1]), float(p_rho[1]), float(sd[0]), float(sd[1]),
                                  orderings, n_permutations)


# --------------------------------------------------------------------------------------------------------------
# (d) what rules v4 decide with: a sign-free pooled community test, and the power of a BH family of unit tests


def _omnibus(rhos: np.ndarray, weights: np.ndarray, null_draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q = sum_s w_s rho_s^2 (rhos (m,) or (S, m)) and its p against the (B, m) null draws (upper tail)."""
    statistic = (rhos * rhos) @ weights
    return statistic, _monte_carlo_p(statistic, (null_draws * null_draws) @ weights, "greater")


def omnibus_rank_correlation_test(rhos, n_communities, *, n_simulations: int = 10000,
                                  seed: int = 0) -> PooledTestResult:
    """A pooled test of the community coupling that no sign can cancel: Q = sum_s (K_s - 1) rho_s^2 over the
    sublayers with a defined rho and K_s >= 2, each term ~ 1 under exchangeability (Var rho = 1 / (K - 1); Q is
    then near chi-square with m degrees of freedom), against its exact null (:func:`null_spearman_draws`), upper
    tail, p = (1 + #) / (1 + B). Couplings of opposite signs in different sublayers (the paper's claim: amplified
    where near-symmetric, suppressed where rotation-dominated) add up here, where :func:`pooled_rank_correlation_test`
    would cancel them. ``statistic`` is the weighted root-mean-square rho, sqrt(Q / sum_s (K_s - 1)). Assumes the
    sublayers independent (neighbouring ones share positions, so the p is somewhat optimistic:
    :func:`dependence_calibrated_omnibus_test` allows for that), and its statistic's chance level depends on the K's
    (:func:`chance_corrected_community_excess` removes it)."""
    rhos = np.asarray(rhos, dtype=np.float64).reshape(-1)
    sizes = np.asarray(n_communities, dtype=np.float64).reshape(-1)
    keep = np.isfinite(rhos) & np.isfinite(sizes) & (sizes >= 2)
    if not keep.any():
        return _undefined("greater", "community rho")
    if np.any(np.abs(rhos[keep]) > 1 + 1e-9):
        raise ValueError("a Spearman rho lies in [-1, 1]; an extrapolated one cannot be tested by permutation")
    weights = sizes[keep] - 1.0
    statistic, p = _omnibus(rhos[keep], weights, null_spearman_draws(sizes[keep].astype(int), n_simulations,
                                                                      seed=seed))
    return PooledTestResult(float(np.sqrt(statistic / weights.sum())), float(p), int(keep.sum()),
                            float(np.sqrt(1.0 / weights.sum() * len(weights))), "greater")


def omnibus_community_power(n_communities_per_sublayer, planted_rho, *, level: float = 0.05,
                            n_simulations: int = 1000, n_null: int = 10000, seed: int = 0,
                            variance_inflation: float = 1.0) -> PowerEstimate:
    """Power of :func:`omnibus_rank_correlation_test` at ``level`` when every sublayer's population rho is
    ``planted_rho`` (sign free: only |rho| matters to Q), each sublayer's sample rho drawn as in
    :func:`community_test_power` at its own K. ``variance_inflation`` > 1: the power of
    :func:`dependence_calibrated_omnibus_test` at the dependence it estimated (its ``variance_inflation``): the null
    draws of Q are stretched about m as that test stretches them, so the power is that of the test the verdict used."""
    _check(level, n_simulations)
    sizes = np.asarray(n_communities_per_sublayer, dtype=np.int64).reshape(-1)
    if len(sizes) == 0 or np.any(sizes < 2):
        raise ValueError(f"every sublayer needs at least 2 communities: {sizes}")
    rng = np.random.default_rng(seed)
    rhos = np.empty((n_simulations, len(sizes)))
    for column, size in enumerate(sizes.tolist()):
        x, y = _bivariate_normal(rng, float(planted_rho), (n_simulations, size))
        rhos[:, column] = np.einsum("sk,sk->s", _standardised_ranks(x), _standardised_ranks(y))
    weights = (sizes - 1).astype(np.float64)
    null_q = (null_spearman_draws(sizes, n_null, seed=seed + 1) ** 2) @ weights
    if variance_inflation > 1.0:  # only then: m + (Q - m) is not Q to the last bit
        null_q = len(sizes) + math.sqrt(float(variance_inflation)) * (null_q - len(sizes))
    return _power(_monte_carlo_p((rhos * rhos) @ weights, null_q, "greater"), level)


def chance_excess_standard_error(n_communities, variance_inflation: float = 1.0) -> float:
    """The standard deviation of the chance-corrected excess e = (Q - m) / sum_s (K_s - 1) without any coupling:
    sqrt(lambda^2 sum_s v_s) / sum_s (K_s - 1), v_s = Var((K_s - 1) rho_s^2) (:func:`_null_square_variance`) and
    lambda^2 the variance inflation of neighbouring sublayers (:func:`dependence_calibrated_omnibus_test`); the
    scale on which a difference of two models' excess is beyond chance."""
    sizes = np.asarray(n_communities, dtype=np.float64).reshape(-1)
    sizes = sizes[np.isfinite(sizes) & (sizes >= 2)]
    if not len(sizes):
        return float("nan")
    return float(math.sqrt(max(float(variance_inflation), 1.0) * np.sum(_null_square_variance(sizes)))
                 / np.sum(sizes - 1.0))

def unit_test_p_values_normal(n_boundary: int, n_interior: int, planted_effect: float, n_simulations: int, *,
                              n_permutations: int, rng: np.random.Generator, strata=None) -> np.ndarray:
    """Simulated p-values of one sublayer's unit-level test under a planted rank-biserial effect r, by the normal
    law of the estimated effect. Milliseconds where the permutation simulation (:func:`unit_test_power`) takes
    seconds to minutes at B = 20,000; the two agree within Monte-Carlo error at the study's sizes
    (tests/unit/test_coupling_power.py).

    One stratum (``strata`` None): r_hat ~ N(r, sigma_0^2), sigma_0^2 = (N + 1) / (3 n_b n_i), N = n_b + n_i (the
    null variance, Mann & Whitney 1947; under an effect the variance is smaller, so the power is slightly
    understated), p = max(2 Phi(-|r_hat| / sigma_0), 1 / (1 + B)) (a permutation p cannot fall below its floor).

    Degree strata (``strata`` = [(b_g, i_g), ...], the boundary and interior units of each bin the labels are
    shuffled within, :func:`resdyn.coupling.coupling_test`): a shuffle within bin g draws its b_g boundary ranks
    from the bin's n_g, so with W = sum_g b_g i_g / n_g the permutation variance of the rank sum is
    W N (N + 1) / 12 against n_b n_i (N + 1) / 12 unstratified, i.e. kappa sigma_0^2 in units of r,
    kappa = W N / (n_b n_i) <= 1 (= 1 when every bin holds the same boundary share). The permutation law is
    centred not at 0 but at the bins' own share of the effect: with no confound, r_hat = c + D, the centre
    c ~ N(r (1 - kappa), (1 - kappa) sigma_0^2) and the departure from it D ~ N(r kappa, kappa sigma_0^2),
    independent; p = P(|c + sqrt(kappa) sigma_0 Z| >= |r_hat|), floored at 1 / (1 + B). Unequal boundary shares
    thus cost power (only D carries evidence): checked against the permutation simulation with skewed shares."""
    if n_boundary < 1 or n_interior < 1:
        raise ValueError(f"both groups must be non-empty: {n_boundary} boundary, {n_interior} interior units")
    n_units = n_boundary + n_interior
    sigma_squared = (n_units + 1) / (3.0 * n_boundary * n_interior)
    kappa = 1.0
    if strata is not None:
        strata = [(int(b), int(i)) for b, i in strata]
        if sum(b for b, _ in strata) != n_boundary or sum(i for _, i in strata) != n_interior:
            raise ValueError(f"the strata {strata} do not add up to {n_boundary} boundary and {n_interior} interior "
                             "units")
        kappa = min(1.0, sum(b * i / (b + i) for b, i in strata if b + i) * n_units / (n_boundary * n_interior))
    if kappa <= 0.0:  # no bin holds both groups: no shuffle moves a label, p = 1
        return np.ones(n_simulations)
    spread = np.sqrt(kappa * sigma_squared)
    # at kappa = 1 (one stratum, or bins of one boundary share) the centre is 0 and draws nothing from ``rng``
    centre = planted_effect * (1.0 - kappa) + (np.sqrt((1.0 - kappa) * sigma_squared) * rng.standard_normal(n_simulations)
                                               if kappa < 1.0 else 0.0)
    estimate = np.abs(centre + planted_effect * kappa + spread * rng.standard_normal(n_simulations))
    p = scipy.stats.norm.cdf((-estimate - centre) / spread) + scipy.stats.norm.sf((estimate - centre) / spread)
    return np.maximum(np.minimum(p, 1.0), 1.0 / (1 + n_permutations))


def bh_family_power(sizes, planted_effect: float, *, fdr: float = 0.05, n_permutations: int = 1000,
                    share_needed: float = 0.0, n_simulations: int = 2000, seed: int = 0, strata=None) -> PowerEstimate:
    """Power of a Benjamini-Hochberg family of unit-level tests (one per sublayer, ``sizes`` = [(n_b, n_i), ...],
    ``strata`` None or per sublayer its degree strata [(b_g, i_g), ...]) when every sublayer has rank-biserial
    effect ``planted_effect``: the share of simulated families in which BH at ``fdr`` rejects more than
    ``share_needed`` of the m tests (0: at least one). Each family draws one p per sublayer
    (:func:`unit_test_p_values_normal`) and applies scipy.stats.false_discovery_control."""
    strata = [None] * len(sizes) if strata is None else list(strata)
    if len(strata) != len(sizes):
        raise ValueError(f"one entry of strata per sublayer: {len(strata)} for {len(sizes)} sizes")
    tested = [(int(b), int(i), s) for (b, i), s in zip(sizes, strata) if int(b) > 0 and int(i) > 0]
    if not tested:
        raise ValueError("no sublayer with both a boundary and an interior group")
    rng = np.random.default_rng(seed)
    p = np.column_stack([unit_test_p_values_normal(b, i, planted_effect, n_simulations, n_permutations=n_permutations,
                                                   rng=rng, strata=s) for b, i, s in tested])
    q = scipy.stats.false_discovery_control(p, axis=1)
    power = float(np.mean(np.mean(q <= fdr, axis=1) > share_needed))
    return PowerEstimate(power, math.sqrt(power * (1.0 - power) / n_simulations), fdr, n_simulations)


# --------------------------------------------------------------------------------------------------------------
# (e) the sign-free pooled test calibrated for dependent neighbouring sublayers, and its chance-corrected effect


def _null_square_variance(n_communities) -> np.ndarray:
    """Var((K - 1) rho^2) of Spearman's rho of K untied pairs under exchangeability, per entry of ``n_communities``:

        Var((K - 1) rho^2) = beta_2 - 1,    beta_2 = E rho^4 / (E rho^2)^2 = 3 (25 K^3 - 38 K^2 - 35 K + 72)
                                                                               / (25 K (K + 1) (K - 1)),

    the null kurtosis of Spearman's rho (e.g. Press et al. 1992, Numerical Recipes, 2nd ed., sec. 14.6; exact, as
    enumeration of the K! orderings confirms in tests/unit/test_coupling_power.py). 0 at K = 2 (rho = +-1), 0.5 at
    K = 3, and up to 2 (a chi-square term with one degree of freedom) as K grows: few communities make each term of
    Q far less variable than a Gaussian z^2.
    """
    sizes = np.asarray(n_communities, dtype=np.float64)
    kurtosis = 3.0 * (25.0 * sizes**3 - 38.0 * sizes**2 - 35.0 * sizes + 72.0) / (25.0 * sizes * (sizes + 1.0)
                                                                                  * (sizes - 1.0))
    return kurtosis - 1.0


def _defined_sublayers(rhos, n_communities) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rho, K, position in depth order) of the sublayers with a finite rho and a finite K >= 2."""
    rhos = np.asarray(rhos, dtype=np.float64).reshape(-1)
    sizes = np.asarray(n_communities, dtype=np.float64).reshape(-1)
    if rhos.shape != sizes.shape:
        raise ValueError(f"one K per rho: {rhos.shape} and {sizes.shape}")
    keep = np.isfinite(rhos) & np.isfinite(sizes) & (sizes >= 2)
    if np.any(np.abs(rhos[keep]) > 1 + 1e-9):
        raise ValueError("a Spearman rho lies in [-1, 1]; an extrapolated one cannot be tested by permutation")
    return rhos[keep], sizes[keep].astype(np.int64), np.flatnonzero(keep)


@dataclass(frozen=True)
class CommunityExcess:
    """The pooled community coupling beyond chance (:func:`chance_corrected_community_excess`); undefined (numbers
    nan, ``reason`` set) without a defined sublayer."""

    excess: float  # e = (Q - m) / sum_s (K_s - 1): the mean squared rho beyond chance; 0 in expectation without
    # coupling, whatever the K's; negative by chance
    rms_excess: float  # sqrt(max(0, e)): the same on the scale of a rho, what to compare between models
    rms_rho: float  # sqrt(Q / sum_s (K_s - 1)), the omnibus test's statistic (its chance level depends on K)
    chance_rms_rho: float  # sqrt(m / sum_s (K_s - 1)): what rms_rho is near without any coupling
    n_sublayers: int
    reason: str = ""

    @property
    def defined(self) -> bool:
        return not self.reason


def chance_corrected_community_excess(rhos, n_communities) -> CommunityExcess:
    """The community coupling pooled over the sublayers, net of what chance alone gives at their numbers of
    communities:

        e = (Q - m) / sum_s w_s,    Q = sum_s w_s rho_s^2,    w_s = K_s - 1,    and    sqrt(max(0, e)),

    over the m sublayers with a finite rho and K_s >= 2 (e: ``excess``, the mean squared rho beyond chance; its root:
    ``rms_excess``, on the scale of a rho). Why: under exchangeability E rho_s = 0 and Var rho_s = 1 / (K_s - 1)
    exactly (Hotelling & Pabst 1936, Ann. Math. Stat. 7:29), so E[w_s rho_s^2] = 1 at every K_s, E Q = m and
    E e = 0 whatever the K's, dependent sublayers included (expectations add). The root-mean-square rho
    sqrt(Q / sum w) that :func:`omnibus_rank_correlation_test` reports sits instead near its chance level
    sqrt(m / sum_s w_s) without any coupling, 1 / sqrt(K - 1) at one K (0.71 at K = 3, 0.30 at K = 12): comparing it
    between two models compares their numbers of communities as much as their coupling.

    With a coupling, E[w_s rho_s^2] - 1 = w_s (E rho_s)^2 - (1 - w_s Var rho_s): e estimates the weighted mean
    square of the sublayers' expected sample rho (:func:`expected_sample_spearman`) less the shrinking of Var rho_s
    about a nonzero mean, which weighs more at few communities. So e removes the chance level exactly but not the
    attenuation of a real coupling over few communities: at population Spearman 0.3 in every sublayer (Gaussian
    copula, 4000 simulated models of 36 sublayers) the mean e is 0.017, 0.031, 0.055 and 0.066 at K = 3, 4, 8 and
    12 (the RMS rho: 0.72, 0.60, 0.44, 0.39). e is unbiased for that; its root, truncated at 0, is biased upwards
    near 0 (compare e with its spread where the coupling is weak). A test of e = 0 is
    :func:`dependence_calibrated_omnibus_test`.
    """
    rhos, sizes, _ = _defined_sublayers(rhos, n_communities)
    if len(rhos) == 0:
        nan = float("nan")
        return CommunityExcess(nan, nan, nan, nan, 0, "no sublayer with a defined community rho")
    weights = sizes - 1.0
    total, q = float(weights.sum()), float((rhos * rhos) @ weights)
    excess = (q - len(rhos)) / total
    return CommunityExcess(excess, math.sqrt(max(0.0, excess)), math.sqrt(q / total), math.sqrt(len(rhos) / total),
                           len(rhos))


MAX_LAG1_AUTOCORRELATION = 0.95


def _lag1_autocorrelation(z: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Lag-1 autocorrelation of the rows of ``z`` (S, m) in depth order, about each row's mean, over the pairs of
    sublayers adjacent in depth (``position`` differing by 1; a sublayer left out breaks a pair), clipped to
    [0, MAX_LAG1_AUTOCORRELATION]; 0 without an adjacent pair or a spread."""
    centred = z - z.mean(axis=1, keepdims=True)
    adjacent = np.flatnonzero(np.diff(position) == 1)
    spread = np.sum(centred * centred, axis=1)
    products = np.sum(centred[:, adjacent] * centred[:, adjacent + 1], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = np.where(spread > 0, products / spread, 0.0)
    return np.clip(estimate, 0.0, MAX_LAG1_AUTOCORRELATION)


def _ar1_variance_inflation(phi: np.ndarray, sizes: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Var Q under the AR(1) correlation r_ij = phi^|i - j| of the z's over Var Q of independent sublayers, per
    entry of ``phi``: sum_ij sqrt(v_i v_j) r_ij^2 / sum_i v_i, v = :func:`_null_square_variance` (1 where every
    v is 0: Q is then m, constant)."""
    root = np.sqrt(_null_square_variance(sizes))
    lag = np.abs(position[:, None] - position[None, :])
    lags, index = np.unique(lag, return_inverse=True)
    per_lag = np.bincount(index.reshape(-1), weights=np.outer(root, root).reshape(-1), minlength=len(lags))
    phi = np.asarray(phi, dtype=np.float64)
    independent = float(per_lag[0])  # lags[0] = 0, the diagonal: sum_i v_i
    if independent == 0:
        return np.ones_like(phi)
    dependent = independent + np.power(phi[..., None], 2.0 * lags[1:]) @ per_lag[1:]  # exactly 1 at phi = 0
    return dependent / independent


def _calibrated_omnibus(rhos: np.ndarray, sizes: np.ndarray, position: np.ndarray, null_q: np.ndarray):
    """For rows ``rhos`` (S, m) of sublayers of K = ``sizes`` at depths ``position``, with ``null_q`` (B,) the
    exact independent null draws of Q: (Q, phi, variance inflation, calibrated p, independent p), each (S,)."""
    weights = sizes - 1.0
    m = len(sizes)
    q = (rhos * rhos) @ weights
    phi = _lag1_autocorrelation(rhos * np.sqrt(weights), position)
    inflation = _ar1_variance_inflation(phi, sizes, position)
    ordered = np.sort(null_q)
    # m + lambda (Q_b - m) >= Q - tolerance, lambda = sqrt(inflation) >= 1, solved for Q_b
    threshold = np.where(inflation == 1.0, q - _TOLERANCE, m + (q - _TOLERANCE - m) / np.sqrt(inflation))
    extreme = len(ordered) - np.searchsorted(ordered, threshold, side="left")
    return q, phi, inflation, (1.0 + extreme) / (1.0 + len(ordered)), _monte_carlo_p(q, null_q, "greater")


@dataclass(frozen=True)
class CalibratedOmnibusResult:
    """The sign-free pooled community test calibrated for dependent neighbouring sublayers
    (:func:`dependence_calibrated_omnibus_test`); undefined (numbers nan, p's 1, ``reason`` set) without a defined
    sublayer."""

    q: float  # Q = sum_s (K_s - 1) rho_s^2
    statistic: float  # the root-mean-square rho sqrt(Q / sum_s (K_s - 1)), as omnibus_rank_correlation_test
    excess: float  # (Q - m) / sum_s (K_s - 1), chance_corrected_community_excess
    rms_excess: float  # sqrt(max(0, excess))
    lag1_autocorrelation: float  # phi: of z_s = sqrt(K_s - 1) rho_s in depth order, centred, clipped to [0, 0.95]
    variance_inflation: float  # Var Q under AR(1) phi over Var Q of independent sublayers (>= 1)
    n_effective: float  # m / variance_inflation: independent sublayers with the same relative spread of Q
    p_value: float  # calibrated for the dependence
    p_independent: float  # omnibus_rank_correlation_test's p (independent sublayers), the same null draws
    n_sublayers: int
    n_simulations: int
    reason: str = ""

    @property
    def defined(self) -> bool:
        return not self.reason


def dependence_calibrated_omnibus_test(rhos, n_communities, *, n_simulations: int = 10000,
                                       seed: int = 0) -> CalibratedOmnibusResult:
    """:func:`omnibus_rank_correlation_test` with a null that allows for the dependence of neighbouring sublayers
    (the residual stream carries positions and gains from one sublayer to the next). ``rhos`` and
    ``n_communities`` list the sublayers in depth order; those without a finite rho or with K_s < 2 are left out
    (and break the adjacency of their neighbours).

    Statistic, as there: Q = sum_s w_s rho_s^2, w_s = K_s - 1; z_s = sqrt(w_s) rho_s has mean 0 and variance 1
    under exchangeability (Hotelling & Pabst 1936), so E Q = m with or without dependence; dependence widens the
    spread of Q. Model: the z's correlated as an AR(1) in depth, r_ij = phi^|i - j| (i, j the depth positions),
    phi estimated as the lag-1 autocorrelation of the z's about their mean over neighbouring pairs, clipped to
    [0, 0.95] (the mean taken out, so that a coupling of one sign everywhere is not read as dependence). Then

        Var Q = sum_ij sqrt(v_i v_j) r_ij^2,    v_s = Var(z_s^2) = beta_2(K_s) - 1    (:func:`_null_square_variance`):

    the variance of a quadratic form in correlated variables (Box 1954, Ann. Math. Stat. 25:290, Theorem 3.1:
    Var Q = 2 tr(R^2) = 2 sum_ij r_ij^2 for Gaussian z; Cov(z_i^2, z_j^2) = 2 r_ij^2, Isserlis 1918, Biometrika
    12:134), with the squares correlated as r_ij^2, as Gaussian pairs are, and each term's exact null variance in
    place of 2. The null of Q is the exact permutation null of independent sublayers (:func:`null_spearman_draws`,
    B = ``n_simulations``: exact marginals, discreteness included) with its spread about the common mean m
    stretched to that variance:

        Q*_b = m + lambda (Q_b - m),    lambda^2 = Var Q (phi) / Var Q (0) = ``variance_inflation`` >= 1,
        p = (1 + #{b : Q*_b >= Q}) / (1 + B)    (Phipson & Smyth 2010),

    a two-moment correction in the sense of Satterthwaite (1946, Biometrics Bull. 2:110) and Box (1954), who fit a
    scaled chi-square instead (Q / c ~ chi2_nu, c = Var Q / (2 m), nu = 2 m^2 / Var Q). At phi = 0 it is
    :func:`omnibus_rank_correlation_test` (same draws, same p, reported as ``p_independent``); where Q >= m (every
    p below about 0.5) the calibrated p is never smaller, where Q < m never larger. ``n_effective`` = m / lambda^2:
    the number of independent sublayers of these K's over which Q would vary as much relative to its mean.

    Why this null and not the others: at few communities the terms are far from Gaussian (v = 0.5 at K = 3, 0.85
    at K = 4, against 2), so the Gaussian Satterthwaite fit (v = 2) rejects almost never at K <= 4 (0.003 to 0.005
    at level 0.05, K = 4), and mixing the exact draws through the Cholesky factor of R makes each z a sum of several
    draws, nearer Gaussian and with a more variable square, conservative at small K too (0.015 to 0.022 at K = 3,
    0.022 to 0.035 at K = 4), while this null rejects 0.043 to 0.045 at K = 4 to 12 and mixed K's (simulations of
    36 and 60 sublayers whose rhos have lag-1 correlation 0.27 to 0.35; the independent test: 0.059 to 0.070; at
    lag-1 0.52: 0.048 against 0.103; tests/unit/test_coupling_power.py). At K = 3 the exact null itself is so
    discrete that every test of Q is conservative (0.03 at m = 36). A coupling that changes smoothly with depth is
    also read as dependence, which costs power against it; a dependence that does not decay with distance (a
    component shared by all sublayers) is beyond the AR(1) model and leaves the p optimistic.
    """
    rhos, sizes, position = _defined_sublayers(rhos, n_communities)
    if len(rhos) == 0:
        nan = float("nan")
        return CalibratedOmnibusResult(nan, nan, nan, nan, nan, nan, nan, 1.0, 1.0, 0, n_simulations,
                                       "no sublayer with a defined community rho")
    weights = sizes - 1.0
    null_q = (null_spearman_draws(sizes, n_simulations, seed=seed) ** 2) @ weights
    q, phi, inflation, p, p_independent = (float(value[0]) for value in
                                           _calibrated_omnibus(rhos[None, :], sizes, position, null_q))
    excess = chance_corrected_community_excess(rhos, sizes)
    return CalibratedOmnibusResult(q, excess.rms_rho, excess.excess, excess.rms_excess, phi, inflation,
                                   len(rhos) / inflation, p, p_independent, len(rhos), n_simulations)
