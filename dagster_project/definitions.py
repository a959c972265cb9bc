import dagster as dg

from .assets_index import ALL_ASSETS, STUDY_ASSETS
from .checks import ALL_CHECKS
from .executors import executor_definition
from .jobs import resdyn_job, study_report_job
from .resources import default_resources
from .sensors import registry_partitions

defs = dg.Definitions(assets=[*ALL_ASSETS, *STUDY_ASSETS], asset_checks=ALL_CHECKS, jobs=[resdyn_job, study_report_job],
                      sensors=[registry_partitions],
                      resources=default_resources(), executor=executor_definition())
