"""Granite, a family added in one module (resdyn/models/adapters/granite.py), against HF and float64 autodiff.

A small random ``GraniteForCausalLM`` with every multiplier away from 1 (residual 0.22, attention 0.03,
embedding 12, logits 4), biases on and norm weights randomised, is saved with ``save_pretrained`` and
loaded by resdyn. Two checks:

- the adapter's two maps, composed, give HF's own hidden states layer after layer;
- the structured backend, the autodiff backend and the layer-major engine give the mean Jacobians of
  an independent reference to 1e-10: each sublayer map written here from the unpatched HF modules and
  ``config.residual_multiplier`` (h' = h + m f(N(h))), a mask and rotary tables made here, differentiated
  by ``torch.func.jacrev`` on the whole sequence with one row varying, under the tests' own mode that
  keeps HF's float32 casts in float64 (tests/references.py) (so no resdyn precision patch is shared).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from resdyn.corpus import Sample
from resdyn.jacobians.autodiff import AutodiffBackend
from resdyn.jacobians.engine import MeasurementOptions, analyse_samples, measure_layer_major
from resdyn.jacobians.structured import StructuredBackend
from resdyn.models.adapters import SUBLAYERS, SUPPORTED_FAMILIES, adapter_for
from resdyn.models.byte_tokenizer import build_byte_tokenizer
from resdyn.models.layerwise import LayerwiseModel
from resdyn.models.loading import load_model

from ..references import UpcastFloat32
from ..tiny_models import GRANITE_MULTIPLIERS as MULTIPLIERS
from ..tiny_models import granite_config

TOLERANCE = 1e-10


@pytest.fixture
def granite_directory(tmp_path, fresh_seed):
    """A saved random Granite model (float64 weights) with a byte tokenizer."""
    torch.manual_seed(fresh_seed)
    model = AutoModelForCausalLM.from_config(granite_config(), dtype=torch.float64, attn_implementation="eager")
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            # norm weights start at 1 and biases at 0, which would hide the gain and bias terms
            if "norm" in name or name.endswith("bias"):
                parameter.add_(0.3 * torch.randn_like(parameter))
    directory = tmp_path / "granite"
    model.save_pretrained(directory)
    build_byte_tokenizer().save_pretrained(directory)
    return directory


def unpatched(directory) -> torch.nn.Module:
    """HF's own Granite, eager attention and HF's RMSNorm, none of resdyn's precision patches."""
    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float64, attn_implementation="eager").eval()


def random_samples(seed: int, n: int = 5, length: int = 12, positions=(4, 11)) -> list[Sample]:
    rng = np.random.default_rng(seed)
    return [Sample(i, tuple(int(t) for t in rng.integers(0, 256, length)), positions) for i in range(n)]


def causal_mask(length: int) -> torch.Tensor:
    """(1, 1, T, T) additive: 0 on and below the diagonal, -inf above."""
    above = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
    return torch.zeros(length, length, dtype=torch.float64).masked_fill(above, float("-inf"))[None, None]


