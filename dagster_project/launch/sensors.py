"""The partition keys the UI offers are the registry's: a sensor keeps the dynamic partitions equal to the
checkpoints a run of each registered model makes by default (``registry.default_partition_keys``; not a SIMEX set's
16 draws until they have data) plus any partition that has data in the warehouse, adding registered checkpoints
and deleting keys typed into the UI that name nothing (they would only fail; a registered key typed in stays).
Removing a partition with its data is ``resdyn forget MODEL@CHECKPOINT``."""

from __future__ import annotations

import dagster as dg

from resdyn.dagster_project.asset_layer.partitions import model_checkpoint_partitions
from resdyn.dagster_project.asset_layer.resources import WarehouseResource


def partition_key_changes(current: set[str], registered: set[str], with_data: set[str],
                          offered: set[str] | None = None) -> tuple[list[str], list[str]]:
    """(keys to add, keys to delete): ``offered`` (default: every registered key) and those ``with_data`` are added,
    and only keys that are neither registered nor with data are deleted."""
    offered = registered if offered is None else offered
    return sorted((offered | with_data) - current), sorted(current - (registered | with_data))


@dg.sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Keeps the model_checkpoint partitions equal to the registry's model@checkpoint keys.")
def registry_partitions(context: dg.SensorEvaluationContext, warehouse: WarehouseResource) -> dg.SensorResult:
    store, registry = warehouse.open(), warehouse.registry()
    registered = set(registry.partition_keys())
    offered = set(registry.default_partition_keys())
    with_data = {f"{model}@{checkpoint}" for model, checkpoint in store.partitions()}
    current = set(context.instance.get_dynamic_partitions(model_checkpoint_partitions.name))
    added, deleted = partition_key_changes(current, registered, with_data, offered)
    requests = []
    if added:
        requests.append(model_checkpoint_partitions.build_add_request(added))
    if deleted:
        requests.append(model_checkpoint_partitions.build_delete_request(deleted))
    context.log.info(f"partition keys: {len(added)} added, {len(deleted)} unknown removed")
    return dg.SensorResult(dynamic_partitions_requests=requests)
