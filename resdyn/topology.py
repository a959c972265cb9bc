"""Functional topology of the residual stream: correlation graphs, signed Leiden communities, boundary units.

Per layer and boundary, units (residual dimensions) are nodes; edges carry the Pearson
correlation r of two units' activations over the analysed samples/positions. Communities come
from signed Leiden CPM (Traag, Waltman & van Eck 2019; Traag & Bruggeman 2009): a positive layer
at resolution gamma and a negative layer (|r| of the negative edges) at resolution 0, combined
with ``layer_weights=[1, -1]``, so negative correlation pushes units apart without the gamma of
one layer cancelling the other's. Boundary units link communities: participation coefficient
P_i = 1 - sum_s (k_is / k_i)^2 on positive strengths (Guimera & Amaral 2005).

Choosing the resolution. CPM's gamma is a density threshold with no natural value, so it is
scanned on a log grid with several Leiden seeds per point (:func:`scan_gamma`). The partition kept
is the one of highest modularity Q of the positive graph (Newman & Girvan 2004; Newman 2006):
a quality measured against a degree-preserving null model that, unlike CPM's objective, does not
grow without bound as gamma fragments the graph, so the scan peaks at the mesoscale. Agreement
across seeds is measured by the adjusted Rand index (Hubert & Arabie 1985), which is zero in
expectation for unrelated partitions; normalised mutual information is kept beside it, but it is
biased towards partitions with many small communities (Vinh, Epps & Bailey 2010) and, used as the
criterion, chose ~240 communities of ~3 units in SmolLM2-135M (d = 576), which made every unit a
boundary unit.

Boundary units. The primary rule is relative: the units whose participation lies above the
75th percentile of their graph (and above 0; the tied top when ties leave nobody above it), so
that both groups exist whenever participation varies, the test compares the quarter of units most
linked across communities (exactly a quarter when participations are distinct) with the rest, and
tests stay comparable across layers and models. Guimera & Amaral's absolute threshold P > 0.3 is
kept as ``is_boundary_absolute``: in SmolLM2-135M's kNN correlation graphs it marks 96.5% of the
units at the modularity peak (47-100% per graph) and all of them at finer resolutions, leaving
little or no interior group to compare with.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import combinations

import igraph
import leidenalg
import numpy as np

BOUNDARY_QUANTILE = 0.75  # primary rule: participation above this quantile of the graph's units
BOUNDARY_PARTICIPATION = 0.3  # the absolute rule, kept beside it
ROBUST_SHARE = 0.05
MODULARITY_TIE = 1e-3  # gammas whose modularity is this close to the best count as tied; stability decides
# leidenalg's default. Iterating to convergence (-1) took 2.2x as long on SmolLM2-135M's graphs (d = 576) for a
# chosen partition's modularity 0-1% higher, inside the seed-to-seed spread of those graphs.
LEIDEN_ITERATIONS = 2
DEFAULT_GAMMAS = tuple(np.geomspace(1e-3, 0.5, 12))


def correlation_matrix(activations: np.ndarray) -> np.ndarray:
    """Pearson correlation between columns (units) of an (observations, units) array, float64.

    A constant unit has no defined correlation; its row and column are 0 (it joins no edge).
    """
    x = np.asarray(activations, dtype=np.float64)
    x = x - x.mean(axis=0)
    norms = np.linalg.norm(x, axis=0)
    safe = np.where(norms > 0, norms, 1.0)
    correlation = (x / safe).T @ (x / safe)
    correlation[norms == 0, :] = 0.0
    correlation[:, norms == 0] = 0.0
    np.fill_diagonal(correlation, 1.0)
    return np.clip(correlation, -1.0, 1.0)


@dataclass(frozen=True)
class SignedEdges:
    """Undirected edges i < j with signed weight r_ij."""

    n_units: int
    source: np.ndarray
    target: np.ndarray
    weight: np.ndarray


def signed_graph(correlation: np.ndarray, construction: str = "knn", *, k: int = 30,
                 threshold: float = 0.3) -> SignedEdges:
    """Edges from a correlation matrix: ``knn`` (each unit's k largest |r|, symmetrised by union),
    ``threshold`` (|r| > threshold) or ``dense`` (every pair)."""
    n = len(correlation)
    magnitude = np.abs(correlation).copy()
    np.fill_diagonal(magnitude, -np.inf)
    if construction == "knn":
        k = min(k, n - 1)
        neighbours = np.argpartition(-magnitude, k - 1, axis=1)[:, :k]
        rows = np.repeat(np.arange(n), k)
        pairs = np.stack([np.minimum(rows, neighbours.ravel()), np.maximum(rows, neighbours.ravel())], axis=1)
        pairs = np.unique(pairs, axis=0)
        source, target = pairs[:, 0], pairs[:, 1]
    elif construction == "threshold":
        source, target = np.nonzero(np.triu(magnitude > threshold, 1))
    elif construction == "dense":
        source, target = np.triu_indices(n, 1)
    else:
        raise ValueError(f"graph construction must be 'knn', 'threshold' or 'dense', not {construction!r}")
    weight = correlation[source, target]
    keep = weight != 0
    return SignedEdges(n, source[keep].astype(np.int32), target[keep].astype(np.int32), weight[keep])


def layer_graphs(edges: SignedEdges) -> tuple[igraph.Graph, igraph.Graph]:
    """(positive graph weighted r, negative graph weighted |r|), built once from the edge arrays."""
    positive = edges.weight > 0
    graphs = []
    for mask, weights in ((positive, edges.weight), (~positive, -edges.weight)):
        pairs = np.column_stack([edges.source[mask], edges.target[mask]]).astype(np.int64)
        graph = igraph.Graph(n=edges.n_units, edges=pairs)
        graph.es["weight"] = weights[mask]
        graphs.append(graph)
    return graphs[0], graphs[1]


def signed_leiden(edges: SignedEdges, gamma: float, seed: int, *, graphs=None) -> np.ndarray:
    """Community of every unit by signed Leiden CPM (module docstring), reproducible from ``seed``.
    ``graphs``: :func:`layer_graphs` of ``edges`` when the caller already built them."""
    positive, negative = graphs or layer_graphs(edges)
    partitions = [
        leidenalg.CPMVertexPartition(positive, weights="weight", resolution_parameter=gamma),
        leidenalg.CPMVertexPartition(negative, weights="weight", resolution_parameter=0.0),
    ]
    optimiser = leidenalg.Optimiser()
    optimiser.set_rng_seed(seed)
    optimiser.optimise_partition_multiplex(partitions, layer_weights=[1, -1], n_iterations=LEIDEN_ITERATIONS)
    return _canonical(np.asarray(partitions[0].membership))


def _canonical(membership: np.ndarray) -> np.ndarray:
    """Relabel communities by first appearance so equal partitions have equal labels."""
    _, first = np.unique(membership, return_index=True)
    order = np.argsort(np.argsort(first))
    return order[np.searchsorted(np.unique(membership), membership)]


def contingency_counts(a, b) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(non-zero cells n_ij, row sums a_i, column sums b_j) of the contingency table of two partitions of
    the same units, any integer labels. Only occupied cells are counted (np.unique of the label pairs), so a
    fine partition (at high gamma nearly every unit alone) costs O(n log n), not a dense k_a x k_b table."""
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"two partitions of the same units are compared, got labels of shapes {a.shape} and {b.shape}")
    _, a = np.unique(a, return_inverse=True)
    _, b = np.unique(b, return_inverse=True)
    _, cells = np.unique(a.astype(np.int64) * (int(b.max(initial=0)) + 1) + b, return_counts=True)
    return cells, np.bincount(a), np.bincount(b)


