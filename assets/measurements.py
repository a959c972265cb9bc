"""One pass over the model: activations, mean Jacobians, per-sample subsample, finite-difference probe
(resdyn/stages/measurement.py)."""

import dagster as dg

from resdyn.dagster_project.asset_layer import MODEL, partition_asset
from resdyn.stages import measurement

measurements = partition_asset(MODEL, group_name="measurements", settings=(
        "backend", "batch_size", "device", "dtype", "fold_max_width", "folds", "per_sample_subsample", "seed"), tables=[
    dg.AssetSpec("activations", code_version="2",
                 description="Residual stream at the analysed positions, one row per (layer, boundary, sample, position)."),
    dg.AssetSpec("jacobians", code_version="2",
                 description="Mean Jacobian d out_t / d h_t of every sublayer map, one row per matrix row; per-entry "
                             "variance where the backend streams it (autodiff)."),
    dg.AssetSpec("sample_jacobians", code_version="3",
                 description="Per-sample Jacobians of a subsample (for per-sample metrics)."),
    dg.AssetSpec("jacobian_folds", code_version="1",
                 description="Mean Jacobian of each contiguous block of samples (--folds; empty above "
                             "--fold-max-width): what the sampling intervals of every measure are made from."),
    dg.AssetSpec("finite_difference_probe", code_version="1",
                 description="Mean central differences (f(x + h v) - f(x - h v)) / 2h along random directions: "
                             "the independent reference the jacobians check compares E[J] v with."),
])(measurement.measurements)
