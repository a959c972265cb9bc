"""The operator type of each trained sublayer, judged against the null model at the same depth (the coupling claims
read "near-symmetric" and "strongly non-normal" layers: PAPER.md's topology-dynamics coupling)."""

from __future__ import annotations

import numpy as np

from .checkpoint import CheckpointData
from .rules import MIN_SHARE_EFFECT, NEAR_SYMMETRIC_ASYMMETRY, STRONGLY_NON_NORMAL_HENRICI

HENRICI = "henrici_rel_j_minus_i"  # Henrici's departure from normality over ||J - I||_F (resdyn/spectra.py)

# each type in words, as the claims print it
MEANING = {
    "near_symmetric": "asymmetry below 1/(2 sqrt 2) and below the null model's at the same depth by 0.05",
    "near_symmetric_relative": "asymmetry below the null model's at the same depth by 0.05",
    "strongly_non_normal": ("Henrici's departure above 0.5, not below the null model's at the same depth by more "
                            "than 0.05, not near-symmetric"),
    "rotation_dominated": "rotation share above the null model's at the same depth by 0.05",
}


def operator_types(trained: CheckpointData, null: CheckpointData) -> dict[str, np.ndarray] | None:
    """{type: mask over the trained model's sublayers}, or None when the two checkpoints' sublayers differ.

    - ``near_symmetric`` (rules v5): asymmetry index below 1/(2 sqrt 2) (half a random map's: near-symmetric in
      absolute terms) and below the null model's at the same depth by MIN_SHARE_EFFECT (made so by training);
    - ``near_symmetric_relative`` (v4): the second condition alone;
    - ``strongly_non_normal`` (v5): Henrici's departure above STRONGLY_NON_NORMAL_HENRICI (far from normal in
      absolute terms) and not below the null model's at the same depth by more than MIN_SHARE_EFFECT (as far from
      normal as the sublayer's own random map, 0.79-0.97 of ||J - I||_F, resdyn/baselines.py), and not
      ``near_symmetric``: the paper's "strongly non-normal";
    - ``rotation_dominated`` (v4's reading of it): rotation share above the null model's by MIN_SHARE_EFFECT, where
      not ``near_symmetric_relative``.
    """
    if len(trained.depth) != len(null.depth) or not np.array_equal(trained.depth, null.depth):
        return None
    asymmetry = trained.measure("asymmetry_index")
    less_asymmetric = asymmetry - null.measure("asymmetry_index") < -MIN_SHARE_EFFECT
    more_rotation = trained.measure("rotation_share") - null.measure("rotation_share") > MIN_SHARE_EFFECT
    types = {"near_symmetric": less_asymmetric & (asymmetry < NEAR_SYMMETRIC_ASYMMETRY),
             "near_symmetric_relative": less_asymmetric,
             "rotation_dominated": more_rotation & ~less_asymmetric}
    if HENRICI in trained.measures and HENRICI in null.measures:
        henrici = trained.measure(HENRICI)
        types["strongly_non_normal"] = ((henrici - null.measure(HENRICI) >= -MIN_SHARE_EFFECT)
                                        & (henrici > STRONGLY_NON_NORMAL_HENRICI) & ~types["near_symmetric"])
    return types
