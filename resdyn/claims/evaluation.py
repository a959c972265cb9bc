"""Every claim on one pair of checkpoints (``evaluate``)."""

from __future__ import annotations

import dataclasses

from .bottleneck import bottleneck_claims
from .checkpoint import CheckpointData
from .claim import Claim, guarded
from .community import community_claims
from .spectral import symmetry_and_rotation_claims
from .statistics import finite
from .unit_coupling import coupling_claims


def evaluate(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    """Every claim of PAPER.md's headline results on this pair of checkpoints, every reading of each."""
    return spectral_and_depth_claims(null, trained) + [
        guarded(claim) for claim in coupling_claims(null, trained) + community_claims(null, trained)]


def spectral_and_depth_claims(null: CheckpointData, trained: CheckpointData) -> list[Claim]:
    """The claims read off the spectral tables (symmetry, rotation, the bottleneck and its surgery): the only ones
    with a zero-rounding reading (rounding.has_zero_rounding_reading), so a SIMEX draw, which holds no other table,
    is judged by these alone. One without the samples' interval (folds off: ``--folds 0`` or wider than
    ``--fold-max-width``) says so in its note: its verdict then rests on the bootstrap over sublayers or on the
    bare number."""
    marked = []
    for claim in symmetry_and_rotation_claims(null, trained) + bottleneck_claims(null, trained):
        estimate = claim.effect or claim.trained or claim.null_model
        if estimate is not None and estimate.sample_low is None and finite(estimate.value) and \
                not claim.key.startswith("spectral_gradient") and "modulus" not in claim.key:
            claim = dataclasses.replace(claim, note="; ".join(filter(None, [claim.note, "no samples interval (folds off)"])))
        marked.append(guarded(claim))
    return marked


