"""Mean Jacobians against a float64 reference that shares none of resdyn's precision patches.

resdyn runs float64 models with its own norm and attention forwards (resdyn/models/precision.py) and
under its torch function mode ``Float64Casts``. The reference here is the Hugging Face model itself,
unpatched (HF's own RMSNorm, eager attention and mixture-of-experts router), under this file's own
torch function mode that turns every float32 cast of float64 data into float64, differentiated row by
row with ``torch.func.jacrev`` and averaged in numpy. A model-internal float32 cast that resdyn misses
(the Gemma 4 router took ``softmax(dtype=torch.float32)``) shows up as a ~1e-8 relative difference.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from transformers import AutoModelForCausalLM

from resdyn.corpus import Sample
from resdyn.jacobians.autodiff import AutodiffBackend
from resdyn.jacobians.engine import analyse_samples
from resdyn.jacobians.structured import StructuredBackend
from resdyn.models.adapters import SUBLAYERS, adapter_for

from ..references import UpcastFloat32
from ..tiny_models import FAMILIES, random_tiny_model

MOE = {"enable_moe_block": True, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 16}


def unpatched_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The same weights in a fresh HF model: HF's own forwards, eager attention, no resdyn patch."""
    config = copy.deepcopy(model.config)  # from_config sets the attention implementation on the config it is given
    extra = {"experts_implementation": "eager"} if getattr(config, "enable_moe_block", False) else {}
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float64, attn_implementation="eager", **extra)
    fresh.load_state_dict(model.state_dict())
    return fresh.eval()


def reference_means(model, family: str, samples: list[Sample]) -> dict:
    """(layer, sublayer) -> mean over samples of the sublayer Jacobian at each sample's positions."""
    adapter = adapter_for(family)
    ids = torch.tensor([sample.token_ids for sample in samples])
    sums, counts = {}, {}
    with UpcastFloat32():
        captured = adapter.capture_layer_inputs(model, ids)
        for index, layer in enumerate(adapter.decoder_layers(model)):
            for sublayer in SUBLAYERS:
                for position in samples[0].positions:
                    function, x0 = adapter.row_function(layer, captured[index], sublayer, position)
                    full = torch.func.jacrev(function)(x0)  # (N, d, N, d): rows are independent
                    blocks = torch.stack([full[n, :, n, :] for n in range(len(x0))])
                    sums[(index, sublayer)] = sums.get((index, sublayer), 0) + blocks.sum(0).detach().numpy()
                    counts[(index, sublayer)] = counts.get((index, sublayer), 0) + len(x0)
    return {key: sums[key] / counts[key] for key in sums}


def random_samples(seed: int, n: int = 4, length: int = 10) -> list[Sample]:
    rng = np.random.default_rng(seed)
    return [Sample(i, rng.integers(0, 250, length).tolist(), (length - 1,)) for i in range(n)]


@pytest.mark.parametrize("family, overrides", [(family, {}) for family in FAMILIES] + [("gemma4", MOE)],
                         ids=FAMILIES + ["gemma4-moe"])
def test_mean_jacobians_equal_an_unpatched_float64_reference(family, overrides, fresh_seed):
    ours = random_tiny_model(family, fresh_seed, **overrides)
    samples = random_samples(fresh_seed)
    expected = reference_means(unpatched_copy(ours), family, samples)
    for backend in (StructuredBackend(), AutodiffBackend()):
        measured = analyse_samples(ours, adapter_for(family), samples, backend=backend, batch_size=2).means
        for key, reference in expected.items():
            error = np.linalg.norm(measured[key] - reference) / np.linalg.norm(reference)
            assert error < 1e-10, (family, backend.name, key, error, fresh_seed)


def test_the_reference_sees_a_float32_router(fresh_seed):
    """The check can fail: without resdyn's mode, Gemma 4's float32 router softmax is visible at ~1e-8."""
    import resdyn.jacobians.engine as engine

    ours = random_tiny_model("gemma4", fresh_seed, **MOE)
    samples = random_samples(fresh_seed)
    expected = reference_means(unpatched_copy(ours), "gemma4", samples)
    class PassThrough(TorchFunctionMode):  # a mode that changes nothing
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    original = engine.float64_casts
    engine.float64_casts = lambda dtype: PassThrough()
    try:
        measured = analyse_samples(ours, adapter_for("gemma4"), samples, backend=AutodiffBackend(), batch_size=2).means
    finally:
        engine.float64_casts = original
    worst = max(np.linalg.norm(measured[key] - expected[key]) / np.linalg.norm(expected[key])
                for key in expected if key[1] == "mlp")
    assert worst > 1e-9, worst


def test_a_gemma4_mixture_of_experts_model_runs_end_to_end_exactly(tmp_path, fresh_seed):
    """`resdyn run` on a saved Gemma 4 MoE model (per-layer inputs, 2 layers, 4 experts, top-2): every check
    passes (the finite-difference probe included) and its mean Jacobians equal the unpatched reference."""
    from resdyn.dagster_project.interface.cli import main
    from resdyn.dagster_project.store.warehouse import Warehouse
    from resdyn.models.byte_tokenizer import build_byte_tokenizer

    ours = random_tiny_model("gemma4", fresh_seed, **MOE)
    directory = tmp_path / "gemma4-moe"
    ours.save_pretrained(directory)
    build_byte_tokenizer().save_pretrained(directory)
    root = tmp_path / "warehouse"
    assert main(["run", "--model", str(directory), "--samples", "4", "--seq-len", "10", "--per-sample", "1",
                 "--leiden-seeds", "2", "--permutations", "30", "--log-level", "ERROR", "--warehouse", str(root)]) == 0
    store = Warehouse(root)
    assert store.query("SELECT status FROM partitions").to_pylist() == [{"status": "complete"}]
    conventions = json.loads(store.query("SELECT map_conventions FROM runs").to_pylist()[0]["map_conventions"])
    assert "held fixed" in conventions["per_layer_input"] and "h_0" in conventions["per_layer_input"]
    samples = [Sample(row["sample_id"], tuple(row["token_ids"]), (row["position"],)) for row in
               store.query("SELECT * FROM samples ORDER BY sample_id").to_pylist()]
    expected = reference_means(unpatched_copy(ours), "gemma4", samples)
    rows = store.query("SELECT layer, sublayer, row, \"values\" FROM jacobians ORDER BY layer, sublayer, row").to_pylist()
    for (layer, sublayer), reference in expected.items():
        measured = np.array([r["values"] for r in rows if r["layer"] == layer and r["sublayer"] == sublayer])
        error = np.linalg.norm(measured - reference) / np.linalg.norm(reference)
        assert error < 1e-10, (layer, sublayer, error, fresh_seed)
