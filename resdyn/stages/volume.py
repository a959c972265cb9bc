"""How each sublayer map changes volume: log |det J| and trace(J - I) of every mean Jacobian (resdyn.volume)."""

from __future__ import annotations

from resdyn.naming import sublayer_depth
from resdyn.stages.result import StageResult
from resdyn.volume import volume_change


def volume_changes(jacobians) -> StageResult:
    """Per sublayer, in depth order: :func:`resdyn.volume.volume_change` of its mean Jacobian."""
    rows = [{"layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer), **volume_change(matrix)}
            for (layer, sublayer), matrix in jacobians.matrices()]
    return StageResult(tables={"volume_changes": sorted(rows, key=lambda row: row["depth"])})


__all__ = ["volume_changes"]
