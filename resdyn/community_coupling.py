"""Community-level topology-dynamics coupling: does a community's position in the graph predict its gain?

Fernando & Guitchounts (arXiv:2605.14258) claim that "the topological positioning of graph
communities predicts whether the Jacobian amplifies or suppresses them, with the sign of the
coupling determined by the local operator type". :mod:`resdyn.coupling` tests units (boundary vs
interior); this module tests communities. Per sublayer, with the communities of the correlation
graph at the boundary where the sublayer starts (attn <- pre_attn, mlp <- pre_mlp):

- the position of every community C (:func:`community_position`): its mean participation
  coefficient (primary) and its share of inter-community strength;
- the log gain of every community under the sublayer's mean Jacobian J, its symmetric part
  S = (J + J^T) / 2 and its update A = J - I (:func:`community_log_gains`);
- the Spearman rank correlation between the two over the communities of at least ``min_size``
  units, with a permutation p-value (:func:`community_coupling_test`); rho > 0: communities placed
  between others are amplified, rho < 0: suppressed. Across the sublayers of one model checkpoint
  the p-values are corrected by Benjamini-Hochberg (:func:`resdyn.coupling.false_discovery`).

A test with fewer than :data:`MIN_COMMUNITIES` eligible communities, or with a constant position or
gain, is undefined, not "not significant" (as in :mod:`resdyn.coupling`): p = 1, rho nan, and a
reason saying why; it takes no part in the FDR correction.

Only numpy and scipy (and the project's own numpy code) are imported here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from resdyn.coupling import SignedTestResult, rank_correlation_test
from resdyn.topology import SignedEdges, participation_coefficient

# The smallest community tested. A community of one or two units has a "mean" participation that is one or two
# units' values and a gain from one or two columns of J, so its position and its gain are single-unit noise; 3 is
# also the size from which topology.is_nontrivial counts a community.
MIN_SIZE = 3
# The fewest eligible communities for which the rank correlation is computed. With 4 there are 4! = 24 orderings,
# so the two-sided permutation p cannot fall below 2/24; 5 communities (p >= 2/120) are needed to reach 0.05.
MIN_COMMUNITIES = 4
POSITION_MEASURE = "mean_participation"  # the primary position (community_position's docstring says why)
GAIN_OPERATORS = ("jacobian", "symmetric", "update")

__all__ = ["GAIN_OPERATORS", "MIN_COMMUNITIES", "MIN_SIZE", "POSITION_MEASURE", "CommunityCouplingResult",
           "CommunityPosition", "community_coupling_test", "community_log_gains",
           "community_position", "inter_community_share", "log_gain"]


@dataclass(frozen=True)
class CommunityPosition:
    """Topological position of every community, indexed by community label 0 .. K-1."""

    size: np.ndarray  # units per community, |C|
    mean_participation: np.ndarray  # primary
    inter_share: np.ndarray


def inter_community_share(edges: SignedEdges, membership: np.ndarray) -> np.ndarray:
    """Share of each community's positive strength that leaves it.

        s(C) = (sum_{i in C} sum_{j not in C} w+_ij) / (sum_{i in C} k+_i),    k+_i = sum_j w+_ij,

    with w+ the positive edge weights of the undirected graph (an edge inside C counts once for each
    of its two units in the denominator, an edge leaving C once): the weighted form of the conductance
    c_C / (2 m_C + c_C) in Yang & Leskovec's scoring functions (2015, Knowl. Inf. Syst. 42:181; c_C edges
    leaving C, m_C edges inside it). A community without positive strength has s = 0
    (as a unit without positive edges has participation 0 in :func:`resdyn.topology.participation_coefficient`).

    Parameters
    ----------
    edges : SignedEdges
        Undirected edges i < j with signed weights (:mod:`resdyn.topology`); negative edges are ignored.
    membership : (n_units,) int array
        Community label of every unit, labels 0 .. K-1.

    Returns
    -------
    (K,) float64 array in [0, 1].
    """
    membership = np.asarray(membership)
    n_communities = int(membership.max()) + 1
    positive = np.asarray(edges.weight) > 0
    weight = np.asarray(edges.weight, dtype=np.float64)[positive]
    source, target = membership[edges.source[positive]], membership[edges.target[positive]]
    total = (np.bincount(source, weight, n_communities) + np.bincount(target, weight, n_communities))
    leaving = source != target
    outside = (np.bincount(source[leaving], weight[leaving], n_communities)
               + np.bincount(target[leaving], weight[leaving], n_communities))
    return np.divide(outside, total, out=np.zeros(n_communities), where=total > 0)


def community_position(edges: SignedEdges, membership: np.ndarray) -> CommunityPosition:
    """Mean participation coefficient and inter-community strength share of every community.

    Mean participation, the primary position:

        P(C) = (1 / |C|) sum_{i in C} P_i,    P_i = 1 - sum_s (k+_is / k+_i)^2,

    the participation coefficient of Guimera & Amaral (2005, Nature 433:895) on positive strengths,
    computed by :func:`resdyn.topology.participation_coefficient` (the same P_i that the unit-level
    boundary rule uses). The inter-community share is :func:`inter_community_share`.

    Why mean participation is primary: it is the statistic the unit-level test's boundary units are
    defined by, so the two tests speak of the same position, and it weights every unit equally, where
    the strength-weighted share lets a few high-strength units set a community's value.

    Parameters
    ----------
    edges : SignedEdges
        The layer's correlation graph (:mod:`resdyn.topology`).
    membership : (n_units,) int array
        Community label of every unit, labels 0 .. K-1.
    """
    membership = np.asarray(membership)
    n_communities = int(membership.max()) + 1
    participation, _ = participation_coefficient(edges, membership)
    size = np.bincount(membership, minlength=n_communities)
    mean = np.divide(np.bincount(membership, participation, n_communities), size,
                     out=np.full(n_communities, np.nan), where=size > 0)
    return CommunityPosition(size, mean, inter_community_share(edges, membership))


def log_gain(matrix: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """Log gain of every community under ``matrix``, from its column norms.

        g(C) = ||M P_C||_F / ||P_C||_F = sqrt((1 / |C|) sum_{i in C} ||M e_i||_2^2),

    P_C the coordinate projector on C's units (diagonal, ones on C), so that
    ||M P_C||_F^2 = sum of the squared column norms of M over C's columns and ||P_C||_F^2 = |C|:
    the root-mean-square gain of M over unit pushes inside C (the community version of the per-unit
    column norm of :func:`resdyn.coupling.unit_amplification`). Returned as log g(C) in float64;
    -inf when every column of C is zero, nan for an empty label.
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    membership = np.asarray(membership)
    n_communities = int(membership.max()) + 1
    squared = np.einsum("ij,ij->j", matrix, matrix)  # squared column norms
    size = np.bincount(membership, minlength=n_communities)
    mean = np.divide(np.bincount(membership, squared, n_communities), size,
                     out=np.full(n_communities, np.nan), where=size > 0)
    with np.errstate(divide="ignore"):
        return 0.5 * np.log(mean)


