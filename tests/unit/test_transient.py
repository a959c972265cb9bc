"""Transient dynamics against known answers (Trefethen & Embree 2005) and independent brute force."""

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize

from resdyn import transient


@pytest.fixture
def rng(fresh_seed):
    return np.random.default_rng(fresh_seed)


def random_normal_matrix(rng, d: int) -> np.ndarray:
    """Q diag(blocks) Q^T with real eigenvalues and rotation-scale 2x2 blocks: normal, not symmetric."""
    blocks = []
    while sum(len(b) for b in blocks) < d:
        if d - sum(len(b) for b in blocks) >= 2 and rng.random() < 0.5:
            radius, angle = rng.uniform(0.2, 1.5), rng.uniform(0.1, 3.0)
            blocks.append(radius * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]]))
        else:
            blocks.append(np.array([[rng.uniform(-1.5, 1.5)]]))
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return q @ scipy.linalg.block_diag(*blocks) @ q.T


def brute_force_numerical_radius(matrix, angles: int = 20000) -> float:
    hermitian, skew = (matrix + matrix.T) / 2, (matrix - matrix.T) / 2
    return max(np.linalg.eigvalsh(np.cos(t) * hermitian + 1j * np.sin(t) * skew)[-1]
               for t in np.linspace(0, 2 * np.pi, angles, endpoint=False))


def test_two_by_two_field_of_values_is_the_closed_form_disc(rng):
    """W([[a, b], [0, a]]) is the disc of centre a, radius |b|/2: w = |a| + |b|/2, omega = a + |b|/2."""
    a, b = rng.uniform(-2, 2), rng.uniform(-3, 3)
    matrix = np.array([[a, b], [0.0, a]])
    radius = transient.numerical_radius(matrix)
    exact = abs(a) + abs(b) / 2
    assert radius.lower <= exact * (1 + 1e-12) and exact <= radius.upper * (1 + 1e-12)
    assert radius.upper - radius.lower <= 1e-6 * exact
    assert transient.numerical_abscissa(matrix) == pytest.approx(a + abs(b) / 2, abs=1e-12)


def test_numerical_radius_brackets_brute_force_and_iterative_paths_agree(rng):
    matrix = rng.standard_normal((24, 24)) / np.sqrt(24)
    reference = brute_force_numerical_radius(matrix)
    dense = transient.numerical_radius(matrix)
    # the brute-force grid (spacing 3e-4) is itself a lower bound, within w (1 - cos 1.6e-4) ~ 1.3e-8 w
    assert dense.lower <= reference * (1 + 1e-7) and reference <= dense.upper * (1 + 1e-12)
    assert dense.upper / dense.lower - 1 <= 1e-6
    lanczos = transient.numerical_radius(matrix, dense_limit=4)
    assert lanczos.lower <= reference * (1 + 1e-7) and reference <= lanczos.upper * (1 + 1e-12)
    assert lanczos.lower == pytest.approx(dense.lower, rel=2e-6)
    # the bracket is certified whatever the first grid: the former 17-angle start lands within the tolerance
    for start in (3, 17):
        other = transient.numerical_radius(matrix, initial_angles=start)
        assert other.lower <= dense.upper * (1 + 1e-12) and dense.lower <= other.upper * (1 + 1e-12)
        assert other.lower == pytest.approx(dense.lower, rel=1e-6)
    assert transient.numerical_abscissa(matrix, dense_limit=4) == pytest.approx(
        np.linalg.eigvalsh((matrix + matrix.T) / 2)[-1], abs=1e-10)


def test_normal_matrix_pseudospectrum_is_the_union_of_eps_discs(rng):
    matrix = random_normal_matrix(rng, 20)
    eigenvalues = np.linalg.eigvals(matrix)
    rho = np.abs(eigenvalues).max()
    result = transient.analyse_transient(matrix)
    for epsilon, radius in result.pseudospectral_radii.items():
        assert radius == pytest.approx(rho + epsilon, rel=1e-8)
    assert result.numerical_radius == pytest.approx(rho, rel=1e-6)  # w(A) = rho(A) for normal A
    assert result.numerical_abscissa == pytest.approx(eigenvalues.real.max(), abs=1e-10)
    assert result.kreiss_lower_bound == pytest.approx(max((rho + e - 1) / e for e in transient.PSEUDOSPECTRAL_EPSILONS))


