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
:mod:`resdyn.jacobians.structured_attention`. Mixture-of-experts MLP blocks (routing couples the
branches inside one norm) fall back to the autodiff backend, and the ``backend`` column says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from ..models.adapters.families import Gemma3Adapter, Gemma4Adapter, PostNormAdapter, PreNormAdapter
from ..models.precision import rms_norm_gain
from .autodiff import AutodiffBackend

log = logging.getLogger(__name__)

INNER_BLOCK = 1024  # rows of the inner dimension combined at a time when a term is turned into its d x d total


# -- factored sums ------------------------------------------------------------------------------


@dataclass
class FactoredTerm:
    """One factored piece of sum_s (J_s - I):

        diag(row_gain) left [core + blocks right_b + sum_k diag(weights_k) right_k
                             + sum_j ((A_j B_j) o moments_j) right'_j] diag(column_gain)

    ``core``, ``blocks`` (per head: (heads, m / heads, e), applied to right_b (heads, e, d) head by
    head), ``weights`` and ``moments`` are sums over samples (added batch by batch); ``left``, the
    gains, the right factors and the fixed products A_j B_j are the layer's weights (shared by all
    batches), so the weight products (d x m x d, and A B) happen once, in :meth:`total`.
    """

    left: torch.Tensor  # d x m
    row_gain: torch.Tensor  # d
    column_gain: torch.Tensor  # d
    core: torch.Tensor | None = None  # m x d
    blocked: tuple | None = None  # (blocks heads x m/heads x e, right heads x e x d)
    weighted: list = field(default_factory=list)  # [(weights m, right m x d)]
    hadamard: list = field(default_factory=list)  # [((A m x k, B k x f), moments m x f, right f x d)]

    def absorb(self, other: FactoredTerm) -> None:
        if other.core is not None:
            self.core = other.core.clone() if self.core is None else self.core.add_(other.core)
        if other.blocked is not None:
            self.blocked[0].add_(other.blocked[0])
        for (weights, _), (more, _) in zip(self.weighted, other.weighted):
            weights.add_(more)
        for (_, moments, _), (_, more, _) in zip(self.hadamard, other.hadamard):
            moments.add_(more)

    @torch.no_grad()
    def total(self) -> torch.Tensor:
        """The d x d sum, the inner dimension taken in blocks so that no m x d temporary is ever whole
        (at d = 4096, d_ff = 14336 one such temporary is 470 MB). The blocked part is folded into the
        core (in place) on the first call."""
        m = self.left.shape[1]
        total = torch.zeros(self.left.shape[0], self.column_gain.shape[0], dtype=self.left.dtype,
                            device=self.left.device)
        core = self.core
        if self.blocked is not None:  # m x d already, like the core: added into it, head by head
            blocks, right = self.blocked
            core = torch.zeros(m, right.shape[-1], dtype=right.dtype, device=right.device) if core is None else \
                core.contiguous()
            core.view(blocks.shape[0], -1, right.shape[-1]).baddbmm_(blocks, right)
            self.core, self.blocked = core, None  # folded: a second call gives the same total
        products: dict[int, torch.Tensor] = {}  # once per layer (independent of the samples), once per pair
        for pair, _, _ in self.hadamard:
            if id(pair) not in products:
                products[id(pair)] = pair[0] @ pair[1]
        fixed = [products[id(pair)] for pair, _, _ in self.hadamard]
        for start in range(0, m, INNER_BLOCK):
            rows = slice(start, min(m, start + INNER_BLOCK))
            block = core[rows].clone() if core is not None else None
            for weights, right in self.weighted:
                if block is None:
                    block = weights[rows, None] * right[rows]
                else:
                    block.addcmul_(weights[rows, None], right[rows])
            for product, (_, moments, right) in zip(fixed, self.hadamard):
                part = (product[rows] * moments[rows]) @ right
                block = part if block is None else block.add_(part)
            block.mul_(self.column_gain[None, :])
            total.addmm_(self.left[:, rows], block)
        return total.mul_(self.row_gain[:, None])


@dataclass
class FactoredSum:
    """sum_s (J_s - I) over one batch: named factored terms plus rank-one terms (d x n, n x d) pairs."""

    terms: dict[str, FactoredTerm]
    outer: list
    scale: float | torch.Tensor = 1.0  # a constant output scale s: the mean is s (I + sum / n)


