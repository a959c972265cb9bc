"""Exact mean of the attention sublayer's diagonal Jacobian block, in closed form.

Sublayer out_t = x + N2(y), y = W_o o(n_t) + b, n_t = N1(x) (N1 / N2: optional RMSNorms, see
:mod:`resdyn.jacobians.structured`), with only row t of the (normalised) sequence varying. Write
Core = dy/dn. With c = 1/r and gains g as for the MLP,

    E[J - I] = diag(g2) E[c1 c2 Core] diag(g1)
             - diag(g2) E[c2 c1^3 (Core (g1 x)) x^T] / d
             - E[c2^3 c1 (g2 y) (Core^T y)^T] diag(g1) / d
             + E[c2^3 c1^3 (y . Core (g1 x)) (g2 y) x^T] / d^2.

The last three need Core times one vector per sample: one batched JVP and one batched VJP of the
model's own attention module. The first is the closed form. Per head h (KV group k), with
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
from torch.func import jvp, vjp

from ..models.adapters.families import Gemma3Adapter, PostNormAdapter, PreNormAdapter, attention_output
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
    identity = torch.eye(cos_t.shape[-1], dtype=dtype)[None, None]  # rows e_i as (1, 1, hd, hd)
    rotated, _ = apply(identity, identity, cos_t[None, None], sin_t[None, None], unsqueeze_dim=1)
    return rotated[0, 0].T  # column i = R e_i


def _norm_vector_jacobian(norm, z: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(dN/dz)^T v for an RMSNorm over the last axis (row-wise): c g v - c^3 z (g z . v) / m."""
    gain, eps = rms_norm_gain(norm)
    c = torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps)
    gain = torch.ones_like(z) if gain is None else gain.to(z.dtype)
    return c * gain * v - c**3 * z * ((gain * z * v).sum(-1, keepdim=True)) / z.shape[-1]