def community_log_gains(jacobian: np.ndarray, membership: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`log_gain` of every community under J ("jacobian"), its symmetric part S = (J + J^T) / 2
    ("symmetric") and the update A = J - I that the sublayer adds to the residual stream ("update")."""
    jacobian = np.asarray(jacobian, dtype=np.float64)
    return {"jacobian": log_gain(jacobian, membership),
            "symmetric": log_gain((jacobian + jacobian.T) / 2.0, membership),
            "update": log_gain(jacobian - np.eye(len(jacobian)), membership)}


@dataclass(frozen=True)
class CommunityCouplingResult(SignedTestResult):
    n_communities: int  # eligible communities (at least min_size units, finite position and gain)
    rho: float  # Spearman rank correlation of position and log gain; nan when undefined
    p_permutation: float  # two-sided permutation p; 1 when undefined
    reason: str = ""  # why the test is undefined; empty when it is defined

    @property
    def effect(self) -> float:
        return self.rho


def community_coupling_test(position: np.ndarray, log_gain: np.ndarray, size: np.ndarray, *,
                            min_size: int = MIN_SIZE, n_permutations: int = 1000,
                            seed: int = 0) -> CommunityCouplingResult:
    """Spearman rank correlation of community position and log gain, with a permutation p-value.

    Over the eligible communities (``size >= min_size``, finite position and gain; see :data:`MIN_SIZE`),
    rho = scipy.stats.spearmanr(position, log_gain) (Spearman 1904: the Pearson correlation of the
    average ranks). The null hypothesis is exchangeability of the gains over the communities: the gains
    are permuted ``n_permutations`` times by a ``numpy.random.default_rng(seed)`` Generator and

        p = (1 + #{b : |rho_b| >= |rho_obs|}) / (1 + B)

    (two-sided; Phipson & Smyth 2010, Stat. Appl. Genet. Mol. Biol. 9:39, never 0). The permuted rho
    is the inner product of the standardised ranks (ranks are a permutation of the same values, so
    nothing is re-ranked: resdyn.coupling.rank_correlation_test). Across sublayers: Benjamini-Hochberg by
    resdyn.coupling.false_discovery.

    Undefined (p = 1, rho nan, ``reason`` set) when fewer than :data:`MIN_COMMUNITIES` communities are
    eligible or when the position or the gain is constant over them.
    """
    position = np.asarray(position, dtype=np.float64)
    log_gain = np.asarray(log_gain, dtype=np.float64)
    eligible = (np.asarray(size) >= min_size) & np.isfinite(position) & np.isfinite(log_gain)
    n = int(eligible.sum())
    if n < MIN_COMMUNITIES:
        return CommunityCouplingResult(n, float("nan"), 1.0,
                                       f"{n} eligible communities (of at least {min_size} units); the rank "
                                       f"test needs {MIN_COMMUNITIES}")
    x, y = position[eligible], log_gain[eligible]
    for values, name in ((x, "position"), (y, "gain")):
        if np.all(values == values[0]):
            return CommunityCouplingResult(n, float("nan"), 1.0, f"the {name} is the same in every eligible community")
    rho, p = rank_correlation_test(x, y, n_permutations=n_permutations, seed=seed)
    return CommunityCouplingResult(n, rho, p)
