"""The per-sublayer unit of spectral work, importable by worker processes without Dagster."""

from __future__ import annotations

import numpy as np

from resdyn.dagster_project.store.matrices import read_matrix
from resdyn.depth import POLAR_NORMAL, SCHUR_ORDERING
from resdyn.spectra import analyse_sublayer

# the normal parts whose alpha = 0 surgery each fold replicates (sampling_intervals): LAPACK's Schur ordering and the
# polar normal part, which depends on no ordering; the two modulus orderings carry no interval (assets/sampling.py)
FOLD_SURGERY_ORDERINGS = (SCHUR_ORDERING, POLAR_NORMAL)


def analyse_row_group(task: tuple[str, int]):
    """(path, row group) -> the row group's SublayerSpectrum (Schur form kept for surgery)."""
    path, row_group = task
    return analyse_sublayer(read_matrix(path, row_group))


def sample_metrics(matrix: np.ndarray) -> dict:
    """The layer_metrics of one per-sample matrix (values-only factorizations, no Schur form kept) and its
    numerical abscissa."""
    from resdyn.transient import numerical_abscissa

    return {**analyse_sublayer(matrix, keep_schur=False).metrics, "numerical_abscissa": numerical_abscissa(matrix)}


def metrics_of_row_group(task: tuple[str, int]) -> dict:
    """(path, row group) -> :func:`sample_metrics` of that matrix."""
    path, row_group = task
    return sample_metrics(read_matrix(path, row_group))


def transient_of_row_group(task: tuple):
    """(jacobians file, its row group, schur_forms file, its row group, ||J||_2, contour points, device) ->
    resdyn.transient.TransientDynamics of that matrix (with its pseudospectra grid when contour points > 0),
    from the real Schur form spectral_analysis stored: the matrix is not factored again."""
    from resdyn.transient import analyse_transient

    path, row_group, schur_path, schur_row_group, spectral_norm, contour_points, device = task
    return analyse_transient(read_matrix(path, row_group), contour_points=contour_points, device=device,
                             real_schur_form=read_matrix(schur_path, schur_row_group), spectral_norm=spectral_norm)


def fold_through_depth(task: tuple) -> list[dict]:
    """One fold carried through depth: (jacobians file, folds file, fold, [(row group of J, row group of J_k,
    n, n_k)] by depth) -> per depth the layer_metrics of the leave-one-fold-out mean J_(-k) = (n J - n_k J_k) /
    (n - n_k) (no alignment metrics, which no claim reads), the ranks of their product so far and, for each entry
    of FOLD_SURGERY_ORDERINGS ("surgery": {ordering: {rank: value}}), of the product of their alpha = 0 surgery.
    Each fold is independent of the others, so the folds run in parallel and nothing larger than one depth's
    numbers leaves the worker."""
    from resdyn.depth import RANK_DEFINITIONS, CumulativeProduct, SchurSurgery, rank_summary

    path, folds_path, fold, steps = task
    product = CumulativeProduct()
    surgery = SchurSurgery((0.0,), orderings=FOLD_SURGERY_ORDERINGS, reordered_alphas=(0.0,))
    results = []
    for mean_group, fold_group, n, n_k in steps:
        matrix = (n * read_matrix(path, mean_group) - n_k * read_matrix(folds_path, fold_group)) / (n - n_k)
        spectrum = analyse_sublayer(matrix, alignment=False)
        operated = surgery.push(spectrum.schur_form, spectrum.schur_basis)
        results.append({"metrics": spectrum.metrics, "cumulative": rank_summary(product.push(matrix)),
                        "surgery": {row["schur_ordering"]: {rank: row[rank] for rank in RANK_DEFINITIONS}
                                    for row in operated}})
        del matrix, spectrum
    return results
