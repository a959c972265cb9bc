"""GGUF files written in the tests with the ``gguf`` package's writer, as llama.cpp's convert_hf_to_gguf.py does.

The export direction is written here independently of resdyn's importer: tensor names from
``gguf.get_tensor_name_map``, Llama-style q/k rows permuted for llama.cpp's RoPE
(``LlamaModel.permute``), Gemma's RMSNorm weights stored as ``1 + w`` (``Gemma3Model.modify_tensors``),
no ``output.weight`` when the embeddings are tied. The tokenizer is byte-level BPE (``gpt2``): the 256
byte symbols of GPT-2's byte-to-unicode table, a few merges, and ``<|endoftext|>``.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch

ARCHITECTURE = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3"}
MERGES = ["Ġ t", "h e", "Ġt he", "i n"]


def byte_symbols() -> list[str]:
    """GPT-2's bytes_to_unicode: one printable character per byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    characters, extra = printable[:], 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + extra)
            extra += 1
    return [chr(code) for _, code in sorted(zip(printable, characters))]


def vocabulary() -> list[str]:
    return byte_symbols() + [merge.replace(" ", "") for merge in MERGES] + ["<|endoftext|>"]


def llama_permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute: HF's rotate-half rows -> interleaved RoPE pairs."""
    return weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(
        weights.shape)


def write_gguf(model: torch.nn.Module, path: Path, *, quantize: tuple[str, ...] = (), name: str = "resdyn test model",
               tie_embeddings: bool | None = None, leave_out: tuple[str, ...] = (), types: dict | None = None) -> Path:
    """``model`` (a small HF causal LM) as a GGUF file. Tensors whose GGUF name contains one of ``quantize`` are
    stored as Q8_0, the rest as F32; the GGUF names in ``leave_out`` are not written (an incomplete file).
    ``types``: GGUF-name part -> GGML type name, for 2-D tensors, before ``quantize``; a type the ``gguf`` package
    cannot quantize (the K-quants) is written as zero blocks (valid: scale 0), for tests that read only the types."""
    config = model.config
    architecture = ARCHITECTURE[config.model_type.removesuffix("_text")]
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name(name)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    rope = config.rope_parameters
    writer.add_rope_freq_base((rope.get("full_attention") or rope)["rope_theta"])  # Gemma: the global layers' base
    head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    if getattr(config, "sliding_window", None):
        writer.add_sliding_window(config.sliding_window)
    writer.add_vocab_size(config.vocab_size)
    tokens = vocabulary()
    assert len(tokens) == config.vocab_size, "build the test model with vocab_size=len(vocabulary())"
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.NORMAL] * (len(tokens) - 1) + [gguf.TokenType.CONTROL])
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(len(tokens) - 1)
    writer.add_eos_token_id(len(tokens) - 1)

    arch = next(key for key, value in gguf.MODEL_ARCH_NAMES.items() if value == architecture)
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    tied = config.tie_word_embeddings if tie_embeddings is None else tie_embeddings
    for hf_name, tensor in model.state_dict().items():
        if hf_name == "lm_head.weight" and tied:
            continue
        base, suffix = hf_name.rsplit(".", 1)
        gguf_name = names.get_name(base)
        if gguf_name is None:  # rotary buffers and the like
            continue
        gguf_name += "." + suffix
        if gguf_name in leave_out:
            continue
        data = tensor.detach().to(torch.float32).numpy().copy()
        if architecture == "llama" and base.endswith("q_proj"):
            data = llama_permute(data, config.num_attention_heads)
        elif architecture == "llama" and base.endswith("k_proj"):
            data = llama_permute(data, config.num_key_value_heads)
        if architecture == "gemma3" and hf_name.endswith("norm.weight"):
            data = data + 1.0
        kind = next((gguf.GGMLQuantizationType[t] for part, t in (types or {}).items() if part in gguf_name), None)
        if data.ndim == 2 and kind is not None:
            try:
                stored = gguf.quants.quantize(data, kind)
            except NotImplementedError:
                stored = np.zeros(gguf.quant_shape_to_byte_shape(data.shape, kind), np.uint8)
            writer.add_tensor(gguf_name, stored, raw_dtype=kind)
        elif data.ndim == 2 and any(part in gguf_name for part in quantize):
            writer.add_tensor(gguf_name, gguf.quantize(data, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(gguf_name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def dequantized_reference(model: torch.nn.Module, quantize: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """What the GGUF holds, in HF names and layout: the model's float32 weights, Q8_0 round-tripped where quantized
    (Q8_0 acts row-wise on blocks of 32 along the input dimension, so HF's q/k row permutation commutes with it)."""
    config = model.config
    architecture = ARCHITECTURE[config.model_type.removesuffix("_text")]
    arch = next(key for key, value in gguf.MODEL_ARCH_NAMES.items() if value == architecture)
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    reference = {}
    for hf_name, tensor in model.state_dict().items():
        data = tensor.detach().to(torch.float32).numpy().copy()
        base = hf_name.rsplit(".", 1)[0]
        gguf_name = names.get_name(base) or ""
        if data.ndim == 2 and any(part in gguf_name for part in quantize):
            data = gguf.dequantize(gguf.quantize(data, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0)
        reference[hf_name] = torch.from_numpy(np.ascontiguousarray(data))
    return reference


def random_model(family: str, seed: int, *, hidden_size: int = 64, n_layers: int = 2, dtype=torch.float32):
    """A random tiny model of ``family`` over this module's byte vocabulary, norms and biases moved off their init
    values (so a lost offset shows)."""
    from transformers import AutoModelForCausalLM

    from resdyn.models.tiny_configs import tiny_config

    size = len(vocabulary())
    extra = {"head_dim": 128} if family == "qwen3" else {}  # transformers' Qwen3 GGUF config keeps the default 128
    config = tiny_config(family, hidden_size=hidden_size, n_layers=n_layers, vocab_size=size, bos_token_id=size - 1,
                         eos_token_id=size - 1, pad_token_id=size - 1, **extra)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or name.endswith("bias"):  # away from their init values, so a lost offset shows
                parameter.add_(0.3 * torch.randn_like(parameter))
    return model
