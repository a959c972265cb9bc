import numpy as np
import pytest
import torch

from resdyn.corpus import Sample
from resdyn.jacobians.autodiff import AutodiffBackend, batch_jacobians
from resdyn.jacobians.engine import analyse_samples
from resdyn.jacobians.streaming import RunningMoments
from resdyn.models.adapters import adapter_for
from resdyn.models.adapters.base import LayerInputs

from ..tiny_models import FAMILIES, random_granite_model, random_tiny_model


def _central_differences(function, x0, step=1e-5):
    columns = []
    with torch.no_grad():
        for i in range(x0.shape[1]):
            shift = torch.zeros_like(x0)
            shift[:, i] = step
            columns.append((function(x0 + shift) - function(x0 - shift)) / (2 * step))
    return torch.stack(columns, dim=-1)


def _relative(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("sublayer", ["attn", "mlp"])
def test_jacobians_equal_finite_differences_and_autograd(family, sublayer, fresh_seed):
    model = random_tiny_model(family, fresh_seed)
    adapter = adapter_for(model.config.model_type)
    generator = torch.Generator().manual_seed(fresh_seed)
    inputs = adapter.capture_layer_inputs(model, torch.randint(0, 256, (3, 12), generator=generator))[1]
    layer = adapter.decoder_layers(model)[1]
    position = int(torch.randint(0, 12, (1,), generator=generator))
    function, x0 = adapter.positional_function(layer, inputs, sublayer, position)
    reverse = batch_jacobians(function, x0, mode="jacrev")
    forward = batch_jacobians(function, x0, mode="jacfwd")
    finite = _central_differences(function, x0)
    assert _relative(reverse, finite) < 1e-6, f"seed {fresh_seed}"
    assert _relative(forward, reverse) < 1e-12
    for n in range(x0.shape[0]):
        def single(x, n=n):
            rows = x0.clone()
            rows[n] = x
            return function(rows)[n]

        reference = torch.autograd.functional.jacobian(single, x0[n])
        assert _relative(reverse[n], reference) < 1e-12


def test_attention_jacobian_holds_other_positions_fixed(fresh_seed):
    model = random_tiny_model("llama", fresh_seed)
    adapter = adapter_for("llama")
    inputs = adapter.capture_layer_inputs(model, torch.randint(0, 256, (1, 8)))[0]
    layer = adapter.decoder_layers(model)[0]
    function, x0 = adapter.positional_function(layer, inputs, "attn", 7)
    with torch.no_grad():
        full = adapter.attention_map(layer, inputs.hidden, inputs.arguments)[:, 7]
    assert torch.allclose(function(x0), full, rtol=0, atol=1e-12)


def test_running_moments_match_numpy(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    data = rng.normal(size=(37, 5, 4)) * rng.uniform(0.1, 10)
    moments = RunningMoments()
    for chunk in np.array_split(data, [3, 4, 20]):
        moments.update(chunk)
    assert moments.count == 37
    np.testing.assert_allclose(moments.mean, data.mean(0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(moments.variance, data.var(0), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("positions", ["last", "all"])
def test_streamed_mean_equals_mean_of_stored_sample_jacobians(positions, fresh_seed):
    model = random_tiny_model("olmo3", fresh_seed)
    adapter = adapter_for("olmo3")
    rng = np.random.default_rng(fresh_seed)
    analysed = (9,) if positions == "last" else (6, 7, 8, 9)
    samples = [Sample(i, tuple(int(t) for t in rng.integers(0, 256, 10)), analysed) for i in range(7)]
    analysis = analyse_samples(model, adapter, samples, backend=AutodiffBackend(), batch_size=3,
                               keep_sample_jacobians=7)
    for key, mean in analysis.means.items():
        stored = np.stack([matrix for _, _, matrix in analysis.sample_jacobians[key]])
        assert stored.shape[0] == 7 * len(analysed) == analysis.counts[key]
        np.testing.assert_allclose(mean, stored.mean(0), rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(analysis.variances[key], stored.var(0), rtol=1e-8, atol=1e-13)
    assert analysis.observation_index[:len(analysed)] == [(0, t) for t in analysed]
    assert analysis.activations[(0, "pre_attn")].shape == (7 * len(analysed), model.config.hidden_size)
    # the pre-MLP boundary is the attention map's output at the same rows
    layer = adapter.decoder_layers(model)[1]
    inputs = adapter.capture_layer_inputs(model, torch.tensor([samples[0].token_ids]))[1]
    with torch.no_grad():
        expected = adapter.attention_map(layer, inputs.hidden, inputs.arguments)[0, list(analysed)]
    np.testing.assert_allclose(analysis.activations[(1, "pre_mlp")][: len(analysed)], expected.numpy(),
                               rtol=1e-5, atol=1e-6)


ROW_CASES = [(family, {}) for family in FAMILIES] + [
    ("mistral", {"sliding_window": 4}), ("olmo3", {"sliding_window": 4}),
    ("gemma4", {"n_layers": 4, "layer_types": ["sliding_attention", "full_attention"] * 2, "num_kv_shared_layers": 2,
                "sliding_window": 4}),
]


@pytest.mark.parametrize("family, extra", ROW_CASES, ids=[f"{f}-{'-'.join(e) or 'default'}" for f, e in ROW_CASES])
def test_row_function_equals_the_whole_sequence_function(family, extra, fresh_seed):
    """Recomputing only the analysed row (other keys and values fixed) gives the same map and Jacobian."""
    model = random_tiny_model(family, fresh_seed, **extra)
    adapter = adapter_for(model.config.model_type)
    generator = torch.Generator().manual_seed(fresh_seed)
    captured = adapter.capture_layer_inputs(model, torch.randint(0, 256, (3, 12), generator=generator))
    for layer, inputs in zip(adapter.decoder_layers(model), captured):
        for position in (0, int(torch.randint(1, 11, (1,), generator=generator)), 11):
            whole, x0 = adapter.positional_function(layer, inputs, "attn", position)
            row, x1 = adapter.row_function(layer, inputs, "attn", position)
            assert torch.equal(x0, x1)
            assert _relative(batch_jacobians(row, x1), batch_jacobians(whole, x0)) < 1e-12, (family, position)
            with torch.no_grad():
                assert _relative(row(x1 + 0.1), whole(x0 + 0.1)) < 1e-13


RECORDING_CASES = [*ROW_CASES, ("granite", {})]


@pytest.mark.parametrize("family, extra", RECORDING_CASES,
                         ids=[f"{f}-{'-'.join(e) or 'default'}" for f, e in RECORDING_CASES])
def test_the_pre_mlp_pass_records_the_keys_and_values_the_row_function_would_and_changes_nothing(family, extra,
                                                                                                 fresh_seed):
    """One attention pass of the whole sequence gives the pre-MLP residual (bit for bit the map without a cache)
    and the keys and values the row function holds fixed (bit for bit those of its own recording pass)."""
    model = random_granite_model(fresh_seed) if family == "granite" else random_tiny_model(family, fresh_seed, **extra)
    adapter = adapter_for(model.config.model_type)
    generator = torch.Generator().manual_seed(fresh_seed)
    captured = adapter.capture_layer_inputs(model, torch.randint(0, 256, (3, 12), generator=generator))
    position = int(torch.randint(0, 12, (1,), generator=generator))
    for layer, inputs in zip(adapter.decoder_layers(model), captured):
        alone = LayerInputs(inputs.hidden, inputs.arguments)  # the row function records its own keys and values
        row_alone, x0 = adapter.row_function(layer, alone, "attn", position)
        with torch.no_grad():
            plain = adapter.attention_map(layer, inputs.hidden, inputs.arguments)
        assert torch.equal(adapter.pre_mlp(layer, inputs), plain), family
        assert inputs.context is not None  # recorded by the pre-MLP pass, so the row function records nothing more
        for recorded, own in ((inputs.context.keys, alone.context.keys), (inputs.context.values, alone.context.values)):
            assert (recorded is None and own is None) or torch.equal(recorded, own), family
        row, x1 = adapter.row_function(layer, inputs, "attn", position)
        with torch.no_grad():
            assert torch.equal(row(x1 + 0.1), row_alone(x0 + 0.1)), family


@pytest.mark.parametrize("family, extra", RECORDING_CASES,
                         ids=[f"{f}-{'-'.join(e) or 'default'}" for f, e in RECORDING_CASES])
def test_the_layer_output_from_the_pre_mlp_residual_is_the_layers_own_forward_bit_for_bit(family, extra, fresh_seed):
    """The layer-major driver advances the residual stream by mlp_map(pre_mlp(h)) instead of the layer's forward
    (which would run the attention again): the HF layer's own output, captured by a hook, bit for bit; None for
    Gemma 4, whose forward also stores keys and values for later layers."""
    model = random_granite_model(fresh_seed) if family == "granite" else random_tiny_model(family, fresh_seed, **extra)
    adapter = adapter_for(model.config.model_type)
    generator = torch.Generator().manual_seed(fresh_seed)
    captured = adapter.capture_layer_inputs(model, torch.randint(0, 256, (3, 12), generator=generator))
    for layer, inputs in zip(adapter.decoder_layers(model), captured):
        output = adapter.layer_output(layer, inputs)
        if family == "gemma4":
            assert output is None
            continue
        assert output is not None and torch.equal(output, inputs.output), family
        assert output.data_ptr() != inputs.pre_mlp.data_ptr()  # a new tensor: the pre-MLP residual may be freed


@pytest.mark.parametrize("sublayer", ["attn", "mlp"])
def test_chunked_vmap_equals_one_chunk_and_the_chunk_bound_sees_attention_width(sublayer, fresh_seed, monkeypatch):
    """The per-sample path in chunks of cotangents (as at paper scale) equals one chunk to rounding; the
    chunk bound counts attention's per-cotangent key/value gradients (T x query width), not just 4 d."""
    from resdyn.jacobians import autodiff

    model = random_tiny_model("llama", fresh_seed)
    adapter = adapter_for("llama")
    inputs = adapter.capture_layer_inputs(model, torch.randint(0, 256, (2, 10)))[1]
    layer = adapter.decoder_layers(model)[1]
    d, query_width = model.config.hidden_size, layer.self_attn.q_proj.out_features
    expected = 10 * query_width if sublayer == "attn" else max(4 * d, model.config.intermediate_size)
    assert autodiff.widest_intermediate(layer, sublayer, 10, d) == max(4 * d, expected)
    whole = AutodiffBackend(chunk_size=d).sample_jacobians(adapter, layer, inputs, sublayer, 6)
    monkeypatch.setattr(autodiff, "VMAP_FLOATS", 2 * autodiff.widest_intermediate(layer, sublayer, 10, d) * 3)
    chunked = AutodiffBackend().sample_jacobians(adapter, layer, inputs, sublayer, 6)  # chunks of 3 cotangents
    assert _relative(chunked, whole) < 1e-13


def test_merged_running_moments_equal_one_stream(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    data = rng.normal(size=(23, 4, 4)) * rng.uniform(0.1, 10)
    parts = []
    for chunk in np.array_split(data, [5, 6, 17]):
        part = RunningMoments()
        part.update(chunk)
        parts.append(part)
    merged = RunningMoments.merged(parts)
    assert merged.count == 23
    np.testing.assert_allclose(merged.mean, data.mean(0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(merged.variance, data.var(0), rtol=1e-10, atol=1e-14)
    sums_only = RunningMoments()
    sums_only.add_sum(data[:5].sum(0), 5)
    assert RunningMoments.merged([sums_only, parts[1]]).variance is None  # a part without variance: unknown


@pytest.mark.parametrize("backend_name", ["structured", "autodiff"])
def test_fold_means_are_the_means_of_contiguous_sample_blocks_whatever_the_batch_size(backend_name, fresh_seed):
    """Fold k's mean equals the mean of the per-sample Jacobians (float64 autodiff) of the k-th contiguous block of
    samples, with batches that straddle blocks (batch 3, blocks of 3-4 of 10 samples); the overall mean is the
    no-fold mean to rounding."""
    from resdyn.jacobians import make_backend
    from resdyn.jacobians.engine import MeasurementOptions, fold_of_samples, measure_whole_model

    model = random_tiny_model("llama", fresh_seed)
    adapter = adapter_for("llama")
    rng = np.random.default_rng(fresh_seed)
    samples = [Sample(i, tuple(int(t) for t in rng.integers(0, 256, 8)), (7,)) for i in range(10)]
    fold_of = fold_of_samples(samples, 3)
    assert [fold_of[i] for i in range(10)] == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    folded = list(measure_whole_model(model, adapter, samples, backend=make_backend(backend_name),
                                      options=MeasurementOptions(batch_size=3, folds=3, keep_sample_jacobians=10,
                                                                 probe_directions=0)))
    plain = list(measure_whole_model(model, adapter, samples, backend=make_backend(backend_name),
                                     options=MeasurementOptions(batch_size=4, probe_directions=0)))
    for with_folds, without in zip(folded, plain):
        for sublayer in ("attn", "mlp"):
            per_sample = {sample_id: matrix for sample_id, _, matrix in with_folds.sample_jacobians[sublayer]}
            assert with_folds.fold_counts[sublayer] == [4, 3, 3]
            for fold, mean in enumerate(with_folds.fold_means[sublayer]):
                block = np.stack([per_sample[i] for i in range(10) if fold_of[i] == fold])
                np.testing.assert_allclose(mean, block.mean(0), rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(with_folds.means[sublayer], without.means[sublayer], rtol=1e-12, atol=1e-13)
            assert without.fold_means == {}