def test_jordan_block_pseudospectral_radius_and_powers(rng):
    n = int(rng.integers(4, 9))
    jordan = np.eye(n, k=1)
    schur = transient.ShiftedSchur(jordan)
    for epsilon in (1e-3, 1e-2, 1e-1):
        # the pseudospectra of J_n(0) are discs (J and e^{i t} J are unitarily similar), so along the real axis:
        reference = scipy.optimize.brentq(
            lambda r, e=epsilon: np.linalg.svd(r * np.eye(n) - jordan, compute_uv=False)[-1] - e, 0, 3, xtol=1e-15)
        assert schur.pseudospectral_radius(epsilon) == pytest.approx(reference, rel=1e-8)
        # ||(rI - J)^{-1}|| lies between its largest entry r^-n and its column sum sum_k r^-k (r < 1), so
        # r^n (1 - r) / (1 - r^n) <= eps <= r^n at r = rho_eps: rho_eps ~ eps^(1/n) (T&E 7)
        assert epsilon ** (1 / n) <= reference and reference ** n * (1 - reference) / (1 - reference ** n) <= epsilon
    growth = {g.window: g for g in transient.transient_growth([jordan] * (n + 2), [0.0] * (n + 2),
                                                               windows=range(1, n + 2), full_depth=False)
              if g.start_depth == 0}
    for k, window in growth.items():  # J^k has ones on the k-th superdiagonal: norm 1 for k < n, then 0
        assert window.product_norm == pytest.approx(1.0 if k < n else 0.0, abs=1e-12)
        assert window.spectral_radius_product == 0.0


def test_powers_of_a_two_by_two_grow_as_the_closed_form(rng):
    """A^k = [[a^k, k a^(k-1) b], [0, a^k]]; ||[[p, q], [0, p]]||_2 = (|q| + sqrt(q^2 + 4 p^2)) / 2."""
    a, b = rng.uniform(0.5, 0.95), rng.uniform(2, 10)
    matrix = np.array([[a, b], [0.0, a]])
    depth = 12
    rows = list(transient.transient_growth([matrix] * depth, [a] * depth))
    assert {(r.window, r.start_depth) for r in rows} == \
        {(k, s) for k in (1, 2, 4, 8) for s in range(depth - k + 1)} | {(depth, 0)}
    for row in rows:
        k = row.window
        p, q = a ** k, k * a ** (k - 1) * b
        assert row.product_norm == pytest.approx((abs(q) + np.sqrt(q * q + 4 * p * p)) / 2, rel=1e-12)
        assert row.spectral_radius_product == pytest.approx(a ** k, rel=1e-12)
        assert row.growth_beyond_spectrum > 1


def test_growth_of_random_chains_matches_explicit_products_on_both_paths(rng):
    d, depth = 20, 10
    chain = [np.eye(d) + rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(depth)]
    radii = [np.abs(np.linalg.eigvals(m)).max() for m in chain]
    for dense_limit in (transient.DENSE_LIMIT, 4):
        for row in transient.transient_growth(chain, radii, dense_limit=dense_limit):
            product = np.eye(d)
            for m in chain[row.start_depth : row.start_depth + row.window]:
                product = m @ product
            assert row.product_norm == pytest.approx(np.linalg.norm(product, 2), rel=1e-9)
            assert row.spectral_radius_product == pytest.approx(np.prod(radii[row.start_depth:][:row.window]))


