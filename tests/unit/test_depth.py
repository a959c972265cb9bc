"""Cumulative products and Schur surgery against exact references."""

import numpy as np
import pytest
import scipy.linalg

from resdyn import spectra
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


def test_surgery_on_a_pure_jordan_block_removes_the_coupling():
    jordan = np.array([[2.0, 5.0], [0.0, 2.0]])
    operated = SchurDecomposition.of(jordan).operated(0.0)
    np.testing.assert_allclose(operated, 2 * np.eye(2), atol=1e-12)
    assert scipy.linalg.norm(SchurDecomposition.of(jordan).operated(0.5) - 2 * np.eye(2)) == pytest.approx(2.5)
