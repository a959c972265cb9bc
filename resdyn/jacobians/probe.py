"""An independent check of a mean Jacobian: central finite differences along random directions.

For a probe direction v, E_s[J_s] v = E_s[J_s v], and J_s v is approximated to O(h^2) by
(f_s(x_s + h v) - f_s(x_s - h v)) / 2h with two forward passes per sample: no autodiff involved.
The engine accumulates sum_s FD_s(v) during its one pass over the model (so the check needs no
second model load); :func:`probe_error` compares the stored mean Jacobian with it later.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

PROBE_DIRECTIONS = 2
PROBE_STEP = 1e-5


def probe_directions(d: int, *, n_directions: int = PROBE_DIRECTIONS, seed: int = 0) -> np.ndarray:
    """``n_directions`` random unit vectors in R^d, reproducible from ``seed``."""
    directions = np.random.default_rng(seed).normal(size=(n_directions, d))
    return directions / np.linalg.norm(directions, axis=1, keepdims=True)


@torch.no_grad()
def central_difference_sum(function: Callable[[torch.Tensor], torch.Tensor], x0: torch.Tensor,
                           directions: torch.Tensor, step: float = PROBE_STEP) -> torch.Tensor:
    """sum over the rows x_s of ``x0`` of (f(x_s + h v) - f(x_s - h v)) / 2h, one row per direction v (float64)."""
    sums = []
    for v in directions.to(device=x0.device, dtype=x0.dtype):
        difference = (function(x0 + step * v) - function(x0 - step * v)) / (2 * step)
        sums.append(difference.to(torch.float64).sum(0))
    return torch.stack(sums)


def probe_error(mean_jacobian: np.ndarray, directions: np.ndarray, finite_difference_mean: np.ndarray) -> float:
    """||E[J] V^T - FD||_F / ||FD||_F over the probe directions (rows of ``directions``)."""
    predicted = np.asarray(directions, dtype=np.float64) @ np.asarray(mean_jacobian, dtype=np.float64).T
    finite = np.asarray(finite_difference_mean, dtype=np.float64)
    return float(np.linalg.norm(predicted - finite) / max(np.linalg.norm(finite), 1e-300))
