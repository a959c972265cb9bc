"""Exact mean Jacobians in closed form: weight matrices times averaged per-sample diagonals.

RMSNorm N(z) = g * z / r(z), r = sqrt(mean(z^2) + eps), has dN/dz = c diag(g) - c^3 (g z) z^T / d with
c = 1/r (absent norms: c = 1, g = 1, no rank-one term).

**Gated MLP sublayer** out = x + N2(M(N1(x))), M(n) = W_down (phi(a) * u), a = W_gate n + b, u = W_up n + b,
N1 before (pre-norm, sandwich), N2 after (post-norm, sandwich). With c1 = 1/r(x), c2 = 1/r(y), y = M(N1(x)),
W_in(s) = diag(phi'(a) u) W_gate + diag(phi(a)) W_up:

    J_s - I = Delta_s = dN2 W_down W_in(s) dN1, so, exactly,

    E[Delta] = diag(g2) W_down [diag(E[c1 c2 phi'(a) u]) W_gate + diag(E[c1 c2 phi(a)]) W_up] diag(g1)
             - diag(g2) W_down E[c1^3 c2 w x^T] / d                  w = W_in(s) (g1 x)      (d_ff)
             - E[c1 c2^3 (g2 y) z^T] / d                             z = diag(g1) W_in(s)^T W_down^T y
             + E[c1^3 c2^3 (y^T W_down w) (g2 y) x^T] / d^2

A branch scalar m (Granite's ``residual_multiplier``), out = x + m N2(M(N1(x))), gives J_s - I = m Delta_s,
so E[J] = I + m E[Delta]; an output scalar s, out = s (x + N2(M(N1(x)))), gives E[J] = s (I + E[Delta]).
Where the map is, and which norms and scalars it has, is the family adapter's description
(:class:`~resdyn.models.adapters.base.MlpParts`, ``adapter.mlp_parts(layer)``); nothing here knows a family.

**Gemma 4's MLP map** adds, after h1 = x + N2(M(N1(x))), the per-layer-input branch and the layer scalar s:
h2 = h1 + N3(W_pp (phi(W_pg h1) * p_t)) with p_t fixed per token, out = s h2. With
q' = phi'(W_pg h1) * p_t, P = W_pp diag(q') W_pg and Q = W_down W_in(s):

    J_s = s (I + G)(I + Delta),  G = dN3 P,   so  E[J] = s (I + E[Delta] + E[G] + E[G Delta]),

    E[G]       = diag(g3) W_pp diag(E[c3 q']) W_pg - E[c3^3 (g3 z3) (P^T z3)^T] / d
    E[G Delta] = diag(g3) W_pp [(C o E[c q' (phi'(a) u)^T]) W_gate + (C o E[c q' phi(a)^T]) W_up] diag(g1)
                 - E[(c3^3 / d) (g3 z3) (dN1^T Q^T dN2^T P^T z3)^T]
                 - E[(c3 c2^3 / d) (g3 * P (g2 y)) (dN1^T Q^T y)^T]
                 - E[(c3 c2 c1^3 / d) (g3 * P (g2 * Q (g1 x))) x^T]

with C = W_pg diag(g2) W_down (d_pl x d_ff), c = c1 c2 c3 and o the elementwise product: the mean of
two per-sample diagonals around a fixed matrix is that matrix times the mean outer product of the
diagonals (sum_s diag(u_s) C diag(v_s) = C o sum_s u_s v_s^T). The first line of each mean is a weight
product done once per layer, the rank-one terms are per-sample vectors.

Cost: a few d x d_ff x d products per sublayer for the whole sample set plus O(n d d_ff) per batch,
instead of n d^2 d_ff for per-sample Jacobians. The attention sublayer's closed form lives in
:mod:`resdyn.jacobians.structured_attention`, the factored sums both add to in
:mod:`resdyn.jacobians.factored`. Mixture-of-experts MLP blocks (routing couples the branches inside
one norm) fall back to the autodiff backend, and the ``backend`` column says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from ..models.adapters.base import MlpParts
from ..models.precision import rms_norm_gain
from .autodiff import AutodiffBackend
from .factored import FactoredAccumulator, FactoredSum, FactoredTerm, NormAt, scalar_factor
from .structured_attention import attention_partial_sum, attention_view_of

__all__ = ["FactoredAccumulator", "FactoredSum", "FactoredTerm", "NormAt", "StructuredBackend", "gated_mlp_of",
           "mlp_partial_sum"]

log = logging.getLogger(__name__)


# -- the MLP map --------------------------------------------------------------------------------


def _known_norms(*norms) -> bool:
    """Is every present norm an RMSNorm of a known form (so that its derivative is the one in the docstring)?"""
    return all(norm is None or rms_norm_gain(norm) is not None for norm in norms)


def gated_mlp_of(adapter, layer) -> MlpParts | None:
    """The adapter's description of ``layer``'s MLP map when the closed form applies to it, else None.

    It applies to a gated MLP whose norms (and per-layer-input norm) are known RMSNorms. A branch scalar
    together with a per-layer-input branch is not written out (no family has both) and is left to autodiff.
    """
    parts = adapter.mlp_parts(layer)
    if parts is None or parts.kind != "gated":
        return None
    branch = parts.per_layer_input
    if branch is not None and parts.branch_scale is not None:
        return None
    if not _known_norms(parts.norm_before, parts.norm_after, branch.norm if branch is not None else None):
        return None
    return parts


def _activation_and_derivative(activation, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.enable_grad():
        leaf = a.detach().requires_grad_(True)
        value = activation(leaf)
        (derivative,) = torch.autograd.grad(value.sum(), leaf)
    return value.detach(), derivative


def _without_bias(linear: torch.nn.Module, output: torch.Tensor) -> torch.Tensor:
    return output - linear.bias if getattr(linear, "bias", None) is not None else output


@torch.no_grad()
def mlp_partial_sum(parts: MlpParts, x: torch.Tensor, per_layer_input: torch.Tensor | None = None) -> FactoredSum:
    """sum_s Delta_s over the rows x_s of ``x`` (n, d), J_s = s (I + m Delta_s), by the closed forms in the
    module docstring; the returned FactoredSum carries s and m.

    Each product with a d x d_ff weight reads the whole weight for a handful of rows (memory-bound, not
    compute-bound), so each is made once for all the vectors that need it: Q (g1 x) = W_down w once,
    and Q^T for y and for the per-layer branch's vector in one stacked pass.
    """
    d, n = x.shape[1], x.shape[0]
    mlp = parts.mlp
    norm1 = NormAt.of(parts.norm_before, x)
    normed = parts.norm_before(x) if parts.norm_before is not None else x
    a, u = mlp.gate_proj(normed), mlp.up_proj(normed)
    phi, phi_prime = _activation_and_derivative(mlp.act_fn, a)
    d1, d2 = phi_prime * u, phi  # dM/dn = W_down [diag(d1) W_gate + diag(d2) W_up]
    y = mlp.down_proj(phi * u)
    norm2 = NormAt.of(parts.norm_after, y)
    g1, c1, g2, c2 = norm1.gain, norm1.scale, norm2.gain, norm2.scale
    w_gate, w_up, w_down = mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight
    # W_in (g1 x) from the projections already made: (a - b) / c1 (c1 = 1 without a norm), no d x d_ff product
    gate_x, up_x = _without_bias(mlp.gate_proj, a) / c1[:, None], _without_bias(mlp.up_proj, u) / c1[:, None]
    w = d1 * gate_x + d2 * up_x  # W_in(s) (g1 x_s), (n, d_ff)
    branch = _PerLayerBranch.at(parts, x, y, norm2, per_layer_input) if parts.per_layer_input is not None else None
    # Q (g1 x), (n, d): only the pre-norm term and the per-layer branch use it (post-norm families skip the pass)
    q_of_gained_x = w @ w_down.T if parts.norm_before is not None or branch is not None else None
    y_down = q_transpose_y = q_transpose_branch = None
    if parts.norm_after is not None or branch is not None:
        rows = y if branch is None else torch.cat([y, branch.pulled])  # (n or 2n, d)
        rows_down = (rows @ w_down).view(-1, n, w_down.shape[1])  # (1 or 2, n, d_ff): d1, d2 broadcast, not copied
        pulled = ((rows_down * d1).flatten(0, 1) @ w_gate + (rows_down * d2).flatten(0, 1) @ w_up)  # Q^T rows
        rows_down = rows_down.flatten(0, 1)
        y_down, q_transpose_y, q_transpose_branch = rows_down[:n], pulled[:n], pulled[n:]

    weight = c1 * c2
    outer = []
    if parts.norm_before is not None:
        outer.append((-(g2 / d)[:, None] * ((c1**3 * c2)[:, None] * q_of_gained_x).T, x))
    if parts.norm_after is not None:
        outer.append((-((c1 * c2**3 / d)[:, None] * (g2 * y)).T, q_transpose_y * g1))
        if parts.norm_before is not None:
            sigma = (y_down * w).sum(-1)  # y^T W_down w
            outer.append((((sigma * c1**3 * c2**3 / d**2)[:, None] * (g2 * y)).T, x))
    terms = {"mlp": FactoredTerm(w_down, g2, g1, weighted=[(weight @ d1, w_gate), (weight @ d2, w_up)])}
    if branch is not None:
        branch.add_terms(parts, x, y, norm1, norm2, (d1, d2), (q_transpose_y, q_transpose_branch, q_of_gained_x),
                         terms, outer)
    return FactoredSum(terms, outer, scalar_factor(parts.output_scale, x.dtype),
                       scalar_factor(parts.branch_scale, x.dtype))


@dataclass
class _PerLayerBranch:
    """Gemma 4's per-layer-input branch at the samples' points: q' = phi'(W_pg h1) * p_t, z3, N3, and
    the vector N2^T P^T z3 that its first E[G Delta] rank-one term sends through Q^T."""

    q_prime: torch.Tensor  # (n, d_pl)
    z3: torch.Tensor  # (n, d)
    norm3: NormAt
    p_transpose_z3: torch.Tensor  # P^T z3, (n, d)
    pulled: torch.Tensor  # N2^T P^T z3, (n, d)

    @classmethod
    def at(cls, parts: MlpParts, x, y, norm2: NormAt, p) -> _PerLayerBranch:
        branch = parts.per_layer_input
        h1 = x + (parts.norm_after(y) if parts.norm_after is not None else y)
        a3 = branch.gate(h1)
        phi3, phi3_prime = _activation_and_derivative(branch.activation, a3)
        q_prime = phi3_prime * p
        z3 = branch.projection(phi3 * p)
        p_transpose_z3 = (q_prime * (z3 @ branch.projection.weight)) @ branch.gate.weight
        return cls(q_prime, z3, NormAt.of(branch.norm, z3), p_transpose_z3, norm2.apply_transpose(p_transpose_z3))

    def add_terms(self, parts: MlpParts, x, y, norm1, norm2, diagonals, made, terms, outer) -> None:
        """E[G] and E[G Delta] (module docstring); ``made`` = (Q^T y, Q^T N2^T P^T z3, Q (g1 x))."""
        branch, mlp = parts.per_layer_input, parts.mlp
        d = x.shape[1]
        d1, d2 = diagonals
        q_transpose_y, q_transpose_branch, q_of_gained_x = made
        q_prime, z3 = self.q_prime, self.z3
        g3, c3 = self.norm3.gain, self.norm3.scale
        w_pg, w_pp = branch.gate.weight, branch.projection.weight
        g1, c1, g2, c2 = norm1.gain, norm1.scale, norm2.gain, norm2.scale

        def p_apply(v):  # P v = W_pp diag(q') W_pg v
            return (q_prime * (v @ w_pg.T)) @ w_pp.T

        ones = torch.ones(d, dtype=x.dtype, device=x.device)
        # E[G]
        terms["per_layer"] = FactoredTerm(w_pp, g3, ones, weighted=[(c3 @ q_prime, w_pg)])
        outer.append((-((c3**3 / d)[:, None] * (g3 * z3)).T, self.p_transpose_z3))
        # E[G Delta]: the diagonal sandwich (Hadamard) term
        mixing = (w_pg * g2[None, :], mlp.down_proj.weight)  # C = W_pg diag(g2) W_down (d_pl x d_ff), in total()
        c = c1 * c2 * c3
        terms["per_layer_mlp"] = FactoredTerm(w_pp, g3, g1, hadamard=[
            (mixing, (c[:, None] * q_prime).T @ d1, mlp.gate_proj.weight),
            (mixing, (c[:, None] * q_prime).T @ d2, mlp.up_proj.weight)])
        # ... and its three rank-one terms
        outer.append((-((c3**3 / d)[:, None] * (g3 * z3)).T, norm1.apply_transpose(q_transpose_branch)))
        left_b = ((c3 * c2**3 / d)[:, None] * (g3 * p_apply(g2 * y))).T
        outer.append((-left_b, norm1.apply_transpose(q_transpose_y)))
        left_c = ((c3 * c2 * c1**3 / d)[:, None] * (g3 * p_apply(g2 * q_of_gained_x))).T
        outer.append((-left_c, x))


# -- the backend --------------------------------------------------------------------------------


class StructuredBackend:
    """Closed-form mean Jacobians where they apply; the autodiff backend elsewhere."""

    name = "structured"

    def __init__(self, fallback: AutodiffBackend | None = None) -> None:
        self.fallback = fallback or AutodiffBackend()
        self._reported: set[tuple[str, str]] = set()
        self._pending: dict[int, tuple] = {}  # id(moments) -> (moments, FactoredAccumulator)

    @staticmethod
    def _closed_form(adapter, layer, sublayer: str):
        if sublayer == "mlp":
            return gated_mlp_of(adapter, layer)
        return attention_view_of(adapter, layer)

    def covers(self, adapter, layer, sublayer: str) -> bool:
        return self._closed_form(adapter, layer, sublayer) is not None

    def backend_for(self, adapter, layer, sublayer: str) -> str:
        if self.covers(adapter, layer, sublayer):
            return self.name
        parts = adapter.mlp_parts(layer) if sublayer == "mlp" else None
        reason = "mixture of experts" if parts is not None and parts.kind == "mixture_of_experts" else "no closed form"
        return f"{self.fallback.name} (structured fallback: {reason})"

    def sample_jacobians(self, adapter, layer, inputs, sublayer: str, position: int) -> torch.Tensor:
        """Each row's own Jacobian at ``position``: the mean's closed form over that one observation (n = 1,
        no averaging), so a kept sample costs the closed form's matrix products (for the gated MLP about
        2 d d_ff d flops, for attention about 2 d (h d_head) d per term) instead of d backward passes;
        autodiff where no closed form applies (mixture-of-experts blocks)."""
        closed_form = self._closed_form(adapter, layer, sublayer)
        if closed_form is None:
            return self.fallback.sample_jacobians(adapter, layer, inputs, sublayer, position)
        matrices = []
        for row in range(inputs.hidden.shape[0]):
            one = inputs.select([row])
            if position in inputs.pre_mlp_rows:
                one.pre_mlp_rows[position] = inputs.pre_mlp_rows[position][row:row + 1]
            accumulator = FactoredAccumulator()
            accumulator.add(self._partial_sum(closed_form, adapter, layer, one, sublayer, position), 1)
            matrices.append(accumulator.mean())
        return torch.stack(matrices)

    @staticmethod
    def _partial_sum(closed_form, adapter, layer, inputs, sublayer: str, position: int):
        """sum over the batch of (J - I) at ``position``, factored; the attention map also leaves the pre-MLP
        row at ``position`` in ``inputs.pre_mlp_rows`` (exactly the row the MLP map then starts from)."""
        if sublayer == "mlp":
            x = inputs.pre_mlp_rows.get(position)
            if x is None:
                x = adapter.positional_function(layer, inputs, sublayer, position)[1]
            per_layer_input = inputs.arguments.get("per_layer_input")
            if per_layer_input is not None:
                per_layer_input = per_layer_input[:, position]
            return mlp_partial_sum(closed_form, x, per_layer_input)
        partial, pre_mlp_row = attention_partial_sum(closed_form, inputs.hidden, inputs.arguments, position)
        inputs.pre_mlp_rows[position] = pre_mlp_row
        return partial

    def accumulate(self, adapter, layer, inputs, sublayer: str, position: int, moments) -> torch.Tensor | None:
        """Add this batch to ``moments``: at once through the fallback, or as a factored sum that
        :meth:`finish` turns into the mean (the d x d_ff x d weight products happen there, once per ``moments``:
        with fold means on, once per fold)."""
        closed_form = self._closed_form(adapter, layer, sublayer)
        if closed_form is None:
            kind = (adapter.family, sublayer)
            if kind not in self._reported:
                self._reported.add(kind)
                log.warning("structured backend: %s for the %s sublayer of %s; using autodiff",
                            self.backend_for(adapter, layer, sublayer).split(": ", 1)[-1].rstrip(")"), sublayer,
                            adapter.family)
            return self.fallback.accumulate(adapter, layer, inputs, sublayer, position, moments)
        partial = self._partial_sum(closed_form, adapter, layer, inputs, sublayer, position)
        if id(moments) not in self._pending:
            self._pending[id(moments)] = (moments, FactoredAccumulator())
        self._pending[id(moments)][1].add(partial, inputs.hidden.shape[0])
        return None

    def finish(self) -> None:
        """Turn every pending factored sum into its mean (call once, after the layer's last batch)."""
        for moments, accumulator in self._pending.values():
            moments.add_sum(accumulator.mean() * accumulator.count, accumulator.count)
        self._pending.clear()
