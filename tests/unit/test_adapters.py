import pytest
import torch

from resdyn.models.adapters import SUPPORTED_FAMILIES, UnsupportedArchitectureError, adapter_for
from resdyn.models.loading import ModelNotFoundError, load_model

from ..tiny_models import FAMILIES, random_tiny_model


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_then_mlp_reproduces_the_decoder_layer(family, fresh_seed):
    model = random_tiny_model(family, fresh_seed)
    adapter = adapter_for(model.config.model_type)
    input_ids = torch.randint(0, 256, (3, 24), generator=torch.Generator().manual_seed(fresh_seed))
    captured = adapter.capture_layer_inputs(model, input_ids)
    for layer, inputs in zip(adapter.decoder_layers(model), captured):
        composed = adapter.mlp_map(layer, adapter.attention_map(layer, inputs.hidden, inputs.arguments),
                                   inputs.arguments)
        relative_error = (composed - inputs.output).norm() / inputs.output.norm()
        assert relative_error < 1e-10, f"seed {fresh_seed}: {relative_error}"
        # the split is not trivial: each map really changes the residual
        pre_mlp = adapter.attention_map(layer, inputs.hidden, inputs.arguments)
        assert (pre_mlp - inputs.hidden).norm() > 1e-3 * inputs.hidden.norm()


def test_gemma4_mlp_map_holds_the_per_layer_input_branch(fresh_seed):
    model = random_tiny_model("gemma4", fresh_seed)
    adapter = adapter_for("gemma4_text")
    inputs = adapter.capture_layer_inputs(model, torch.randint(0, 256, (2, 10)))[0]
    layer = adapter.decoder_layers(model)[0]
    pre_mlp = adapter.attention_map(layer, inputs.hidden, inputs.arguments)
    zeroed = dict(inputs.arguments, per_layer_input=torch.zeros_like(inputs.arguments["per_layer_input"]))
    assert not torch.allclose(adapter.mlp_map(layer, pre_mlp, zeroed), inputs.output)


def test_unsupported_architecture_names_the_supported_families():
    with pytest.raises(UnsupportedArchitectureError) as error:
        adapter_for("gpt2")
    for family in ("llama", "olmo3", "gemma3", "gemma4"):
        assert family in str(error.value)
    assert set(FAMILIES) <= set(SUPPORTED_FAMILIES) | {"gemma3", "gemma4"}


def test_unsupported_model_directory_fails_before_loading_weights(tmp_path):
    from transformers import GPT2Config

    GPT2Config(n_layer=1, n_embd=8, n_head=2).save_pretrained(tmp_path)
    with pytest.raises(UnsupportedArchitectureError, match="gpt2"):
        load_model(str(tmp_path))


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(ModelNotFoundError, match="save_pretrained"):
        load_model(str(tmp_path / "does-not-exist"))
    with pytest.raises(ModelNotFoundError, match="config.json"):
        load_model(str(tmp_path))
