"""What non-normality does to the dynamics (resdyn.transient).

Per sublayer (in parallel processes at large d): numerical abscissa and radius, pseudospectral radii
on the eps grid and the Kreiss lower bound, from the real Schur form and ||J||_2 that spectral_analysis
stored (schur_forms, layer_metrics): no matrix is factored twice. Then, as the results come back in depth
order (at most 8 matrices held), the norm of every window of consecutive maps against the product of their
spectral radii. The figure draws the pseudospectra of the most and the least non-normal sublayer (by henrici_rel_j_minus_i)
and the growth beyond the spectrum against the window length.
"""

import contextlib

import dagster as dg
import numpy as np
import pyarrow as pa

from resdyn.dagster_project.asset_layer import (
    ANALYSIS,
    MatrixTable,
    TableHandle,
    conform,
    figure,
    interrupts,
    ordered_parallel_map,
    partition_asset,
    rows_table,
    table_output,
)
from resdyn.figures import pseudospectra_contours
from resdyn.naming import sublayer_depth
from resdyn.transient import PSEUDOSPECTRAL_EPSILONS, transient_growth

from .common import StageProgress, partition
from .spectra import jacobians_in_depth_order, sublayers_in_depth_order
from .spectral_worker import transient_of_matrix

TABLES = ("transient_dynamics", "pseudospectra", "transient_growth")


@partition_asset(ANALYSIS, settings=("device", "workers"), tables=[
        dg.AssetSpec("transient_dynamics", code_version="3",
                     group_name="transient",
                     description="Per sublayer: numerical abscissa (J and J - I), numerical radius (bracketed), "
                                 "Kreiss lower bound, ||J|| / rho(J) (resdyn.transient)."),
        dg.AssetSpec("pseudospectra", code_version="3", group_name="transient",
                     description="Pseudospectral radius rho_eps(J) for eps in 1e-3, 1e-2, 1e-1, and (rho_eps - rho) / eps."),
        dg.AssetSpec("transient_growth", code_version="3", group_name="transient",
                     description="||J_{l+k-1} ... J_l||_2 against prod rho(J_i) for windows k = 1, 2, 4, 8 and the "
                                 "full depth."),
])
def transient_analysis(context, settings, outputs, jacobians: MatrixTable, schur_forms: MatrixTable,
                       layer_metrics: TableHandle):
    yield from _analyse(context, settings, outputs, jacobians, schur_forms, layer_metrics)


