"""The structured backend against per-sample autodiff on every option the families can switch on.

Each case builds a tiny random model (biases and norm weights randomised), draws samples, and
requires the closed-form means to equal the mean of per-sample autodiff Jacobians (through the
one-row function, itself tested against the whole-sequence map) to 1e-10 relative in float64.
"""

import numpy as np
import pytest
import torch

from resdyn.corpus import Sample
from resdyn.jacobians.autodiff import AutodiffBackend, batch_jacobians
from resdyn.jacobians.engine import UnsupportedAttentionError, analyse_samples
from resdyn.jacobians.structured import StructuredBackend
from resdyn.models.adapters import adapter_for

from ..tiny_models import random_tiny_model

SHARED_GEMMA4 = {"n_layers": 4, "layer_types": ["sliding_attention", "full_attention"] * 2, "num_kv_shared_layers": 2,
                 "sliding_window": 4}

CASES = {
    # Gemma 4 with everything on: per-layer inputs, KV sharing, v_norm, k_eq_v, double-wide MLP, global head_dim
    "gemma4-all-options": ("gemma4", {**SHARED_GEMMA4, "attention_bias": True, "attention_k_eq_v": True,
                                      "num_global_key_value_heads": 1, "global_head_dim": 12,
                                      "use_double_wide_mlp": True}),
    "gemma4-no-per-layer-input": ("gemma4", {"hidden_size_per_layer_input": 0, "sliding_window": 3}),
    "llama-biases-head-dim-llama3-rope": ("llama", {"attention_bias": True, "mlp_bias": True, "head_dim": 12,
                                                    "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                                     "original_max_position_embeddings": 8}}),
    "llama-dynamic-rope-past-original": ("llama", {"max_position_embeddings": 6,
                                                   "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}),
    "olmo3-yarn-window-3": ("olmo3", {"sliding_window": 3, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                                            "original_max_position_embeddings": 8}}),
    "qwen2-qkv-biases": ("qwen2", {}),
    "qwen3-head-dim": ("qwen3", {"head_dim": 12, "attention_bias": True}),
    "mistral-window-3": ("mistral", {"sliding_window": 3}),
    "gemma3-query-scalar-softcap-config": ("gemma3", {"query_pre_attn_scalar": 5, "sliding_window": 3,
                                                      "attn_logit_softcapping": 2.0, "attention_bias": True}),
    "olmo2": ("olmo2", {}),
}


def _samples(rng, n, tokens, positions):
    return [Sample(i, tuple(int(t) for t in rng.integers(0, 256, tokens)), positions) for i in range(n)]


def assert_structured_matches_autodiff(model, samples, tolerance=1e-10, batch_size=3):
    adapter = adapter_for(model.config.model_type)
    structured = analyse_samples(model, adapter, samples, backend=StructuredBackend(), batch_size=batch_size)
    reference = analyse_samples(model, adapter, samples, backend=AutodiffBackend(), batch_size=batch_size)
    worst = 0.0
    for key, expected in reference.means.items():
        worst = max(worst, np.linalg.norm(structured.means[key] - expected) / np.linalg.norm(expected))
    assert worst < tolerance, worst
    return structured


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("positions", ["last", "all"])
def test_closed_form_equals_autodiff_on_every_option(case, positions, fresh_seed):
    family, overrides = CASES[case]
    model = random_tiny_model(family, fresh_seed, **overrides)
    rng = np.random.default_rng(fresh_seed)
    analysed = (11,) if positions == "last" else (0, 1, 5, 11)
    structured = assert_structured_matches_autodiff(model, _samples(rng, 5, 12, analysed))
    assert set(structured.backend_by_sublayer.values()) == {"structured"}, structured.backend_by_sublayer


@pytest.mark.parametrize("tokens", [1, 2])
def test_one_and_two_token_windows(tokens, fresh_seed):
    for family, overrides in (("gemma4", SHARED_GEMMA4), ("olmo3", {"sliding_window": 1})):
        model = random_tiny_model(family, fresh_seed, **overrides)
        assert_structured_matches_autodiff(model, _samples(np.random.default_rng(fresh_seed), 4, tokens, tuple(range(tokens))))


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("family, overrides", [("llama", {}), ("mistral", {"sliding_window": 3}),
                                               ("gemma4", {"layer_types": ["sliding_attention", "full_attention"],
                                                           "sliding_window": 3})])
def test_exact_under_eager_and_sdpa_masks(attention, family, overrides, fresh_seed):
    """The mask the model passes, in whatever form its implementation uses (sdpa: none on the causal fast
    path, a boolean one with a window; eager: additive), is read exactly: the closed form and the autodiff
    row function on that model equal autograd through the whole sequence of the same weights with
    resdyn's float64 attention. (HF's eager attention takes its softmax in float32, so autodiff through it
    is float32-accurate there.) The mistral case is the issue's reproduction."""
    model = random_tiny_model(family, fresh_seed, attention=attention, **overrides)
    twin = random_tiny_model(family, fresh_seed, **overrides)
    adapter = adapter_for(model.config.model_type)
    samples = _samples(np.random.default_rng(fresh_seed), 4, 10, (9,))
    captured = adapter.capture_layer_inputs(twin, torch.tensor([s.token_ids for s in samples]))[0]
    function, x0 = adapter.positional_function(adapter.decoder_layers(twin)[0], captured, "attn", 9)
    expected = batch_jacobians(function, x0).mean(0).detach().numpy()
    for backend, tolerance in ((StructuredBackend(), 1e-10),
                               (AutodiffBackend(), 1e-10 if attention == "sdpa" else 1e-6)):
        measured = analyse_samples(model, adapter, samples, backend=backend, batch_size=4).means[(0, "attn")]
        assert np.linalg.norm(measured - expected) / np.linalg.norm(expected) < tolerance, (backend.name, attention)


def test_float32_structured_is_close_to_float32_autodiff(fresh_seed):
    model = random_tiny_model("gemma4", fresh_seed, attention="eager", dtype=torch.float32, **SHARED_GEMMA4)
    assert_structured_matches_autodiff(model, _samples(np.random.default_rng(fresh_seed), 4, 12, (11,)), tolerance=1e-4)


def test_mixture_of_experts_falls_back_for_its_block_and_says_so(fresh_seed):
    model = random_tiny_model("gemma4", fresh_seed, enable_moe_block=True, num_experts=4, top_k_experts=2,
                              moe_intermediate_size=16)
    structured = assert_structured_matches_autodiff(model, _samples(np.random.default_rng(fresh_seed), 4, 10, (9,)))
    assert structured.backend_by_sublayer[(0, "attn")] == "structured"
    assert structured.backend_by_sublayer[(0, "mlp")] == "autodiff (structured fallback: mixture of experts)"


def test_flash_style_implementations_are_refused(fresh_seed):
    model = random_tiny_model("llama", fresh_seed)
    model.config._attn_implementation = "flash_attention_2"
    for layer in model.model.layers:
        layer.self_attn.config._attn_implementation = "flash_attention_2"
    with pytest.raises(UnsupportedAttentionError, match="flash_attention_2.*eager"):
        analyse_samples(model, adapter_for("llama"), _samples(np.random.default_rng(0), 2, 6, (5,)),
                        backend=StructuredBackend())
