"""Exact mean Jacobians in closed form: weight matrices times averaged per-sample diagonals.

Gated MLP sublayer out = x + N2(M(N1(x))), with M(n) = W_down (phi(a) * u), a = W_gate n + b,
u = W_up n + b, and optional RMSNorms N(z) = g * z / r(z), r = sqrt(mean(z^2) + eps) before
(pre-norm, sandwich) and after (post-norm, sandwich). With c1 = 1/r(x), c2 = 1/r(y), y = M(N1(x)),
dN/dz = c diag(g) - c^3 (g * z) z^T / d, and W_in(s) = diag(phi'(a) u) W_gate + diag(phi(a)) W_up:

    J_s - I = [c2 diag(g2) - c2^3 (g2 y) y^T / d] W_down W_in(s) [c1 diag(g1) - c1^3 (g1 x) x^T / d]

so the mean over samples is, exactly,

    E[J - I] = diag(g2) W_down [diag(E[c1 c2 phi'(a) u]) W_gate + diag(E[c1 c2 phi(a)]) W_up] diag(g1)
             - diag(g2) W_down E[c1^3 c2 w x^T] / d                  w = W_in(s) (g1 x)      (d_ff)
             - E[c1 c2^3 (g2 y) z^T] / d                             z = diag(g1) W_in(s)^T W_down^T y
             + E[c1^3 c2^3 (y^T W_down w) (g2 y) x^T] / d^2

(absent norms: c = 1, g = 1, and their rank-one terms drop). Cost: two d x d_ff x d products for
the whole sample set plus O(n d d_ff) per batch, instead of n d^2 d_ff for per-sample Jacobians.

The attention sublayer's closed form lives in :mod:`resdyn.jacobians.structured_attention`.
Sublayers neither covers (Gemma 4's maps with its per-layer-input branch, MoE
blocks, ungated MLPs, unknown norms) fall back to the autodiff backend, logged once per kind.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from ..models.adapters.families import Gemma3Adapter, Gemma4Adapter, PostNormAdapter, PreNormAdapter
from ..models.precision import rms_norm_gain
from .autodiff import AutodiffBackend

log = logging.getLogger(__name__)

INNER_BLOCK = 1024  # rows of W_gate / W_up (or of the attention core) combined at a time in PartialSum.total


@dataclass(frozen=True)
class GatedMlp:
    """The pieces of one gated-MLP residual map (None: that norm is absent)."""

    mlp: torch.nn.Module
    norm_in: torch.nn.Module | None
    norm_out: torch.nn.Module | None


def gated_mlp_of(adapter, layer) -> GatedMlp | None:
    """The closed-form view of ``layer``'s MLP map, or None when the closed form does not apply."""
    mlp = getattr(layer, "mlp", None)
    if isinstance(adapter, Gemma4Adapter) or mlp is None:
        return None
    if not all(hasattr(mlp, name) for name in ("gate_proj", "up_proj", "down_proj", "act_fn")):
        return None
    if type(adapter) is PreNormAdapter:
        pieces = GatedMlp(mlp, layer.post_attention_layernorm, None)
    elif type(adapter) is PostNormAdapter:
        pieces = GatedMlp(mlp, None, layer.post_feedforward_layernorm)
    elif type(adapter) is Gemma3Adapter:
        pieces = GatedMlp(mlp, layer.pre_feedforward_layernorm, layer.post_feedforward_layernorm)
    else:
        return None
    for norm in (pieces.norm_in, pieces.norm_out):
        if norm is not None and rms_norm_gain(norm) is None:
            return None
    return pieces


def _norm_terms(norm, z: torch.Tensor):
    """(gain g, per-sample c = 1 / r(z)) of an RMSNorm; (1, 1) when the norm is absent."""
    if norm is None:
        return (torch.ones(z.shape[-1], dtype=z.dtype, device=z.device),
                torch.ones(z.shape[0], dtype=z.dtype, device=z.device))
    gain, eps = rms_norm_gain(norm)
    gain = torch.ones(z.shape[-1], dtype=z.dtype, device=z.device) if gain is None else gain.to(z.dtype)
    return gain, torch.rsqrt(z.pow(2).mean(-1) + eps)


