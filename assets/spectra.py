"""Stage 5: spectral geometry of every mean sublayer Jacobian (eigenvalues, SVD, metrics)."""

import dagster as dg
import pyarrow as pa

from dagster_project.resources import WarehouseResource
from resdyn import spectra
from resdyn.figures import eigenvalue_clouds, metrics_by_depth
from resdyn.models.adapters import sublayer_depth

from .common import PARTITIONS, figure, partition, read_mean_jacobians, table_metadata
from .jacobians import jacobians

DEPTH_CURVES = ("henrici_rel_j_minus_i", "frac_complex", "self_alignment", "effective_rank",
                "log10_condition", "spectral_radius")


def checkpoints_of(store, table: str, model: str) -> list[str]:
    """Checkpoints of ``model`` already in ``table`` (figures compare them)."""
    directory = store.root / table / f"model={model}"
    return sorted(p.name.split("=", 1)[1] for p in directory.glob("checkpoint=*") if (p / "data.parquet").is_file())


def depth_curves(store, table: str, model: str, metrics, x_column: str = "depth", filter_=None) -> dict:
    curves: dict[str, dict[str, tuple[list, list]]] = {metric: {} for metric in metrics}
    for checkpoint in checkpoints_of(store, table, model):
        rows = sorted(store.read(table, model, checkpoint).to_pylist(), key=lambda r: r[x_column])
        rows = [r for r in rows if filter_ is None or filter_(r)]
        for metric in metrics:
            curves[metric][checkpoint] = ([r[x_column] for r in rows], [r[metric] for r in rows])
    return curves


@dg.multi_asset(
    partitions_def=PARTITIONS, group_name="spectra", can_subset=False,
    specs=[
        dg.AssetSpec("eigenvalues", code_version="1", deps=[jacobians], description="Every eigenvalue of every mean Jacobian."),
        dg.AssetSpec("singular_values", code_version="1", deps=[jacobians], description="Every singular value of every mean Jacobian."),
        dg.AssetSpec("layer_metrics", code_version="1", deps=[jacobians], description="One row per sublayer: conditioning, "
                     "non-normality, rotation, alignment, ranks, operator type (resdyn.spectra)."),
    ],
)
def spectral_tables(context: dg.AssetExecutionContext, warehouse: WarehouseResource):
    model, checkpoint = partition(context)
    store = warehouse.open()
    matrices = read_mean_jacobians(store, model, checkpoint)
    eigen_rows, singular_rows, metric_rows, clouds = [], [], [], {}
    for key in matrices:
        eigenvalues, singular_values = spectra.spectrum(matrices[key])
        depth = sublayer_depth(*key)
        clouds[depth] = eigenvalues
        base = {"layer": key[0], "sublayer": key[1], "depth": depth}
        eigen_rows += [{**base, "idx": i, "re": float(v.real), "im": float(v.imag), "modulus": float(abs(v))}
                       for i, v in enumerate(eigenvalues)]
        singular_rows += [{**base, "idx": i, "sigma": float(s)} for i, s in enumerate(singular_values)]
        metric_rows.append({**base, **spectra.sublayer_metrics(matrices[key], spectrum_of_jacobian=(eigenvalues,
                                                                                                singular_values))})
    tables = {"eigenvalues": pa.Table.from_pylist(eigen_rows), "singular_values": pa.Table.from_pylist(singular_rows),
              "layer_metrics": pa.Table.from_pylist(metric_rows)}
    figures_directory = store.artefact_directory("figures", model, checkpoint)
    cloud_png = eigenvalue_clouds(clouds, figures_directory, title=context.partition_key)
    for name, table in tables.items():
        path = store.write(name, model, checkpoint, table)
        extra = {}
        if name == "eigenvalues":
            extra = figure(cloud_png)
        if name == "layer_metrics":
            curves = depth_curves(store, "layer_metrics", model, DEPTH_CURVES)
            extra = figure(metrics_by_depth(curves, figures_directory, title=f"{model}: metrics vs depth"))
            types = table.column("operator_type").to_pylist()
            extra["operator_types"] = dg.MetadataValue.json({t: types.count(t) for t in sorted(set(types))})
        yield dg.MaterializeResult(asset_key=name, metadata={**table_metadata(table, path), **extra})
