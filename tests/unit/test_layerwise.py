"""The layer-major engine against the whole-model path, its memory bound, and device errors."""

import numpy as np
import pytest
import torch

from resdyn.corpus import Sample
from resdyn.jacobians.autodiff import AutodiffBackend
from resdyn.jacobians.engine import MeasurementOptions, measure_layer_major, measure_whole_model
from resdyn.jacobians.structured import StructuredBackend
from resdyn.models.byte_tokenizer import build_byte_tokenizer
from resdyn.models.devices import DeviceError, resolve_device
from resdyn.models.layerwise import LayerwiseModel, describe_checkpoint
from resdyn.models.loading import load_model

from ..tiny_models import FAMILIES, random_tiny_model

# (family, extra config): Gemma 4 with KV-shared layers, OLMo 3 with a window shorter than the samples
CASES = [(family, {}) for family in FAMILIES] + [
    ("gemma4", {"n_layers": 4, "layer_types": ["sliding_attention", "full_attention"] * 2, "num_kv_shared_layers": 2,
                "sliding_window": 6}),
    ("olmo3", {"n_layers": 3, "sliding_window": 5}),
]


def _samples(rng, n=5, tokens=14, positions=(13,)):
    return [Sample(i, tuple(int(t) for t in rng.integers(0, 256, tokens)), positions) for i in range(n)]


def _saved(tmp_path, family, seed, extra, dtype=None, shard=None):
    extra = dict(extra)
    n_layers = extra.pop("n_layers", 2)
    model = random_tiny_model(family, seed, n_layers=n_layers, **extra)
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(tmp_path, **({"max_shard_size": shard} if shard else {}))
    build_byte_tokenizer().save_pretrained(tmp_path)
    return tmp_path


@pytest.mark.parametrize("family, extra", CASES, ids=[f"{f}{'-' + '-'.join(e) if e else ''}" for f, e in CASES])
def test_layer_major_equals_the_whole_model_path(tmp_path, family, extra, fresh_seed):
    directory = _saved(tmp_path, family, fresh_seed, extra)
    rng = np.random.default_rng(fresh_seed)
    samples = _samples(rng, positions=(9, 13))
    options = MeasurementOptions(batch_size=2, keep_sample_jacobians=2, probe_directions=2, probe_seed=fresh_seed)
    loaded = load_model(str(directory), dtype="float64")
    reference = list(measure_whole_model(loaded.model, loaded.adapter, samples, backend=StructuredBackend(),
                                         options=options))
    layerwise = LayerwiseModel(str(directory), dtype="float64", device="cpu")
    measured = list(measure_layer_major(layerwise, samples, backend=StructuredBackend(), options=options))
    assert len(measured) == len(reference) == layerwise.n_layers
    for ours, theirs in zip(measured, reference):
        assert ours.observation_index == theirs.observation_index
        for sublayer in ("attn", "mlp"):
            scale = np.abs(theirs.means[sublayer]).max()
            assert np.abs(ours.means[sublayer] - theirs.means[sublayer]).max() <= 1e-12 * scale, (family, sublayer)
            np.testing.assert_allclose(ours.probe_differences[sublayer], theirs.probe_differences[sublayer],
                                       rtol=0, atol=1e-9)
            for (s1, t1, m1), (s2, t2, m2) in zip(ours.sample_jacobians[sublayer], theirs.sample_jacobians[sublayer]):
                assert (s1, t1) == (s2, t2) and np.abs(m1 - m2).max() <= 1e-12 * np.abs(m2).max()
        for boundary in ("pre_attn", "pre_mlp"):
            np.testing.assert_array_equal(ours.activations[boundary], theirs.activations[boundary])
    # never more than one decoder layer's parameters at once, and nothing left behind
    assert layerwise.ledger.peak_layers == 1 and layerwise.ledger.loads == layerwise.n_layers
    assert layerwise.ledger.peak_bytes <= layerwise.ledger.largest_layer_bytes
    assert all(parameter.is_meta for parameter in layerwise.model.parameters())


def test_sharded_bf16_checkpoint_reads_like_from_pretrained(tmp_path, fresh_seed):
    directory = _saved(tmp_path, "llama", fresh_seed, {"n_layers": 3}, dtype=torch.bfloat16, shard="60KB")
    assert (directory / "model.safetensors.index.json").is_file()
    described = describe_checkpoint(str(directory))
    loaded = load_model(str(directory), dtype="float64")
    # from the headers alone; the tied LM head is stored once, as parameters() counts it
    assert described["n_params"] == sum(p.numel() for p in loaded.model.parameters())
    assert set(described["stored_dtypes"]) == {"BF16"}
    samples = _samples(np.random.default_rng(fresh_seed), n=3)
    options = MeasurementOptions(batch_size=3, probe_directions=0)
    reference = list(measure_whole_model(loaded.model, loaded.adapter, samples, backend=AutodiffBackend(),
                                         options=options))
    measured = list(measure_layer_major(LayerwiseModel(str(directory), device="cpu"), samples,
                                        backend=AutodiffBackend(), options=options))
    for ours, theirs in zip(measured, reference):
        for sublayer in ("attn", "mlp"):
            np.testing.assert_allclose(ours.means[sublayer], theirs.means[sublayer], rtol=0, atol=1e-12)
            np.testing.assert_allclose(ours.variances[sublayer], theirs.variances[sublayer], rtol=0, atol=1e-12)


def test_bad_devices_are_one_line_errors_naming_the_available_ones():
    assert resolve_device("auto").type in ("cpu", "cuda")
    assert resolve_device("cpu") == torch.device("cpu")
    for name in ("cuda:7", "gpu", "tpu:0"):
        with pytest.raises(DeviceError) as error:
            resolve_device(name)
        assert "available" in str(error.value) and "cpu" in str(error.value) and "\n" not in str(error.value)