@dataclass
class PartialSum:
    """sum_s (J_s - I) over some samples, kept factored so the big weight products happen once:

        total = diag(row_gain) left [diag(gate_weights) w_gate + diag(up_weights) w_up + core] diag(column_gain)
                + sum_k outer_left_k outer_right_k

    (an absent core or gate/up part counts as zero; the outer terms stay as low-rank factor pairs,
    d x n and n x d, until they are added into one d x d buffer). Partial sums of one sublayer
    share left, w_gate, w_up and the gains; :class:`PartialSumAccumulator` adds them.
    """

    left: torch.Tensor  # d x m (W_down or W_o)
    core: torch.Tensor | None  # m x d
    outer: list  # [(d x n, n x d), ...]
    row_gain: torch.Tensor  # d
    column_gain: torch.Tensor  # d
    gate_weights: torch.Tensor | None = None  # m
    up_weights: torch.Tensor | None = None  # m
    w_gate: torch.Tensor | None = None  # m x d
    w_up: torch.Tensor | None = None  # m x d

    def total(self) -> torch.Tensor:
        """The d x d sum, the inner dimension taken in blocks so that no m x d temporary is ever whole
        (at d = 4096, d_ff = 14336 one such temporary is 470 MB)."""
        m = self.left.shape[1]
        total = torch.zeros(self.left.shape[0], self.column_gain.shape[0], dtype=self.left.dtype,
                            device=self.left.device)
        for start in range(0, m, INNER_BLOCK):
            rows = slice(start, min(m, start + INNER_BLOCK))
            block = self.core[rows].clone() if self.core is not None else None
            if self.gate_weights is not None:
                gated = self.gate_weights[rows, None] * self.w_gate[rows]
                gated.addcmul_(self.up_weights[rows, None], self.w_up[rows])
                block = gated if block is None else block.add_(gated)
            block.mul_(self.column_gain[None, :])
            total.addmm_(self.left[:, rows], block)
        total.mul_(self.row_gain[:, None])
        for left, right in self.outer:
            total.addmm_(left, right)
        return total


class PartialSumAccumulator:
    """Running sum of one sublayer's PartialSums with one d x d buffer for all low-rank terms."""

    def __init__(self) -> None:
        self.first: PartialSum | None = None
        self.outer: torch.Tensor | None = None
        self.count = 0

    def add(self, partial: PartialSum, count: int) -> None:
        self.count += count
        factors = partial.outer
        if self.first is None:
            self.first = PartialSum(partial.left, partial.core, [], partial.row_gain, partial.column_gain,
                                    partial.gate_weights, partial.up_weights, partial.w_gate, partial.w_up)
            d = partial.left.shape[0]
            self.outer = torch.zeros(d, d, dtype=partial.left.dtype, device=partial.left.device)
        else:
            if partial.core is not None:
                self.first.core += partial.core
            if partial.gate_weights is not None:
                self.first.gate_weights += partial.gate_weights
                self.first.up_weights += partial.up_weights
        for left, right in factors:
            self.outer.addmm_(left, right)

    def total(self) -> torch.Tensor:
        return self.first.total() + self.outer


