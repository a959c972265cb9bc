"""Stage 4: mean sublayer Jacobians (and a per-sample subsample) at the analysed positions."""


import dagster as dg
import numpy as np
import pyarrow as pa

from dagster_project.resources import AnalysisSettings, WarehouseResource
from resdyn.figures import jacobian_heatmaps
from resdyn.jacobians import make_backend
from resdyn.jacobians.engine import analyse_samples
from resdyn.models.adapters import sublayer_depth

from .common import PARTITIONS, figure, model_and_samples, partition, table_metadata
from .samples import samples


def _matrix_rows(keys_and_matrices, extra_columns: dict | None = None) -> dict:
    """One row per matrix row: (layer, sublayer, depth, row, values DOUBLE[])."""
    layers, sublayers, depths, rows, values = [], [], [], [], []
    for (layer, sublayer), matrix in keys_and_matrices:
        d = matrix.shape[0]
        layers += [layer] * d
        sublayers += [sublayer] * d
        depths += [sublayer_depth(layer, sublayer)] * d
        rows += list(range(d))
        values.append(np.asarray(matrix, dtype=np.float64))
    stacked = np.concatenate(values)
    return {
        "layer": pa.array(layers, pa.int32()), "sublayer": sublayers, "depth": pa.array(depths, pa.int32()),
        "row": pa.array(rows, pa.int32()),
        "values": pa.FixedSizeListArray.from_arrays(pa.array(stacked.ravel()), stacked.shape[1]).cast(
            pa.list_(pa.float64())),
    }


@dg.asset(partitions_def=PARTITIONS, code_version="1", group_name="measurements", deps=[samples],
          description="Mean Jacobian d out_t / d h_t of every sublayer map, one row per matrix row; "
                      "per-entry variance beside it where the backend streams it (autodiff). Also writes "
                      "sample_jacobians for a subsample.")
def jacobians(context: dg.AssetExecutionContext, warehouse: WarehouseResource,
              settings: AnalysisSettings) -> dg.MaterializeResult:
    model, checkpoint = partition(context)
    store = warehouse.open()
    loaded, sample_list = model_and_samples(warehouse, settings, model, checkpoint)
    backend = make_backend(settings.backend)
    analysis = analyse_samples(
        loaded.model, loaded.adapter, sample_list, backend=backend, batch_size=settings.batch_size,
        keep_sample_jacobians=settings.per_sample_subsample,
        progress=lambda done, total: context.log.info(f"jacobians {context.partition_key}: batch {done}/{total}"),
    )
    keys = sorted(analysis.moments)
    columns = _matrix_rows([(key, analysis.moments[key].mean) for key in keys])
    d = analysis.d_model
    # per-entry variance; null where a closed-form backend streamed means only
    columns["variance"] = pa.array([None if analysis.moments[key].variance is None else
                                    [float(v) for v in analysis.moments[key].variance[row]]
                                    for key in keys for row in range(d)], pa.list_(pa.float64()))
    n_rows = len(columns["row"])
    columns["n_observations"] = pa.array([analysis.moments[keys[0]].count] * n_rows, pa.int32())
    columns["backend"] = [analysis.backend_by_sublayer[key] for key in keys for _ in range(d)]
    table = pa.table(columns)
    path = store.write("jacobians", model, checkpoint, table)

    kept = [((layer, sublayer), sample_id, position, matrix)
            for (layer, sublayer), entries in analysis.sample_jacobians.items()
            for sample_id, position, matrix in entries]
    per_sample = _matrix_rows([(key, matrix) for key, _, _, matrix in kept])
    per_sample["sample_id"] = pa.array([s for _, s, _, _ in kept for _ in range(d)], pa.int32())
    per_sample["position"] = pa.array([t for _, _, t, _ in kept for _ in range(d)], pa.int32())
    store.write("sample_jacobians", model, checkpoint, pa.table(per_sample))

    png = jacobian_heatmaps({key: analysis.moments[key].mean for key in keys},
                            store.artefact_directory("figures", model, checkpoint), title=context.partition_key)
    return dg.MaterializeResult(
        metadata={**table_metadata(table, path), **figure(png), "backend": backend.name,
                  "backend_by_sublayer": dg.MetadataValue.json(
                      {f"{layer}/{sublayer}": name for (layer, sublayer), name in analysis.backend_by_sublayer.items()}),
                  "n_observations": analysis.moments[keys[0]].count, "d_model": d},
        data_version=dg.DataVersion(store.content_hash("jacobians", model, checkpoint)),
    )
