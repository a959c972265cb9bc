"""IBM Granite (``model_type`` ``granite``, transformers' ``GraniteForCausalLM``): a family in one module.

A Granite decoder layer is pre-norm with one scalar m (``config.residual_multiplier``) on each branch's
output:

    attn: m_l     = h_l + m * Attn(N_in(h_l))
    mlp:  h_{l+1} = m_l + m * MLP(N_post(m_l))

with N_in = ``input_layernorm``, N_post = ``post_attention_layernorm`` (RMSNorms) and a gated MLP.
Granite's other multipliers need nothing here: ``attention_multiplier`` is the attention module's own
``scaling`` (the closed form reads it there), ``embedding_multiplier`` scales the embeddings before
layer 0 (inside the decoder's forward, so the captured residual h_0 already carries it) and
``logits_scaling`` acts after the last layer.
"""

from __future__ import annotations

from .base import AttentionParts, FamilyAdapter, MlpParts, attention_output, mlp_kind, register_family


@register_family
class GraniteAdapter(FamilyAdapter):
    """Granite's two residual maps, h' = h + m * f(N(h)) with m = ``layer.residual_multiplier``."""

    families = ("granite",)

    def attention_map(self, layer, hidden, arguments):
        attended = attention_output(layer.self_attn, layer.input_layernorm(hidden), arguments)
        return hidden + attended * layer.residual_multiplier

    def mlp_map(self, layer, hidden, arguments):
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden)) * layer.residual_multiplier

    def attention_parts(self, layer):
        return AttentionParts(layer.self_attn, layer.input_layernorm, None, branch_scale=layer.residual_multiplier)

    def mlp_parts(self, layer):
        return MlpParts(layer.mlp, mlp_kind(layer.mlp), layer.post_attention_layernorm, None,
                        branch_scale=layer.residual_multiplier)
