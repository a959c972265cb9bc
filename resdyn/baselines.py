"""Random references that fit a sublayer: each measure on random updates A = J - I of the sublayer's own shapes.

One Ginibre matrix is the wrong reference for a sublayer: a freshly initialised sublayer's update is a
product (or a sum of products) of independent random factors, and products are further from normal than
one Gaussian matrix (dep(A) / ||A||_F: 0.71 for one matrix, ~0.8 for two factors, ~0.97 for a rank-64
W_o W_v at d = 576). The shapes simulated here, with factors of independent N(0, 1 / fan_in) entries:

- ``ginibre``: one d x d matrix;
- ``mlp``: W_down D W_up (d x d_ff, d_ff x d) with D = diag of N(0, 1) (an activation's derivative at
  random pre-activations); ``gated_mlp``: W_down (D_1 W_up + D_2 W_gate), the SwiGLU Jacobian's shape;
- ``attention``: sum_h c_h W_o^h W_v^{g(h)} over heads (d x head_dim, head_dim x d; query heads share their
  group's value head, g(h) = h // (heads / kv_heads)) with self-attention weights c_h ~ U(0, 1): the value
  path of d out_t / d h_t at the analysed position (the query and key paths vanish at random init as the
  attention scores flatten).

The null model itself remains the reference of record (the same architecture at its own initialisation:
resdyn/claims/ compares trained with null); these simulations give the one-number references the
claims quote and docs/methods.md tabulates, with their spread over draws.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .spectra import (
    asymmetry_index,
    complex_fraction,
    departure_of_schur_form,
    eigenvalues_of_schur_form,
    real_schur_form,
    rotation_share,
)


def _gaussian(rng: np.random.Generator, rows: int, columns: int) -> np.ndarray:
    return rng.standard_normal((rows, columns)) / np.sqrt(columns)


def ginibre_update(rng: np.random.Generator, d: int) -> np.ndarray:
    return _gaussian(rng, d, d)


def mlp_update(rng: np.random.Generator, d: int, d_ff: int, *, gated: bool = True) -> np.ndarray:
    """W_down (D_1 W_up [+ D_2 W_gate]) with D_i = diag(N(0, 1)) (module docstring)."""
    down, up = _gaussian(rng, d, d_ff), _gaussian(rng, d_ff, d)
    inner = rng.standard_normal(d_ff)[:, None] * up
    if gated:
        inner += rng.standard_normal(d_ff)[:, None] * _gaussian(rng, d_ff, d)
    return down @ inner


def attention_update(rng: np.random.Generator, d: int, n_heads: int, head_dim: int, n_kv_heads: int | None = None
                     ) -> np.ndarray:
    """sum_h c_h W_o^h W_v^{g(h)}, c_h ~ U(0, 1) (module docstring)."""
    n_kv_heads = n_kv_heads or n_heads
    if n_heads % n_kv_heads:
        raise ValueError(f"{n_heads} query heads do not split into {n_kv_heads} key/value groups")
    values = [_gaussian(rng, head_dim, d) for _ in range(n_kv_heads)]
    output = _gaussian(rng, d, n_heads * head_dim)
    update = np.zeros((d, d))
    for head in range(n_heads):
        weight = rng.uniform()
        block = output[:, head * head_dim:(head + 1) * head_dim]
        update += weight * block @ values[head // (n_heads // n_kv_heads)]
    return update


def update_measures(update: np.ndarray) -> dict[str, float]:
    """The symmetry, rotation and non-normality measures of layer_metrics on an update A (= J - I)."""
    form, _ = real_schur_form(np.asarray(update, dtype=np.float64), with_basis=False)
    mu = eigenvalues_of_schur_form(form)
    norm = float(np.linalg.norm(update))
    return {"asymmetry_index": asymmetry_index(update), "rotation_share": rotation_share(mu),
            "henrici_rel_j_minus_i": departure_of_schur_form(form) / norm if norm > 0 else 0.0,
            "frac_complex": complex_fraction(mu)}


@dataclass(frozen=True)
class Baseline:
    shape: str
    mean: dict[str, float]
    standard_deviation: dict[str, float]
    draws: int


def simulate(shape: str, make: Callable[[np.random.Generator], np.ndarray], *, draws: int = 8, seed: int = 0) -> Baseline:
    """Mean and standard deviation of every :func:`update_measures` over ``draws`` updates from ``make``."""
    rng = np.random.default_rng(seed)
    samples = [update_measures(make(rng)) for _ in range(draws)]
    names = samples[0].keys()
    return Baseline(shape, {n: float(np.mean([s[n] for s in samples])) for n in names},
                    {n: float(np.std([s[n] for s in samples], ddof=1)) if draws > 1 else float("nan") for n in names},
                    draws)
