"""The polar normal part N = U Lambda U^* (resdyn/normal_part.py) and its surgery, against an independent
complex reference: numpy.linalg.eig of J, unit columns, scipy.linalg.polar, eigenpairs in a random order with
random phases."""

from types import SimpleNamespace

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize

from resdyn import depth, normal_part, spectra
from resdyn.stages.workers import analyse_matrix


def _non_normal(rng, d):
    return np.eye(d) + rng.uniform(0.2, 0.6) * rng.normal(size=(d, d))


def _reference(jacobian, rng, unit_columns=True):
    """N = U Lambda U^* in complex arithmetic, written apart from resdyn: V from numpy.linalg.eig (LAPACK dgeev,
    not the Schur form's DTREVC), permuted and multiplied by random phases, U from scipy.linalg.polar."""
    eigenvalues, vectors = np.linalg.eig(jacobian)
    order = rng.permutation(len(eigenvalues))
    vectors = vectors[:, order] * np.exp(2j * np.pi * rng.random(len(order)))
    eigenvalues = eigenvalues[order]
    if unit_columns:
        vectors = vectors / np.linalg.norm(vectors, axis=0)
    else:
        vectors = vectors * rng.uniform(0.2, 5.0, len(order))  # lengths no longer 1
    unitary, _ = scipy.linalg.polar(vectors)
    return unitary @ np.diag(eigenvalues) @ unitary.conj().T


def _matched_distance(eigenvalues, reference):
    """The largest distance of a one-to-one matching of two spectra that minimises the total distance."""
    distance = np.abs(np.asarray(eigenvalues)[:, None] - np.asarray(reference)[None, :])
    rows, columns = scipy.optimize.linear_sum_assignment(distance)
    return distance[rows, columns].max()


