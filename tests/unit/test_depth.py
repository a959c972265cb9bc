"""Cumulative products and Schur surgery against exact references."""

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize

from resdyn import depth, spectra
from resdyn.depth import SchurDecomposition, cumulative_products


def test_rescaled_product_matches_a_product_with_known_spectrum(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    d, depth = 12, 60
    # J_l = Q_{l+1} diag(s_l) Q_l^T telescopes: the product's singular values are prod_l s_l exactly
    bases = [np.linalg.qr(rng.normal(size=(d, d)))[0] for _ in range(depth + 1)]
    scales = [np.sort(rng.uniform(0.05, 4.0, d))[::-1] for _ in range(depth)]
    jacobians = [bases[k + 1] @ np.diag(scales[k]) @ bases[k].T for k in range(depth)]
    steps = list(cumulative_products(jacobians))
    exact_log = np.cumsum(np.log(np.array(scales)), axis=0)  # sorted columns stay sorted
    for step in steps:
        # the largest to 1e-10 relative; the rest to float64's floor relative to the largest
        # (a finite product's small singular values carry an absolute error ~ depth eps sigma_max)
        assert step.log_sigma_max == pytest.approx(exact_log[step.depth][0], rel=1e-10, abs=1e-10)
        relative = np.exp(step.log_singular_values - step.log_sigma_max)
        exact_relative = np.exp(exact_log[step.depth] - exact_log[step.depth][0])
        np.testing.assert_allclose(relative, exact_relative, rtol=1e-8, atol=1e-12 * (step.depth + 1))
    # products whose raw entries over/underflow float64 are still handled
    assert abs(steps[-1].log_sigma_max) < 1e4 and np.isfinite(steps[-1].log_sigma_max)


def test_rescaled_product_matches_the_direct_product_when_it_is_safe(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    jacobians = [np.eye(8) + 0.2 * rng.normal(size=(8, 8)) for _ in range(5)]
    direct = np.eye(8)
    for step, jacobian in zip(cumulative_products(jacobians), jacobians):
        direct = jacobian @ direct
        np.testing.assert_allclose(np.exp(step.log_singular_values), np.linalg.svd(direct, compute_uv=False),
                                   rtol=1e-10)


@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.5, 0.75, 1.0, 1.5])
def test_surgery_keeps_eigenvalues_and_scales_departure(alpha, fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    jacobian = np.eye(30) + 0.4 * rng.normal(size=(30, 30))
    decomposition = SchurDecomposition.of(jacobian)
    operated = decomposition.operated(alpha)
    assert np.isrealobj(operated)
    before = np.sort_complex(np.linalg.eigvals(jacobian))
    after = np.sort_complex(np.linalg.eigvals(operated))
    np.testing.assert_allclose(after, before, atol=1e-10)
    dep = spectra.henrici_departure(jacobian)
    assert spectra.henrici_departure(operated) == pytest.approx(alpha * dep, rel=1e-9, abs=1e-9)
    if alpha == 0.0:
        assert np.linalg.norm(operated @ operated.T - operated.T @ operated) < 1e-10 * np.linalg.norm(operated) ** 2
    if alpha == 1.0:
        np.testing.assert_allclose(operated, jacobian, atol=1e-12)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.5])
def test_block_eigenvalue_drift_is_the_drift_a_full_eigendecomposition_measures(alpha, fresh_seed):
    """The pipeline reads the drift off the 2x2 blocks; the reference eigendecomposes Z T(alpha) Z^T, and a
    perturbed form must show the same drift both ways."""
    rng = np.random.default_rng(fresh_seed)
    jacobian = np.eye(20) + 0.5 * rng.normal(size=(20, 20))
    form, basis = scipy.linalg.schur(jacobian, output="real")
    operated = depth.operated_schur_form(form, alpha)

    def full_drift(matrix):
        moved = np.linalg.eigvals(matrix)
        reference = np.linalg.eigvals(jacobian)
        return np.max(np.min(np.abs(moved[:, None] - reference[None, :]), axis=1))

    assert depth.block_eigenvalue_drift(form, operated) < 1e-10
    assert full_drift(basis @ operated @ basis.T) < 1e-8
    shifted = operated + np.diag(np.where(np.arange(20) == 0, 1e-3, 0.0))  # one eigenvalue moved by ~1e-3
    assert depth.block_eigenvalue_drift(form, shifted) == pytest.approx(full_drift(basis @ shifted @ basis.T),
                                                                        rel=0.2)