class ReferenceLayer:
    """Granite's decoder layer l as its two residual maps, written from the HF modules and the config:

        attention: m = h + r * o_proj(Attn(input_layernorm(h)))
        mlp:       h' = m + r * mlp(post_attention_layernorm(m)),   r = config.residual_multiplier
    """

    def __init__(self, model, index: int, length: int) -> None:
        self.layer = model.model.layers[index]
        self.multiplier = model.config.residual_multiplier
        positions = torch.arange(length)[None]
        self.rotary = model.model.rotary_emb(torch.zeros(1, length, 1, dtype=torch.float64), positions)
        self.mask = causal_mask(length)

    def attention(self, hidden: torch.Tensor) -> torch.Tensor:
        attended, _ = self.layer.self_attn(self.layer.input_layernorm(hidden), position_embeddings=self.rotary,
                                           attention_mask=self.mask)
        return hidden + self.multiplier * attended

    def mlp(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + self.multiplier * self.layer.mlp(self.layer.post_attention_layernorm(hidden))

    def attention_of_row(self, hidden: torch.Tensor, t: int):
        """x (B, d) -> row t of the attention map of ``hidden`` with its row t replaced by x (the other rows,
        and so their keys and values, fixed)."""
        def attention_at_t(x: torch.Tensor) -> torch.Tensor:
            sequence = torch.cat([hidden[:, :t], x[:, None], hidden[:, t + 1:]], dim=1)
            return self.attention(sequence)[:, t]

        return attention_at_t

    def mlp_of_row(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, d) -> the MLP map of each row (position-wise)."""
        return self.mlp(x[:, None])[:, 0]


def block_sum(function, x0: torch.Tensor) -> np.ndarray:
    """sum over the batch of d function(x)_b / d x_b for rows x0 (B, d) -> (B, d)."""
    full = torch.func.jacrev(function)(x0)  # (B, d, B, d); the rows do not interact
    return torch.stack([full[b, :, b, :] for b in range(len(x0))]).sum(0).detach().numpy()


def reference_means(model, samples: list[Sample]) -> dict:
    """(layer, sublayer) -> the mean over samples and analysed positions of d out_t / d h_t, the other
    positions held at HF's own hidden states."""
    ids = torch.tensor([sample.token_ids for sample in samples])
    length = ids.shape[1]
    means = {}
    with UpcastFloat32(), torch.no_grad():
        hidden_states = model(ids, output_hidden_states=True).hidden_states
    with UpcastFloat32():
        for index in range(model.config.num_hidden_layers):
            reference = ReferenceLayer(model, index, length)
            hidden = hidden_states[index]
            with torch.no_grad():
                pre_mlp = reference.attention(hidden)
            sums = {sublayer: 0 for sublayer in SUBLAYERS}
            for t in samples[0].positions:
                sums["attn"] = sums["attn"] + block_sum(reference.attention_of_row(hidden, t), hidden[:, t])
                sums["mlp"] = sums["mlp"] + block_sum(reference.mlp_of_row, pre_mlp[:, t])
            count = len(samples) * len(samples[0].positions)
            means.update({(index, sublayer): total / count for sublayer, total in sums.items()})
    return means


def assert_close_to_reference(measured: dict, expected: dict, label: str, seed: int) -> None:
    """E[J] and E[J] - I (the part the multipliers shape; I dominates E[J]) both to TOLERANCE, relative."""
    for key, reference in expected.items():
        identity = np.eye(reference.shape[0])
        error = np.linalg.norm(measured[key] - reference)
        assert error / np.linalg.norm(reference) < TOLERANCE, (label, key, error, seed)
        assert error / np.linalg.norm(reference - identity) < TOLERANCE, (label, key, error, seed)


def test_granite_is_a_registered_family():
    adapter = adapter_for("granite")
    assert "granite" in SUPPORTED_FAMILIES and adapter.family == "granite"


def test_the_reference_layer_and_the_adapter_reproduce_hf_hidden_states(granite_directory, fresh_seed):
    """Both the reference maps here and resdyn's adapter maps (on resdyn's loaded, patched model), composed,
    give HF's own hidden states after every layer (the last one through HF's final norm)."""
    hf = unpatched(granite_directory)
    ours = load_model(str(granite_directory), dtype="float64")
    adapter = ours.adapter
    ids = torch.tensor([sample.token_ids for sample in random_samples(fresh_seed, n=3, length=16)])
    with UpcastFloat32(), torch.no_grad():
        hidden_states = hf(ids, output_hidden_states=True).hidden_states
        captured = adapter.capture_layer_inputs(ours.model, ids)
        embedded = hf.model.embed_tokens(ids) * MULTIPLIERS["embedding_multiplier"]
        assert torch.equal(captured[0].hidden, embedded) and torch.equal(hidden_states[0], embedded)
        layers = adapter.decoder_layers(ours.model)
        n_layers = len(layers)
        for index, (layer, inputs) in enumerate(zip(layers, captured)):
            reference = ReferenceLayer(hf, index, ids.shape[1])
            start = hidden_states[index]
            pre_mlp = adapter.attention_map(layer, start, inputs.arguments)
            assert (pre_mlp - start).norm() > 1e-3 * start.norm()  # the split is not trivial
            ours_out = adapter.mlp_map(layer, pre_mlp, inputs.arguments)
            reference_out = reference.mlp(reference.attention(start))
            expected = hidden_states[index + 1]
            for label, output in (("adapter", ours_out), ("reference", reference_out)):
                seen = hf.model.norm(output) if index == n_layers - 1 else output
                relative = (seen - expected).norm() / expected.norm()
                assert relative < 1e-12, (label, index, float(relative), fresh_seed)


def test_structured_autodiff_and_layer_major_equal_the_float64_reference(granite_directory, fresh_seed):
    samples = random_samples(fresh_seed)
    expected = reference_means(unpatched(granite_directory), samples)
    loaded = load_model(str(granite_directory), dtype="float64")
    for backend in (StructuredBackend(), AutodiffBackend()):
        analysis = analyse_samples(loaded.model, loaded.adapter, samples, backend=backend, batch_size=2)
        assert_close_to_reference(analysis.means, expected, backend.name, fresh_seed)
        if backend.name == "structured":  # the closed form covers both Granite sublayers: no fallback
            assert set(analysis.backend_by_sublayer.values()) == {"structured"}, analysis.backend_by_sublayer
    layerwise = LayerwiseModel(str(granite_directory), dtype="float64", device="cpu")
    options = MeasurementOptions(batch_size=2, probe_directions=0)
    layer_major = {(measurement.layer, sublayer): measurement.means[sublayer]
                   for measurement in measure_layer_major(layerwise, samples, backend=StructuredBackend(),
                                                          options=options)
                   for sublayer in SUBLAYERS}
    assert_close_to_reference(layer_major, expected, "layer-major structured", fresh_seed)