def _analyse(context, settings, outputs, jacobians, schur_forms, layer_metrics):
    model, checkpoint = partition(context)
    order, width, workers = jacobians_in_depth_order(jacobians, settings)
    metrics = _spectral_metrics(layer_metrics)
    schur_row_group = {(layer, sublayer): index for index, layer, sublayer in sublayers_in_depth_order(schur_forms)}
    missing = [key for _, *key in order if tuple(key) not in schur_row_group or tuple(key) not in metrics]
    if missing:
        raise ValueError(f"{context.partition_key}: schur_forms / layer_metrics lack sublayers {missing[:3]} of the "
                         "jacobians table; rematerialize spectral_analysis for this partition")
    chosen = _plotted_sublayers(metrics, order)
    points = 48 if width <= 256 else 20 if width <= 2048 else 12  # beyond d = 256 each grid point is a Lanczos run
    tasks = [(jacobians.reference(index), schur_forms.reference(schur_row_group[layer, sublayer]),
              metrics[layer, sublayer]["sigma_max"],
              points if (layer, sublayer) in chosen.values() else 0, settings.device)
             for index, layer, sublayer in order]
    progress = StageProgress(context, "transient dynamics", len(order))
    results = []  # consumed as they arrive, so each sublayer's line is logged when it is done
    dynamics_rows, pseudo_rows, radii = [], [], []

    def analysed():
        """Each J in depth order as the workers' results come back; its rows and rho(J) recorded first."""
        for (index, layer, sublayer), result in zip(order, ordered_parallel_map(transient_of_matrix, tasks,
                                                                                workers=workers)):
            results.append(result)
            key = {"layer": layer, "sublayer": sublayer, "depth": sublayer_depth(layer, sublayer)}
            dynamics_rows.append({**key, "spectral_radius": result.spectral_radius,
                                  "spectral_norm": result.spectral_norm,
                                  "numerical_abscissa": result.numerical_abscissa,
                                  "numerical_abscissa_j_minus_i": result.numerical_abscissa_j_minus_i,
                                  "numerical_radius": result.numerical_radius,
                                  "numerical_radius_upper": result.numerical_radius_upper,
                                  "kreiss_lower_bound": result.kreiss_lower_bound,
                                  "growth_beyond_spectrum": result.spectral_norm / result.spectral_radius
                                  if result.spectral_radius > 0 else float("inf")})
            for epsilon, radius in sorted(result.pseudospectral_radii.items()):
                pseudo_rows.append({**key, "eps": epsilon, "pseudospectral_radius": radius,
                                    "excess_over_normal": (radius - result.spectral_radius) / epsilon})
            progress.done(f"depth {key['depth']}, {sublayer}")
            interrupts.check(f"transient_analysis of {context.partition_key}")
            radii.append(result.spectral_radius)
            yield jacobians.matrix(index)

    # The windows' products are taken here while the workers analyse the next sublayers (this process only waited
    # then; the products took ~10 s after them per SmolLM2 partition). transient_growth zips the matrices with
    # the radii and asks for each matrix first, so the list already holds that depth's radius; no matrix is kept
    # here (transient_growth holds its window's).
    with contextlib.closing(analysed()) as matrices:  # on a failure the pool stops now, not when collected
        growth = list(transient_growth(matrices, iter(radii), spectral_norms=[
            metrics[layer, sublayer]["sigma_max"] for _, layer, sublayer in order]))
    context.log.info(f"{context.partition_key}: transient growth over {len(order)} sublayers done, "
                     f"{progress.seconds():.0f} s")
    tables = {
        "transient_dynamics": rows_table("transient_dynamics", dynamics_rows),
        "pseudospectra": rows_table("pseudospectra", pseudo_rows),
        "transient_growth": conform("transient_growth", pa.table({
            "start_depth": pa.array([g.start_depth for g in growth], pa.int32()),
            "window_length": pa.array([g.window for g in growth], pa.int32()),
            "product_norm": pa.array([g.product_norm for g in growth], pa.float64()),
            "spectral_radius_product": pa.array([g.spectral_radius_product for g in growth], pa.float64()),
            "growth_beyond_spectrum": pa.array([g.growth_beyond_spectrum for g in growth], pa.float64()),
        })),
    }
    extra = {name: {} for name in TABLES}
    extra["transient_dynamics"] = figure(_figure(context, outputs, model, checkpoint, order, results, chosen, growth))
    for name in TABLES:
        yield table_output(tables[name], name, extra[name])


def _spectral_metrics(layer_metrics) -> dict[tuple[int, str], dict]:
    """What spectral_analysis already knows of each sublayer: ||J||_2 (sigma_max) and henrici_rel_j_minus_i."""
    rows = layer_metrics.read(["layer", "sublayer", "sigma_max", "henrici_rel_j_minus_i"]).to_pylist()
    return {(row["layer"], row["sublayer"]): row for row in rows}


def _plotted_sublayers(metrics, order) -> dict[str, tuple[int, str]]:
    """The most and the least non-normal sublayer (henrici_rel_j_minus_i of layer_metrics)."""
    ranked = sorted(((layer, sublayer) for _, layer, sublayer in order),
                    key=lambda key: metrics[key]["henrici_rel_j_minus_i"])
    return {"most non-normal": ranked[-1], "least non-normal": ranked[0]}


def _figure(context, outputs, model, checkpoint, order, results, chosen, growth):
    """Pseudospectra of the chosen sublayers (grids computed by their workers), growth against window length."""
    positions = {(layer, sublayer): i for i, (_, layer, sublayer) in enumerate(order)}
    panels = {f"{label}: depth {sublayer_depth(*key)} ({key[1]})": results[positions[key]].contour
              for label, key in chosen.items()}
    by_window: dict[int, list[float]] = {}
    for g in growth:
        if np.isfinite(g.growth_beyond_spectrum):
            by_window.setdefault(g.window, []).append(g.growth_beyond_spectrum)
    summary = {w: (float(np.max(v)), float(np.median(v))) for w, v in by_window.items()}
    directory = outputs.figures
    return pseudospectra_contours(panels, summary, directory, title=f"{context.partition_key}: pseudospectra "
                                  f"(eps = {', '.join(f'{e:g}' for e in PSEUDOSPECTRAL_EPSILONS)})")
