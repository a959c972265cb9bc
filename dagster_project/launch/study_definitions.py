"""How the study is launched, from one :class:`~resdyn.dagster_project.configuration.config.StudyConfig`.

The launch API (dagster_project/launch/run_loop.py), the UI (``definitions.py``) and the benchmarks all come here:
:func:`build_definitions` makes the Dagster definitions of a configuration (assets with their step tags, checks, jobs on its
executor, resources holding its settings), :func:`reconstructable_job` hands the same job to
processes that run steps (multiprocess, Ray), the configuration travelling as the job's JSON
argument, and :func:`step_tags` says what each kind of step asks a Ray cluster for.
"""

from __future__ import annotations

import json
import os

import dagster as dg

from resdyn.dagster_project.configuration.config import StudyConfig
from resdyn.dagster_project.launch.event_log_file import LOGGERS
from resdyn.dagster_project.launch.executors import (
    check_ray_address,
    executor_definition,
    largest_node_cpus,
    ray_address,
)

RAY_CONFIG_TAG = "dagster-ray/config"  # the op tag dagster-ray reads a step's resource request from
STUDY_JOB = "resdyn_job"
IN_PROCESS_JOB = "__ephemeral_asset_job__"  # the name dg.materialize gives its job, kept for the runs it made before


def step_tags(config: StudyConfig, kind: str) -> dict[str, str]:
    """What a step of ``kind`` asks Ray for: a GPU for the model when the device is cuda (or auto on a cluster
    with GPUs), else one CPU; analysis steps as many CPUs as ``workers`` (0: every core of the largest node;
    never more than a node has, which would never be scheduled; 1 when the cluster did not say)."""
    device, workers = str(config.settings["device"]), int(config.settings["workers"])
    node_cpus = config.ray_node_cpus
    if kind == "model":
        wants_gpu = device.startswith("cuda") or (device == "auto" and config.ray_gpus)
        request = {"num_gpus": 1, "num_cpus": 1} if wants_gpu else {"num_cpus": 1}
    elif workers == 0:
        request = {"num_cpus": node_cpus or 1}
    else:
        request = {"num_cpus": min(workers, node_cpus or os.cpu_count() or 1)}
    return {RAY_CONFIG_TAG: json.dumps(request)}


def study_assets(config: StudyConfig) -> list[dg.AssetsDefinition]:
    """Every partitioned asset, each step tagged with what its kind asks of the cluster under ``config``."""
    from resdyn.dagster_project.launch.assets_index import PARTITION_ASSETS

    return [asset.definition(step_tags(config, asset.kind)) for asset in PARTITION_ASSETS]


def study_resources(config: StudyConfig) -> dict:
    """The resources of a run under ``config`` (the UI's launchpad may still override the settings)."""
    from resdyn.dagster_project.asset_layer.io_manager import WarehouseIOManager
    from resdyn.dagster_project.asset_layer.resources import AnalysisSettings, WarehouseResource

    warehouse = WarehouseResource(root=config.warehouse, wikitext_directory=config.wikitext_directory,
                                  wikitext_tokenized_directory=config.wikitext_tokenized_directory)
    settings = AnalysisSettings(**config.settings)
    return {"warehouse": warehouse, "settings": settings,
            "io_manager": WarehouseIOManager()}


def build_definitions(config: StudyConfig) -> dg.Definitions:
    """The study's Dagster definitions under ``config``."""
    from resdyn.dagster_project.asset_layer.partitions import model_checkpoint_partitions
    from resdyn.dagster_project.launch.assets_index import STUDY_ASSETS
    from resdyn.dagster_project.launch.checks import ALL_CHECKS
    from resdyn.dagster_project.launch.sensors import registry_partitions

    executor = executor_definition(config.executor, config.ray_address)
    study_job = dg.define_asset_job(STUDY_JOB, selection=dg.AssetSelection.all() - dg.AssetSelection.groups(
        "study"), partitions_def=model_checkpoint_partitions, executor_def=executor)
    report_job = dg.define_asset_job("study_report_job", selection=dg.AssetSelection.groups("study"),
                                     description="The study across every complete partition, and report.html.")
    return dg.Definitions(assets=[*study_assets(config), *STUDY_ASSETS], asset_checks=ALL_CHECKS,
                          jobs=[study_job, report_job], sensors=[registry_partitions],
                          resources=study_resources(config), executor=executor, loggers=LOGGERS)


def partition_job(config: StudyConfig, selected_keys=None) -> dg.JobDefinition:
    """The job of one partition's run in this process (the in-process executor): the one ``dg.materialize`` builds
    of every partitioned asset and check, executing those of ``selected_keys`` (None: all), with resdyn's loggers
    (``dg.materialize`` takes none). Its steps are those of the study job's run of the same selection."""
    from resdyn.dagster_project.launch.checks import ALL_CHECKS

    # a selection's assets with their checks (as execute_job's asset_selection runs them out of process)
    selection = dg.AssetSelection.assets(*selected_keys) | dg.AssetSelection.checks_for_assets(*selected_keys) \
        if selected_keys else None
    return dg.Definitions(jobs=[dg.define_asset_job(IN_PROCESS_JOB, selection=selection)],
                          assets=[*study_assets(config), *ALL_CHECKS], resources=study_resources(config),
                          loggers=LOGGERS).resolve_job_def(IN_PROCESS_JOB)


def step_names(job: dg.JobDefinition) -> list[str]:
    """The steps a run of ``job`` executes, in an order they can run in (each node is one step)."""
    return [node.name for node in job.nodes_in_topological_order]


def job_from_json(config: str) -> dg.JobDefinition:
    """The study job of a configuration given as JSON: what a step process rebuilds (the reconstructor)."""
    return build_definitions(StudyConfig.from_json(config)).resolve_job_def(STUDY_JOB)


def reconstructable_job(config: StudyConfig):
    """The study job under ``config`` as processes that run its steps rebuild it."""
    return dg.build_reconstructable_job(__name__, job_from_json.__name__, reconstructable_kwargs={
        "config": config.to_json()})


def prepare(config: StudyConfig) -> StudyConfig:
    """``config`` ready to launch: for Ray, the address a user gave turned into the cluster's job-submission URL
    (checked: one request) and the cores of its largest node (what ``--workers 0`` asks for)."""
    if config.executor != "ray":
        return config
    address = ray_address(config.ray_address)
    check_ray_address(address)
    return config.replace(ray_address=address, ray_node_cpus=largest_node_cpus(address) or config.ray_node_cpus)
