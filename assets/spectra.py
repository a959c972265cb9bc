"""Spectral geometry of every mean sublayer Jacobian, and depth as time (resdyn/stages/spectral.py)."""

import dagster as dg

from resdyn.dagster_project.asset_layer import ANALYSIS, partition_asset
from resdyn.stages import spectral

spectral_analysis = partition_asset(ANALYSIS, settings=("workers",), tables=[
    dg.AssetSpec("eigenvalues", code_version="2", group_name="spectra",
                 description="Every eigenvalue of every mean Jacobian (read off its real Schur form)."),
    dg.AssetSpec("singular_values", code_version="2", group_name="spectra",
                 description="Every singular value of every mean Jacobian."),
    dg.AssetSpec("schur_forms", code_version="1", group_name="spectra",
                 description="The real Schur form T of every mean Jacobian, factored once here and read by "
                             "transient_analysis (resdyn.spectra.real_schur_form)."),
    dg.AssetSpec("layer_metrics", code_version="6", group_name="spectra",
                 description="One row per sublayer: conditioning, non-normality, rotation, alignment, ranks, "
                             "operator type (resdyn.spectra)."),
    dg.AssetSpec("cumulative_rank", code_version="2", group_name="depth",
                 description="Ranks of the composed Jacobian J_depth ... J_0 (rescaled float64 product) at every depth."),
    dg.AssetSpec("schur_surgery", code_version="4", group_name="depth",
                 description="Ranks of the cumulative product of Schur-operated Jacobians J(alpha): spectrum kept, "
                             "non-normal part scaled by alpha (alpha = 1 reproduces cumulative_rank), under three "
                             "Schur orderings and beside them J(alpha) = N + alpha (J - N) for the polar normal "
                             "part N (polar-normal, no ordering; resdyn/normal_part.py)."),
])(spectral.spectral_analysis)
