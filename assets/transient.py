"""What non-normality does to the dynamics (resdyn/stages/transient.py)."""

import dagster as dg

from resdyn.dagster_project.asset_layer import ANALYSIS, partition_asset
from resdyn.stages import transient

transient_analysis = partition_asset(ANALYSIS, settings=("device", "workers"), tables=[
    dg.AssetSpec("transient_dynamics", code_version="3", group_name="transient",
                 description="Per sublayer: numerical abscissa (J and J - I), numerical radius (bracketed), "
                             "Kreiss lower bound, ||J|| / rho(J) (resdyn.transient)."),
    dg.AssetSpec("pseudospectra", code_version="3", group_name="transient",
                 description="Pseudospectral radius rho_eps(J) for eps in 1e-3, 1e-2, 1e-1, and (rho_eps - rho) / eps."),
    dg.AssetSpec("transient_growth", code_version="3", group_name="transient",
                 description="||J_{l+k-1} ... J_l||_2 against prod rho(J_i) for windows k = 1, 2, 4, 8 and the "
                             "full depth."),
])(transient.transient_analysis)
