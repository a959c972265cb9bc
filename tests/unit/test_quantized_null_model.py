"""The quantization control (``init-quantized``): the null model rounded through the trained GGUF file's own types.

The expected weights are computed here from the ``gguf`` package directly (quantize, then dequantize) and the file's
types are read with the package's reader under names mapped by its own tensor-name map, not the importer's.
"""

import json
from collections import Counter
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from resdyn.models.gguf_import import import_gguf
from resdyn.models.null_model import initialised_checkpoint
from resdyn.models.quantized_null_model import (
    QUANTIZED_NULL_MODEL_RECORD,
    SUBSTITUTES,
    can_quantize,
    quantized_checkpoint,
    type_used,
)

from ..gguf_files import vocabulary, write_gguf

QUANTIZABLE = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16"]
K_QUANTS = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]  # 256-weight blocks; gguf 0.19 only dequantizes them


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    weights = {}
    for file in sorted(directory.glob("*.safetensors")):
        weights.update(load_file(file))
    return weights


def _round_trip(array: np.ndarray, kind: str) -> np.ndarray:
    qtype = gguf.GGMLQuantizationType[kind]
    return gguf.quants.dequantize(gguf.quants.quantize(array, qtype), qtype)


def test_every_substitute_is_quantizable_and_replaces_a_dequantize_only_type():
    for kind, (used, reason) in SUBSTITUTES.items():
        assert not can_quantize(kind) and type_used(kind) == used and reason, kind
        assert can_quantize(used) and used != kind
        with pytest.raises(NotImplementedError):
            gguf.quants.quantize(np.zeros((1, 256), np.float32), gguf.GGMLQuantizationType[kind])
    for kind in QUANTIZABLE + ["F32"]:
        assert type_used(kind) == kind


def test_the_quantized_null_model_is_the_null_model_rounded_through_the_files_own_types(tmp_path, fresh_seed):
    from transformers import AutoModelForCausalLM

    from resdyn.models.tiny_configs import tiny_config

    rng = np.random.default_rng(fresh_seed)
    size = len(vocabulary())
    config = tiny_config("llama", hidden_size=64, n_layers=2, intermediate_size=256, vocab_size=size,
                         bos_token_id=size - 1, eos_token_id=size - 1, pad_token_id=size - 1)
    torch.manual_seed(fresh_seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # ffn_down's rows hold 256 weights: a K-quant the package cannot quantize; attn_output stays F32 (2-D)
    types = {part: str(rng.choice(QUANTIZABLE)) for part in ("attn_q", "attn_k", "ffn_up", "ffn_gate", "token_embd")}
    types.update({"ffn_down": str(rng.choice(K_QUANTS)), "attn_output": "F32", "attn_v": "F16"})
    path = write_gguf(model, tmp_path / "model.gguf", types=types)
    import_gguf(path, tmp_path / "trained")
    initialised_checkpoint(tmp_path / "trained", tmp_path / "init", seed=fresh_seed)
    record = quantized_checkpoint(path, tmp_path / "init", tmp_path / "quantized")

    # the file's type of each HF tensor, by the gguf package's reader and name map
    stored = {tensor.name: tensor.tensor_type.name for tensor in gguf.GGUFReader(path).tensors}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    null, ours = _weights(tmp_path / "init"), _weights(tmp_path / "quantized")
    assert set(ours) == set(null) and null
    requested, used = Counter(), Counter()
    for name, weights in null.items():
        base, suffix = name.rsplit(".", 1)
        kind = stored[f"{names.get_name(base)}.{suffix}"]
        expected_kind = SUBSTITUTES[kind][0] if kind in K_QUANTS else kind
        requested[kind] += 1
        used[expected_kind] += 1
        assert ours[name].dtype == torch.float32 and ours[name].shape == weights.shape
        if kind == "F32":  # norms and attn_output: unchanged
            assert torch.equal(ours[name], weights), name
            continue
        expected = _round_trip(weights.numpy(), expected_kind)
        assert np.array_equal(ours[name].numpy(), expected), (name, kind, expected_kind)
        assert not torch.equal(ours[name], weights), name  # the rounding did something
        if kind in K_QUANTS:  # not merely some rounding: the substitute's, not another type's
            other = "Q8_0" if expected_kind != "Q8_0" else "Q4_0"
            assert not np.array_equal(ours[name].numpy(), _round_trip(weights.numpy(), other))
    k_quant = types["ffn_down"]
    assert requested[k_quant] == config.num_hidden_layers and requested["F32"] >= 3 * config.num_hidden_layers
    assert record["requested"] == dict(requested) and record["used"] == dict(used)
    assert record["substituted"] == {k_quant: {"used": SUBSTITUTES[k_quant][0], "reason": SUBSTITUTES[k_quant][1]}}
    assert record["not_in_file"] == [] and record["source_sha256"] == import_gguf(path, tmp_path / "trained").sha256
    assert json.loads((tmp_path / "quantized" / QUANTIZED_NULL_MODEL_RECORD).read_text()) == record
    assert (tmp_path / "quantized" / "config.json").read_text() == (tmp_path / "init" / "config.json").read_text()
    assert (tmp_path / "quantized" / "tokenizer.json").is_file()

    # made once: a second call returns the record and rewrites nothing; nothing is left beside the directory
    shards = sorted((tmp_path / "quantized").glob("*.safetensors"))
    stamps = [shard.stat().st_mtime_ns for shard in shards]
    assert quantized_checkpoint(path, tmp_path / "init", tmp_path / "quantized") == record
    assert [shard.stat().st_mtime_ns for shard in shards] == stamps
    assert not list(tmp_path.glob(".quantized.*")) or all(p.suffix == ".lock" for p in tmp_path.glob(".quantized.*"))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "quantized", dtype=torch.float32)
    assert torch.equal(loaded.state_dict()["model.layers.0.mlp.down_proj.weight"],
                       ours["model.layers.0.mlp.down_proj.weight"])
