"""Stage 3: residual activations at both boundaries (pre_attn, pre_mlp) of every layer."""


import dagster as dg
import numpy as np
import pyarrow as pa

from dagster_project.resources import AnalysisSettings, WarehouseResource
from resdyn.jacobians.engine import capture_activations

from .common import PARTITIONS, model_and_samples, partition, table_metadata
from .samples import samples


@dg.asset(partitions_def=PARTITIONS, code_version="1", group_name="measurements", deps=[samples],
          description="Residual stream at the analysed positions, one row per (layer, boundary, sample, position).")
def activations(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
                settings: AnalysisSettings) -> dg.MaterializeResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    loaded, sample_list = model_and_samples(warehouse, settings, model, checkpoint)
    captured, index = capture_activations(loaded.model, loaded.adapter, sample_list, batch_size=settings.batch_size)
    layers, boundaries, values = [], [], []
    for (layer, boundary), matrix in sorted(captured.items()):
        layers.extend([layer] * len(matrix))
        boundaries.extend([boundary] * len(matrix))
        values.append(matrix)
    stacked = np.concatenate(values)
    if not np.isfinite(stacked).all():
        raise FloatingPointError(f"non-finite activations in {context.partition_key}: check the checkpoint's weights")
    d = stacked.shape[1]
    repeats = len(captured)
    table = pa.table({
        "layer": pa.array(layers, pa.int32()),
        "boundary": boundaries,
        "sample_id": pa.array([s for s, _ in index] * repeats, pa.int32()),
        "position": pa.array([t for _, t in index] * repeats, pa.int32()),
        "values": pa.FixedSizeListArray.from_arrays(pa.array(stacked.ravel(), pa.float32()), d).cast(
            pa.list_(pa.float32())),
    })
    path = store.write("activations", model, checkpoint, table)
    return dg.MaterializeResult(
        metadata=table_metadata(table, path),
        data_version=dg.DataVersion(store.content_hash("activations", model, checkpoint)),
    )
