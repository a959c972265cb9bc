"""An independent check of a mean Jacobian: central finite differences along random directions.

For a probe direction v, E_s[J_s] v = E_s[J_s v], and J_s v is approximated to O(h^2) by
(f_s(x_s + h v) - f_s(x_s - h v)) / 2h with two forward passes per sample: no autodiff involved.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..corpus import Sample
from ..models.adapters import FamilyAdapter


@torch.no_grad()
def finite_difference_probe(
    model: torch.nn.Module,
    adapter: FamilyAdapter,
    samples: Sequence[Sample],
    mean_jacobians: dict[tuple[int, str], np.ndarray],
    *,
    n_directions: int = 2,
    step: float = 1e-5,
    seed: int = 0,
    batch_size: int = 16,
) -> dict[tuple[int, str], float]:
    """Relative error ||E[J] v - FD(v)|| / ||FD(v)||, worst over directions, per (layer, sublayer)."""
    rng = np.random.default_rng(seed)
    layers = adapter.decoder_layers(model)
    dtype = next(model.parameters()).dtype
    d = int(model.config.hidden_size)
    directions = torch.tensor(rng.normal(size=(n_directions, d)), dtype=dtype)
    directions /= directions.norm(dim=1, keepdim=True)
    sums = {key: torch.zeros(n_directions, d, dtype=torch.float64) for key in mean_jacobians}
    count = 0
    for start in range(0, len(samples), batch_size):
        batch = samples[start : start + batch_size]
        captured = adapter.capture_layer_inputs(model, torch.tensor([s.token_ids for s in batch]))
        for (layer_index, sublayer) in mean_jacobians:
            for position in batch[0].positions:
                function, x0 = adapter.positional_function(layers[layer_index], captured[layer_index], sublayer, position)
                for k, v in enumerate(directions):
                    difference = (function(x0 + step * v) - function(x0 - step * v)) / (2 * step)
                    sums[(layer_index, sublayer)][k] += difference.to(torch.float64).sum(0)
        count += len(batch) * len(batch[0].positions)
    errors = {}
    for key, mean in mean_jacobians.items():
        finite = (sums[key] / count).numpy()
        predicted = directions.to(torch.float64).numpy() @ np.asarray(mean).T
        errors[key] = float(np.linalg.norm(predicted - finite) / max(np.linalg.norm(finite), 1e-300))
    return errors
