"""Small random models of every family, every parameter perturbed (shared by the tests)."""

from __future__ import annotations

import torch

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "olmo2", "olmo3", "gemma3", "gemma4"]


def random_tiny_model(family: str, seed: int, hidden_size: int = 32, n_layers: int = 2, *,
                      attention: str = "full_precision", dtype=torch.float64, **overrides):
    """A tiny model whose every parameter and buffer is randomised (float64, full-precision norms and
    attention by default; ``attention="eager"`` or ``"sdpa"`` keeps HF's own implementation).

    Norm weights, biases, Gemma's ``layer_scalar`` and the like start at constants; perturbing them
    makes the tests see each term of every sublayer map.
    """
    from transformers import AutoModelForCausalLM

    from resdyn.models.precision import use_full_precision, use_full_precision_norms
    from resdyn.models.tiny_configs import tiny_config

    torch.manual_seed(seed)
    config = tiny_config(family, hidden_size=hidden_size, n_layers=n_layers, **overrides)
    implementation = "eager" if attention == "full_precision" else attention
    extra = {"experts_implementation": "eager"} if getattr(config, "enable_moe_block", False) else {}
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=implementation, **extra).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or "scalar" in name or name.endswith("bias"):
                parameter.add_(0.3 * torch.randn_like(parameter))
        for name, buffer in model.named_buffers():
            if name.endswith("layer_scalar"):
                buffer.copy_(0.5 + torch.rand_like(buffer))
    if attention == "full_precision":
        use_full_precision(model)
    elif dtype == torch.float64:
        use_full_precision_norms(model)
    return model


# Granite with every multiplier away from 1, so each one is seen (tests/unit/test_family_granite.py)
GRANITE_MULTIPLIERS = {"residual_multiplier": 0.22, "attention_multiplier": 0.03, "embedding_multiplier": 12.0,
                       "logits_scaling": 4.0}


def granite_config(n_layers: int = 3):
    from transformers import GraniteConfig

    from resdyn.models.tiny_configs import END_OF_TEXT_ID, VOCABULARY_SIZE

    return GraniteConfig(vocab_size=VOCABULARY_SIZE, hidden_size=32, intermediate_size=96, num_hidden_layers=n_layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         attention_bias=True, mlp_bias=True, bos_token_id=END_OF_TEXT_ID, eos_token_id=END_OF_TEXT_ID,
                         pad_token_id=END_OF_TEXT_ID, tie_word_embeddings=True, **GRANITE_MULTIPLIERS)


def random_granite_model(seed: int, n_layers: int = 2):
    """A random float64 Granite model, norm weights and biases perturbed, resdyn's full-precision patches on."""
    from transformers import AutoModelForCausalLM

    from resdyn.models.precision import use_full_precision

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(granite_config(n_layers), dtype=torch.float64,
                                             attn_implementation="eager").eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                parameter.add_(0.3 * torch.randn_like(parameter))
    use_full_precision(model)
    return model
