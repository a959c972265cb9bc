"""What the claims need of one partition (``CheckpointData``), the depth ranges they read, and the noise gate of
the topology verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .references import noise_knn_correlation
from .rules import EARLY, LATE, TOPOLOGY_NOISE_FACTOR
from .statistics import Estimate, bootstrap, finite, jackknife_bounds


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
    eigenvector_condition: np.ndarray | None = None  # kappa(V) per sublayer (polar part's conditioning); None: not kept
    d_model: int = 0
    n_samples: int = 0
    n_observations: int = 0  # (sample, position) pairs behind the correlation graphs
    median_edge_correlation: float = float("nan")  # median |r| over the kNN graphs' edges
    graph_k: int = 0  # 0 when the graphs are not kNN graphs (then there is no noise level to compare with)
    # What the power of the coupling tests depends on, per sublayer (None: inputs made before rules v4)
    n_boundary: np.ndarray | None = None  # boundary units of the unit-level test
    n_interior: np.ndarray | None = None
    n_communities: np.ndarray | None = None  # eligible communities of the community test
    # per sublayer the unit test's degree strata ((boundary, interior) per bin); None: kept before they were recorded
    unit_strata: list[tuple[tuple[int, int], ...]] | None = None
    n_permutations: int = 1000  # of each per-sublayer test (the run's settings)
    missing: tuple[str, ...] = ()  # input columns this checkpoint's frames lack (older inputs), named in notes

    def __post_init__(self) -> None:
        if self.sublayer is None:
            self.sublayer = np.asarray(["attn" if d % 2 == 0 else "mlp" for d in self.depth])
        if self.operator_type_henrici is None:
            self.operator_type_henrici = np.full(len(self.depth), "other")

    @property
    def relative_depth(self) -> np.ndarray:
        return self.depth / max(1, self.depth.max())

    @property
    def layer(self) -> np.ndarray:
        return np.asarray(self.depth) // 2  # depth = 2 layer + (sublayer = mlp): resdyn/naming.py

    @property
    def n_folds(self) -> int:
        return min((len(r) for r in self.replicates.values()), default=0)

    def measure(self, name: str) -> np.ndarray:
        return np.asarray(self.measures[name], dtype=np.float64)

    def largest_eigenvector_condition(self) -> tuple[float, int] | None:
        """(largest eigenvector condition number, its depth) over the sublayers, or None where not recorded."""
        values = self.eigenvector_condition
        if values is None or not len(values) or np.isnan(values).all():
            return None
        index = int(np.nanargmax(values))
        return float(values[index]), int(self.depth[index])

    def graph_noise_ratio(self) -> float:
        """Median kNN edge |r| over that of independent units (NaN when not a kNN graph)."""
        noise = noise_knn_correlation(self.n_observations, self.d_model, self.graph_k)
        return self.median_edge_correlation / noise if finite(noise) and noise > 0 else float("nan")


def noise_gate(verdict: str, why: str, *checkpoints: CheckpointData) -> tuple[str, str, str]:
    """(verdict, why, note): a topology verdict is undecided where one of ``checkpoints`` (those whose graphs can
    change the verdict: the caller's choice, rules v5) has graphs within TOPOLOGY_NOISE_FACTOR of the
    independent-unit noise level; ``why`` then says so."""
    ratios = [data.graph_noise_ratio() for data in checkpoints]
    noisy = [r for r in ratios if finite(r) and r < TOPOLOGY_NOISE_FACTOR]
    note = "graphs " + " / ".join(f"{r:.2f}x" if finite(r) else "n/a" for r in ratios) + " the noise level"
    if noisy and verdict in ("holds", "does not hold"):
        reason = (f"but the graphs are {' / '.join(f'{r:.2f}x' for r in noisy)} the independent-unit noise level "
                  f"(below {TOPOLOGY_NOISE_FACTOR}x: they cannot carry the test; it would have been '{verdict}')")
        return "undecided", f"{why}; {reason}", note + f" (below {TOPOLOGY_NOISE_FACTOR}x: the graphs cannot carry the test)"
    return verdict, why, note


EARLY_DEPTHS = lambda d: d.relative_depth <= EARLY  # noqa: E731
LATE_DEPTHS = lambda d: d.relative_depth >= LATE  # noqa: E731
EARLY_AND_MIDDLE_DEPTHS = lambda d: d.relative_depth < LATE  # noqa: E731
EVERY_DEPTH = lambda d: np.ones(len(d.depth), bool)  # noqa: E731


def over_sublayers(data: CheckpointData, name: str, mask: np.ndarray) -> Estimate | None:
    """Mean of measure ``name`` over the masked sublayers: bootstrap over them, jackknife over the folds."""
    values = data.measure(name)
    keep = mask & np.isfinite(values)
    if not keep.any():
        return None
    estimate = bootstrap(np.mean, values[keep])
    replicates = data.replicates.get(name)
    sample_low, sample_high = jackknife_bounds(
        estimate.value, None if replicates is None else [float(np.mean(r[keep])) for r in replicates])
    return Estimate(estimate.value, estimate.low, estimate.high, sample_low, sample_high)


def paired_difference(trained: CheckpointData, null: CheckpointData, name: str, mask_of) -> Estimate | None:
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
    low, high = jackknife_bounds(estimate.value, [float(np.mean(a[keep] - b[keep])) for a, b in zip(ours, theirs)])
    return Estimate(estimate.value, estimate.low, estimate.high, low, high)
