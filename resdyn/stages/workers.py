"""The per-sublayer units of spectral work that worker processes run: each loads its matrices where it runs."""

from __future__ import annotations

import dataclasses

import numpy as np

from resdyn.depth import POLAR_NORMAL, SCHUR_ORDERING
from resdyn.normal_part import eigenvector_condition_number
from resdyn.spectra import analyse_sublayer

# the normal parts whose alpha = 0 surgery each fold replicates (sampling_intervals): LAPACK's Schur ordering and the
# polar normal part, which depends on no ordering; the two modulus orderings carry no interval (resdyn/stages/sampling.py)
FOLD_SURGERY_ORDERINGS = (SCHUR_ORDERING, POLAR_NORMAL)


def analyse_matrix(matrix):
    """A matrix reference (store.handles.MatrixReference) -> its SublayerSpectrum (Schur form kept for surgery),
    with the eigenvector condition number of the mean Jacobian (the polar normal part's conditioning, from the same
    Schur form; only layer_metrics records it)."""
    spectrum = analyse_sublayer(matrix.load())
    condition = eigenvector_condition_number(spectrum.schur_form)
    return dataclasses.replace(spectrum, metrics={**spectrum.metrics, "eigenvector_condition_number": condition})


def sample_metrics(matrix: np.ndarray) -> dict:
    """The layer_metrics of one per-sample matrix (values-only factorizations, no Schur form kept) and its
    numerical abscissa."""
    from resdyn.transient import numerical_abscissa

    return {**analyse_sublayer(matrix, keep_schur=False).metrics, "numerical_abscissa": numerical_abscissa(matrix)}


def metrics_of_matrix(matrix) -> dict:
    """A matrix reference -> :func:`sample_metrics` of that matrix."""
    return sample_metrics(matrix.load())


def transient_of_matrix(task: tuple):
    """(reference of J, reference of its real Schur form, ||J||_2, contour points, device) ->
    resdyn.transient.TransientDynamics of that matrix (with its pseudospectra grid when contour points > 0),
    from the real Schur form spectral_analysis stored: the matrix is not factored again."""
    from resdyn.transient import analyse_transient

    matrix, schur_form, spectral_norm, contour_points, device = task
    return analyse_transient(matrix.load(), contour_points=contour_points, device=device,
                             real_schur_form=schur_form.load(), spectral_norm=spectral_norm)


def fold_through_depth(task: tuple) -> list[dict]:
    """One fold carried through depth: (fold, [(reference of J, reference of J_k, n, n_k)] by depth) -> per depth the layer_metrics of the leave-one-fold-out mean J_(-k) = (n J - n_k J_k) /
    (n - n_k) (no alignment metrics, which no claim reads), the ranks of their product so far and, for each entry
    of FOLD_SURGERY_ORDERINGS ("surgery": {ordering: {rank: value}}), of the product of their alpha = 0 surgery.
    Each fold is independent of the others, so the folds run in parallel and nothing larger than one depth's
    numbers leaves the worker."""
    from resdyn.depth import RANK_DEFINITIONS, CumulativeProduct, SchurSurgery, rank_summary

    fold, steps = task
    product = CumulativeProduct()
    surgery = SchurSurgery((0.0,), orderings=FOLD_SURGERY_ORDERINGS, reordered_alphas=(0.0,))
    results = []
    for mean, of_fold, n, n_k in steps:
        matrix = (n * mean.load() - n_k * of_fold.load()) / (n - n_k)
        spectrum = analyse_sublayer(matrix, alignment=False)
        operated = surgery.push(spectrum.schur_form, spectrum.schur_basis)
        results.append({"metrics": spectrum.metrics, "cumulative": rank_summary(product.push(matrix)),
                        "surgery": {row["schur_ordering"]: {rank: row[rank] for rank in RANK_DEFINITIONS}
                                    for row in operated}})
        del matrix, spectrum
    return results