class FactoredAccumulator:
    """Running sum of one sublayer's FactoredSums, with one d x d buffer for all rank-one terms."""

    def __init__(self) -> None:
        self.terms: dict[str, FactoredTerm] = {}
        self.outer: torch.Tensor | None = None
        self.scale = 1.0
        self.count = 0

    def add(self, partial: FactoredSum, count: int) -> None:
        self.count += count
        self.scale = partial.scale
        for name, term in partial.terms.items():
            if name in self.terms:
                self.terms[name].absorb(term)
            else:
                self.terms[name] = term
        if self.outer is None:
            reference = next(iter(partial.terms.values())).left
            d = reference.shape[0]
            self.outer = torch.zeros(d, d, dtype=reference.dtype, device=reference.device)
        for left, right in partial.outer:
            self.outer.addmm_(left, right)

    def mean(self) -> torch.Tensor:
        """s (I + sum / n)."""
        total = self.outer
        for term in self.terms.values():
            total = total.add_(term.total())
        total.div_(self.count)
        total.diagonal().add_(1.0)
        return total.mul_(self.scale)


# -- norms --------------------------------------------------------------------------------------


def _norm_terms(norm, z: torch.Tensor):
    """(gain g, per-sample c = 1 / r(z)) of an RMSNorm; (1, 1) when the norm is absent."""
    if norm is None:
        return (torch.ones(z.shape[-1], dtype=z.dtype, device=z.device),
                torch.ones(z.shape[0], dtype=z.dtype, device=z.device))
    gain, eps = rms_norm_gain(norm)
    gain = torch.ones(z.shape[-1], dtype=z.dtype, device=z.device) if gain is None else gain.to(z.dtype)
    return gain, torch.rsqrt(z.pow(2).mean(-1) + eps)


@dataclass(frozen=True)
class NormAt:
    """An RMSNorm's derivative at per-sample points z (rows): dN v = c g v - c^3 (g z)(z . v) / m."""

    gain: torch.Tensor
    scale: torch.Tensor  # c per sample
    z: torch.Tensor
    present: bool

    @classmethod
    def of(cls, norm, z: torch.Tensor) -> NormAt:
        gain, scale = _norm_terms(norm, z)
        return cls(gain, scale, z, norm is not None)

    def apply(self, v: torch.Tensor) -> torch.Tensor:
        if not self.present:
            return v
        c = self.scale[:, None]
        return c * self.gain * v - c**3 * (self.gain * self.z) * (self.z * v).sum(-1, keepdim=True) / v.shape[-1]

    def apply_transpose(self, w: torch.Tensor) -> torch.Tensor:
        if not self.present:
            return w
        c = self.scale[:, None]
        return c * self.gain * w - c**3 * self.z * (self.gain * self.z * w).sum(-1, keepdim=True) / w.shape[-1]


# -- the MLP map --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GatedMlp:
    """The pieces of one gated-MLP residual map (None: that norm or branch is absent)."""

    mlp: torch.nn.Module
    norm_in: torch.nn.Module | None
    norm_out: torch.nn.Module | None
    per_layer: torch.nn.Module | None = None  # the decoder layer, when it has Gemma 4's per-layer-input branch
    output_scale: torch.Tensor | None = None  # Gemma 4's layer_scalar


def gated_mlp_of(adapter, layer) -> GatedMlp | None:
    """The closed-form view of ``layer``'s MLP map, or None when the closed form does not apply."""
    mlp = getattr(layer, "mlp", None)
    if mlp is None or not all(hasattr(mlp, name) for name in ("gate_proj", "up_proj", "down_proj", "act_fn")):
        return None
    if type(adapter) is PreNormAdapter:
        pieces = GatedMlp(mlp, layer.post_attention_layernorm, None)
    elif type(adapter) is PostNormAdapter:
        pieces = GatedMlp(mlp, None, layer.post_feedforward_layernorm)
    elif type(adapter) is Gemma3Adapter:
        pieces = GatedMlp(mlp, layer.pre_feedforward_layernorm, layer.post_feedforward_layernorm)
    elif type(adapter) is Gemma4Adapter:
        if getattr(layer, "enable_moe_block", False):
            return None
        per_layer = layer if getattr(layer, "hidden_size_per_layer_input", 0) else None
        if per_layer is not None and rms_norm_gain(layer.post_per_layer_input_norm) is None:
            return None
        pieces = GatedMlp(mlp, layer.pre_feedforward_layernorm, layer.post_feedforward_layernorm, per_layer,
                          layer.layer_scalar)
    else:
        return None
    for norm in (pieces.norm_in, pieces.norm_out):
        if norm is not None and rms_norm_gain(norm) is None:
            return None
    return pieces


