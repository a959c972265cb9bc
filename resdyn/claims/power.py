"""The power of the coupling tests: one sublayer's unit-level and community test, the BH family of unit tests,
and the per-sublayer power table every claims directory keeps."""

from __future__ import annotations

import functools

import numpy as np

from .. import coupling_power
from .checkpoint import CheckpointData
from .rules import BOOTSTRAP_SEED, MIN_COMMUNITIES, MIN_POWER, STATED_COMMUNITY_RHO, STATED_UNIT_EFFECT, TEST_LEVEL


def unit_power(n_boundary: int, n_interior: int, level: float, n_permutations: int, strata=None) -> float:
    """Power of one sublayer's unit-level test for a rank-biserial effect of STATED_UNIT_EFFECT at ``level``, by the
    normal law of the estimated effect over the test's degree strata where they were kept (``strata``, else one
    stratum; resdyn/coupling_power.py: the permutation simulation agrees within Monte-Carlo error and takes minutes
    at 20,000 permutations)."""
    p = coupling_power.unit_test_p_values_normal(n_boundary, n_interior, STATED_UNIT_EFFECT, 4000,
                                                 n_permutations=n_permutations,
                                                 rng=np.random.default_rng(BOOTSTRAP_SEED), strata=strata or None)
    return float(np.mean(p <= level))


@functools.lru_cache(maxsize=256)
def community_power(n_communities: int, level: float, n_permutations: int) -> float:
    """Power of one sublayer's community test for rho = STATED_COMMUNITY_RHO at ``level``, cached by size; 0 where
    no permutation p can reach the level (its floor, coupling_power.smallest_attainable_p)."""
    if level < coupling_power.smallest_attainable_p(n_communities, n_permutations):
        return 0.0
    return float(coupling_power.community_test_power(n_communities, STATED_COMMUNITY_RHO, level=level,
                                                     # enough permutations to resolve the level, no more
                                                     n_permutations=min(n_permutations, max(2000, int(20 / level))),
                                                     seed=BOOTSTRAP_SEED).power)


def _strata_of(data: CheckpointData, tested: np.ndarray) -> tuple[list | None, str]:
    """(the tested sublayers' degree strata or None, a note saying which law the power used)."""
    if data.unit_strata is None:
        return None, "over one stratum per test: the inputs lack the degree strata, kept before they were recorded"
    return [data.unit_strata[index] or None for index in np.flatnonzero(tested)], "over the degree strata as observed"


def unit_family_power(data: CheckpointData, share_needed: float = 0.0) -> tuple[float, str]:
    """Power of the checkpoint's BH family of unit-level tests (its sublayers' own sizes and degree strata) to reject
    more than ``share_needed`` of them when every sublayer has a rank-biserial effect of STATED_UNIT_EFFECT
    (coupling_power.bh_family_power), and a note; NaN when the sizes were not kept."""
    if data.n_boundary is None or data.n_interior is None:
        return float("nan"), "power unknown: the inputs lack n_boundary / n_interior (made before rules v4)"
    tested = np.isfinite(data.coupling_effect) & (data.n_boundary > 0) & (data.n_interior > 0)
    if not tested.any():
        return float("nan"), "no tested sublayer"
    sizes = list(zip(data.n_boundary[tested], data.n_interior[tested]))
    strata, law = _strata_of(data, tested)
    power = coupling_power.bh_family_power(sizes, STATED_UNIT_EFFECT, n_permutations=data.n_permutations,
                                           share_needed=share_needed, seed=BOOTSTRAP_SEED, strata=strata).power
    detectable = minimum_detectable_unit_effect(sizes, data.n_permutations, share_needed, strata)
    return power, (f"power {power:.2f} of BH over {int(tested.sum())} sublayers to find "
                   + ("any" if share_needed == 0 else f"more than {share_needed:.2g} of them") +
                   f" with a rank-biserial effect of {STATED_UNIT_EFFECT} in each ({law}); minimum detectable effect "
                   f"(power {MIN_POWER}) {detectable:.3g}")


def minimum_detectable_unit_effect(sizes, n_permutations: int, share_needed: float = 0.0, strata=None) -> float:
    """The smallest rank-biserial effect, the same in every sublayer, at which the BH family of unit tests
    (``sizes`` = [(n_boundary, n_interior), ...], ``strata`` their degree strata or None) reaches power MIN_POWER
    to reject more than ``share_needed`` of them (coupling_power.bh_family_power), by bisection to 0.005 on [0, 1];
    inf when even an effect of 1 falls short (the permutation floor)."""
    def power(effect: float) -> float:
        return coupling_power.bh_family_power(sizes, effect, n_permutations=n_permutations,
                                              share_needed=share_needed, seed=BOOTSTRAP_SEED, strata=strata).power
    low, high = 0.0, 1.0
    if power(high) < MIN_POWER:
        return float("inf")
    while high - low > 0.005:
        middle = (low + high) / 2
        low, high = (low, middle) if power(middle) >= MIN_POWER else (middle, high)
    return high


def coupling_power_table(null: CheckpointData, trained: CheckpointData) -> list[dict]:
    """Each coupling test's power, per checkpoint and sublayer: the unit-level test for a rank-biserial effect of
    STATED_UNIT_EFFECT and the community test for rho = STATED_COMMUNITY_RHO, each at level 0.05 and at BH's first
    level 0.05 / m, with the smallest p the community test can reach."""
    rows = []
    for label, data in (("null model", null), ("trained", trained)):
        tested = np.isfinite(data.coupling_effect)
        communities = np.isfinite(data.community_rho) if data.community_rho is not None else np.zeros(len(data.depth),
                                                                                                       bool)
        m_unit, m_community = max(int(tested.sum()), 1), max(int(communities.sum()), 1)
        for index, depth in enumerate(data.depth):
            row = {"checkpoint": label, "depth": int(depth), "sublayer": str(data.sublayer[index])}
            if data.n_boundary is not None and data.n_interior is not None and tested[index] and \
                    data.n_boundary[index] > 0 and data.n_interior[index] > 0:
                b, i = int(data.n_boundary[index]), int(data.n_interior[index])
                strata = data.unit_strata[index] if data.unit_strata is not None else None
                row.update(n_boundary=b, n_interior=i,
                           unit_power=unit_power(b, i, TEST_LEVEL, data.n_permutations, strata),
                           unit_power_bh=unit_power(b, i, TEST_LEVEL / m_unit, data.n_permutations, strata))
            if data.n_communities is not None and int(data.n_communities[index]) >= MIN_COMMUNITIES:
                k = int(data.n_communities[index])
                row.update(n_communities=k, community_power=community_power(k, TEST_LEVEL, data.n_permutations),
                           community_power_bh=community_power(k, TEST_LEVEL / m_community, data.n_permutations),
                           community_smallest_p=coupling_power.smallest_attainable_p(k, data.n_permutations))
            rows.append(row)
    return rows


