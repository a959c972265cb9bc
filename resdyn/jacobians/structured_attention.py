"""Exact mean of the attention sublayer's diagonal Jacobian block, in closed form.

Sublayer out_t = x + N2(y), y = W_o o(n_t) + b, n_t = N1(x) (N1 / N2: optional RMSNorms, see
:mod:`resdyn.jacobians.structured`), with only row t of the (normalised) sequence varying. Write
Core = dy/dn. With c = 1/r and gains g as for the MLP,

    E[J - I] = diag(g2) E[c1 c2 Core] diag(g1)
             - diag(g2) E[c2 c1^3 (Core (g1 x)) x^T] / d
             - E[c2^3 c1 (g2 y) (Core^T y)^T] diag(g1) / d
             + E[c2^3 c1^3 (y . Core (g1 x)) (g2 y) x^T] / d^2.

The last three need Core times one vector per sample, applied from the per-sample factors below
(no autodiff). Per head h (KV group k), with
post-RoPE query q_h, keys K_k and values V_k over the visible positions, weights p_h and output
o_h = V_k^T p_h, and R_t the (linear) RoPE map at position t:

    d o_h / d q_h   = s V_k^T (diag p_h - p_h p_h^T) K_k = s sum_j p_hj (v_j - o_h) k_j^T    (hd x hd)
    d o_h / d k_t   = s p_ht (v_t - o_h) q_h^T                                              (rank one)
    d o_h / d v_t   = p_ht I

then through R_t, the q/k norms (none, per head, or over the full projection: c diag(g) minus a
rank-one term) and W_q, W_k, W_v. Per-sample d_head x d_head blocks and scalars are averaged,
rank-one terms are summed in factored form, and the weights are applied once at the end:
O(n T d d_head + n d^2 + d^3) for n samples instead of n d per-sample backward passes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from ..models.adapters.families import Gemma3Adapter, PostNormAdapter, PreNormAdapter
from ..models.precision import rms_norm_gain
from .structured import _norm_terms


@dataclass(frozen=True)
class AttentionView:
    attention: torch.nn.Module
    norm_in: torch.nn.Module | None
    norm_out: torch.nn.Module | None
    qk_norm: str  # "none", "per_head" or "full"


def attention_view_of(adapter, layer) -> AttentionView | None:
    """The closed-form view of ``layer``'s attention map, or None (then: autodiff)."""
    attention = getattr(layer, "self_attn", None)
    if attention is None or not all(hasattr(attention, name) for name in
                                    ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling")):
        return None
    if getattr(attention, "attn_logit_softcapping", None) or getattr(attention, "v_norm", None) is not None:
        return None
    if type(adapter) is PreNormAdapter:
        norm_in, norm_out = layer.input_layernorm, None
    elif type(adapter) is PostNormAdapter:
        norm_in, norm_out = None, layer.post_attention_layernorm
    elif type(adapter) is Gemma3Adapter:
        norm_in, norm_out = layer.input_layernorm, layer.post_attention_layernorm
    else:
        return None
    qk_norm = "none"
    if getattr(attention, "q_norm", None) is not None:
        width = attention.q_norm.weight.shape[0]
        qk_norm = "per_head" if width == attention.head_dim else "full"
        if rms_norm_gain(attention.q_norm) is None or rms_norm_gain(attention.k_norm) is None:
            return None
    for norm in (norm_in, norm_out):
        if norm is not None and rms_norm_gain(norm) is None:
            return None
    return AttentionView(attention, norm_in, norm_out, qk_norm)


def _rope_matrix(attention, cos_t: torch.Tensor, sin_t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """R_t (hd x hd) of the module's own RoPE at one position, read off the identity."""
    apply = sys.modules[type(attention).__module__].apply_rotary_pos_emb
    identity = torch.eye(cos_t.shape[-1], dtype=dtype, device=cos_t.device)[None, None]  # rows e_i as (1, 1, hd, hd)
    rotated, _ = apply(identity, identity, cos_t[None, None], sin_t[None, None], unsqueeze_dim=1)
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

    blocks: torch.Tensor  # (B, H, hd, hd): s sum_j p_j (v_j - o) k_j^T
    rope: torch.Tensor  # (hd, hd): R_t
    qk_norm: str
    q_gain: torch.Tensor | None  # (H, hd)
    q_scale: torch.Tensor | None  # (B, H): c of the q norm (per head or shared)
    q_raw: torch.Tensor  # (B, H, hd): q~ before the q norm
    w_q: torch.Tensor  # (H, hd, d)
    k_left: torch.Tensor  # (B, H, hd): s p_t (v_t - o)
    k_right: torch.Tensor  # (B, H, d): q^T R_t dk/dk~ W_k
    p_t: torch.Tensor  # (B, H)
    w_v: torch.Tensor  # (H_kv, hd, d): one block per KV group, shared by its query heads
    output: torch.Tensor  # (B, H, hd): o

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

    def apply(self, v: torch.Tensor) -> torch.Tensor:
        """(d o / d n) v for a per-sample vector v (B, d) -> (B, H, hd)."""
        q_direction = self._q_norm(torch.einsum("hfx,bx->bhf", self.w_q, v), transpose=False)
        out = torch.einsum("bhde,ef,bhf->bhd", self.blocks, self.rope, q_direction)
        out = out + self.k_left * (self.k_right * v[:, None]).sum(-1, keepdim=True)
        group = self.p_t.shape[1] // self.w_v.shape[0]
        values = torch.einsum("kfx,bx->bkf", self.w_v, v).repeat_interleave(group, dim=1)
        return out + self.p_t[:, :, None] * values

    def apply_transpose(self, w: torch.Tensor) -> torch.Tensor:
        """(d o / d n)^T w for per-sample w (B, H, hd) -> (B, d)."""
        back = torch.einsum("bhde,bhd->bhe", self.blocks, w)
        back = self._q_norm(torch.einsum("ef,bhe->bhf", self.rope, back), transpose=True)
        out = torch.einsum("hfx,bhf->bx", self.w_q, back)
        out = out + torch.einsum("bhx,bh->bx", self.k_right, (self.k_left * w).sum(-1))
        n_kv = self.w_v.shape[0]
        by_group = (self.p_t[:, :, None] * w).view(w.shape[0], n_kv, -1, w.shape[-1]).sum(2)
        return out + torch.einsum("kfx,bkf->bx", self.w_v, by_group)

    def weighted_sum(self, weights: torch.Tensor) -> torch.Tensor:
        """sum_s weights_s (d o / d n)_s as a (H hd) x d matrix."""
        n_heads, head_dim, d = self.w_q.shape
        if self.qk_norm == "none":
            scaled, gain = weights[:, None, None, None] * self.blocks, torch.ones(
                n_heads, head_dim, dtype=self.blocks.dtype, device=self.blocks.device)
        else:
            scaled, gain = (weights[:, None] * self.q_scale)[:, :, None, None] * self.blocks, self.q_gain
        # sum over samples first: (H, hd, hd) blocks, then R_t, the gain and W_q once per head
        averaged = torch.einsum("bhde->hde", scaled) @ self.rope * gain[:, None, :]
        total = torch.bmm(averaged, self.w_q)
        if self.qk_norm != "none":  # rank-one part of the q norm: -c^3 / m (M R (g q~)) (q~^T W_q)
            left = torch.einsum("bhde,ef,bhf->bhd", self.blocks, self.rope, self.q_gain[None] * self.q_raw)
            if self.qk_norm == "per_head":
                right = torch.einsum("bhf,hfx->bhx", self.q_raw, self.w_q)
                total -= torch.einsum("bhd,bhx->hdx", (weights[:, None] * self.q_scale**3 / head_dim)[:, :, None] * left,
                                      right)
            else:
                right = torch.einsum("bhf,hfx->bx", self.q_raw, self.w_q)
                coefficient = weights * self.q_scale[:, 0] ** 3 / (n_heads * head_dim)
                total -= torch.einsum("bhd,bx->hdx", coefficient[:, None, None] * left, right)
        total += torch.einsum("bhd,bhx->hdx", weights[:, None, None] * self.k_left, self.k_right)
        n_kv = self.w_v.shape[0]
        value_weights = (weights[:, None] * self.p_t).sum(0).view(n_kv, -1)  # (H_kv, group)
        total += (value_weights[:, :, None, None] * self.w_v[:, None]).reshape(n_heads, head_dim, d)
        return total.reshape(n_heads * head_dim, d)


@torch.no_grad()
def attention_pieces(view: AttentionView, hidden: torch.Tensor, arguments: dict, position: int) -> AttentionPieces:
    """The per-sample factors of the attention map's diagonal block at ``position``."""
    attention = view.attention
    batch, tokens, d = hidden.shape
    head_dim = attention.head_dim
    normed = view.norm_in(hidden) if view.norm_in is not None else hidden
    q_raw = attention.q_proj(normed[:, position])  # only the analysed position's query is needed
    k_raw, v = attention.k_proj(normed), attention.v_proj(normed)
    n_heads, n_kv = q_raw.shape[-1] // head_dim, k_raw.shape[-1] // head_dim
    group = n_heads // n_kv
    q_pre, k_pre = q_raw, k_raw
    if view.qk_norm == "full":
        q_pre, k_pre = attention.q_norm(q_raw), attention.k_norm(k_raw)
    q_heads = q_pre.view(batch, 1, n_heads, head_dim)
    k_heads = k_pre.view(batch, tokens, n_kv, head_dim)
    if view.qk_norm == "per_head":
        q_heads, k_heads = attention.q_norm(q_heads), attention.k_norm(k_heads)
    cos, sin = arguments["position_embeddings"]
    apply = sys.modules[type(attention).__module__].apply_rotary_pos_emb
    _, k_rot = apply(k_heads.transpose(1, 2), k_heads.transpose(1, 2), cos, sin)  # (B, Hkv, T, hd)
    q_rot, _ = apply(q_heads.transpose(1, 2), q_heads.transpose(1, 2), cos[:, position : position + 1],
                     sin[:, position : position + 1])
    q_t = q_rot[:, :, 0]  # (B, H, hd)
    k_rot = k_rot.repeat_interleave(group, dim=1)
    v_heads = v.view(batch, tokens, n_kv, head_dim).transpose(1, 2).repeat_interleave(group, dim=1)
    mask = arguments["attention_mask"][:, 0, position]  # (B, T) additive
    scores = torch.einsum("bhe,bhje->bhj", q_t, k_rot) * attention.scaling + mask[:, None, :]
    p = torch.softmax(scores, dim=-1)  # (B, H, T)
    o = torch.einsum("bhj,bhje->bhe", p, v_heads)
    rope = _rope_matrix(attention, cos[0, position], sin[0, position], hidden.dtype)
    scale = attention.scaling
    p_t = p[:, :, position]
    blocks = scale * torch.einsum("bhj,bhjd,bhje->bhde", p, v_heads - o[:, :, None], k_rot)
    q_by_head = q_raw.view(batch, n_heads, head_dim)
    q_gain = q_scale = None
    if view.qk_norm != "none":
        gain_q, eps_q = rms_norm_gain(attention.q_norm)
        if view.qk_norm == "per_head":
            q_gain = gain_q.to(hidden.dtype).expand(n_heads, head_dim)
            q_scale = torch.rsqrt(q_by_head.pow(2).mean(-1) + eps_q)
        else:
            q_gain = gain_q.to(hidden.dtype).view(n_heads, head_dim)
            q_scale = torch.rsqrt(q_raw.pow(2).mean(-1) + eps_q)[:, None].expand(batch, n_heads)
    # k path: the row q^T R_t through the k norm and W_k
    row = torch.einsum("bhe,ef->bhf", q_t, rope)
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
    return AttentionPieces(
        blocks=blocks, rope=rope, qk_norm=view.qk_norm, q_gain=q_gain, q_scale=q_scale, q_raw=q_by_head,
        w_q=attention.q_proj.weight.view(n_heads, head_dim, d),
        k_left=scale * p_t[:, :, None] * (v_heads[:, :, position] - o), k_right=k_right, p_t=p_t,
        w_v=attention.v_proj.weight.view(n_kv, head_dim, d), output=o,
    )


@torch.no_grad()
def attention_partial_sum(view: AttentionView, hidden: torch.Tensor, arguments: dict, position: int):
    """sum_s (J_s - I) of the attention map at ``position`` over the batch (module docstring), factored."""
    from .structured import PartialSum

    x = hidden[:, position]
    batch, d = x.shape
    pieces = attention_pieces(view, hidden, arguments, position)
    w_o = view.attention.o_proj.weight
    y = view.attention.o_proj(pieces.output.reshape(batch, -1))
    g1, c1 = _norm_terms(view.norm_in, x)
    g2, c2 = _norm_terms(view.norm_out, y)
    core = pieces.weighted_sum(c1 * c2)
    outer = []
    if view.norm_in is not None:
        applied = pieces.apply(g1 * x).reshape(batch, -1)  # (d o / d n)(g1 x), before W_o
        outer.append((-(g2 / d)[:, None] * (w_o @ ((c2 * c1**3)[:, None] * applied).T), x))
    if view.norm_out is not None:
        pulled = pieces.apply_transpose((y @ w_o).view_as(pieces.output))  # Core^T y
        outer.append((-((c2**3 * c1 / d)[:, None] * (g2 * y)).T, pulled * g1))
        if view.norm_in is not None:
            sigma = (y * (applied @ w_o.T)).sum(-1)  # y . Core (g1 x)
            outer.append((((sigma * c2**3 * c1**3 / d**2)[:, None] * (g2 * y)).T, x))
    return PartialSum(w_o, core, outer, g2, g1), x + (view.norm_out(y) if view.norm_out is not None else y)