@torch.no_grad()
def attention_core_mean_parts(view: AttentionView, hidden: torch.Tensor, arguments: dict, position: int,
                              weights: torch.Tensor) -> torch.Tensor:
    """sum_s weights_s d o_s / d n_s, as a (H hd) x d matrix (before W_o), for the batch ``hidden``."""
    attention = view.attention
    batch, tokens, d = hidden.shape
    head_dim = attention.head_dim
    normed = view.norm_in(hidden) if view.norm_in is not None else hidden
    q_raw, k_raw, v = attention.q_proj(normed), attention.k_proj(normed), attention.v_proj(normed)
    q_pre, k_pre = q_raw, k_raw
    if view.qk_norm == "full":
        q_pre, k_pre = attention.q_norm(q_raw), attention.k_norm(k_raw)
    n_heads, n_kv = q_raw.shape[-1] // head_dim, k_raw.shape[-1] // head_dim
    group = n_heads // n_kv
    q_heads = q_pre.view(batch, tokens, n_heads, head_dim)
    k_heads = k_pre.view(batch, tokens, n_kv, head_dim)
    if view.qk_norm == "per_head":
        q_heads, k_heads = attention.q_norm(q_heads), attention.k_norm(k_heads)
    cos, sin = arguments["position_embeddings"]
    apply = sys.modules[type(attention).__module__].apply_rotary_pos_emb
    q_rot, k_rot = apply(q_heads.transpose(1, 2), k_heads.transpose(1, 2), cos, sin)  # (B, H, T, hd)
    v_heads = v.view(batch, tokens, n_kv, head_dim).transpose(1, 2)
    k_rot = k_rot.repeat_interleave(group, dim=1)
    v_heads = v_heads.repeat_interleave(group, dim=1)
    q_t = q_rot[:, :, position]  # (B, H, hd)
    mask = arguments["attention_mask"][:, 0, position]  # (B, T) additive
    scores = torch.einsum("bhe,bhje->bhj", q_t, k_rot) * attention.scaling + mask[:, None, :]
    p = torch.softmax(scores, dim=-1)  # (B, H, T)
    o = torch.einsum("bhj,bhje->bhe", p, v_heads)  # (B, H, hd)
    rope = _rope_matrix(attention, cos[0, position], sin[0, position], hidden.dtype)  # same rotation for every sample
    scale = attention.scaling
    p_t = p[:, :, position]  # (B, H)
    w = weights.to(hidden.dtype)

    # q path: block (hd x hd) per head, M = s sum_j p_j (v_j - o) k_j^T, then R_t and the q norm
    blocks = scale * torch.einsum("bhj,bhjd,bhje->bhde", p, v_heads - o[:, :, None], k_rot)  # (B,H,hd,hd)
    q_raw_t = q_raw[:, position]  # (B, H hd)
    w_q = attention.q_proj.weight.view(n_heads, head_dim, d)
    total = torch.zeros(n_heads, head_dim, d, dtype=hidden.dtype)
    if view.qk_norm == "none":
        total += torch.einsum("bhde,ef,hfx->hdx", w[:, None, None, None] * blocks, rope, w_q)
    else:
        gain_q, eps_q = rms_norm_gain(attention.q_norm)
        if view.qk_norm == "per_head":
            q_by_head = q_raw_t.view(batch, n_heads, head_dim)
            c_q = torch.rsqrt(q_by_head.pow(2).mean(-1) + eps_q)  # (B, H)
            gain_by_head = gain_q.to(hidden.dtype).expand(n_heads, head_dim)
            width = head_dim
        else:
            c_q = torch.rsqrt(q_raw_t.pow(2).mean(-1) + eps_q)[:, None].expand(batch, n_heads)
            gain_by_head = gain_q.to(hidden.dtype).view(n_heads, head_dim)
            q_by_head = q_raw_t.view(batch, n_heads, head_dim)
            width = n_heads * head_dim
        weighted = (w[:, None] * c_q)[:, :, None, None] * blocks
        total += torch.einsum("bhde,ef,hf,hfx->hdx", weighted, rope, gain_by_head, w_q)
        # rank-one part of the q norm: -c^3 / m (M R (g q~)) (q~^T W_q)
        left = torch.einsum("bhde,ef,bhf->bhd", blocks, rope, gain_by_head[None] * q_by_head)
        if view.qk_norm == "per_head":
            right = torch.einsum("bhf,hfx->bhx", q_by_head, w_q)  # q~_h^T W_q^(h)
            total -= torch.einsum("bh,bhd,bhx->hdx", w[:, None] * c_q**3 / width, left, right)
        else:
            right = q_raw_t @ attention.q_proj.weight  # q~^T W_q, (B, d)
            total -= torch.einsum("b,bhd,bx->hdx", w * c_q[:, 0] ** 3 / width, left, right)

    # k path: rank one per head, s p_t (v_t - o) (q^T R_t dk/dk~ W_k)
    row = torch.einsum("bhe,ef->bhf", q_t, rope)  # R_t^T q_h as rows, (B, H, hd)
    k_raw_t = k_raw[:, position]
    if view.qk_norm == "per_head":
        k_by_group = k_raw_t.view(batch, n_kv, head_dim).repeat_interleave(group, dim=1)
        row = _norm_vector_jacobian(attention.k_norm, k_by_group, row)
    elif view.qk_norm == "full":
        slots = torch.zeros(batch, n_heads, n_kv, head_dim, dtype=hidden.dtype)
        slots[:, torch.arange(n_heads), torch.arange(n_heads) // group] = row
        full = _norm_vector_jacobian(attention.k_norm, k_raw_t[:, None].expand(batch, n_heads, -1),
                                     slots.view(batch, n_heads, n_kv * head_dim))
        k_right = full @ attention.k_proj.weight  # (B, H, d)
    if view.qk_norm != "full":
        w_k = attention.k_proj.weight.view(n_kv, head_dim, d).repeat_interleave(group, dim=0)
        k_right = torch.einsum("bhf,hfx->bhx", row, w_k)
    k_left = scale * p_t[:, :, None] * (v_heads[:, :, position] - o)  # (B, H, hd)
    total += torch.einsum("b,bhd,bhx->hdx", w, k_left, k_right)

    # v path: p_t W_v per head
    w_v = attention.v_proj.weight.view(n_kv, head_dim, d).repeat_interleave(group, dim=0)
    total += torch.einsum("h,hdx->hdx", (w[:, None] * p_t).sum(0), w_v)

    return total.reshape(n_heads * head_dim, d)


def attention_jacobian_sum(view: AttentionView, hidden: torch.Tensor, arguments: dict, position: int) -> torch.Tensor:
    """sum_s (J_s - I) of the attention map at ``position`` over the batch (module docstring)."""
    normed_sequence = view.norm_in(hidden) if view.norm_in is not None else hidden
    before, after = normed_sequence[:, :position], normed_sequence[:, position + 1 :]

    def core_function(n: torch.Tensor) -> torch.Tensor:
        """The normalised residual at ``position`` (B, d) -> y = W_o o + b there."""
        sequence = torch.cat([before, n.unsqueeze(1), after], dim=1)
        return attention_output(view.attention, sequence, arguments)[:, position]

    x = hidden[:, position]
    batch, d = x.shape
    g1, c1 = _norm_terms(view.norm_in, x)
    normed = view.norm_in(x) if view.norm_in is not None else x
    y, pullback = vjp(core_function, normed)
    g2, c2 = _norm_terms(view.norm_out, y)
    core = attention_core_mean_parts(view, hidden, arguments, position, c1 * c2)
    w_o = view.attention.o_proj.weight
    total = g2[:, None] * (w_o @ core) * g1[None, :]
    if view.norm_in is not None:
        _, pushed = jvp(core_function, (normed,), (g1 * x,))  # Core (g1 x)
        total -= g2[:, None] * (((c2 * c1**3)[:, None] * pushed).T @ x) / d
    if view.norm_out is not None:
        (pulled,) = pullback(y)  # Core^T y
        total -= ((c2**3 * c1)[:, None] * (g2 * y)).T @ (pulled * g1) / d
        if view.norm_in is not None:
            sigma = (y * pushed).sum(-1)
            total += ((sigma * c2**3 * c1**3)[:, None] * (g2 * y)).T @ x / d**2
    return total
