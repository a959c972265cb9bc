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
    # boundary and interior units per degree stratum (the permutation's bins, by increasing degree): the sizes the
    # test's power depends on (resdyn.coupling_power.unit_test_p_values_normal)
    stratum_boundary: tuple[int, ...] = ()
    stratum_interior: tuple[int, ...] = ()


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
    strata = degree_strata(np.asarray(degree)[finite]) if degree is not None and finite.any() else \
        np.zeros(len(amplification), int)
    bins = np.unique(strata)
    sizes = {"stratum_boundary": tuple(int(np.sum(is_boundary[strata == g])) for g in bins),
             "stratum_interior": tuple(int(np.sum(~is_boundary[strata == g])) for g in bins)}
    if n_boundary == 0 or n_interior == 0:
        return CouplingResult(n_boundary, n_interior, float("nan"), float("nan"), 1.0, 1.0,
                              undefined_reason(n_boundary, n_interior), **sizes)
    u, effect, p_value = rank_biserial(amplification[is_boundary], amplification[~is_boundary])
    # effect from rank sums: U_b = R_b - n_b (n_b + 1) / 2, so permuting labels needs no re-ranking
    boundary_rank_sums = _permuted_rank_sums(scipy.stats.rankdata(amplification), is_boundary, strata,
                                             n_permutations, np.random.default_rng(seed))
    permuted = 2.0 / (n_boundary * n_interior) * (boundary_rank_sums - n_boundary * (n_boundary + 1) / 2) - 1.0
    extreme = int(np.sum(np.abs(permuted) >= abs(effect) - 1e-12))
    return CouplingResult(n_boundary, n_interior, u, effect, p_value, (1 + extreme) / (1 + n_permutations), **sizes)


def coupling_test_of(task: tuple) -> CouplingResult:
    """:func:`coupling_test` of one (amplification, is_boundary, degree, n_permutations, seed) tuple: the unit a
    process pool maps over the sublayers (each test has its own seed, so the order of the work changes nothing)."""
    amplification, is_boundary, degree, n_permutations, seed = task
    return coupling_test(amplification, is_boundary, degree, n_permutations=n_permutations, seed=seed)


PERMUTATION_CHUNK = 2048  # permutations drawn at once: (chunk, units) indices in memory


def _permuted_rank_sums(ranks: np.ndarray, is_boundary: np.ndarray, strata: np.ndarray, n_permutations: int,
                        rng: np.random.Generator) -> np.ndarray:
    """The boundary group's rank sum after each of ``n_permutations`` shuffles of the labels within every stratum.

    The draws are made in the order they always were (per permutation, stratum by stratum, one Fisher-Yates
    shuffle of the stratum's labels: ``rng.shuffle`` of its positions consumes the generator exactly as
    ``rng.permutation`` of its labels did), so a seed gives the same p as before; only the sums are vectorised.
    Ranks are multiples of 1/2, so every sum is exact in float64 whatever the order of summation."""
    members = [np.flatnonzero(strata == stratum) for stratum in np.unique(strata)]
    labels = [is_boundary[m].astype(np.float64) for m in members]
    stratum_ranks = [ranks[m] for m in members]
    sums = np.empty(n_permutations)
    for start in range(0, n_permutations, PERMUTATION_CHUNK):
        count = min(PERMUTATION_CHUNK, n_permutations - start)
        orders = [np.tile(np.arange(len(m)), (count, 1)) for m in members]
        shuffle = rng.shuffle
        for row in range(count):
            for order in orders:
                shuffle(order[row])
        # the permuted labels of stratum s are labels[s][order]: their rank sum is that 0/1 matrix times its ranks
        sums[start:start + count] = sum(stratum_labels[order] @ r for stratum_labels, order, r
                                        in zip(labels, orders, stratum_ranks))
    return sums


def family_decisions(p_values, defined, decided_on=None) -> list[dict]:
    """One family's decisions (a model checkpoint's sublayers): per test, q by Benjamini-Hochberg (``q_value``) and
    Benjamini-Yekutieli (``q_value_by``) of ``p_values``, and ``significant`` = BH q of ``decided_on`` (default:
    ``p_values``; the coupling tests pass the degree-stratified permutation p, which guards against a boundary/degree
    confound) below :data:`SIGNIFICANCE`. Only the ``defined`` tests count and get values (an undefined test is not
    a test); the others get None. Benjamini & Hochberg (1995), JRSS B 57:289; Benjamini & Yekutieli (2001), Ann.
    Stat. 29:1165."""
    def over_defined(values):
        return [value if known else np.nan for value, known in zip(values, defined)]

    q = false_discovery(over_defined(p_values))
    q_by = false_discovery(over_defined(p_values), "by")
    q_decided = q if decided_on is None else false_discovery(over_defined(decided_on))
    return [{"q_value": float(a), "q_value_by": float(b), "q_value_decided": float(c),
             "significant": bool(c < SIGNIFICANCE)} if known else
            {"q_value": None, "q_value_by": None, "q_value_decided": None, "significant": None}
            for a, b, c, known in zip(q, q_by, q_decided, defined)]


def false_discovery(p_values, method: str = "bh") -> np.ndarray:
    """Adjusted p-values (q) by Benjamini-Hochberg ("bh") or Benjamini-Yekutieli ("by"); nan entries (undefined
    tests) stay nan and are not counted among the tests."""
    p_values = np.asarray(p_values, dtype=np.float64)
    q = np.full(len(p_values), np.nan)
    defined = ~np.isnan(p_values)
    if defined.any():
        q[defined] = scipy.stats.false_discovery_control(p_values[defined], method=method)
    return q
