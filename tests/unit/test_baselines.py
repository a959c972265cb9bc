"""Sublayer-shaped random baselines against closed forms and an independent direct simulation."""

import numpy as np
import pytest

from resdyn import baselines, spectra


def test_one_gaussian_matrix_sits_at_the_closed_forms(fresh_seed):
    """Ginibre: asymmetry 1/sqrt(2); dep/||A||_F -> 1/sqrt(2) (sum |lambda|^2 ~ ||A||_F^2 / 2); rotation share -> 2/pi."""
    result = baselines.simulate("ginibre", lambda rng: baselines.ginibre_update(rng, 300), draws=3, seed=fresh_seed)
    assert result.mean["asymmetry_index"] == pytest.approx(1 / np.sqrt(2), abs=0.01)
    assert result.mean["henrici_rel_j_minus_i"] == pytest.approx(1 / np.sqrt(2), abs=0.03)
    assert result.mean["rotation_share"] == pytest.approx(2 / np.pi, abs=0.03)


def test_products_sit_above_one_gaussian_matrix_and_match_a_direct_simulation(fresh_seed):
    """A rank-deficient attention value path W_o W_v is far from normal (dep/||A||_F near 1); an MLP product sits
    between; both equal a Monte Carlo written here independently (other seeds) within 4 standard errors."""
    d, d_ff, heads, head_dim = 96, 256, 2, 16
    attention = baselines.simulate("attention", lambda rng: baselines.attention_update(rng, d, heads, head_dim),
                                   draws=12, seed=fresh_seed)
    mlp = baselines.simulate("mlp", lambda rng: baselines.mlp_update(rng, d, d_ff, gated=False), draws=12,
                             seed=fresh_seed)
    ginibre = baselines.simulate("ginibre", lambda rng: baselines.ginibre_update(rng, d), draws=12, seed=fresh_seed)
    assert attention.mean["henrici_rel_j_minus_i"] > mlp.mean["henrici_rel_j_minus_i"] > ginibre.mean["henrici_rel_j_minus_i"]
    rng = np.random.default_rng(fresh_seed + 1)
    direct = []
    for _ in range(40):
        down = rng.normal(size=(d, d_ff)) / np.sqrt(d_ff)
        up = rng.normal(size=(d_ff, d)) / np.sqrt(d)
        update = down @ np.diag(rng.normal(size=d_ff)) @ up
        direct.append(spectra.henrici_departure(update) / np.linalg.norm(update))
    error = np.hypot(np.std(direct) / np.sqrt(40), mlp.standard_deviation["henrici_rel_j_minus_i"] / np.sqrt(12))
    assert mlp.mean["henrici_rel_j_minus_i"] == pytest.approx(np.mean(direct), abs=4 * error + 1e-3)
    assert attention.mean["asymmetry_index"] == pytest.approx(1 / np.sqrt(2), abs=0.05)  # E a_ij a_ji = 0
    with pytest.raises(ValueError, match="key/value groups"):
        baselines.attention_update(rng, d, 3, 8, 2)
