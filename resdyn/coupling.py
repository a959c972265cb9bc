"""Topology-dynamics coupling: does a sublayer amplify or suppress its boundary units?

Per-unit amplification from the mean Jacobian J of the sublayer that starts at the boundary
where the communities were found: log ||J e_i|| (column norm: how much a push on unit i grows;
primary), ||(J - I) e_i|| (what the sublayer adds), ||e_i^T J|| (row norm) and J_ii.

Per sublayer: Mann-Whitney U of boundary vs interior amplification, rank-biserial effect
r = 2 U_boundary / (n_b n_i) - 1 in [-1, 1] (> 0: boundary units amplified; < 0: suppressed;
Kerby 2014), and a degree-stratified permutation p-value (labels shuffled within degree bins,
so a boundary/degree confound cannot fake an effect). Across the sublayers of one model
checkpoint: Benjamini-Hochberg FDR (Benjamini-Yekutieli as a check).

A test with an empty group is undefined, not "not significant": its p-values are 1 (METHODS.md),
its effect, q-values and significance are null, its direction is ``undefined`` and its reason says
why; it takes no part in the FDR correction of the defined tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.stats

SIGNIFICANCE = 0.05


def unit_amplification(jacobian: np.ndarray) -> dict[str, np.ndarray]:
    jacobian = np.asarray(jacobian, dtype=np.float64)
    column_norm = np.linalg.norm(jacobian, axis=0)
    with np.errstate(divide="ignore"):
        log_column_norm = np.log(column_norm)
    return {
        "log_column_norm": log_column_norm,
        "deviation_column_norm": np.linalg.norm(jacobian - np.eye(len(jacobian)), axis=0),
        "row_norm": np.linalg.norm(jacobian, axis=1),
        "diagonal": np.diag(jacobian).copy(),
    }


class SignedTestResult:
    """What a test result with a ``reason`` (why it is undefined; empty when defined) and a signed ``effect``
    says: defined or not, and which way."""

    reason: str
    effect: float

    @property
    def defined(self) -> bool:
        return not self.reason

    @property
    def direction(self) -> str:
        if not self.defined:
            return "undefined"
        return "amplified" if self.effect > 0 else "suppressed"


@dataclass(frozen=True)
class CouplingResult(SignedTestResult):
    n_boundary: int
    n_interior: int
    u_statistic: float
    effect: float  # nan when undefined
    p_value: float
    p_permutation: float
    reason: str = ""  # why the test is undefined; empty when it is defined


def rank_correlation_test(x: np.ndarray, y: np.ndarray, *, n_permutations: int, seed: int) -> tuple[float, float]:
    """(rho, p): Spearman's rank correlation (scipy.stats.spearmanr; Spearman 1904) of two non-constant samples and
    its two-sided permutation p = (1 + #{b : |rho_b| >= |rho|}) / (1 + B) over B permutations of y by
    ``numpy.random.default_rng(seed)`` (Phipson & Smyth 2010: never 0). A permuted rho is the inner product of the
    standardised ranks, which a permutation only reorders, so nothing is ranked again."""
    rho = float(scipy.stats.spearmanr(x, y).statistic)
    rx, ry = (_standardised_ranks(values) for values in (x, y))
    permuted = np.random.default_rng(seed).permuted(np.broadcast_to(ry, (n_permutations, len(ry))), axis=1) @ rx
    return rho, (1 + int(np.sum(np.abs(permuted) >= abs(rho) - 1e-12))) / (1 + n_permutations)


def _standardised_ranks(values: np.ndarray) -> np.ndarray:
    ranks = scipy.stats.rankdata(values)
    ranks -= ranks.mean()
    return ranks / np.linalg.norm(ranks)


def undefined_reason(n_boundary: int, n_interior: int) -> str:
    if n_boundary == 0 and n_interior == 0:
        return "no unit with a finite amplification"
    if n_boundary == 0:
        return "no boundary units (no unit's participation stands above the others': e.g. one community)"
    if n_interior == 0:
        return "no interior units (every unit is a boundary unit)"
    return ""


def rank_biserial(boundary: np.ndarray, interior: np.ndarray) -> tuple[float, float, float]:
    """(U of the boundary group, rank-biserial effect, two-sided Mann-Whitney p)."""
    result = scipy.stats.mannwhitneyu(boundary, interior, alternative="two-sided")
    u = float(result.statistic)
    return u, 2.0 * u / (len(boundary) * len(interior)) - 1.0, float(result.pvalue)


def degree_strata(degree: np.ndarray, n_bins: int = 4) -> np.ndarray:
    """Quantile bins of degree (ties kept together)."""
    edges = np.unique(np.quantile(degree, np.linspace(0, 1, n_bins + 1)[1:-1]))
    return np.searchsorted(edges, degree, side="right")


def coupling_test(amplification: np.ndarray, is_boundary: np.ndarray, degree: np.ndarray | None = None, *,
                  n_permutations: int = 1000, seed: int = 0) -> CouplingResult:
    """Boundary vs interior amplification; an empty group gives an undefined result (p = 1, effect nan, a reason)."""
    amplification = np.asarray(amplification, dtype=np.float64)
    is_boundary = np.asarray(is_boundary, dtype=bool)
    finite = np.isfinite(amplification)
    amplification, is_boundary = amplification[finite], is_boundary[finite]
    n_boundary, n_interior = int(is_boundary.sum()), int((~is_boundary).sum())
    if n_boundary == 0 or n_interior == 0:
        return CouplingResult(n_boundary, n_interior, float("nan"), float("nan"), 1.0, 1.0,
                              undefined_reason(n_boundary, n_interior))
    u, effect, p_value = rank_biserial(amplification[is_boundary], amplification[~is_boundary])
    strata = degree_strata(np.asarray(degree)[finite]) if degree is not None else np.zeros(len(amplification), int)
    ranks = scipy.stats.rankdata(amplification)
    rng = np.random.default_rng(seed)
    labels = is_boundary.copy()
    extreme = 0
    # effect from rank sums: U_b = R_b - n_b (n_b + 1) / 2, so permuting labels needs no re-ranking
    scale = 2.0 / (n_boundary * n_interior)
    offset = n_boundary * (n_boundary + 1) / 2
    groups = [np.flatnonzero(strata == s) for s in np.unique(strata)]
    for _ in range(n_permutations):
        for members in groups:
            labels[members] = rng.permutation(labels[members])
        permuted = scale * (ranks[labels].sum() - offset) - 1.0
        extreme += abs(permuted) >= abs(effect) - 1e-12
        labels[:] = is_boundary
    return CouplingResult(n_boundary, n_interior, u, effect, p_value, (1 + extreme) / (1 + n_permutations))


def false_discovery(p_values, method: str = "bh") -> np.ndarray:
    """Adjusted p-values (q) by Benjamini-Hochberg ("bh") or Benjamini-Yekutieli ("by"); nan entries (undefined
    tests) stay nan and are not counted among the tests."""
    p_values = np.asarray(p_values, dtype=np.float64)
    q = np.full(len(p_values), np.nan)
    defined = ~np.isnan(p_values)
    if defined.any():
        q[defined] = scipy.stats.false_discovery_control(p_values[defined], method=method)
    return q
