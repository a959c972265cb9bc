"""The per-sublayer unit of spectral work, importable by worker processes without Dagster."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from resdyn.dagster_project.store.arrow_tables import matrix_rows
from resdyn.spectra import analyse_sublayer


def read_matrix(path: str, row_group: int) -> np.ndarray:
    """One matrix (one row group) of a matrix table, rows in order."""
    data = pq.ParquetFile(path).read_row_group(row_group, columns=["row", "values"])
    values = matrix_rows(data.column("values"))
    rows = data.column("row").to_numpy()
    return np.asarray(values if np.array_equal(rows, np.arange(len(rows))) else values[np.argsort(rows)],
                      dtype=np.float64)


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


def leave_one_out_of_row_groups(task: tuple) -> tuple[list, list[int]]:
    """(jacobians file, its row group, folds file, the fold row groups, fold counts) -> ([J_(-k)], counts): the
    leave-one-fold-out means of one sublayer (resdyn.sampling.leave_one_out_means)."""
    from resdyn.sampling import leave_one_out_means

    path, row_group, folds_path, fold_row_groups, counts = task
    folds = [read_matrix(folds_path, index) for index in fold_row_groups]
    return leave_one_out_means(read_matrix(path, row_group), folds, counts), counts


def fold_metrics_of_row_groups(task: tuple) -> list:
    """The SublayerSpectrum (Schur form and basis kept, for the surgery; no alignment metrics, which no claim reads)
    of every leave-one-fold-out mean of one sublayer (:func:`leave_one_out_of_row_groups`), and the noise-to-signal
    ratio of its mean."""
    from resdyn.sampling import noise_to_signal

    leave_one_out, _ = leave_one_out_of_row_groups(task)
    path, row_group = task[0], task[1]
    ratio = noise_to_signal(read_matrix(path, row_group), leave_one_out)
    return [analyse_sublayer(matrix, alignment=False) for matrix in leave_one_out], ratio
