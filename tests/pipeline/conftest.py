"""The pipeline tier's warehouse: the whole graph for one tiny partition, materialized in-process once per session."""

import pytest

from resdyn.dagster_project.store.warehouse import Warehouse

from ..pipeline_helpers import TINY_PARTITION, materialize_partition


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory):
    """(store, check results, Dagster instance) of a warehouse holding TINY_PARTITION, every asset and check run."""
    root = tmp_path_factory.mktemp("warehouse")
    result, checks, instance = materialize_partition(root, TINY_PARTITION)
    assert result.success
    return Warehouse(root), checks, instance
