"""Materialize the study in-process into a temporary warehouse (shared by the pipeline tests)."""

from __future__ import annotations

import dagster as dg

from resdyn.dagster_project.assets_index import ALL_ASSETS
from resdyn.dagster_project.checks import ALL_CHECKS
from resdyn.dagster_project.partitions import register_partitions
from resdyn.dagster_project.resources import AnalysisSettings, WarehouseResource

SMALL = dict(n_samples=12, sequence_length=24, batch_size=6, per_sample_subsample=3, leiden_seeds=3, n_permutations=200)


def materialize_partition(root, key: str, instance: dg.DagsterInstance | None = None, **settings):
    instance = instance or dg.DagsterInstance.ephemeral()
    register_partitions(instance, [key])
    resources = {"warehouse": WarehouseResource(root=str(root)),
                 "settings": AnalysisSettings(**{**SMALL, **settings})}
    result = dg.materialize([*ALL_ASSETS, *ALL_CHECKS], partition_key=key, resources=resources, instance=instance)
    checks = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return result, checks, instance
