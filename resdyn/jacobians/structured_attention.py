"""Exact mean of the attention sublayer's diagonal Jacobian block, in closed form.

Sublayer out_t = x + m N2(y), y = W_o o(n_t) + b, n_t = N1(x) (N1 / N2: optional RMSNorms, see
:mod:`resdyn.jacobians.structured`; m: the branch's output scalar, Granite's ``residual_multiplier``,
1 elsewhere), with only row t of the (normalised) sequence varying. Write Core = dy/dn. With c = 1/r
and gains g as for the MLP,

    E[J - I] / m = diag(g2) E[c1 c2 Core] diag(g1)
                 - diag(g2) E[c2 c1^3 (Core (g1 x)) x^T] / d
                 - E[c2^3 c1 (g2 y) (Core^T y)^T] diag(g1) / d
                 + E[c2^3 c1^3 (y . Core (g1 x)) (g2 y) x^T] / d^2.

Which norms and scalar the layer has is the family adapter's description
(:class:`~resdyn.models.adapters.base.AttentionParts`, ``adapter.attention_parts(layer)``); the rest
is read from the attention module itself, its logit scale included (the module's ``scaling``, which
is Granite's ``attention_multiplier``).

The last three need Core times one vector per sample, applied from the per-sample factors below
(no autodiff). Per head h (KV group k), with post-RoPE query q_h, keys K_k and values V_k over the
positions, logits s_j = scale q_h . k_j, capped z_j = cap tanh(s_j / cap) (when the forward caps
them; w_j = dz_j / ds_j = 1 - tanh^2, else z = s, w = 1), weights p_h = softmax(z + mask row) and
output o_h = V_k^T p_h, and R_t the (linear) RoPE map at position t:

    d o_h / d q_h   = s sum_j p_hj w_j (v_j - o_h) k_j^T                        (hd x hd)
    d o_h / d k_t   = s p_ht w_t (v_t - o_h) q_h^T                              (rank one)
    d o_h / d v_t   = p_ht I

then through R_t, the q/k norms (none, per head, or over the full projection: c diag(g) minus a
rank-one term), the value norm (Gemma 4's scale-free per-head norm: c I - c^3 v~ v~^T / hd) and
W_q, W_k, W_v (Gemma 4's ``attention_k_eq_v``: the values are the raw keys, so W_k). In a layer
that reuses an earlier layer's keys and values (Gemma 4 KV sharing), only the query depends on h_t:
the k and v terms vanish. The per-sample d_head x d_head blocks d o_h / d q_h are kept as their two
(T x d_head) factors and summed over samples in one product, scalars are averaged, rank-one terms are
summed in factored form, and the weights (W_q, W_o) are applied once per layer, at the end:
O(n T d d_head + n d^2) per batch and O(d^2 H d_head) per layer, for n samples, instead of n d
per-sample backward passes.

The mask row is taken from what the model passed, whatever its attention implementation
(:func:`resdyn.models.masks.additive_mask_row`): an additive float mask as it is, a boolean mask as
0 / -inf, and no mask (sdpa's causal fast path) as the causal mask of the module (or none, for a
bidirectional one). Implementations whose masks are implicit in kernels (flash, flex) are refused by
the engine.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..models.masks import additive_mask_row
from ..models.precision import rms_norm_gain
from .factored import FactoredSum, FactoredTerm, NormAt, scalar_factor


@dataclass(frozen=True)
class AttentionView:
    """What the closed form needs of one attention map: the adapter's
    :class:`~resdyn.models.adapters.base.AttentionParts` (norms and branch scalar) and what it reads off
    the attention module."""

    attention: torch.nn.Module
    norm_before: torch.nn.Module | None
    norm_after: torch.nn.Module | None
    branch_scale: float | None  # m: out = x + m N2(y)
    qk_norm: str  # "none", "per_head" or "full"
    v_norm: torch.nn.Module | None  # per-head value norm (Gemma 4)
    kv_shared: bool  # keys and values reused from an earlier layer (Gemma 4)
    k_eq_v: bool  # values are the raw keys (Gemma 4 attention_k_eq_v)
    softcap: float | None  # logit soft-capping the forward applies


@functools.lru_cache(maxsize=64)
def _forward_passes_softcap(attention_class: type) -> bool:
    """Does this attention class's forward hand a soft-cap to its attention function? (Gemma 3 keeps
    ``attn_logit_softcapping`` in its config but, in this transformers, does not pass it.)"""
    try:
        return "softcap=" in inspect.getsource(attention_class.forward)
    except (OSError, TypeError):
        return False


def applied_softcap(attention: torch.nn.Module) -> float | None:
    cap = getattr(attention, "attn_logit_softcapping", None)
    return float(cap) if cap and _forward_passes_softcap(type(attention)) else None


def attention_view_of(adapter, layer) -> AttentionView | None:
    """The closed-form view of ``layer``'s attention map, from the adapter's description
    (``adapter.attention_parts(layer)``) and the attention module; None (then: autodiff) when the adapter
    gives none or the module is not one the closed form covers."""
    parts = adapter.attention_parts(layer)
    if parts is None:
        return None
    attention = parts.attention
    if not all(hasattr(attention, name) for name in ("q_proj", "o_proj", "head_dim", "scaling")):
        return None
    kv_shared = bool(getattr(attention, "is_kv_shared_layer", False))
    if not kv_shared and getattr(attention, "k_proj", None) is None:
        return None
    k_eq_v = not kv_shared and getattr(attention, "v_proj", None) is None
    norm_before, norm_after = parts.norm_before, parts.norm_after
    qk_norm = "none"
    if getattr(attention, "q_norm", None) is not None:
        width = attention.q_norm.weight.shape[0] if getattr(attention.q_norm, "weight", None) is not None else \
            attention.head_dim
        qk_norm = "per_head" if width == attention.head_dim else "full"
        norms = [attention.q_norm] + ([attention.k_norm] if not kv_shared else [])
        if any(rms_norm_gain(norm) is None for norm in norms):
            return None
    v_norm = getattr(attention, "v_norm", None) if not kv_shared else None
    for norm in (norm_before, norm_after, v_norm):
        if norm is not None and rms_norm_gain(norm) is None:
            return None
    return AttentionView(attention, norm_before, norm_after, parts.branch_scale, qk_norm, v_norm, kv_shared, k_eq_v,
                         applied_softcap(attention))


def rotary(attention) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """The module's own RoPE as x (B, H, T, hd) -> rotated, whichever signature its file uses
    (``(q, k, cos, sin)`` in most families, ``(x, cos, sin, unsqueeze_dim)`` in Gemma 4)."""
    apply = sys.modules[type(attention).__module__].apply_rotary_pos_emb
    parameters = list(inspect.signature(apply).parameters)
    if parameters[:2] == ["q", "k"]:
        return lambda x, cos, sin: apply(x, x, cos, sin)[0]
    return lambda x, cos, sin: apply(x, cos, sin, unsqueeze_dim=1)


def _rope_matrix(rope, cos_t: torch.Tensor, sin_t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """R_t (hd x hd) of the module's own RoPE at one position, read off the identity."""
    identity = torch.eye(cos_t.shape[-1], dtype=dtype, device=cos_t.device)[None, None]  # rows e_i as (1, 1, hd, hd)
    rotated = rope(identity, cos_t[None, None], sin_t[None, None])
    return rotated[0, 0].T  # column i = R e_i


