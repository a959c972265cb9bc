"""The model checkpoint: trained (tiny suite), imported (GGUF) or located (any HF model), then described
(resdyn/stages/checkpoint.py)."""

import dagster as dg

from resdyn.dagster_project.asset_layer import MODEL, partition_asset
from resdyn.stages import checkpoint

model_checkpoints = partition_asset(MODEL, group_name="inputs", settings=("dtype",), tables=[
    dg.AssetSpec("model_checkpoints", code_version="3", description="One row describing the checkpoint (from its "
                 "config and safetensors headers); trains the tiny suite member, imports a GGUF file or initialises a "
                 "null model on first use."),
    # skippable: only a tiny-suite member is trained here, so only it has a loss curve
    dg.AssetSpec("training_loss", code_version="1", skippable=True, description="The tiny suite member's training "
                 "loss per optimizer step up to this checkpoint (other models are trained elsewhere: no rows)."),
])(checkpoint.model_checkpoints)