def test_dtrevc_gives_the_eigenvectors_of_the_schur_form_in_lapack_real_storage(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    d = int(rng.integers(20, 61))
    form, _ = scipy.linalg.schur(_non_normal(rng, d), output="real")
    vectors = normal_part.quasi_triangular_eigenvectors(form)
    eigenvalues = spectra.eigenvalues_of_schur_form(form)
    complex_vectors = vectors.astype(np.complex128)
    pairs = [start for start, size in spectra.schur_blocks(form) if size == 2]
    assert pairs  # a Gaussian matrix of this width has complex pairs
    for start in pairs:
        assert eigenvalues[start].imag > 0 and eigenvalues[start + 1] == np.conj(eigenvalues[start])
        complex_vectors[:, start] = vectors[:, start] + 1j * vectors[:, start + 1]
        complex_vectors[:, start + 1] = vectors[:, start] - 1j * vectors[:, start + 1]
    residual = form @ complex_vectors - complex_vectors * eigenvalues
    assert np.linalg.norm(residual, axis=0).max() < 1e-12 * np.linalg.norm(form)
    assert np.linalg.norm(complex_vectors, axis=0).min() > 0.5  # each scaled to a largest element 1, none zero


def test_polar_normal_part_is_real_normal_and_keeps_the_spectrum(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    jacobian = _non_normal(rng, int(rng.integers(20, 61)))
    normal = normal_part.polar_normal_part(jacobian)
    assert normal.dtype == np.float64 and np.isrealobj(normal)
    commutator = np.linalg.norm(normal @ normal.T - normal.T @ normal)
    assert commutator <= 1e-12 * np.linalg.norm(normal) ** 2
    reference = np.linalg.eigvals(jacobian)
    assert _matched_distance(np.linalg.eigvals(normal), reference) <= 1e-10 * np.abs(reference).max()
    # ... and N is not J: J is far from normal
    assert np.linalg.norm(jacobian @ jacobian.T - jacobian.T @ jacobian) > 1e-2 * np.linalg.norm(jacobian) ** 2
    assert np.linalg.norm(normal - jacobian) > 1e-2 * np.linalg.norm(jacobian)


def test_polar_normal_part_depends_on_no_ordering_phase_or_path_but_on_the_unit_norm(fresh_seed):
    """Three orders of the eigenpairs along the Schur form's diagonal (whose Schur normal parts differ, as
    test_depth checks) and the independent complex path with a random order and random phases give one N; the
    complex path's N is real; with eigenvectors of other lengths the polar factor, and N, change."""
    rng = np.random.default_rng(fresh_seed)
    jacobian = _non_normal(rng, int(rng.integers(20, 61)))
    scale = np.linalg.norm(jacobian)
    form, basis = scipy.linalg.schur(jacobian, output="real")
    by_ordering = {key: normal_part.polar_normal_part_from_schur(*depth.reorder_real_schur(form, basis, key))
                   for key in depth.SCHUR_FORM_ORDERINGS}
    lapack = by_ordering[depth.SCHUR_ORDERING]
    ascending, _ = depth.reorder_real_schur(form, basis, depth.MODULUS_ASCENDING)
    assert not np.allclose(np.abs(spectra.eigenvalues_of_schur_form(ascending)),
                           np.abs(spectra.eigenvalues_of_schur_form(form)))  # the order did change
    for key, normal in by_ordering.items():
        assert np.linalg.norm(normal - lapack) <= 1e-12 * scale, key
    for _ in range(2):
        reference = _reference(jacobian, rng)
        assert np.abs(reference.imag).max() <= 1e-12 * scale
        assert np.linalg.norm(reference.real - lapack) <= 1e-12 * scale
    rescaled = _reference(jacobian, rng, unit_columns=False)
    assert np.linalg.norm(rescaled - lapack) > 1e-3 * scale


def test_a_normal_matrix_is_its_own_polar_normal_part(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    d = int(rng.integers(20, 61))
    blocks, row = np.zeros((d, d)), 0
    while row < d:  # real eigenvalues and rotation-scaling blocks [[a, b], [-b, a]]
        if row + 1 < d and rng.random() < 0.5:
            a, b = rng.normal(), rng.uniform(0.1, 2.0)
            blocks[row:row + 2, row:row + 2] = [[a, b], [-b, a]]
            row += 2
        else:
            blocks[row, row] = rng.normal()
            row += 1
    rotation = np.linalg.qr(rng.normal(size=(d, d)))[0]
    jacobian = rotation @ blocks @ rotation.T
    assert np.linalg.norm(jacobian @ jacobian.T - jacobian.T @ jacobian) < 1e-12 * np.linalg.norm(jacobian) ** 2
    np.testing.assert_allclose(normal_part.polar_normal_part(jacobian), jacobian, rtol=0,
                               atol=1e-12 * np.linalg.norm(jacobian))


def test_the_two_by_two_upper_triangular_case_has_its_closed_form(fresh_seed):
    """J = [[a, b], [0, c]], a != c: unit eigenvectors v1 = e1 and v2 = (b, c - a) / r, r = sqrt(b^2 + (a - c)^2),
    i.e. (cos t, sin t). The polar factor of two unit vectors at angle t is the orthogonal pair symmetric about
    their bisector, u1 = (cos p, sin p), u2 perpendicular, p = t/2 - pi/4 (sin t > 0, a rotation) or t/2 + pi/4
    (sin t < 0, a reflection). N = a u1 u1^T + c u2 u2^T = (a + c)/2 I + (a - c)/2 [[cos 2p, sin 2p], [sin 2p,
    -cos 2p]], and in both cases

        N = (a + c)/2 I + |a - c| / (2 r) [[a - c, b], [b, c - a]]:

    symmetric (real eigenvalues, orthogonal U), trace a + c, eigenvalues (a + c)/2 +- |a - c|/2 = a, c; diag(a, c)
    at b = 0."""
    rng = np.random.default_rng(fresh_seed)
    for _ in range(20):
        a, b, c = rng.normal(size=3) * rng.uniform(0.1, 10.0, 3)
        r = np.hypot(b, a - c)
        closed_form = (a + c) / 2 * np.eye(2) + abs(a - c) / (2 * r) * np.array([[a - c, b], [b, c - a]])
        normal = normal_part.polar_normal_part(np.array([[a, b], [0.0, c]]))
        np.testing.assert_allclose(normal, closed_form, rtol=0, atol=1e-13 * max(abs(a), abs(b), abs(c)))


def test_a_defective_matrix_warns_and_still_gets_a_normal_matrix_with_its_spectrum():
    jordan = np.array([[2.0, 5.0], [0.0, 2.0]])
    with pytest.warns(RuntimeWarning, match="not unique"):
        normal = normal_part.polar_normal_part(jordan)
    np.testing.assert_allclose(normal, 2 * np.eye(2), rtol=0, atol=1e-12)  # the one normal matrix with {2, 2}


def test_the_eigenpair_residual_is_the_move_of_an_eigenvalue(fresh_seed):
    """PolarNormalForm's residual is tiny for the eigenvalues N_T is built from, and equals |delta| when one
    eigenvalue passed (real, or a pair's real or imaginary part) is off by delta."""
    rng = np.random.default_rng(fresh_seed)
    odd = 2 * int(rng.integers(10, 30)) + 1  # an odd width: a real eigenvalue for certain
    form, _ = scipy.linalg.schur(_non_normal(rng, odd), output="real")
    polar = normal_part.polar_normal_form(form)
    assert polar.eigenpair_residual < 1e-12 * np.linalg.norm(form)
    np.testing.assert_allclose(polar.polar_factor.T @ polar.polar_factor, np.eye(len(form)), rtol=0, atol=1e-12)
    blocks = spectra.schur_blocks(form)
    single = next(start for start, size in blocks if size == 1)
    pair = next(start for start, size in blocks if size == 2)
    delta = 10 ** rng.uniform(-6, -2)
    moves = {"a real eigenvalue": [(single, single, delta)],
             "a pair's real part": [(pair, pair, delta), (pair + 1, pair + 1, delta)],
             "a pair's imaginary part": [(pair, pair + 1, delta), (pair + 1, pair, -delta)]}  # [[a, b], [-b, a]]
    for what, changes in moves.items():
        moved = polar.blocks.copy()
        for i, j, amount in changes:
            moved[i, j] += amount
        residual = normal_part.max_eigenpair_residual(polar.normal_form, polar.polar_factor, moved)
        assert residual == pytest.approx(delta, rel=1e-6), what


def _through_depth(rng, d, layers, alphas=(0.0, 1.0)):
    jacobians = [_non_normal(rng, d) for _ in range(layers)]
    surgery = depth.SchurSurgery((), orderings=(depth.POLAR_NORMAL,), reordered_alphas=alphas)
    measured, rows, steps = depth.CumulativeProduct(), [], []
    for jacobian in jacobians:
        rows += surgery.push(*scipy.linalg.schur(jacobian, output="real"))
        steps.append(depth.rank_summary(measured.push(jacobian)))
    return jacobians, surgery, measured, rows, steps


def test_polar_surgery_at_one_is_the_measured_product_and_at_zero_the_product_of_the_normal_parts(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    jacobians, surgery, measured, rows, steps = _through_depth(rng, int(rng.integers(16, 33)), 5)
    assert {(row["schur_ordering"], row["alpha"], row["block_rule"]) for row in rows} == {
        ("polar-normal", 0.0, "polar"), ("polar-normal", 1.0, "polar")}
    identity = [row for row in rows if row["alpha"] == 1.0]
    for row, step in zip(identity, steps, strict=True):
        assert row["depth"] == step["depth"] and row["numerical_rank"] == step["numerical_rank"]
        for name in ("effective_rank", "participation_ratio", "stable_rank", "log_sigma_max"):
            assert row[name] == pytest.approx(step[name], rel=1e-9, abs=1e-12)
        assert row["max_eigenvalue_drift"] == 0.0
    np.testing.assert_allclose(surgery.chains["polar-normal", 1.0].product, measured.product, rtol=0, atol=1e-10)
    reference = depth.CumulativeProduct()
    normal_rows = [row for row in rows if row["alpha"] == 0.0]
    for row, jacobian in zip(normal_rows, jacobians, strict=True):
        expected = depth.rank_summary(reference.push(_reference(jacobian, rng).real))
        for name in ("effective_rank", "participation_ratio", "stable_rank", "log_sigma_max"):
            assert row[name] == pytest.approx(expected[name], rel=1e-9)
        assert 0.0 < row["max_eigenvalue_drift"] < 1e-12 * np.linalg.norm(jacobian)
    # and the normal parts' product is not the measured one
    assert normal_rows[-1]["effective_rank"] != pytest.approx(steps[-1]["effective_rank"], rel=1e-3)


def test_polar_surgery_between_zero_and_one_reports_how_far_the_spectrum_moved(fresh_seed):
    """J(alpha) = N + alpha (J - N) keeps the spectrum only at the ends; in between the row's drift is the
    Hausdorff distance between its spectrum and J's, computed here from the matrices in J's basis."""
    rng = np.random.default_rng(fresh_seed)
    jacobians, surgery, _, rows, _ = _through_depth(rng, 20, 1, alphas=(0.5,))
    jacobian = jacobians[0]
    normal = _reference(jacobian, rng).real
    operated = normal + 0.5 * (jacobian - normal)
    np.testing.assert_allclose(surgery.chains["polar-normal", 0.5].product * np.exp(surgery.chains[
        "polar-normal", 0.5].log_scale), operated, rtol=0, atol=1e-10 * np.linalg.norm(jacobian))
    moved, original = np.linalg.eigvals(operated), np.linalg.eigvals(jacobian)
    distance = np.abs(moved[:, None] - original[None, :])
    hausdorff = max(distance.min(axis=1).max(), distance.min(axis=0).max())
    assert hausdorff > 1e-3
    assert rows[0]["max_eigenvalue_drift"] == pytest.approx(hausdorff, rel=1e-6)


class _Loaded:
    """A matrix reference (store.handles.MatrixReference's protocol) of a matrix already in memory."""

    def __init__(self, matrix):
        self.matrix = matrix

    def load(self):
        return self.matrix


def test_each_fold_replicates_the_polar_normal_surgery(fresh_seed):
    """fold_through_depth (the sampling stage's worker) returns the alpha = 0 ranks under LAPACK's ordering and the
    polar normal part, each that of the product of the leave-one-fold-out means' normal parts."""
    from resdyn.stages import workers as spectral_worker

    rng = np.random.default_rng(fresh_seed)
    d, layers, n, n_k = 12, 3, 10, 4
    matrices = {("means", k): _non_normal(rng, d) for k in range(layers)}
    matrices.update({("folds", k): _non_normal(rng, d) for k in range(layers)})
    results = spectral_worker.fold_through_depth(
        (0, [(_Loaded(matrices[("means", k)]), _Loaded(matrices[("folds", k)]), n, n_k) for k in range(layers)]))
    assert spectral_worker.FOLD_SURGERY_ORDERINGS == ("lapack-default", "polar-normal")
    polar, lapack = depth.CumulativeProduct(), depth.CumulativeProduct()
    for k, result in enumerate(results):
        leave_one_out = (n * matrices[("means", k)] - n_k * matrices[("folds", k)]) / (n - n_k)
        expected_polar = depth.rank_summary(polar.push(_reference(leave_one_out, rng).real))
        expected_lapack = depth.rank_summary(lapack.push(depth.SchurDecomposition.of(leave_one_out).operated(0.0)))
        assert set(result["surgery"]) == {"lapack-default", "polar-normal"}
        for rank in depth.RANK_DEFINITIONS:
            assert result["surgery"]["polar-normal"][rank] == pytest.approx(expected_polar[rank], rel=1e-9)
            assert result["surgery"]["lapack-default"][rank] == pytest.approx(expected_lapack[rank], rel=1e-9)


def test_the_eigenvector_condition_number_is_that_of_numpys_unit_eigenvectors(fresh_seed):
    """kappa(V) from the Schur form's DTREVC vectors against numpy.linalg.eig's (LAPACK dgeev) unit columns, with
    complex pairs; it does not depend on the Schur basis, and the polar construction reports the same number."""
    rng = np.random.default_rng(fresh_seed)
    for _ in range(5):
        d = int(rng.integers(10, 80))
        jacobian = _non_normal(rng, d)
        _, vectors = np.linalg.eig(jacobian)
        reference = np.linalg.cond(vectors / np.linalg.norm(vectors, axis=0))
        schur_form, _ = scipy.linalg.schur(jacobian, output="real")
        condition = normal_part.eigenvector_condition_number(schur_form)
        assert condition == pytest.approx(reference, rel=1e-8)
        assert normal_part.polar_normal_form(schur_form).eigenvector_condition == pytest.approx(condition, rel=1e-12)
        spectrum = analyse_matrix(SimpleNamespace(load=lambda matrix=jacobian: matrix))  # the spectral stage's unit of work
        assert spectrum.metrics["eigenvector_condition_number"] == pytest.approx(reference, rel=1e-8)
        assert "eigenvector_condition_number" not in spectra.analyse_sublayer(jacobian).metrics  # per-sample: not asked


def test_the_eigenvector_condition_number_has_its_two_by_two_closed_form_and_is_one_for_normal_matrices(fresh_seed):
    """J = [[a, b], [0, c]], a != c: unit eigenvectors e1 and (b, c - a) / r at cos t = b / r, r = sqrt(b^2 +
    (a - c)^2); V^T V = [[1, cos t], [cos t, 1]] has eigenvalues 1 +- |cos t|, so kappa(V) = sqrt((1 + |cos t|) /
    (1 - |cos t|)). A normal matrix with distinct eigenvalues has orthonormal unit eigenvectors: kappa = 1."""
    rng = np.random.default_rng(fresh_seed)
    for _ in range(20):
        a, b, c = rng.normal(size=3) * rng.uniform(0.1, 10.0, 3)
        cosine = abs(b) / np.hypot(b, a - c)
        closed_form = np.sqrt((1 + cosine) / (1 - cosine))
        schur_form, _ = scipy.linalg.schur(np.array([[a, b], [0.0, c]]), output="real")
        assert normal_part.eigenvector_condition_number(schur_form) == pytest.approx(closed_form, rel=1e-10)
    d = int(rng.integers(10, 50))
    rotation = np.linalg.qr(rng.normal(size=(d, d)))[0]
    schur_form, _ = scipy.linalg.schur(rotation, output="real")
    assert normal_part.eigenvector_condition_number(schur_form) == pytest.approx(1.0, abs=1e-10)
