"""Per-family sublayer maps. Each mirrors its HF decoder layer's ``forward`` line by line, and its
``attention_parts`` / ``mlp_parts`` say where the norms and scalars of those maps are.

- Pre-norm (Llama 3.x, Mistral, Qwen 2/3): x + Attn(Norm(x)), x + MLP(Norm(x)).
- Post-norm (OLMo 2, OLMo 3): the norm acts on the sublayer output before the add,
  x + Norm(Attn(x)), x + Norm(MLP(x)).
- Sandwich (Gemma 3): x + Norm(Attn(Norm(x))), x + Norm(MLP(Norm(x))).
- Gemma 4 text: Gemma 3's sandwich plus, in the MLP map, the optional mixture-of-experts branch,
  the per-layer-input third residual branch and the final ``layer_scalar``.
- Granite (:mod:`.granite`, a family in one module): pre-norm with ``residual_multiplier`` m on
  each branch, x + m Attn(Norm(x)), x + m MLP(Norm(x)).

Every adapter is registered (:func:`~.base.register_family`); :func:`adapter_for` looks the config's
``model_type`` up among them.
"""

from __future__ import annotations

from . import granite  # noqa: F401 - imported for its registration: the Granite family registers itself
from .base import (
    AttentionParts,
    FamilyAdapter,
    MlpParts,
    PerLayerInputParts,
    attention_output,
    mlp_kind,
    register_family,
    registered_adapters,
)


def _attention(layer, hidden, arguments):
    return attention_output(layer.self_attn, hidden, arguments)


@register_family
class PreNormAdapter(FamilyAdapter):
    families = ("llama", "mistral", "qwen2", "qwen3")

    def attention_map(self, layer, hidden, arguments):
        return hidden + _attention(layer, layer.input_layernorm(hidden), arguments)

    def mlp_map(self, layer, hidden, arguments):
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))

    def attention_parts(self, layer):
        return AttentionParts(layer.self_attn, layer.input_layernorm, None)

    def mlp_parts(self, layer):
        return MlpParts(layer.mlp, mlp_kind(layer.mlp), layer.post_attention_layernorm, None)


@register_family
class PostNormAdapter(FamilyAdapter):
    families = ("olmo2", "olmo3")

    def attention_map(self, layer, hidden, arguments):
        return hidden + layer.post_attention_layernorm(_attention(layer, hidden, arguments))

    def mlp_map(self, layer, hidden, arguments):
        return hidden + layer.post_feedforward_layernorm(layer.mlp(hidden))

    def attention_parts(self, layer):
        return AttentionParts(layer.self_attn, None, layer.post_attention_layernorm)

    def mlp_parts(self, layer):
        return MlpParts(layer.mlp, mlp_kind(layer.mlp), None, layer.post_feedforward_layernorm)


@register_family
class Gemma3Adapter(FamilyAdapter):
    families = ("gemma3", "gemma3_text")

    def attention_map(self, layer, hidden, arguments):
        attended = _attention(layer, layer.input_layernorm(hidden), arguments)
        return hidden + layer.post_attention_layernorm(attended)

    def mlp_map(self, layer, hidden, arguments):
        return hidden + layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(hidden)))

    def attention_parts(self, layer):
        return AttentionParts(layer.self_attn, layer.input_layernorm, layer.post_attention_layernorm)

    def mlp_parts(self, layer):
        return MlpParts(layer.mlp, mlp_kind(layer.mlp), layer.pre_feedforward_layernorm,
                        layer.post_feedforward_layernorm)


@register_family
class Gemma4Adapter(Gemma3Adapter):
    """Gemma 4. Its per-layer input (``per_layer_input``) is computed by the model from the token
    embeddings, i.e. from h_0, before layer 0, and every map holds it fixed: it is an input of the layer
    like the rotary tables, not a function of the residual being differentiated. Letting it move with h_0
    would add a path h_0 -> per-layer input -> h_1 and change E[dh_1/dh_0] by about 23% on a random
    Gemma 4 (the independent audit's measurement). A layer that reuses an earlier layer's keys and values
    (KV sharing) holds them fixed too."""

    families = ("gemma4", "gemma4_text")
    per_token_arguments = ("per_layer_input",)
    # a layer that stores keys and values for later layers does so in its own forward; the maps write into a
    # private copy (attention_output), so only the forward fills the model's storage
    forward_is_the_two_maps = False
    conventions = {
        **FamilyAdapter.conventions,
        "per_layer_input": "computed from the token embeddings (h_0) before layer 0 and held fixed by every map; "
                           "letting it move with h_0 changes E[dh_1/dh_0] by about 23%",
        "shared_kv": "a layer that reuses an earlier layer's keys and values holds them fixed (no Jacobian "
                     "through them)",
    }

    def mlp_map(self, layer, hidden, arguments):
        residual = hidden
        output = layer.mlp(layer.pre_feedforward_layernorm(hidden))
        if getattr(layer, "enable_moe_block", False):
            dense = layer.post_feedforward_layernorm_1(output)
            flat = residual.reshape(-1, residual.shape[-1])
            _, top_k_weights, top_k_index = layer.router(flat)
            experts = layer.experts(layer.pre_feedforward_layernorm_2(flat), top_k_index, top_k_weights)
            output = dense + layer.post_feedforward_layernorm_2(experts.reshape(residual.shape))
        hidden = residual + layer.post_feedforward_layernorm(output)
        if getattr(layer, "hidden_size_per_layer_input", 0):
            gated = layer.act_fn(layer.per_layer_input_gate(hidden)) * arguments["per_layer_input"]
            hidden = hidden + layer.post_per_layer_input_norm(layer.per_layer_projection(gated))
        return hidden * layer.layer_scalar

    def mlp_parts(self, layer):
        # the mixture-of-experts block sums a routed branch into the dense one inside one norm
        kind = "mixture_of_experts" if getattr(layer, "enable_moe_block", False) else mlp_kind(layer.mlp)
        per_layer_input = None
        if getattr(layer, "hidden_size_per_layer_input", 0):
            per_layer_input = PerLayerInputParts(layer.per_layer_input_gate, layer.per_layer_projection,
                                                 layer.post_per_layer_input_norm, layer.act_fn)
        return MlpParts(layer.mlp, kind, layer.pre_feedforward_layernorm, layer.post_feedforward_layernorm,
                        per_layer_input=per_layer_input, output_scale=layer.layer_scalar)


SUPPORTED_FAMILIES = tuple(family for adapter in registered_adapters() for family in adapter.families)


class UnsupportedArchitectureError(ValueError):
    pass


def family_of(model_type: str) -> str:
    """The family name of a config's ``model_type`` (``gemma3_text`` -> ``gemma3``)."""
    adapter_for(model_type)  # unsupported types fail here, with the list of supported ones
    return model_type.removesuffix("_text")


def adapter_for(model_type: str) -> FamilyAdapter:
    """The adapter for a config's ``model_type``; a clear error for anything else."""
    for adapter in registered_adapters():
        if model_type in adapter.families:
            return adapter(model_type)
    raise UnsupportedArchitectureError(
        f"model_type {model_type!r} is not supported. Supported families (config.model_type): "
        f"{', '.join(SUPPORTED_FAMILIES)}. Add a module in resdyn/models/adapters/ (as granite.py) whose "
        "registered adapter splits the decoder layer into its attention and MLP residual maps."
    )
