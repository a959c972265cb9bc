"""The partition keys the UI offers are the registry's: a sensor keeps the dynamic partitions equal to
``registry.partition_keys()`` (plus any partition that has data in the warehouse), adding registered
checkpoints and deleting keys typed into the UI that name nothing (they would only fail). Removing a
partition with its data is ``resdyn forget MODEL@CHECKPOINT``."""

from __future__ import annotations

import dagster as dg

from resdyn.dagster_project.asset_layer.partitions import model_checkpoint_partitions
from resdyn.dagster_project.asset_layer.resources import WarehouseResource


def partition_key_changes(current: set[str], registered: set[str], with_data: set[str]) -> tuple[list[str], list[str]]:
    """(keys to add, keys to delete) so that the dynamic partitions become registered | with_data."""
    wanted = registered | with_data
    return sorted(wanted - current), sorted(current - wanted)


@dg.sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Keeps the model_checkpoint partitions equal to the registry's model@checkpoint keys.")
def registry_partitions(context: dg.SensorEvaluationContext, warehouse: WarehouseResource) -> dg.SensorResult:
    store = warehouse.open()
    registered = set(warehouse.registry().partition_keys())
    with_data = {f"{model}@{checkpoint}" for model, checkpoint in store.partitions()}
    current = set(context.instance.get_dynamic_partitions(model_checkpoint_partitions.name))
    added, deleted = partition_key_changes(current, registered, with_data)
    requests = []
    if added:
        requests.append(model_checkpoint_partitions.build_add_request(added))
    if deleted:
        requests.append(model_checkpoint_partitions.build_delete_request(deleted))
    context.log.info(f"partition keys: {len(added)} added, {len(deleted)} unknown removed")
    return dg.SensorResult(dynamic_partitions_requests=requests)