def _adjusted_rand_of_counts(cells, rows, columns) -> float:
    """ARI from the contingency table's occupied cells and margins (:func:`adjusted_rand_index`)."""
    if len(rows) == 1 and len(columns) == 1:
        return 1.0  # both partitions trivial

    def pairs(counts):
        counts = np.asarray(counts, dtype=np.float64)
        return float(np.sum(counts * (counts - 1) / 2))

    index, row_pairs, column_pairs = pairs(cells), pairs(rows), pairs(columns)
    expected = row_pairs * column_pairs / pairs([rows.sum()])
    maximum = (row_pairs + column_pairs) / 2
    return float("nan") if maximum == expected else (index - expected) / (maximum - expected)


def _mutual_information_of_counts(cells, rows, columns) -> float:
    """NMI from the contingency table's occupied cells and margins (:func:`normalized_mutual_information`)."""
    if len(rows) == 1 and len(columns) == 1:
        return 1.0  # both partitions trivial
    n = float(rows.sum())

    def entropy(counts):
        p = counts[counts > 0] / n
        return float(-np.sum(p * np.log(p)))

    # I = H(a) + H(b) - H(a, b): the joint entropy needs the occupied cells only
    marginal = entropy(rows) + entropy(columns)
    return 2.0 * (marginal - entropy(cells)) / marginal