def test_surgery_on_a_pure_jordan_block_removes_the_coupling():
    jordan = np.array([[2.0, 5.0], [0.0, 2.0]])
    operated = SchurDecomposition.of(jordan).operated(0.0)
    np.testing.assert_allclose(operated, 2 * np.eye(2), atol=1e-12)
    assert scipy.linalg.norm(SchurDecomposition.of(jordan).operated(0.5) - 2 * np.eye(2)) == pytest.approx(2.5)


REORDERINGS = [depth.MODULUS_ASCENDING, depth.MODULUS_DESCENDING]


def _non_normal(rng, d):
    return np.eye(d) + 0.4 * rng.normal(size=(d, d))


def _assert_standardised_quasi_triangular(form):
    assert np.all(np.tril(form, -2) == 0)
    sub = np.diagonal(form, -1)
    assert not np.any((sub[:-1] != 0) & (sub[1:] != 0))  # no 3x3 blocks
    for start, size in spectra.schur_blocks(form):
        if size == 2:  # LAPACK's standardised complex block [[a, b], [c, a]], b c < 0
            assert form[start, start] == form[start + 1, start + 1]
            assert form[start, start + 1] * form[start + 1, start] < 0


@pytest.mark.parametrize("key", REORDERINGS)
def test_reordered_schur_form_is_a_schur_form_of_the_same_matrix_in_modulus_order(key, fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    d = int(rng.integers(30, 61))
    jacobian = _non_normal(rng, d)
    form, basis = scipy.linalg.schur(jacobian, output="real")
    reordered, reordered_basis = depth.reorder_real_schur(form, basis, key)
    np.testing.assert_allclose(reordered_basis @ reordered @ reordered_basis.T, jacobian, rtol=0, atol=1e-10)
    np.testing.assert_allclose(reordered_basis.T @ reordered_basis, np.eye(d), rtol=0, atol=1e-12)
    _assert_standardised_quasi_triangular(reordered)
    moduli = np.abs(spectra.eigenvalues_of_schur_form(reordered))
    steps = np.diff(moduli) if key == depth.MODULUS_ASCENDING else -np.diff(moduli)
    assert steps.min() >= -1e-12 * moduli.max()
    # ... and the order did change: LAPACK's own order is not the modulus order
    original = np.abs(spectra.eigenvalues_of_schur_form(form))
    assert not np.allclose(original, moduli)
    # the eigenvalue multiset is unchanged (matched one to one)
    reference = np.linalg.eigvals(jacobian)
    eigenvalues = spectra.eigenvalues_of_schur_form(reordered)
    distance = np.abs(eigenvalues[:, None] - reference[None, :])
    rows, columns = scipy.optimize.linear_sum_assignment(distance)
    assert distance[rows, columns].max() < 1e-10


def test_lapack_ordering_is_returned_unchanged_and_unknown_orderings_are_refused(fresh_seed):
    form, basis = scipy.linalg.schur(_non_normal(np.random.default_rng(fresh_seed), 10), output="real")
    same_form, same_basis = depth.reorder_real_schur(form, basis, depth.SCHUR_ORDERING)
    assert same_form is form and same_basis is basis
    with pytest.raises(ValueError, match="ordering"):
        depth.reorder_real_schur(form, basis, "modulus")
    with pytest.raises(ValueError, match="ordering"):  # the polar normal part is no order of T's diagonal
        depth.reorder_real_schur(form, basis, depth.POLAR_NORMAL)
    with pytest.raises(ValueError, match="orderings"):
        depth.SchurSurgery([0.0], orderings=["modulus"])


@pytest.mark.parametrize("key", depth.SCHUR_FORM_ORDERINGS)
def test_surgery_at_zero_is_normal_with_the_same_eigenvalues_under_every_ordering(key, fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    jacobian = _non_normal(rng, 30)
    form, basis = depth.reorder_real_schur(*scipy.linalg.schur(jacobian, output="real"), key)
    normal = basis @ depth.operated_schur_form(form, 0.0) @ basis.T
    assert spectra.henrici_departure(jacobian) > 1.0
    assert spectra.henrici_departure(normal) < 1e-10 * np.linalg.norm(jacobian)
    reference, eigenvalues = np.linalg.eigvals(jacobian), np.linalg.eigvals(normal)
    distance = np.abs(eigenvalues[:, None] - reference[None, :])
    rows, columns = scipy.optimize.linear_sum_assignment(distance)
    assert distance[rows, columns].max() < 1e-10


def _surgery_through_depth(rng, d=24, layers=6):
    jacobians = [_non_normal(rng, d) for _ in range(layers)]
    surgery, measured, rows, steps = depth.SchurSurgery((0.0, 0.5, 1.0)), depth.CumulativeProduct(), [], []
    for jacobian in jacobians:
        rows += surgery.push(*scipy.linalg.schur(jacobian, output="real"))
        steps.append(depth.rank_summary(measured.push(jacobian)))
    return surgery, measured, rows, steps


def test_surgery_rows_per_ordering_and_alpha_one_is_the_measured_product_under_every_ordering(fresh_seed):
    surgery, measured, rows, steps = _surgery_through_depth(np.random.default_rng(fresh_seed))
    assert {(row["schur_ordering"], row["alpha"]) for row in rows} == {
        ("lapack-default", 0.0), ("lapack-default", 0.5), ("lapack-default", 1.0),
        ("modulus-ascending", 0.0), ("modulus-ascending", 1.0),
        ("modulus-descending", 0.0), ("modulus-descending", 1.0),
        ("polar-normal", 0.0), ("polar-normal", 1.0)}
    assert len(rows) == 9 * len(steps)
    assert {row["block_rule"] for row in rows if row["schur_ordering"] == "polar-normal"} == {"polar"}
    assert {row["block_rule"] for row in rows if row["schur_ordering"] != "polar-normal"} == {"sinh"}
    for ordering in depth.SCHUR_ORDERINGS:
        np.testing.assert_allclose(surgery.chains[ordering, 1.0].product, measured.product, rtol=0, atol=1e-10)
        assert surgery.chains[ordering, 1.0].log_scale == pytest.approx(measured.log_scale, rel=1e-12)
        identity = [row for row in rows if row["schur_ordering"] == ordering and row["alpha"] == 1.0]
        for row, step in zip(identity, steps, strict=True):
            assert row["depth"] == step["depth"]
            for name in ("effective_rank", "participation_ratio", "stable_rank", "log_sigma_max"):
                assert row[name] == pytest.approx(step[name], rel=1e-9, abs=1e-12)
            assert row["numerical_rank"] == step["numerical_rank"]
    assert max(row["max_eigenvalue_drift"] for row in rows) < 1e-10


def test_the_normal_part_and_its_product_depend_on_the_ordering(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    jacobian = _non_normal(rng, 24)
    form, basis = scipy.linalg.schur(jacobian, output="real")
    orderings = depth.SCHUR_FORM_ORDERINGS  # the polar normal part depends on none (tests/unit/test_normal_part.py)
    normal = {}
    for key in orderings:
        reordered, reordered_basis = depth.reorder_real_schur(form, basis, key)
        normal[key] = reordered_basis @ depth.operated_schur_form(reordered, 0.0) @ reordered_basis.T
    for a, b in [(0, 1), (0, 2), (1, 2)]:
        key_a, key_b = orderings[a], orderings[b]
        assert np.linalg.norm(normal[key_a] - normal[key_b]) > 1e-2 * np.linalg.norm(jacobian)
    surgery, _, rows, _ = _surgery_through_depth(rng)
    last = max(row["depth"] for row in rows)
    full_depth = {row["schur_ordering"]: row["effective_rank"] for row in rows
                  if row["alpha"] == 0.0 and row["depth"] == last}
    for a, b in [(0, 1), (0, 2), (1, 2)]:
        chain_a, chain_b = (surgery.chains[orderings[k], 0.0] for k in (a, b))
        assert np.linalg.norm(chain_a.product - chain_b.product) > 1e-2
        assert full_depth[orderings[a]] != pytest.approx(full_depth[orderings[b]], rel=1e-6)