@torch.no_grad()
def mlp_partial_sum(pieces: GatedMlp, x: torch.Tensor) -> PartialSum:
    """sum_s (J_s - I) over the rows x_s of ``x`` (n, d), by the closed form in the module docstring."""
    d = x.shape[1]
    mlp = pieces.mlp
    g1, c1 = _norm_terms(pieces.norm_in, x)
    normed = pieces.norm_in(x) if pieces.norm_in is not None else x
    a = mlp.gate_proj(normed)
    u = mlp.up_proj(normed)
    with torch.enable_grad():
        a_leaf = a.detach().requires_grad_(True)
        phi = mlp.act_fn(a_leaf)
        (phi_prime,) = torch.autograd.grad(phi.sum(), a_leaf)
    phi = phi.detach()
    d1, d2 = phi_prime * u, phi  # dM/dn = W_down [diag(d1) W_gate + diag(d2) W_up]
    y = mlp.down_proj(phi * u)
    g2, c2 = _norm_terms(pieces.norm_out, y)
    w_gate, w_up, w_down = mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight

    weight = c1 * c2
    outer = []
    if pieces.norm_in is not None:
        # W (g1 x) from the projections already made: (a - b) / c1, without another d x d_ff product
        gate_x = (a - (mlp.gate_proj.bias if mlp.gate_proj.bias is not None else 0)) / c1[:, None]
        up_x = (u - (mlp.up_proj.bias if mlp.up_proj.bias is not None else 0)) / c1[:, None]
        w = d1 * gate_x + d2 * up_x  # W_in(s) (g1 x_s), (n, d_ff)
        outer.append((-(g2 / d)[:, None] * (w_down @ ((c1**3 * c2)[:, None] * w).T), x))
    if pieces.norm_out is not None:
        back = y @ w_down  # rows: W_down^T y_s, (n, d_ff)
        z = ((back * d1) @ w_gate + (back * d2) @ w_up) * g1  # (n, d)
        outer.append((-((c1 * c2**3 / d)[:, None] * (g2 * y)).T, z))
        if pieces.norm_in is not None:
            sigma = (back * w).sum(-1)  # y^T W_down w
            outer.append((((sigma * c1**3 * c2**3 / d**2)[:, None] * (g2 * y)).T, x))
    return PartialSum(w_down, None, outer, g2, g1, weight @ d1, weight @ d2, w_gate, w_up)


class StructuredBackend:
    """Closed-form mean Jacobians where they apply; the autodiff backend elsewhere."""

    name = "structured"

    def __init__(self, fallback: AutodiffBackend | None = None) -> None:
        self.fallback = fallback or AutodiffBackend()
        self._reported: set[tuple[str, str]] = set()
        self._pending: dict[int, tuple] = {}  # id(moments) -> (moments, PartialSumAccumulator)

    def covers(self, adapter, layer, sublayer: str) -> bool:
        return self._closed_form(adapter, layer, sublayer) is not None

    @staticmethod
    def _closed_form(adapter, layer, sublayer: str):
        from .structured_attention import attention_view_of

        if sublayer == "mlp":
            return gated_mlp_of(adapter, layer)
        return attention_view_of(adapter, layer)

    def backend_for(self, adapter, layer, sublayer: str) -> str:
        return self.name if self.covers(adapter, layer, sublayer) else f"{self.fallback.name} (structured fallback)"

    def sample_jacobians(self, adapter, layer, inputs, sublayer: str, position: int) -> torch.Tensor:
        return self.fallback.sample_jacobians(adapter, layer, inputs, sublayer, position)

    def accumulate(self, adapter, layer, inputs, sublayer: str, position: int, moments) -> torch.Tensor | None:
        """Add this batch to ``moments``: at once through the fallback, or as a partial sum that
        :meth:`finish` turns into the mean (the d x d_ff x d weight products happen there, once)."""
        pieces = self._closed_form(adapter, layer, sublayer)
        if pieces is None:
            kind = (type(adapter).__name__, sublayer)
            if kind not in self._reported:
                self._reported.add(kind)
                log.warning("structured backend: no closed form for the %s sublayer of %s; using autodiff",
                            sublayer, type(adapter).__name__)
            return self.fallback.accumulate(adapter, layer, inputs, sublayer, position, moments)
        if sublayer == "mlp":
            x = inputs.pre_mlp_rows.get(position)
            if x is None:
                x = adapter.positional_function(layer, inputs, sublayer, position)[1]
            partial = mlp_partial_sum(pieces, x)
        else:
            from .structured_attention import attention_partial_sum

            partial, pre_mlp_row = attention_partial_sum(pieces, inputs.hidden, inputs.arguments, position)
            inputs.pre_mlp_rows[position] = pre_mlp_row  # the MLP step needs exactly this row
        if id(moments) not in self._pending:
            self._pending[id(moments)] = (moments, PartialSumAccumulator())
        self._pending[id(moments)][1].add(partial, inputs.hidden.shape[0])
        return None

    def finish(self) -> None:
        """Turn every pending partial sum into its mean (call once, after the last batch)."""
        for moments, accumulator in self._pending.values():
            deviation = accumulator.total()
            count = accumulator.count
            identity = torch.eye(deviation.shape[0], dtype=deviation.dtype, device=deviation.device)
            moments.add_sum(deviation + count * identity, count)
        self._pending.clear()
