"""Materialize the study in-process into a temporary warehouse (shared by the pipeline tests)."""

from __future__ import annotations

import contextlib
import dataclasses

import dagster as dg

from resdyn.dagster_project.asset_layer.partitions import register_partitions
from resdyn.dagster_project.configuration.config import StudyConfig
from resdyn.dagster_project.launch.checks import ALL_CHECKS
from resdyn.dagster_project.launch.study_definitions import study_assets, study_resources

TINY_PARTITION = "tiny-olmo3@step-000000"  # the pipeline tier's session warehouse holds this partition
SMALL = dict(n_samples=12, sequence_length=24, batch_size=6, per_sample_subsample=3, leiden_seeds=3, n_permutations=200)


def materialize_partition(root, key: str, instance: dg.DagsterInstance | None = None, **settings):
    instance = instance or dg.DagsterInstance.ephemeral()
    register_partitions(instance, [key])
    config = StudyConfig.resolve({**SMALL, **settings, "warehouse": str(root)})
    result = dg.materialize([*study_assets(config), *ALL_CHECKS], partition_key=key, resources=study_resources(config),
                            instance=instance)
    checks = [e.asset_check_evaluation_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return result, checks, instance


def read_mean_jacobians(store, model: str, checkpoint: str) -> dict:
    """The partition's mean Jacobians keyed (layer, sublayer), in depth order."""
    from resdyn.naming import sublayer_depth

    matrices = dict(store.matrix_table("jacobians", model, checkpoint).matrices())
    return {key: matrices[key] for key in sorted(matrices, key=lambda key: sublayer_depth(*key))}


@contextlib.contextmanager
def bumped_code_version(stage: str):
    """``stage``'s tables at code version + 1 in this process's declarations (what the views and the rerun plan
    judge by), as an edit of its module would declare them."""
    from resdyn.dagster_project.store import table_identity

    before = table_identity.declarations()[stage]
    table_identity.declare(dataclasses.replace(before, tables={table: str(int(version) + 1)
                                                                for table, version in before.tables.items()}))
    try:
        yield
    finally:
        table_identity.declare(before)
