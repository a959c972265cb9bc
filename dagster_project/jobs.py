"""The study as one partitioned job, on the executor RESDYN_EXECUTOR names (in-process by default)."""

import dagster as dg

from .executors import executor_definition
from .partitions import model_checkpoint_partitions


def study_job(executor: str | None = None, ray_address: str | None = None):
    from .assets_index import STUDY_ASSET_KEYS

    return dg.define_asset_job("resdyn_job", selection=dg.AssetSelection.all() - dg.AssetSelection.assets(*STUDY_ASSET_KEYS),
                               partitions_def=model_checkpoint_partitions,
                               executor_def=executor_definition(executor, ray_address))


def resolved_study_job() -> dg.JobDefinition:
    """The job with its resources, as step processes rebuild it (``dg.reconstructable`` target)."""
    from .definitions import defs

    return defs.resolve_job_def("resdyn_job")


resdyn_job = study_job()

study_report_job = dg.define_asset_job("study_report_job", selection=dg.AssetSelection.groups("study"),
                                       description="The study across every complete partition, and report.html.")