def normalized_mutual_information(a: np.ndarray, b: np.ndarray) -> float:
    """2 I(a; b) / (H(a) + H(b)) (Danon et al. 2005, J. Stat. Mech. P09008; igraph's "nmi"), from the
    occupied cells of the contingency table; 1 when both partitions are trivial."""
    return _mutual_information_of_counts(*contingency_counts(a, b))


def adjusted_rand_index(a: np.ndarray, b: np.ndarray) -> float:
    """Hubert & Arabie (1985): pair agreement corrected for chance (0 expected for unrelated partitions, 1 equal),
    (sum_ij C(n_ij, 2) - E) / ((sum_i C(a_i, 2) + sum_j C(b_j, 2)) / 2 - E), E = sum_i C(a_i, 2) sum_j C(b_j, 2) / C(n, 2).
    1 when both partitions are trivial; NaN where it is 0/0 otherwise (two partitions into singletons), as igraph."""
    return _adjusted_rand_of_counts(*contingency_counts(a, b))


def partition_agreement(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(adjusted Rand index, NMI) of two partitions from one contingency table (what the scan asks of every pair)."""
    counts = contingency_counts(a, b)
    return _adjusted_rand_of_counts(*counts), _mutual_information_of_counts(*counts)


def is_nontrivial(membership: np.ndarray) -> bool:
    """At least two communities of 3+ units, together holding at least half the units."""
    sizes = np.bincount(membership)
    large = sizes[sizes >= 3]
    return len(large) >= 2 and large.sum() >= 0.5 * len(membership)


@dataclass(frozen=True)
class GammaScanRow:
    gamma: float
    n_communities: float
    stability: float  # mean pairwise adjusted Rand index across seeds (NaN where only the coarse pass ran)
    stability_nmi: float  # mean pairwise NMI (biased towards many small communities; kept for comparison)
    modularity: float  # mean over seeds
    nontrivial: bool
    n_seeds: int = 0  # Leiden runs behind the row: every seed where the scan refined, else the coarse pass's one


_WORKER_GRAPHS: dict = {}


def _worker_start() -> None:
    from .threads import limit_blas_threads

    limit_blas_threads(1)


def _worker_leiden(task: tuple[int, SignedEdges, float, int]) -> tuple[np.ndarray, float]:
    key, edges, gamma, seed = task
    if _WORKER_GRAPHS.get("key") != key:  # each worker builds a graph's two layers once
        _WORKER_GRAPHS.update(key=key, graphs=layer_graphs(edges))
    started = time.perf_counter()
    membership = signed_leiden(edges, gamma, seed, graphs=_WORKER_GRAPHS["graphs"])
    return membership, time.perf_counter() - started


class LeidenPool:
    """Spawned worker processes for the Leiden runs of many graphs: started once (about a second each),
    not once per graph."""

    def __init__(self, workers: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_worker_start)
        self.graphs = 0

    def run(self, edges: SignedEdges, tasks: list[tuple[float, int]]) -> list[tuple[np.ndarray, float]]:
        self.graphs += 1
        return list(self.pool.map(_worker_leiden, [(self.graphs, edges, gamma, seed) for gamma, seed in tasks]))

    def __enter__(self) -> LeidenPool:
        return self

    def __exit__(self, *exception) -> None:
        self.pool.shutdown()


@dataclass(frozen=True)
class GammaScan:
    gamma: float
    rows: list
    membership: np.ndarray  # the chosen gamma's partition: its seed of highest modularity
    leiden_seconds: float  # summed over the Leiden runs (in whichever process they ran)
    wall_seconds: float  # of the whole scan
    memberships: tuple = ()  # every run's partition, gamma by gamma, seeds in order


REFINED_GAMMAS = 3  # gammas the coarse pass hands to the fine pass (every seed); more where none is non-trivial


def scan_gamma(edges: SignedEdges, gammas=DEFAULT_GAMMAS, seeds=(0, 1, 2, 3, 4), *, workers: int = 1,
               pool: LeidenPool | None = None, refine: int | None = REFINED_GAMMAS) -> GammaScan:
    """Pick gamma on a log grid (module docstring): among gammas whose every seed gives a non-trivial
    partition, the one of highest mean modularity of the positive graph (gammas within MODULARITY_TIE of
    it tie, and the most stable across seeds by adjusted Rand index wins); the partition kept is that
    gamma's seed of highest modularity.

    Coarse to fine: the first seed runs at every gamma, and the other seeds only at the ``refine`` gammas of
    highest coarse modularity among the non-trivial ones (then at the next ones, while none of those refined is
    non-trivial at every seed); the choice is made among the refined gammas. Modularity through the grid is a
    smooth curve with one peak whose seed-to-seed spread is far below the step between grid points, so the peak
    is among the coarse pass's best few: 12 + 3 x 4 = 24 Leiden runs instead of 60 at the defaults
    (``refine=None``: every seed at every gamma, as before; benchmarks/communities_scan.py compares the two on
    real graphs). The Leiden runs are independent and run in ``pool`` (or ``workers`` processes started for
    this scan; each builds the two layer graphs once); their summed time is reported beside the scan's wall
    time."""
    started = time.perf_counter()
    gammas, seeds = [float(gamma) for gamma in gammas], [int(seed) for seed in seeds]
    graphs = layer_graphs(edges)  # once: the runs here and the modularity of every partition share them
    positive, _ = graphs
    pools = contextlib.ExitStack()  # a pool started for this scan alone, shut down when it ends
    pool = pool or (pools.enter_context(LeidenPool(workers)) if workers > 1 else None)
    runs: dict[tuple[int, int], np.ndarray] = {}
    modularity: dict[tuple[int, int], float] = {}  # of each run's partition, computed once (coarse pass and rows)
    leiden_seconds = 0.0

    def modularity_of(task: tuple[int, int]) -> float:
        if task not in modularity:
            modularity[task] = positive.modularity(list(runs[task]), weights="weight")
        return modularity[task]

    def run(tasks: list[tuple[int, int]]) -> None:
        nonlocal leiden_seconds
        work = [(gammas[g], seeds[s]) for g, s in tasks]
        if pool is not None:
            results = pool.run(edges, work)
        else:
            results = []
            for gamma, seed in work:
                run_started = time.perf_counter()
                results.append((signed_leiden(edges, gamma, seed, graphs=graphs), time.perf_counter() - run_started))
        for task, (membership, seconds) in zip(tasks, results):
            runs[task] = membership
            leiden_seconds += seconds

    with pools:
        if refine is None or refine >= len(gammas) or len(seeds) == 1:
            run([(g, s) for g in range(len(gammas)) for s in range(len(seeds))])
        else:
            run([(g, 0) for g in range(len(gammas))])
            coarse = [modularity_of((g, 0)) for g in range(len(gammas))]
            order = sorted((g for g in range(len(gammas)) if np.isfinite(coarse[g])),
                           key=lambda g: (not is_nontrivial(runs[(g, 0)]), -coarse[g]))
            refined = 0
            while refined < len(order):
                batch = order[refined:refined + (refine if refined == 0 else 1)]
                run([(g, s) for g in batch for s in range(1, len(seeds))])
                refined += len(batch)
                if any(all(is_nontrivial(runs[(g, s)]) for s in range(len(seeds))) for g in order[:refined]):
                    break
    scan, best_of_gamma = [], []
    for g, gamma in enumerate(gammas):
        tasks = [(g, s) for s in range(len(seeds)) if (g, s) in runs]
        memberships = [runs[task] for task in tasks]
        agreement = np.array([partition_agreement(a, b) for a, b in combinations(memberships, 2)]).reshape(-1, 2)
        modularities = [modularity_of(task) for task in tasks]
        best_of_gamma.append(memberships[int(np.argmax(modularities))])
        complete = len(memberships) == len(seeds)
        scan.append(GammaScanRow(gamma, float(np.mean([m.max() + 1 for m in memberships])),
                                 (float(np.mean(agreement[:, 0])) if len(agreement) else 1.0) if complete else np.nan,
                                 (float(np.mean(agreement[:, 1])) if len(agreement) else 1.0) if complete else np.nan,
                                 float(np.mean(modularities)), all(is_nontrivial(m) for m in memberships),
                                 len(memberships)))
    every_run = tuple(runs[key] for key in sorted(runs))
    candidates = [row for row in scan if row.n_seeds == len(seeds)]
    candidates = [row for row in candidates if row.nontrivial] or candidates
    candidates = [row for row in candidates if np.isfinite(row.modularity)]
    if not candidates:  # no positive edge: modularity is 0/0 at every gamma, so no gamma is chosen
        return GammaScan(float("nan"), scan, np.arange(edges.n_units), leiden_seconds, time.perf_counter() - started,
                         every_run)
    top = max(row.modularity for row in candidates)
    best = max((row for row in candidates if row.modularity >= top - MODULARITY_TIE), key=lambda row: row.stability)
    chosen = best_of_gamma[[row.gamma for row in scan].index(best.gamma)]
    return GammaScan(best.gamma, scan, chosen, leiden_seconds, time.perf_counter() - started, every_run)


def participation_coefficient(edges: SignedEdges, membership: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P_i, share matrix): P_i = 1 - sum_s (k_is / k_i)^2 over positive strengths k_is of unit i
    towards community s (Guimera & Amaral 2005); a unit without positive edges has P = 0."""
    positive = edges.weight > 0
    n, n_communities = edges.n_units, int(membership.max()) + 1
    source, target, weight = edges.source[positive], edges.target[positive], edges.weight[positive]
    strength = np.zeros((n, n_communities))
    np.add.at(strength, (source, membership[target]), weight)
    np.add.at(strength, (target, membership[source]), weight)
    total = strength.sum(axis=1)
    share = np.divide(strength, total[:, None], out=np.zeros_like(strength), where=total[:, None] > 0)
    participation = np.where(total > 0, 1.0 - np.sum(share**2, axis=1), 0.0)
    return participation, share


def boundary_units(participation: np.ndarray) -> np.ndarray:
    """Primary rule: P_i above the BOUNDARY_QUANTILE quantile of the graph's participations, and above 0
    (module docstring); when ties at the top leave nobody above the quantile, the units of the largest
    participation. Empty only when every participation is equal (e.g. one community, all P = 0); never all."""
    participation = np.asarray(participation, dtype=np.float64)
    if len(participation) == 0 or participation.max() == participation.min():
        return np.zeros(len(participation), bool)
    boundary = (participation > np.quantile(participation, BOUNDARY_QUANTILE)) & (participation > 0)
    if not boundary.any():  # e.g. [0, .5, .5, .5, .5]: the quantile is the tied maximum
        boundary = participation == participation.max()
    return boundary


def absolute_boundary_units(participation: np.ndarray) -> np.ndarray:
    """Guimera & Amaral's absolute threshold, P_i > 0.3 (the primary rule before real models showed it marks
    nearly every unit)."""
    return np.asarray(participation) > BOUNDARY_PARTICIPATION


def robust_boundary_units(share: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """Robustness rule: positive neighbours in >= 2 other communities, each >= 5% of the unit's strength."""
    other = share.copy()
    other[np.arange(len(membership)), membership] = 0.0
    return np.sum(other >= ROBUST_SHARE, axis=1) >= 2


def unit_degree(edges: SignedEdges) -> np.ndarray:
    """Number of edges (either sign) at each unit."""
    return np.bincount(np.concatenate([edges.source, edges.target]), minlength=edges.n_units)