def test_inverse_iteration_matches_dense_singular_values(rng):
    matrix = rng.standard_normal((30, 30)) / np.sqrt(30)
    dense, iterative = transient.ShiftedSchur(matrix), transient.ShiftedSchur(matrix, dense_limit=4)
    for z in rng.standard_normal(5) + 1j * rng.standard_normal(5):
        assert iterative.smallest_singular_value(z) == pytest.approx(
            np.linalg.svd(z * np.eye(30) - matrix, compute_uv=False)[-1], rel=1e-8)
    assert iterative.pseudospectral_radius(1e-2) == pytest.approx(dense.pseudospectral_radius(1e-2), rel=1e-7)


def test_ginibre_matrices_are_more_non_normal_than_normal_ones_as_theory_says(rng):
    d = 32
    ginibre = rng.standard_normal((d, d)) / np.sqrt(d)
    normal = random_normal_matrix(rng, d)
    g, n = transient.analyse_transient(ginibre), transient.analyse_transient(normal)
    # normal: w = rho and rho_eps = rho + eps; Ginibre (departure ~ ||A||_F / sqrt 2): both strictly above
    assert n.numerical_radius == pytest.approx(n.spectral_radius, rel=1e-6)
    assert g.numerical_radius > 1.1 * g.spectral_radius
    for epsilon in transient.PSEUDOSPECTRAL_EPSILONS:
        assert n.pseudospectral_radii[epsilon] - n.spectral_radius == pytest.approx(epsilon, abs=1e-8)
        assert g.pseudospectral_radii[epsilon] - g.spectral_radius > epsilon
    # always: rho <= w <= ||A|| <= 2 w, and omega <= w
    for result in (g, n):
        assert result.spectral_radius <= result.numerical_radius * (1 + 1e-9)
        assert result.numerical_radius <= result.spectral_norm * (1 + 1e-9) <= 2 * result.numerical_radius_upper
        assert result.numerical_abscissa <= result.numerical_radius_upper


def test_shifted_schur_factor_goes_to_lapack_without_a_copy(fresh_seed):
    """Guard: z I - T stays Fortran-ordered, since LAPACK's triangular solve copies (transposes) a C-ordered
    matrix, which at d = 4096 costs 30x the solve itself at every Lanczos step; sigma_min matches a dense SVD."""
    rng = np.random.default_rng(fresh_seed)
    matrix = np.eye(120) + 0.5 * rng.standard_normal((120, 120)) / np.sqrt(120)
    schur = transient.ShiftedSchur(matrix)
    z = complex(rng.uniform(0.5, 1.5), rng.uniform(-0.5, 0.5))
    assert schur.shifted(z).flags.f_contiguous
    # the buffer the solves use: Fortran-ordered, and z I - T exactly, however many points came before
    for point in (z, 0.0, 2.0 - 1j, z):
        assert schur._shifted_in_place(point).flags.f_contiguous
        assert np.array_equal(schur._shifted_in_place(point), schur.shifted(point))
    expected = np.linalg.svd(z * np.eye(120) - matrix, compute_uv=False)[-1]
    assert schur.smallest_singular_value(z) == pytest.approx(expected, rel=1e-8)


