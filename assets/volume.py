"""How each sublayer map changes volume: log |det J| and trace(J - I) of every mean Jacobian (resdyn/stages/volume.py)."""

from resdyn.dagster_project.asset_layer import ANALYSIS, partition_asset
from resdyn.stages import volume

volume_changes = partition_asset(
    ANALYSIS, code_version="1", group_name="spectra",
    description="Per sublayer: log |det J|, the sign of det J, log |det J| / d and trace(J - I) of the mean Jacobian "
                "(resdyn.volume.volume_change).",
)(volume.volume_changes)
