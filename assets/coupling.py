"""Does each sublayer amplify or suppress the boundary units where it starts? (resdyn/stages/coupling.py)"""

from resdyn.dagster_project.asset_layer import ANALYSIS, partition_asset
from resdyn.stages import coupling

unit_amplification = partition_asset(
    ANALYSIS, code_version="2", group_name="coupling",
    description="Per-unit amplification from each sublayer's mean Jacobian (column, J - I column, row, diagonal).",
)(coupling.unit_amplification)

coupling_tests = partition_asset(
    ANALYSIS, group_name="coupling", code_version="5", settings=("n_permutations", "seed", "workers"),
    description="Boundary vs interior amplification per sublayer: Mann-Whitney U, rank-biserial effect, "
                "degree-stratified permutation p, BH q within the model checkpoint, operator type.",
)(coupling.coupling_tests)

community_coupling = partition_asset(
    ANALYSIS, group_name="coupling", code_version="2", settings=("n_permutations", "seed"),
    description="Community position (mean participation) vs community gain ||J P_C||_F / ||P_C||_F per sublayer: "
                "Spearman rho, permutation p (J, its symmetric part, J - I), BH q within the model checkpoint.",
)(coupling.community_coupling)
