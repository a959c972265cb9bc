"""What non-normality does to the dynamics (resdyn.transient).

Per sublayer (in parallel processes at large d): numerical abscissa and radius, pseudospectral radii
on the eps grid and the Kreiss lower bound, from the real Schur form and ||J||_2 that spectral_analysis
stored (schur_forms, layer_metrics): no matrix is factored twice. Then, as the results come back in depth
order (at most 8 matrices held), the norm of every window of consecutive maps against the product of their
spectral radii. The figure draws the pseudospectra of the most and the least non-normal sublayer (by
henrici_rel_j_minus_i) and the growth beyond the spectrum against the window length.
"""

from __future__ import annotations

import contextlib

import numpy as np

from resdyn.figures import pseudospectra_contours
from resdyn.naming import sublayer_depth
from resdyn.stages.result import Figure, StageResult
from resdyn.stages.spectral import PARALLEL_MIN_WIDTH, sublayers_in_depth_order
from resdyn.stages.workers import transient_of_matrix
from resdyn.transient import PSEUDOSPECTRAL_EPSILONS, transient_growth


def transient_analysis(settings, tools, jacobians, schur_forms, layer_metrics) -> StageResult:
    """Per sublayer its transient dynamics and pseudospectra; per window of consecutive sublayers the growth of
    their product beyond the product of their spectral radii. ``settings.device``: where the pseudospectra's
    grids are computed."""
    order = sublayers_in_depth_order(jacobians)
    width = jacobians.width
    metrics = _spectral_metrics(layer_metrics)
    schur_row_group = {(layer, sublayer): index for index, layer, sublayer in sublayers_in_depth_order(schur_forms)}
    missing = [key for _, *key in order if tuple(key) not in schur_row_group or tuple(key) not in metrics]
    if missing:
        raise ValueError(f"{tools.label}: schur_forms / layer_metrics lack sublayers {missing[:3]} of the "
                         "jacobians table; rematerialize spectral_analysis for this partition")
    chosen = _plotted_sublayers(metrics, order)
    points = 48 if width <= 256 else 20 if width <= 2048 else 12  # beyond d = 256 each grid point is a Lanczos run
    tasks = [(jacobians.reference(index), schur_forms.reference(schur_row_group[layer, sublayer]),
              metrics[layer, sublayer]["sigma_max"],
              points if (layer, sublayer) in chosen.values() else 0, settings.device)
             for index, layer, sublayer in order]
    progress = tools.progress("transient dynamics", len(order))
    results = []  # consumed as they arrive, so each sublayer's line is logged when it is done
    dynamics_rows, pseudo_rows, radii = [], [], []

    def analysed():
        """Each J in depth order as the workers' results come back; its rows and rho(J) recorded first."""
        for (index, layer, sublayer), result in zip(order, tools.map(transient_of_matrix, tasks,
                                                                     parallel=width >= PARALLEL_MIN_WIDTH)):
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
            radii.append(result.spectral_radius)
            yield jacobians.matrix(index)

    # The windows' products are taken here while the workers analyse the next sublayers (this process only waited
    # then; the products took ~10 s after them per SmolLM2 partition). transient_growth zips the matrices with
    # the radii and asks for each matrix first, so the list already holds that depth's radius; no matrix is kept
    # here (transient_growth holds its window's).
    with contextlib.closing(analysed()) as matrices:  # on a failure the pool stops now, not when collected
        growth = list(transient_growth(matrices, iter(radii), spectral_norms=[
            metrics[layer, sublayer]["sigma_max"] for _, layer, sublayer in order]))
    tools.log(f"transient growth over {len(order)} sublayers done, {progress.seconds():.0f} s")
    growth_rows = [{"start_depth": g.start_depth, "window_length": g.window, "product_norm": g.product_norm,
                    "spectral_radius_product": g.spectral_radius_product,
                    "growth_beyond_spectrum": g.growth_beyond_spectrum} for g in growth]
    drawn = _figure(tools, order, results, chosen, growth)
    return StageResult(tables={"transient_dynamics": dynamics_rows, "pseudospectra": pseudo_rows,
                               "transient_growth": growth_rows},
                       metadata={"transient_dynamics": {"pseudospectra": Figure(drawn)}})


def _spectral_metrics(layer_metrics) -> dict[tuple[int, str], dict]:
    """What spectral_analysis already knows of each sublayer: ||J||_2 (sigma_max) and henrici_rel_j_minus_i."""
    rows = layer_metrics.read(["layer", "sublayer", "sigma_max", "henrici_rel_j_minus_i"]).to_pylist()
    return {(row["layer"], row["sublayer"]): row for row in rows}


def _plotted_sublayers(metrics, order) -> dict[str, tuple[int, str]]:
    """The most and the least non-normal sublayer (henrici_rel_j_minus_i of layer_metrics)."""
    ranked = sorted(((layer, sublayer) for _, layer, sublayer in order),
                    key=lambda key: metrics[key]["henrici_rel_j_minus_i"])
    return {"most non-normal": ranked[-1], "least non-normal": ranked[0]}


def _figure(tools, order, results, chosen, growth):
    """Pseudospectra of the chosen sublayers (grids computed by their workers), growth against window length."""
    positions = {(layer, sublayer): i for i, (_, layer, sublayer) in enumerate(order)}
    panels = {f"{label}: depth {sublayer_depth(*key)} ({key[1]})": results[positions[key]].contour
              for label, key in chosen.items()}
    by_window: dict[int, list[float]] = {}
    for g in growth:
        if np.isfinite(g.growth_beyond_spectrum):
            by_window.setdefault(g.window, []).append(g.growth_beyond_spectrum)
    summary = {w: (float(np.max(v)), float(np.median(v))) for w, v in by_window.items()}
    return pseudospectra_contours(panels, summary, tools.figures, title=f"{tools.label}: pseudospectra "
                                  f"(eps = {', '.join(f'{e:g}' for e in PSEUDOSPECTRAL_EPSILONS)})")


__all__ = ["transient_analysis"]
