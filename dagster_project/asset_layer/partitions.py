"""One dynamic partition per model checkpoint, keyed ``model@checkpoint``."""

from __future__ import annotations

import dagster as dg

model_checkpoint_partitions = dg.DynamicPartitionsDefinition(name="model_checkpoint")


def register_partitions(instance: dg.DagsterInstance, keys: list[str]) -> None:
    """Add partition keys the instance does not know yet (a new model needs no code change)."""
    known = set(instance.get_dynamic_partitions(model_checkpoint_partitions.name))
    missing = [key for key in keys if key not in known]
    if missing:
        instance.add_dynamic_partitions(model_checkpoint_partitions.name, missing)