def test_transient_from_the_spectral_stages_schur_form_equals_a_fresh_factorization(fresh_seed):
    """The transient stage reads the real Schur form and ||J||_2 that resdyn.spectra computed instead of
    factoring J again: every scalar it writes equals the standalone path's to 1e-10 relative, at d = 256
    (the Lanczos path for sigma_min), on a near-identity, a Ginibre and a strongly non-normal matrix."""
    from resdyn.spectra import analyse_sublayer

    rng = np.random.default_rng(fresh_seed)
    d = 256
    near_identity = np.eye(d) + rng.standard_normal((d, d)) / (2 * np.sqrt(d))
    ginibre = rng.standard_normal((d, d)) / np.sqrt(d)
    low_rank = np.eye(d) + 3 * rng.standard_normal((d, 4)) @ rng.standard_normal((4, d)) / d
    for matrix in (near_identity, ginibre, low_rank):
        spectrum = analyse_sublayer(matrix)
        standalone = transient.analyse_transient(matrix)
        shared = transient.analyse_transient(matrix, real_schur_form=spectrum.schur_form,
                                             spectral_norm=spectrum.singular_values[0])
        for field in ("spectral_radius", "spectral_norm", "numerical_abscissa", "numerical_abscissa_j_minus_i",
                      "numerical_radius", "numerical_radius_upper", "kreiss_lower_bound"):
            assert getattr(shared, field) == pytest.approx(getattr(standalone, field), rel=1e-10, abs=1e-12), field
        for epsilon, radius in standalone.pseudospectral_radii.items():
            assert shared.pseudospectral_radii[epsilon] == pytest.approx(radius, rel=1e-10)
        # the complex form read off T is the one a fresh factorization gives, and it is A's (A = Q U Q*)
        fresh, _ = scipy.linalg.rsf2csf(*scipy.linalg.schur(matrix, output="real"))
        assert np.array_equal(transient.complex_schur_of_real_schur(spectrum.schur_form), fresh)
        # as the warehouse returns it (C-ordered rows): the same complex form
        assert np.array_equal(transient.complex_schur_of_real_schur(np.ascontiguousarray(spectrum.schur_form)), fresh)
    with pytest.raises(ValueError, match="does not belong"):
        transient.ShiftedSchur(near_identity, real_schur_form=np.eye(d - 1))
    # a Schur form left from Jacobians that were remeasured since is refused, naming the fix
    stale = analyse_sublayer(ginibre).schur_form
    with pytest.raises(ValueError, match="rematerialize spectral_analysis"):
        transient.analyse_transient(near_identity, real_schur_form=stale, spectral_norm=1.0)
    with pytest.raises(ValueError, match="at least 3"):
        transient.numerical_radius(near_identity, initial_angles=2)


def test_growth_with_known_norms_equals_the_computed_ones(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    chain = [np.eye(40) + rng.standard_normal((40, 40)) / 10 for _ in range(5)]
    radii = [float(np.abs(np.linalg.eigvals(m)).max()) for m in chain]
    norms = [float(np.linalg.svd(m, compute_uv=False)[0]) for m in chain]
    computed = list(transient.transient_growth(chain, radii))
    known = list(transient.transient_growth(chain, radii, spectral_norms=norms))
    assert [(g.start_depth, g.window) for g in known] == [(g.start_depth, g.window) for g in computed]
    for a, b in zip(known, computed):
        assert a.product_norm == pytest.approx(b.product_norm, rel=1e-12)


def test_complex_lanczos_sigma_min_equals_arpack_and_a_dense_svd(fresh_seed, monkeypatch):
    """sigma_min(z I - A) by the complex Lanczos (warm-started, ARPACK's residual criterion) equals a dense SVD
    to 1e-10 and ARPACK's real-embedding path; the pseudospectral radii of both paths agree to RADIAL_TOLERANCE's
    order, at d = 200 (above DENSE_SVD_LIMIT, so neither path is the dense one)."""
    rng = np.random.default_rng(fresh_seed)
    d = 200
    matrix = np.eye(d) + rng.standard_normal((d, d)) / (2 * np.sqrt(d))
    points = 1.0 + 0.8 * (rng.standard_normal(6) + 1j * rng.standard_normal(6))
    radii = {}
    for backend in ("complex", "arpack"):
        monkeypatch.setattr(transient, "LANCZOS_BACKEND", backend)
        schur = transient.ShiftedSchur(matrix)
        assert not schur.dense
        for z in points:
            sigma, u, v = schur.smallest_singular_triple(z)
            reference = np.linalg.svd(z * np.eye(d) - matrix, compute_uv=False)[-1]
            assert sigma == pytest.approx(reference, rel=1e-10), (backend, z)
            shifted = schur.shifted(z)  # the pair belongs to z I - T (Schur basis)
            assert np.linalg.norm(shifted @ v - sigma * u) <= 1e-12 * sigma
            assert np.linalg.norm(shifted.conj().T @ u - sigma * v) <= 1e-4 * sigma
        radii[backend] = schur.pseudospectral_radii((1e-3, 1e-1))
    for epsilon, radius in radii["arpack"].items():
        assert radii["complex"][epsilon] == pytest.approx(radius, rel=1e-8)
