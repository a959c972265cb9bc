"""How each sublayer map changes volume: log |det J| and trace(J - I) of every mean Jacobian (resdyn.volume)."""

from resdyn.dagster_project.asset_layer import ANALYSIS, MatrixTable, partition_asset, rows_table, table_output
from resdyn.naming import sublayer_depth
from resdyn.volume import volume_change


@partition_asset(ANALYSIS, code_version="1", group_name="spectra",
                 description="Per sublayer: log |det J|, the sign of det J, log |det J| / d and trace(J - I) of the "
                             "mean Jacobian (resdyn.volume.volume_change).")
def volume_changes(jacobians: MatrixTable):
    rows = [{"layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer), **volume_change(matrix)}
            for (layer, sublayer), matrix in jacobians.matrices()]
    yield table_output(rows_table("volume_changes", sorted(rows, key=lambda row: row["depth"])))
