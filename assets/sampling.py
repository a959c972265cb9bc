"""Every measure's interval from the samples themselves: a block jackknife over fold means
(resdyn/stages/sampling.py)."""

from resdyn.dagster_project.asset_layer import ANALYSIS, partition_asset
from resdyn.stages import sampling

sampling_intervals = partition_asset(
    ANALYSIS, code_version="2", group_name="spectra", settings=("workers",),
    description="Sampling intervals of every layer_metrics measure, the cumulative ranks and the alpha = 0 "
                "surgery: block jackknife over the fold means (resdyn/sampling.py).",
)(sampling.sampling_intervals)
