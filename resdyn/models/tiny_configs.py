"""Tiny configurations of the real families: the same HF classes, a few thousand times smaller.

They exercise everything the production models have that changes a sublayer map: grouped-query
attention, RoPE, q/k norms (OLMo 3, Gemma), sliding-window layers (OLMo 3, Gemma), post-norm
(OLMo), sandwich norms (Gemma) and Gemma 4's per-layer inputs and ``layer_scalar``.
"""

from __future__ import annotations

from transformers import AutoConfig, PretrainedConfig

from .byte_tokenizer import BYTE_VOCABULARY_SIZE

VOCABULARY_SIZE = BYTE_VOCABULARY_SIZE + 1  # bytes plus <|endoftext|>
END_OF_TEXT_ID = BYTE_VOCABULARY_SIZE


def tiny_config(family: str, *, hidden_size: int = 64, n_layers: int = 4, **overrides) -> PretrainedConfig:
    """A random-init-ready config of ``family`` (llama, mistral, qwen2, qwen3, olmo2, olmo3, gemma3, gemma4);
    ``overrides`` replace any of its settings (e.g. ``layer_types``, ``num_kv_shared_layers``)."""
    n_heads = 4
    head_dim = hidden_size // n_heads
    common = dict(
        vocab_size=VOCABULARY_SIZE,
        hidden_size=hidden_size,
        intermediate_size=3 * hidden_size,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=END_OF_TEXT_ID,
        eos_token_id=END_OF_TEXT_ID,
        pad_token_id=END_OF_TEXT_ID,
        tie_word_embeddings=True,
        attn_implementation="eager",
    )
    sliding = ["sliding_attention"] * (n_layers - 1) + ["full_attention"]
    if family in ("llama", "mistral", "qwen2", "qwen3", "olmo2"):
        extra = {"head_dim": head_dim} if family in ("llama", "qwen3", "mistral") else {}
        return AutoConfig.for_model(family, **{**common, **extra, **overrides})
    if family == "olmo3":
        return AutoConfig.for_model("olmo3", **{**common, "sliding_window": 32, "layer_types": sliding, **overrides})
    if family == "gemma3":
        return AutoConfig.for_model("gemma3_text", **{
            **common, "head_dim": head_dim, "query_pre_attn_scalar": head_dim, "sliding_window": 32,
            "layer_types": sliding, **overrides})
    if family == "gemma4":
        return AutoConfig.for_model("gemma4_text", **{
            **common, "head_dim": head_dim, "global_head_dim": head_dim, "sliding_window": 32, "layer_types": sliding,
            "hidden_size_per_layer_input": 16, "vocab_size_per_layer_input": VOCABULARY_SIZE,
            "num_kv_shared_layers": 0, **overrides})
    raise ValueError(f"no tiny config for family {family!r}")
