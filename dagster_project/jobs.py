"""The study as one partitioned job, run in-process (one model load per asset, no subprocess per step)."""

import dagster as dg

from .partitions import model_checkpoint_partitions

resdyn_job = dg.define_asset_job(
    "resdyn_job",
    selection=dg.AssetSelection.all(),
    partitions_def=model_checkpoint_partitions,
    executor_def=dg.in_process_executor,
)
