"""Per-family sublayer maps. Each mirrors its HF decoder layer's ``forward`` line by line.

- Pre-norm (Llama 3.x, Mistral, Qwen 2/3): x + Attn(Norm(x)), x + MLP(Norm(x)).
- Post-norm (OLMo 2, OLMo 3): the norm acts on the sublayer output before the add,
  x + Norm(Attn(x)), x + Norm(MLP(x)).
- Sandwich (Gemma 3): x + Norm(Attn(Norm(x))), x + Norm(MLP(Norm(x))).
- Gemma 4 text: Gemma 3's sandwich plus, in the MLP map, the optional mixture-of-experts branch,
  the per-layer-input third residual branch and the final ``layer_scalar``.
"""

from __future__ import annotations

from collections.abc import MutableMapping

import torch
from torch import nn

from .base import FamilyAdapter


def _attention(layer: nn.Module, hidden: torch.Tensor, arguments: dict) -> torch.Tensor:
    return attention_output(layer.self_attn, hidden, arguments)


def attention_output(attention: nn.Module, hidden: torch.Tensor, arguments: dict) -> torch.Tensor:
    """The attention module's output (after o_proj) for a whole sequence."""
    arguments = dict(arguments)
    shared = arguments.get("shared_kv_states")
    if isinstance(shared, MutableMapping):
        # Gemma 4 layers that own a KV cache write into this mapping (a KVSharingDict, which is a
        # UserDict, not a dict); a private copy keeps the states of the model's own forward intact
        # for the layers that read them, whatever this (perhaps perturbed) call computes.
        arguments["shared_kv_states"] = type(shared)(shared)
    output = attention(hidden_states=hidden, **arguments)
    return output[0] if isinstance(output, tuple) else output


class PreNormAdapter(FamilyAdapter):
    families = ("llama", "mistral", "qwen2", "qwen3")

    def attention_map(self, layer, hidden, arguments):
        return hidden + _attention(layer, layer.input_layernorm(hidden), arguments)

    def mlp_map(self, layer, hidden, arguments):
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))


class PostNormAdapter(FamilyAdapter):
    families = ("olmo2", "olmo3")

    def attention_map(self, layer, hidden, arguments):
        return hidden + layer.post_attention_layernorm(_attention(layer, hidden, arguments))

    def mlp_map(self, layer, hidden, arguments):
        return hidden + layer.post_feedforward_layernorm(layer.mlp(hidden))


class Gemma3Adapter(FamilyAdapter):
    families = ("gemma3", "gemma3_text")

    def attention_map(self, layer, hidden, arguments):
        attended = _attention(layer, layer.input_layernorm(hidden), arguments)
        return hidden + layer.post_attention_layernorm(attended)

    def mlp_map(self, layer, hidden, arguments):
        return hidden + layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(hidden)))


class Gemma4Adapter(Gemma3Adapter):
    """Gemma 4. Its per-layer input (``per_layer_input``) is computed by the model from the token
    embeddings, i.e. from h_0, before layer 0, and every map holds it fixed: it is an input of the layer
    like the rotary tables, not a function of the residual being differentiated. Letting it move with h_0
    would add a path h_0 -> per-layer input -> h_1 and change E[dh_1/dh_0] by about 23% on a random
    Gemma 4 (the independent audit's measurement). A layer that reuses an earlier layer's keys and values
    (KV sharing) holds them fixed too."""

    families = ("gemma4", "gemma4_text")
    per_token_arguments = ("per_layer_input",)
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


ADAPTERS: tuple[type[FamilyAdapter], ...] = (PreNormAdapter, PostNormAdapter, Gemma3Adapter, Gemma4Adapter)
SUPPORTED_FAMILIES = tuple(family for adapter in ADAPTERS for family in adapter.families)


class UnsupportedArchitectureError(ValueError):
    pass


def family_of(model_type: str) -> str:
    """The family name of a config's ``model_type`` (``gemma3_text`` -> ``gemma3``)."""
    adapter_for(model_type)  # unsupported types fail here, with the list of supported ones
    return model_type.removesuffix("_text")


def adapter_for(model_type: str) -> FamilyAdapter:
    """The adapter for a config's ``model_type``; a clear error for anything else."""
    for adapter in ADAPTERS:
        if model_type in adapter.families:
            return adapter()
    raise UnsupportedArchitectureError(
        f"model_type {model_type!r} is not supported. Supported families (config.model_type): "
        f"{', '.join(SUPPORTED_FAMILIES)}. Add an adapter in resdyn/models/adapters/families.py "
        "that splits the decoder layer into its attention and MLP residual maps."
    )
