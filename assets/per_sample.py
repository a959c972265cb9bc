"""Per-sample spread: the same metrics on per-sample Jacobians, with bootstrap intervals (resdyn/stages/per_sample.py)."""

from resdyn.dagster_project.asset_layer import ANALYSIS, partition_asset
from resdyn.stages import per_sample

layer_metrics_per_sample = partition_asset(
    ANALYSIS, code_version="6", group_name="spectra", settings=("seed", "workers"),
    description="Per-sample metric means with 95% percentile-bootstrap intervals, beside the mean-Jacobian value.",
)(per_sample.layer_metrics_per_sample)
