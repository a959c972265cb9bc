"""The analysis samples: seeded windows of the model's own tokens (resdyn/stages/samples.py)."""

from resdyn.dagster_project.asset_layer import ANALYSIS, partition_asset
from resdyn.stages import samples as drawn_samples

samples = partition_asset(
    ANALYSIS, code_version="3", group_name="inputs", deps=["model_checkpoints"],
    settings=("bos", "n_samples", "positions", "seed", "sequence_length", "warmup"),
    description="WikiText-2 test windows (token ids kept) and their analysed positions.",
)(drawn_samples.samples)
