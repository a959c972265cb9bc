"""Exact per-sample Jacobians by automatic differentiation (``torch.func``).

For a batch map F: (N, d) -> (N, d) whose rows are independent (row n of the output depends only
on row n of the input), the N per-sample Jacobians come from d vector products on the whole batch:

- reverse mode ("jacrev"): one forward, then vmap over d cotangents e_i, giving rows  e_i^T J_n;
- forward mode ("jacfwd"): vmap over d tangents e_i, giving columns  J_n e_i.

Both are exact to rounding; which is faster depends on the map (benchmarks/jacobians.py measures
it; reverse mode wins for the sublayers of the supported families on CPU).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.func import jvp, vjp, vmap


def batch_jacobians(
    function: Callable[[torch.Tensor], torch.Tensor],
    inputs: torch.Tensor,
    *,
    mode: str = "jacrev",
    chunk_size: int | None = None,
) -> torch.Tensor:
    """Per-row Jacobians d F(X)_n / d X_n, shape (N, d_out, d_in)."""
    n, d = inputs.shape
    basis = torch.eye(d, dtype=inputs.dtype, device=inputs.device)
    if mode == "jacrev":
        outputs, pullback = vjp(function, inputs)
        cotangents = basis[:, None, :].expand(outputs.shape[-1], n, outputs.shape[-1])
        (rows,) = vmap(pullback, chunk_size=chunk_size)(cotangents)  # (d_out, N, d_in)
        return rows.permute(1, 0, 2)
    if mode == "jacfwd":
        tangents = basis[:, None, :].expand(d, n, d)

        def push(tangent: torch.Tensor) -> torch.Tensor:
            return jvp(function, (inputs,), (tangent,))[1]

        columns = vmap(push, chunk_size=chunk_size)(tangents)  # (d_in, N, d_out)
        return columns.permute(1, 2, 0)
    raise ValueError(f"mode must be 'jacrev' or 'jacfwd', not {mode!r}")


VMAP_FLOATS = 2**24  # widest intermediate of one vmap chunk: chunk x batch x width (128 MB in float64)


def widest_intermediate(layer: torch.nn.Module, sublayer: str, tokens: int, d: int) -> int:
    """Floats per cotangent in the widest tensor of one row function's backward.

    MLP: its hidden width (the widest projection's output, ~4 d). Attention: the gradient of the keys
    and values reaches every position (T x the query heads' width once expanded to them), which is
    what dominates at paper scale: at T = 64 and 32 x 128 query columns, 262,144 floats per cotangent,
    against 4 d = 16,384. Measured on the Gemma 4 E4B shape (full-attention layer, 8 x 512 query
    columns): about 2.9 such tensors alive per cotangent.
    """
    key = "mlp" if sublayer == "mlp" else "attn"
    widths = [module.out_features for name, module in layer.named_modules()
              if isinstance(module, torch.nn.Linear) and key in name.lower()]
    widest = max(widths, default=4 * d)
    return max(4 * d, tokens * widest if key == "attn" else widest)


class AutodiffBackend:
    """The reference backend: per-sample Jacobians by ``torch.func``, then streamed.

    Each sublayer is differentiated through the adapter's one-row function (only the analysed
    row is recomputed; for attention the other positions' keys and values are held fixed), so a
    vmap chunk of c cotangents holds O(c x batch x (d_ff + T heads)) floats, not O(c x batch x T x d).
    """

    name = "autodiff"

    def __init__(self, mode: str = "jacrev", chunk_size: int | None = None) -> None:
        self.mode = mode
        self.chunk_size = chunk_size

    def sample_jacobians(self, adapter, layer, inputs, sublayer: str, position: int) -> torch.Tensor:
        function, x0 = adapter.row_function(layer, inputs, sublayer, position)
        chunk_size = self.chunk_size
        if chunk_size is None:  # bound the chunk's widest intermediate (before: 5 GB spikes at d = 2560)
            batch, tokens, d = inputs.hidden.shape
            width = widest_intermediate(layer, sublayer, tokens, d)
            chunk_size = max(1, min(d, VMAP_FLOATS // (batch * width)))
        return batch_jacobians(function, x0, mode=self.mode, chunk_size=chunk_size)

    def accumulate(self, adapter, layer, inputs, sublayer: str, position: int, moments) -> torch.Tensor:
        jacobians = self.sample_jacobians(adapter, layer, inputs, sublayer, position)
        moments.update(jacobians)
        return jacobians
