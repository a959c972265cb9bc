"""Per-sample Jacobians in closed form (the mean's closed form over one observation) equal float64 autodiff
per observation, for every family the mean's closed form covers; mixture-of-experts blocks use autodiff."""

import numpy as np
import pytest
import torch

from resdyn.jacobians.autodiff import AutodiffBackend
from resdyn.jacobians.structured import StructuredBackend
from resdyn.models.adapters import SUBLAYERS, adapter_for

from ..tiny_models import FAMILIES, random_granite_model, random_tiny_model

TOLERANCE = 1e-10
MOE = {"enable_moe_block": True, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 16}


def _relative(ours: torch.Tensor, reference: torch.Tensor) -> float:
    ours, reference = ours.detach().cpu().numpy(), reference.detach().cpu().numpy()
    return float(np.max(np.linalg.norm(ours - reference, axis=(1, 2)) / np.linalg.norm(reference, axis=(1, 2))))


@pytest.mark.parametrize("family", [*FAMILIES, "granite"])
def test_each_observations_closed_form_jacobian_equals_autodiff(family, fresh_seed):
    model = random_granite_model(fresh_seed) if family == "granite" else random_tiny_model(family, fresh_seed)
    adapter = adapter_for(model.config.model_type)
    generator = torch.Generator().manual_seed(fresh_seed)
    captured = adapter.capture_layer_inputs(model, torch.randint(0, 256, (3, 14), generator=generator))
    structured, autodiff = StructuredBackend(), AutodiffBackend()
    for layer, inputs in zip(adapter.decoder_layers(model), captured):
        for position in (6, 13):
            for sublayer in SUBLAYERS:
                assert structured.covers(adapter, layer, sublayer), (family, sublayer)
                ours = structured.sample_jacobians(adapter, layer, inputs, sublayer, position)
                reference = autodiff.sample_jacobians(adapter, layer, inputs, sublayer, position)
                assert ours.shape == reference.shape == (3, model.config.hidden_size, model.config.hidden_size)
                assert ours.dtype == torch.float64
                relative = _relative(ours, reference)
                assert relative < TOLERANCE, (family, sublayer, position, relative, fresh_seed)
                # one observation, not an average: the rows differ from each other as the samples do
                assert _relative(ours[:1].expand(3, -1, -1), reference) > 1e-6


def test_a_mixture_of_experts_block_falls_back_to_autodiff(fresh_seed):
    model = random_tiny_model("gemma4", fresh_seed, **MOE)
    adapter = adapter_for(model.config.model_type)
    inputs = adapter.capture_layer_inputs(model, torch.randint(0, 256, (2, 10)))[0]
    layer = adapter.decoder_layers(model)[0]
    structured = StructuredBackend()
    assert not structured.covers(adapter, layer, "mlp")
    ours = structured.sample_jacobians(adapter, layer, inputs, "mlp", 9)
    reference = AutodiffBackend().sample_jacobians(adapter, layer, inputs, "mlp", 9)
    assert torch.equal(ours, reference)