def _activation_and_derivative(activation, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.enable_grad():
        leaf = a.detach().requires_grad_(True)
        value = activation(leaf)
        (derivative,) = torch.autograd.grad(value.sum(), leaf)
    return value.detach(), derivative


def _without_bias(linear: torch.nn.Module, output: torch.Tensor) -> torch.Tensor:
    return output - linear.bias if getattr(linear, "bias", None) is not None else output


@torch.no_grad()
def mlp_partial_sum(pieces: GatedMlp, x: torch.Tensor, per_layer_input: torch.Tensor | None = None) -> FactoredSum:
    """sum_s (J_s - I) over the rows x_s of ``x`` (n, d), by the closed forms in the module docstring.

    Each product with a d x d_ff weight reads the whole weight for a handful of rows (memory-bound, not
    compute-bound), so each is made once for all the vectors that need it: Q (g1 x) = W_down w once,
    and Q^T for y and for the per-layer branch's vector in one stacked pass.
    """
    d, n = x.shape[1], x.shape[0]
    mlp = pieces.mlp
    norm1 = NormAt.of(pieces.norm_in, x)
    normed = pieces.norm_in(x) if pieces.norm_in is not None else x
    a, u = mlp.gate_proj(normed), mlp.up_proj(normed)
    phi, phi_prime = _activation_and_derivative(mlp.act_fn, a)
    d1, d2 = phi_prime * u, phi  # dM/dn = W_down [diag(d1) W_gate + diag(d2) W_up]
    y = mlp.down_proj(phi * u)
    norm2 = NormAt.of(pieces.norm_out, y)
    g1, c1, g2, c2 = norm1.gain, norm1.scale, norm2.gain, norm2.scale
    w_gate, w_up, w_down = mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight
    # W_in (g1 x) from the projections already made: (a - b) / c1 (c1 = 1 without a norm), no d x d_ff product
    gate_x, up_x = _without_bias(mlp.gate_proj, a) / c1[:, None], _without_bias(mlp.up_proj, u) / c1[:, None]
    w = d1 * gate_x + d2 * up_x  # W_in(s) (g1 x_s), (n, d_ff)
    branch = _PerLayerBranch.at(pieces, x, y, norm2, per_layer_input) if pieces.per_layer is not None else None
    # Q (g1 x), (n, d): only the pre-norm term and the per-layer branch use it (post-norm families skip the pass)
    q_of_gained_x = w @ w_down.T if pieces.norm_in is not None or branch is not None else None
    y_down = q_transpose_y = q_transpose_branch = None
    if pieces.norm_out is not None or branch is not None:
        rows = y if branch is None else torch.cat([y, branch.pulled])  # (n or 2n, d)
        rows_down = (rows @ w_down).view(-1, n, w_down.shape[1])  # (1 or 2, n, d_ff): d1, d2 broadcast, not copied
        pulled = ((rows_down * d1).flatten(0, 1) @ w_gate + (rows_down * d2).flatten(0, 1) @ w_up)  # Q^T rows
        rows_down = rows_down.flatten(0, 1)
        y_down, q_transpose_y, q_transpose_branch = rows_down[:n], pulled[:n], pulled[n:]

    weight = c1 * c2
    outer = []
    if pieces.norm_in is not None:
        outer.append((-(g2 / d)[:, None] * ((c1**3 * c2)[:, None] * q_of_gained_x).T, x))
    if pieces.norm_out is not None:
        outer.append((-((c1 * c2**3 / d)[:, None] * (g2 * y)).T, q_transpose_y * g1))
        if pieces.norm_in is not None:
            sigma = (y_down * w).sum(-1)  # y^T W_down w
            outer.append((((sigma * c1**3 * c2**3 / d**2)[:, None] * (g2 * y)).T, x))
    terms = {"mlp": FactoredTerm(w_down, g2, g1, weighted=[(weight @ d1, w_gate), (weight @ d2, w_up)])}
    scale = pieces.output_scale.to(x.dtype) if pieces.output_scale is not None else 1.0
    if branch is not None:
        branch.add_terms(pieces, x, y, norm1, norm2, (d1, d2), (q_transpose_y, q_transpose_branch, q_of_gained_x),
                         terms, outer)
    return FactoredSum(terms, outer, scale)


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
    def at(cls, pieces: GatedMlp, x, y, norm2: NormAt, p) -> _PerLayerBranch:
        layer = pieces.per_layer
        h1 = x + (pieces.norm_out(y) if pieces.norm_out is not None else y)
        a3 = layer.per_layer_input_gate(h1)
        phi3, phi3_prime = _activation_and_derivative(layer.act_fn, a3)
        q_prime = phi3_prime * p
        z3 = layer.per_layer_projection(phi3 * p)
        p_transpose_z3 = (q_prime * (z3 @ layer.per_layer_projection.weight)) @ layer.per_layer_input_gate.weight
        return cls(q_prime, z3, NormAt.of(layer.post_per_layer_input_norm, z3), p_transpose_z3,
                   norm2.apply_transpose(p_transpose_z3))

    def add_terms(self, pieces, x, y, norm1, norm2, diagonals, made, terms, outer) -> None:
        """E[G] and E[G Delta] (module docstring); ``made`` = (Q^T y, Q^T N2^T P^T z3, Q (g1 x))."""
        layer, mlp = pieces.per_layer, pieces.mlp
        d = x.shape[1]
        d1, d2 = diagonals
        q_transpose_y, q_transpose_branch, q_of_gained_x = made
        q_prime, z3 = self.q_prime, self.z3
        g3, c3 = self.norm3.gain, self.norm3.scale
        w_pg, w_pp = layer.per_layer_input_gate.weight, layer.per_layer_projection.weight
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
        from .structured_attention import attention_view_of

        if sublayer == "mlp":
            return gated_mlp_of(adapter, layer)
        return attention_view_of(adapter, layer)

    def covers(self, adapter, layer, sublayer: str) -> bool:
        return self._closed_form(adapter, layer, sublayer) is not None

    def backend_for(self, adapter, layer, sublayer: str) -> str:
        if self.covers(adapter, layer, sublayer):
            return self.name
        reason = "mixture of experts" if sublayer == "mlp" and getattr(layer, "enable_moe_block", False) else \
            "no closed form"
        return f"{self.fallback.name} (structured fallback: {reason})"

    def sample_jacobians(self, adapter, layer, inputs, sublayer: str, position: int) -> torch.Tensor:
        return self.fallback.sample_jacobians(adapter, layer, inputs, sublayer, position)

    def accumulate(self, adapter, layer, inputs, sublayer: str, position: int, moments) -> torch.Tensor | None:
        """Add this batch to ``moments``: at once through the fallback, or as a factored sum that
        :meth:`finish` turns into the mean (the d x d_ff x d weight products happen there, once)."""
        pieces = self._closed_form(adapter, layer, sublayer)
        if pieces is None:
            kind = (type(adapter).__name__, sublayer)
            if kind not in self._reported:
                self._reported.add(kind)
                log.warning("structured backend: %s for the %s sublayer of %s; using autodiff",
                            self.backend_for(adapter, layer, sublayer).split(": ", 1)[-1].rstrip(")"), sublayer,
                            type(adapter).__name__)
            return self.fallback.accumulate(adapter, layer, inputs, sublayer, position, moments)
        if sublayer == "mlp":
            x = inputs.pre_mlp_rows.get(position)
            if x is None:
                x = adapter.positional_function(layer, inputs, sublayer, position)[1]
            per_layer_input = inputs.arguments.get("per_layer_input")
            if per_layer_input is not None:
                per_layer_input = per_layer_input[:, position]
            partial = mlp_partial_sum(pieces, x, per_layer_input)
        else:
            from .structured_attention import attention_partial_sum

            partial, pre_mlp_row = attention_partial_sum(pieces, inputs.hidden, inputs.arguments, position)
            inputs.pre_mlp_rows[position] = pre_mlp_row  # the MLP step needs exactly this row
        if id(moments) not in self._pending:
            self._pending[id(moments)] = (moments, FactoredAccumulator())
        self._pending[id(moments)][1].add(partial, inputs.hidden.shape[0])
        return None

    def finish(self) -> None:
        """Turn every pending factored sum into its mean (call once, after the layer's last batch)."""
        for moments, accumulator in self._pending.values():
            moments.add_sum(accumulator.mean() * accumulator.count, accumulator.count)
        self._pending.clear()
