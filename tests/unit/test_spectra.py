"""Spectral metrics on METHODS.md's known answers and against independent references."""

import numpy as np
import pytest
import scipy.linalg

from resdyn import spectra


@pytest.mark.parametrize("matrix, expected", [
    ([[1, 1], [0, 1]], 1.0),
    ([[1, 2], [0, 3]], 2.0),
    (np.eye(5, k=1), 2.0),
    ([[0, 4], [-1, 0]], 3.0),
    ([[2, 1], [1, 2]], 0.0),
    ([[np.cos(0.3), -np.sin(0.3)], [np.sin(0.3), np.cos(0.3)]], 0.0),
])
def test_henrici_known_answers(matrix, expected):
    assert spectra.henrici_departure(matrix) == pytest.approx(expected, abs=1e-12)


def test_henrici_normalisations():
    jordan = np.array([[1.0, 1.0], [0.0, 1.0]])
    metrics = spectra.sublayer_metrics(jordan, k=1)
    assert metrics["henrici_rel_j"] == pytest.approx(1 / np.sqrt(3), abs=1e-12)  # 0.577
    shift = np.eye(5, k=1)
    assert spectra.henrici_departure(shift) / np.linalg.norm(shift) == pytest.approx(1.0)


def test_henrici_matches_the_complex_schur_form_and_survives_tiny_departures(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    a = rng.normal(size=(40, 40))
    schur_form, _ = scipy.linalg.schur(a.astype(complex), output="complex")
    reference = np.linalg.norm(np.triu(schur_form, 1))
    assert spectra.henrici_departure(a) == pytest.approx(reference, rel=1e-10)
    # a normal matrix plus a 1e-9 non-normal nudge: subtraction of moduli would return noise
    q, _ = np.linalg.qr(rng.normal(size=(30, 30)))
    upper = np.triu(rng.normal(size=(30, 30)), 1)
    nudged = q @ (np.diag(rng.normal(size=30)) + 1e-9 * upper) @ q.T
    assert spectra.henrici_departure(nudged) == pytest.approx(1e-9 * np.linalg.norm(upper), rel=1e-3)


def test_spectral_fractions():
    rotation = scipy.linalg.block_diag([[0.0, -2.0], [2.0, 0.0]], [[0.5]], [[1.0]])
    eigenvalues = np.linalg.eigvals(rotation)
    assert spectra.complex_fraction(eigenvalues) == pytest.approx(0.5)
    assert spectra.expanding_fraction(eigenvalues) == pytest.approx(0.5)
    assert spectra.neutral_fraction(eigenvalues) == pytest.approx(0.25)
    # a defective double eigenvalue splits by ~1e-8: not a rotation at the 1e-6 tolerance
    defective = np.linalg.eigvals(np.array([[1.0, 1.0], [1e-16, 1.0]]))
    assert spectra.complex_fraction(defective) == 0.0


def test_conditioning():
    assert spectra.condition_number([4.0, 2.0, 0.5]) == 8.0
    assert spectra.condition_number([1.0, 1e-20]) == np.inf
    assert spectra.log10_condition([1.0, 1e-20]) == pytest.approx(20.0)


def test_alignment_known_answers(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    x = rng.normal(size=(8, 8))
    assert spectra.subspace_overlap(x @ x.T, k=3) == pytest.approx(1.0)
    rotated = np.array([[0.0, -1.0], [1.0, 0.0]]) @ np.diag([3.0, 1.0])
    assert spectra.subspace_overlap(rotated, k=1) == pytest.approx(0.0, abs=1e-12)
    skew = scipy.linalg.block_diag(*[[[0.0, -s], [s, 0.0]] for s in (3.0, 2.0, 1.0)])
    assert spectra.subspace_overlap(skew, k=2) == pytest.approx(1.0)
    assert spectra.signed_alignment(skew, k=2) == pytest.approx(0.0, abs=1e-12)
    assert spectra.signed_alignment(x @ x.T, k=3) == pytest.approx(1.0)
    # self-alignment is of J - I
    assert spectra.self_alignment(np.eye(8) + x @ x.T, k=3) == pytest.approx(1.0)


def test_ranks_known_answers():
    identity = np.ones(10)
    for rank in (spectra.effective_rank, spectra.participation_ratio, spectra.stable_rank):
        assert rank(identity) == pytest.approx(10.0)
    assert spectra.numerical_rank(identity) == 10
    assert spectra.effective_rank([3.0, 1.0]) == pytest.approx(1.7548, abs=1e-4)
    assert spectra.participation_ratio([3.0, 1.0]) == pytest.approx(1.2195, abs=1e-4)
    assert spectra.stable_rank([3.0, 1.0]) == pytest.approx(1.1111, abs=1e-4)
    assert spectra.numerical_rank([1.0, 1e-3, 1e-20]) == 2


def test_sublayer_metrics_agree_with_numpy(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    jacobian = np.eye(24) + 0.3 * rng.normal(size=(24, 24))
    metrics = spectra.sublayer_metrics(jacobian)
    assert metrics["spectral_radius"] == pytest.approx(np.abs(np.linalg.eigvals(jacobian)).max())
    assert metrics["condition_number"] == pytest.approx(np.linalg.cond(jacobian))
    assert metrics["stable_rank"] == pytest.approx(np.linalg.norm(jacobian) ** 2 / np.linalg.norm(jacobian, 2) ** 2)
    assert metrics["frac_complex_schur"] == pytest.approx(metrics["frac_complex"])
    assert metrics["self_alignment_k"] == 6
    symmetric = spectra.sublayer_metrics(np.eye(24) + 0.1 * (jacobian + jacobian.T))
    assert symmetric["operator_type"] == "near_symmetric" and symmetric["henrici"] < 1e-10
    assert symmetric["operator_type_henrici"] == "near_normal"
    skew = spectra.sublayer_metrics(np.eye(24) + np.triu(rng.normal(size=(24, 24)), 1) * 2 - np.eye(24, k=-1) * 3)
    assert skew["operator_type_henrici"] in ("rotational_non_normal", "other")
    assert skew["operator_type"] in ("rotation_dominated", "other")
    with pytest.raises(FloatingPointError, match="rematerialize"):
        spectra.sublayer_metrics(np.full((3, 3), np.nan))


def test_lanczos_top_singular_triplets_and_basis_free_schur_match_the_dense_path(fresh_seed, monkeypatch):
    """At paper scale the alignment metrics use a Lanczos top-k SVD of J - I and the per-sample metrics a
    Schur form without its basis: both give the dense path's metrics (reference: numpy's full SVD and
    scipy.linalg.schur), here forced at d = 160 by lowering the width threshold."""
    rng = np.random.default_rng(fresh_seed)
    d = 160
    jacobian = np.eye(d) + rng.normal(size=(d, d)) / np.sqrt(d) + np.diag(rng.uniform(0, 2, d))
    reference = spectra.sublayer_metrics(jacobian)
    u, s, vt = np.linalg.svd(jacobian - np.eye(d))
    monkeypatch.setattr(spectra, "TRUNCATED_SVD_MIN_WIDTH", 64)
    top_u, top_s, top_vt = spectra.top_singular_triplets(jacobian - np.eye(d), 32)
    np.testing.assert_allclose(top_s, s[:32], rtol=1e-12)
    np.testing.assert_allclose(np.abs(np.sum(top_u * u[:, :32], axis=0)), 1.0, atol=1e-9)  # same vectors up to sign
    np.testing.assert_allclose(np.sum(top_u * u[:, :32], axis=0), np.sum(top_vt * vt[:32], axis=1), atol=1e-9)
    form, basis = spectra.real_schur_form(jacobian, with_basis=False)
    assert basis is None
    np.testing.assert_allclose(np.sort_complex(spectra.eigenvalues_of_schur_form(form)),
                               np.sort_complex(scipy.linalg.eigvals(jacobian)), atol=1e-10)
    with_basis, _ = scipy.linalg.schur(jacobian, output="real")
    assert spectra.departure_of_schur_form(form) == pytest.approx(spectra.departure_of_schur_form(with_basis),
                                                                   rel=1e-10)
    truncated = spectra.sublayer_metrics(jacobian)
    for name, value in reference.items():
        if isinstance(value, str):
            assert truncated[name] == value
        else:
            assert truncated[name] == pytest.approx(value, rel=1e-10, abs=1e-12), name


def _rotation_generator(rng, d: int) -> np.ndarray:
    """A real normal matrix whose eigenvalues are all imaginary pairs: Q blockdiag([[0, -w], [w, 0]]) Q^T."""
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    blocks = scipy.linalg.block_diag(*[[[0.0, -w], [w, 0.0]] for w in rng.uniform(0.1, 1.0, d // 2)])
    return q @ blocks @ q.T


def test_symmetry_and_rotation_measures_known_answers(fresh_seed):
    """Symmetric update: asymmetry 0, rotation 0. A rotation generator (normal, skew): Henrici 0 but asymmetry 1
    and rotation share 1, where the Henrici rule alone calls it near-normal."""
    rng = np.random.default_rng(fresh_seed)
    d = 40
    x = rng.normal(size=(d, d))
    symmetric_update = 0.2 * (x + x.T)
    metrics = spectra.sublayer_metrics(np.eye(d) + symmetric_update)
    assert metrics["asymmetry_index"] == pytest.approx(0.0, abs=1e-15)
    assert metrics["rotation_share"] == pytest.approx(0.0, abs=1e-12)
    assert metrics["operator_type"] == "near_symmetric"
    assert metrics["update_size"] == pytest.approx(np.linalg.norm(symmetric_update) / np.linalg.norm(np.eye(d) + symmetric_update))
    generator = _rotation_generator(rng, d)
    rotating = spectra.sublayer_metrics(np.eye(d) + generator)
    assert rotating["henrici"] == pytest.approx(0.0, abs=1e-10)
    assert rotating["asymmetry_index"] == pytest.approx(1.0, rel=1e-12)
    assert rotating["rotation_share"] == pytest.approx(1.0, rel=1e-10)
    assert rotating["operator_type"] == "rotation_dominated"
    assert rotating["operator_type_henrici"] == "other"  # normal but all complex: the Henrici rule has no name for it
    # mean |arg| of the eigenvalues 1 +- i w of J: arctan(w), against numpy's eigenvalues
    assert rotating["mean_absolute_argument"] == pytest.approx(
        np.mean(np.abs(np.angle(np.linalg.eigvals(np.eye(d) + generator)))), rel=1e-10)
    # the measures against their definitions on a random matrix (independent references: numpy)
    a = rng.normal(size=(d, d))
    assert spectra.asymmetry_index(a) == pytest.approx(np.linalg.norm((a - a.T) / 2) / np.linalg.norm(a), rel=1e-12)
    mu = np.linalg.eigvals(a)
    assert spectra.rotation_share(mu) == pytest.approx(np.abs(mu.imag).sum() / np.abs(mu).sum(), rel=1e-12)
    assert spectra.asymmetry_index(np.zeros((3, 3))) == 0.0 and spectra.rotation_share(np.zeros(3)) == 0.0


def test_gaussian_matrices_sit_at_the_stated_random_values(fresh_seed):
    """Asymmetry of a Gaussian matrix: 1/sqrt(2) (sqrt(2 d (d - 1)) / (2 d) in expectation); rotation share of its
    eigenvalues: 2/pi in the circular-law limit (finite d sits slightly below: real eigenvalues, ~sqrt(2d/pi))."""
    rng = np.random.default_rng(fresh_seed)
    d = 400
    a = rng.normal(size=(d, d))
    assert spectra.asymmetry_index(a) == pytest.approx(np.sqrt(2 * d * (d - 1)) / (2 * d), abs=0.01)
    assert spectra.asymmetry_index(a) == pytest.approx(spectra.GINIBRE_ASYMMETRY, abs=0.01)
    assert spectra.rotation_share(np.linalg.eigvals(a)) == pytest.approx(spectra.GINIBRE_ROTATION_SHARE, abs=0.02)


def test_a_small_skew_perturbation_fills_the_complex_fraction_but_not_the_rotation_share(fresh_seed):
    """The count saturates (issue 30): a symmetric update plus 10% non-symmetric noise makes most eigenvalues
    complex, while the graded share stays small and the matrix stays near-symmetric by the primary rule."""
    rng = np.random.default_rng(fresh_seed)
    d = 200
    x = rng.normal(size=(d, d))
    symmetric = (x + x.T) / 2
    noise = rng.normal(size=(d, d))
    update = symmetric + 0.1 * np.linalg.norm(symmetric) / np.linalg.norm(noise) * noise
    metrics = spectra.sublayer_metrics(np.eye(d) + update)
    # at d = 200, over 40 seeds: complex fraction 0.27-0.40 (mean 0.32), rotation share at most 0.004
    assert metrics["frac_complex"] > 0.2
    assert metrics["rotation_share"] < 0.01 and metrics["frac_complex"] > 20 * metrics["rotation_share"]
    assert metrics["operator_type"] == "near_symmetric"