def _norm_vector_jacobian(norm, z: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(dN/dz)^T v for an RMSNorm over the last axis (row-wise): c g v - c^3 z (g z . v) / m."""
    gain, eps = rms_norm_gain(norm)
    c = torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps)
    gain = torch.ones_like(z) if gain is None else gain.to(z.dtype)
    return c * gain * v - c**3 * z * ((gain * z * v).sum(-1, keepdim=True)) / z.shape[-1]


@dataclass
class AttentionPieces:
    """Per-sample factors of d o / d n at one position (o: the heads' outputs before W_o)."""

    # the (hd x hd) block s sum_j p_j w_j (v_j - o) k_j^T of every sample and head, kept as its two
    # factors (rank <= T): never built, since applying them costs T hd per vector instead of hd^2 and the
    # per-sample blocks (B H hd^2 floats, 268 MB at B = 16, H = 8, hd = 512) are only ever summed
    value_factor: torch.Tensor  # (B, H, T, hd): s p_j w_j (v_j - o)
    key_factor: torch.Tensor  # (B, H, T, hd): k_j
    rope: torch.Tensor  # (hd, hd): R_t
    qk_norm: str
    q_gain: torch.Tensor | None  # (H, hd)
    q_scale: torch.Tensor | None  # (B, H): c of the q norm (per head or shared)
    q_raw: torch.Tensor  # (B, H, hd): q~ before the q norm
    w_q: torch.Tensor  # (H, hd, d)
    output: torch.Tensor  # (B, H, hd): o
    # the k and v terms (None in a layer that reuses an earlier layer's keys and values)
    k_left: torch.Tensor | None = None  # (B, H, hd): s p_t w_t (v_t - o)
    k_right: torch.Tensor | None = None  # (B, H, d): q^T R_t dk/dk~ W_k
    p_t: torch.Tensor | None = None  # (B, H)
    w_v: torch.Tensor | None = None  # (H_kv, hd, d): one block per KV group, shared by its query heads
    v_raw: torch.Tensor | None = None  # (B, H_kv, hd): v~_t before the value norm
    v_scale: torch.Tensor | None = None  # (B, H_kv): c of the value norm
    v_gain: torch.Tensor | None = None  # (hd,): gain of the value norm (ones when scale-free)

    @property
    def has_kv_terms(self) -> bool:
        return self.k_left is not None

    def _q_norm(self, u: torch.Tensor, transpose: bool) -> torch.Tensor:
        """(dq/dq~) u or its transpose, per head; dq/dq~ = c diag(g) - c^3 (g q~) q~^T / m."""
        if self.qk_norm == "none":
            return u
        c = self.q_scale[:, :, None]
        gq = self.q_gain[None] * self.q_raw
        if self.qk_norm == "per_head":
            width = u.shape[-1]
            along = ((self.q_raw if not transpose else gq) * u).sum(-1, keepdim=True)
        else:
            width = u.shape[-1] * u.shape[-2]
            along = ((self.q_raw if not transpose else gq) * u).sum((-1, -2), keepdim=True)
        return c * self.q_gain[None] * u - c**3 * (gq if not transpose else self.q_raw) * along / width

    def _v_norm(self, u: torch.Tensor) -> torch.Tensor:
        """(dv/dv~) u per KV group (symmetric up to the gain: transposed, gain and v~ swap sides)."""
        if self.v_raw is None:
            return u
        c = self.v_scale[:, :, None]
        return c * self.v_gain * u - c**3 * (self.v_gain * self.v_raw) * (self.v_raw * u).sum(-1, keepdim=True) / u.shape[-1]

    def _v_norm_transpose(self, u: torch.Tensor) -> torch.Tensor:
        if self.v_raw is None:
            return u
        c = self.v_scale[:, :, None]
        gv = self.v_gain * self.v_raw
        return c * self.v_gain * u - c**3 * self.v_raw * (gv * u).sum(-1, keepdim=True) / u.shape[-1]

    def _blocks_times(self, u: torch.Tensor) -> torch.Tensor:
        """block u per sample and head: (B, H, hd) -> (B, H, hd)."""
        return torch.einsum("bhjd,bhj->bhd", self.value_factor, torch.einsum("bhje,bhe->bhj", self.key_factor, u))

    def _blocks_transpose_times(self, w: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bhje,bhj->bhe", self.key_factor, torch.einsum("bhjd,bhd->bhj", self.value_factor, w))

    def _blocks_rope_times(self, u: torch.Tensor) -> torch.Tensor:
        """block R_t u per sample and head, (B, H, hd)."""
        return self._blocks_times(u @ self.rope.T)

    def apply(self, v: torch.Tensor) -> torch.Tensor:
        """(d o / d n) v for a per-sample vector v (B, d) -> (B, H, hd)."""
        q_direction = self._q_norm(torch.einsum("hfx,bx->bhf", self.w_q, v), transpose=False)
        out = self._blocks_rope_times(q_direction)
        if not self.has_kv_terms:
            return out
        out = out + self.k_left * (self.k_right * v[:, None]).sum(-1, keepdim=True)
        group = self.p_t.shape[1] // self.w_v.shape[0]
        values = self._v_norm(torch.einsum("kfx,bx->bkf", self.w_v, v)).repeat_interleave(group, dim=1)
        return out + self.p_t[:, :, None] * values

    def apply_transpose(self, w: torch.Tensor) -> torch.Tensor:
        """(d o / d n)^T w for per-sample w (B, H, hd) -> (B, d)."""
        back = self._blocks_transpose_times(w)
        back = self._q_norm(torch.einsum("ef,bhe->bhf", self.rope, back), transpose=True)
        out = torch.einsum("hfx,bhf->bx", self.w_q, back)
        if not self.has_kv_terms:
            return out
        out = out + torch.einsum("bhx,bh->bx", self.k_right, (self.k_left * w).sum(-1))
        n_kv = self.w_v.shape[0]
        by_group = (self.p_t[:, :, None] * w).view(w.shape[0], n_kv, -1, w.shape[-1]).sum(2)
        return out + torch.einsum("kfx,bkf->bx", self.w_v, self._v_norm_transpose(by_group))

    def weighted_sum(self, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """sum_s weights_s (d o / d n)_s as a (H hd) x d matrix, in two parts: per-head (H, hd, hd) blocks
        that multiply W_q (H, hd, d) head by head, and the rest ((H hd) x d, or None). The blocks are kept
        apart so that the (H hd) x hd x d product with W_q is made once per layer, not once per batch."""
        n_heads, head_dim, d = self.w_q.shape
        weights_by_head = weights[:, None] if self.qk_norm == "none" else weights[:, None] * self.q_scale
        # sum over samples first: (H, hd, hd) blocks, then R_t and the q gain
        averaged = torch.einsum("bhjd,bhje->hde", weights_by_head[:, :, None, None] * self.value_factor,
                                self.key_factor) @ self.rope
        total = None
        if self.qk_norm != "none":  # the q gain, and the rank-one part of the q norm: -c^3 / m (M R (g q~)) (q~^T W_q)
            averaged.mul_(self.q_gain[:, None, :])
            left = self._blocks_rope_times(self.q_gain[None] * self.q_raw)
            if self.qk_norm == "per_head":
                right = torch.einsum("bhf,hfx->bhx", self.q_raw, self.w_q)
                total = -torch.einsum("bhd,bhx->hdx", (weights[:, None] * self.q_scale**3 / head_dim)[:, :, None] * left,
                                      right)
            else:
                right = torch.einsum("bhf,hfx->bx", self.q_raw, self.w_q)
                coefficient = weights * self.q_scale[:, 0] ** 3 / (n_heads * head_dim)
                total = -torch.einsum("bhd,bx->hdx", coefficient[:, None, None] * left, right)
        if not self.has_kv_terms:
            return averaged, None if total is None else total.reshape(n_heads * head_dim, d)
        k_part = torch.einsum("bhd,bhx->hdx", weights[:, None, None] * self.k_left, self.k_right)
        total = k_part if total is None else total.add_(k_part)
        n_kv = self.w_v.shape[0]
        group = n_heads // n_kv
        weighted_p = weights[:, None] * self.p_t  # (B, H)
        if self.v_raw is None:
            value_weights = weighted_p.sum(0).view(n_kv, group)
            total += (value_weights[:, :, None, None] * self.w_v[:, None]).reshape(n_heads, head_dim, d)
        else:  # p_t (c diag(g) - c^3 (g v~) v~^T / hd) W_v per head, summed over samples
            per_head_scale = weighted_p * self.v_scale.repeat_interleave(group, dim=1)
            gained = self.v_gain[None, :, None] * self.w_v  # (H_kv, hd, d)
            total += (per_head_scale.sum(0).view(n_kv, group)[:, :, None, None] * gained[:, None]).reshape(
                n_heads, head_dim, d)
            cubes = (weighted_p * self.v_scale.repeat_interleave(group, dim=1) ** 3 / head_dim)  # (B, H)
            projected = torch.einsum("kfx,bkf->bkx", self.w_v, self.v_raw)  # W_v^T v~, (B, H_kv, d)
            gv = (self.v_gain * self.v_raw).repeat_interleave(group, dim=1)  # (B, H, hd)
            total -= torch.einsum("bh,bhf,bhx->hfx", cubes, gv, projected.repeat_interleave(group, dim=1))
        return averaged, total.reshape(n_heads * head_dim, d)


@torch.no_grad()
def attention_pieces(view: AttentionView, hidden: torch.Tensor, arguments: dict, position: int) -> AttentionPieces:
    """The per-sample factors of the attention map's diagonal block at ``position``."""
    attention = view.attention
    rope = rotary(attention)
    batch, tokens, d = hidden.shape
    head_dim = attention.head_dim
    normed = view.norm_before(hidden) if view.norm_before is not None else hidden
    q_raw = attention.q_proj(normed[:, position])  # only the analysed position's query is needed
    n_heads = q_raw.shape[-1] // head_dim
    q_pre = attention.q_norm(q_raw) if view.qk_norm == "full" else q_raw
    q_heads = q_pre.view(batch, 1, n_heads, head_dim)
    if view.qk_norm == "per_head":
        q_heads = attention.q_norm(q_heads)
    cos, sin = arguments["position_embeddings"]
    q_t = rope(q_heads.transpose(1, 2), cos[:, position : position + 1], sin[:, position : position + 1])[:, :, 0]
    if view.kv_shared:
        keys, values = arguments["shared_kv_states"][attention.layer_type]  # (B, H_kv, T, hd), final
        k_raw = v_raw_all = None
    else:
        k_raw = attention.k_proj(normed)
        v_raw_all = k_raw if view.k_eq_v else attention.v_proj(normed)
        k_pre = attention.k_norm(k_raw) if view.qk_norm == "full" else k_raw
        k_heads = k_pre.view(batch, tokens, -1, head_dim)
        if view.qk_norm == "per_head":
            k_heads = attention.k_norm(k_heads)
        keys = rope(k_heads.transpose(1, 2), cos, sin)  # (B, H_kv, T, hd)
        v_heads = v_raw_all.view(batch, tokens, -1, head_dim)
        values = (view.v_norm(v_heads) if view.v_norm is not None else v_heads).transpose(1, 2)
    n_kv = keys.shape[1]
    group = n_heads // n_kv
    keys_by_head = keys.repeat_interleave(group, dim=1)
    values_by_head = values.repeat_interleave(group, dim=1)
    mask = additive_mask_row(arguments.get("attention_mask"), attention, position, keys.shape[2], batch,
                             hidden.dtype, hidden.device)
    scale = attention.scaling
    logits = torch.einsum("bhe,bhje->bhj", q_t, keys_by_head) * scale
    if view.softcap:
        capped = torch.tanh(logits / view.softcap)
        logits, slope = view.softcap * capped, 1.0 - capped**2
    else:
        slope = torch.ones_like(logits)
    p = torch.softmax(logits + mask[:, None, :], dim=-1)  # (B, H, T)
    o = torch.einsum("bhj,bhje->bhe", p, values_by_head)
    rope_t = _rope_matrix(rope, cos[0, position], sin[0, position], hidden.dtype)
    value_factor = (scale * p * slope)[..., None] * (values_by_head - o[:, :, None])
    q_by_head = q_raw.view(batch, n_heads, head_dim)
    q_gain = q_scale = None
    if view.qk_norm != "none":
        gain_q, eps_q = rms_norm_gain(attention.q_norm)
        gain_q = torch.ones(head_dim if view.qk_norm == "per_head" else n_heads * head_dim, dtype=hidden.dtype,
                            device=hidden.device) if gain_q is None else gain_q.to(hidden.dtype)
        if view.qk_norm == "per_head":
            q_gain = gain_q.expand(n_heads, head_dim)
            q_scale = torch.rsqrt(q_by_head.pow(2).mean(-1) + eps_q)
        else:
            q_gain = gain_q.view(n_heads, head_dim)
            q_scale = torch.rsqrt(q_raw.pow(2).mean(-1) + eps_q)[:, None].expand(batch, n_heads)
    pieces = AttentionPieces(value_factor=value_factor, key_factor=keys_by_head, rope=rope_t, qk_norm=view.qk_norm,
                             q_gain=q_gain, q_scale=q_scale, q_raw=q_by_head,
                             w_q=attention.q_proj.weight.view(n_heads, head_dim, d), output=o)
    if view.kv_shared:
        return pieces
    # k path: the row q^T R_t through the k norm and W_k
    row = torch.einsum("bhe,ef->bhf", q_t, rope_t)
    k_raw_t = k_raw[:, position]
    if view.qk_norm == "full":
        slots = torch.zeros(batch, n_heads, n_kv, head_dim, dtype=hidden.dtype, device=hidden.device)
        heads = torch.arange(n_heads, device=hidden.device)
        slots[:, heads, heads // group] = row
        full = _norm_vector_jacobian(attention.k_norm, k_raw_t[:, None].expand(batch, n_heads, -1),
                                     slots.view(batch, n_heads, n_kv * head_dim))
        k_right = full @ attention.k_proj.weight
    else:
        if view.qk_norm == "per_head":
            k_by_group = k_raw_t.view(batch, n_kv, head_dim).repeat_interleave(group, dim=1)
            row = _norm_vector_jacobian(attention.k_norm, k_by_group, row)
        w_k = attention.k_proj.weight.view(n_kv, head_dim, d)
        k_right = torch.einsum("bkgf,kfx->bkgx", row.view(batch, n_kv, group, head_dim), w_k).reshape(batch, n_heads, d)
    p_t = p[:, :, position]
    pieces.k_left = scale * (p_t * slope[:, :, position])[:, :, None] * (values_by_head[:, :, position] - o)
    pieces.k_right, pieces.p_t = k_right, p_t
    value_weight = attention.k_proj.weight if view.k_eq_v else attention.v_proj.weight
    pieces.w_v = value_weight.view(n_kv, head_dim, d)
    if view.v_norm is not None:
        gain_v, eps_v = rms_norm_gain(view.v_norm)
        pieces.v_raw = v_raw_all[:, position].view(batch, n_kv, head_dim)
        pieces.v_scale = torch.rsqrt(pieces.v_raw.pow(2).mean(-1) + eps_v)
        pieces.v_gain = (torch.ones(head_dim, dtype=hidden.dtype, device=hidden.device) if gain_v is None
                         else gain_v.to(hidden.dtype))
    return pieces


@torch.no_grad()
def attention_partial_sum(view: AttentionView, hidden: torch.Tensor, arguments: dict, position: int):
    """sum_s (J_s - I) / m of the attention map at ``position`` over the batch (module docstring), factored
    (the FactoredSum carries m), and the pre-MLP residual x + m N2(y) at that position (which the MLP step
    needs)."""
    x = hidden[:, position]
    batch, d = x.shape
    pieces = attention_pieces(view, hidden, arguments, position)
    w_o = view.attention.o_proj.weight
    y = view.attention.o_proj(pieces.output.reshape(batch, -1))
    norm1, norm2 = NormAt.of(view.norm_before, x), NormAt.of(view.norm_after, y)
    g1, c1, g2, c2 = norm1.gain, norm1.scale, norm2.gain, norm2.scale
    blocks, core = pieces.weighted_sum(c1 * c2)
    outer = []
    if view.norm_before is not None:
        applied = pieces.apply(g1 * x).reshape(batch, -1)  # (d o / d n)(g1 x), before W_o
        outer.append((-(g2 / d)[:, None] * (w_o @ ((c2 * c1**3)[:, None] * applied).T), x))
    if view.norm_after is not None:
        pulled = pieces.apply_transpose((y @ w_o).view_as(pieces.output))  # Core^T y
        outer.append((-((c2**3 * c1 / d)[:, None] * (g2 * y)).T, pulled * g1))
        if view.norm_before is not None:
            sigma = (y * (applied @ w_o.T)).sum(-1)  # y . Core (g1 x)
            outer.append((((sigma * c2**3 * c1**3 / d**2)[:, None] * (g2 * y)).T, x))
    branch_scale = scalar_factor(view.branch_scale, x.dtype)
    partial = FactoredSum({"attention": FactoredTerm(w_o, g2, g1, core=core, blocked=(blocks, pieces.w_q))}, outer,
                          branch_scale=branch_scale)
    return partial, x + branch_scale * (view.norm_after(y) if view.norm_after is not None else y)
