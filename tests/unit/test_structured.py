"""The structured backend's closed-form means equal the mean of per-sample autodiff Jacobians."""

import numpy as np
import pytest

from resdyn.corpus import Sample
from resdyn.jacobians.autodiff import AutodiffBackend
from resdyn.jacobians.engine import analyse_samples
from resdyn.jacobians.streaming import RunningMoments
from resdyn.jacobians.structured import StructuredBackend, gated_mlp_of
from resdyn.jacobians.structured_attention import attention_view_of
from resdyn.models.adapters import adapter_for

from ..tiny_models import FAMILIES, random_tiny_model


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("positions", ["last", "all"])
def test_structured_mean_equals_mean_of_autodiff_jacobians(family, positions, fresh_seed):
    model = random_tiny_model(family, fresh_seed)
    adapter = adapter_for(model.config.model_type)
    rng = np.random.default_rng(fresh_seed)
    analysed = (39,) if positions == "last" else (20, 33, 38, 39)  # beyond the 32-token sliding window
    samples = [Sample(i, tuple(int(t) for t in rng.integers(0, 256, 40)), analysed) for i in range(9)]
    structured = analyse_samples(model, adapter, samples, backend=StructuredBackend(), batch_size=4)
    reference = analyse_samples(model, adapter, samples, backend=AutodiffBackend(), batch_size=4)
    for key, expected in reference.means.items():
        mean = structured.means[key]
        assert structured.counts[key] == reference.counts[key]
        relative = np.linalg.norm(mean - expected) / np.linalg.norm(expected)
        assert relative < 1e-10, (key, relative, fresh_seed)
    layer = adapter.decoder_layers(model)[0]
    assert set(structured.backend_by_sublayer.values()) == {"structured"}
    assert (gated_mlp_of(adapter, layer) is not None) == (attention_view_of(adapter, layer) is not None)


def test_sum_only_batches_keep_the_mean_and_drop_the_variance(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    data = rng.normal(size=(11, 3, 3))
    moments = RunningMoments()
    moments.update(data[:4])
    moments.add_sum(data[4:].sum(0), 7)
    np.testing.assert_allclose(moments.mean, data.mean(0), rtol=1e-12, atol=1e-14)
    assert moments.count == 11 and moments.variance is None


def test_subsample_of_a_means_only_backend_equals_full_batch_autodiff(fresh_seed):
    """The structured backend computes the kept samples' matrices in closed form (a sliced batch, one observation
    each): the same matrices as autodiff over the full batch."""
    model = random_tiny_model("gemma4", fresh_seed, n_layers=4, layer_types=["sliding_attention", "full_attention"] * 2,
                              num_kv_shared_layers=2, sliding_window=5)
    adapter = adapter_for(model.config.model_type)
    rng = np.random.default_rng(fresh_seed)
    samples = [Sample(i, tuple(int(t) for t in rng.integers(0, 256, 12)), (7, 11)) for i in range(5)]
    kept = dict(batch_size=5, keep_sample_jacobians=2)
    structured = analyse_samples(model, adapter, samples, backend=StructuredBackend(), **kept)
    reference = analyse_samples(model, adapter, samples, backend=AutodiffBackend(), **kept)
    for key, matrices in reference.sample_jacobians.items():
        assert len(matrices) == 2 * 2 == len(structured.sample_jacobians[key])
        for (s1, t1, m1), (s2, t2, m2) in zip(structured.sample_jacobians[key], matrices):
            assert (s1, t1) == (s2, t2)
            np.testing.assert_allclose(m1, m2, rtol=0, atol=1e-12)


def test_factored_term_total_equals_its_dense_formula_and_is_stable(fresh_seed):
    """FactoredTerm.total() against the formula in its docstring, written densely in numpy (two batches
    absorbed; blocks per head, weighted rows and a Hadamard term over a lazily made product), twice."""
    import torch

    from resdyn.jacobians.structured import FactoredTerm

    rng = np.random.default_rng(fresh_seed)
    d, heads, head_width, inner, f, k = 7, 3, 4, 5, 9, 2
    m = heads * head_width

    def tensor(*shape):
        return torch.from_numpy(rng.standard_normal(shape))

    left, row_gain, column_gain = tensor(d, m), tensor(d), tensor(d)
    right_blocks, right_weighted, a, b, right_hadamard = (tensor(heads, inner, d), tensor(m, d), tensor(m, k),
                                                          tensor(k, f), tensor(f, d))

    def batch():
        return FactoredTerm(left, row_gain, column_gain, core=tensor(m, d),
                            blocked=(tensor(heads, head_width, inner), right_blocks),
                            weighted=[(tensor(m), right_weighted)], hadamard=[((a, b), tensor(m, f), right_hadamard)])

    first, second = batch(), batch()
    parts = [(term.core.numpy().copy(), term.blocked[0].numpy().copy(), term.weighted[0][0].numpy().copy(),
              term.hadamard[0][1].numpy().copy()) for term in (first, second)]
    first.absorb(second)
    core, blocks, weights, moments = (sum(values) for values in zip(*parts))
    blocked = np.concatenate([blocks[h] @ right_blocks[h].numpy() for h in range(heads)])
    inside = (core + blocked + weights[:, None] * right_weighted.numpy()
              + ((a.numpy() @ b.numpy()) * moments) @ right_hadamard.numpy())
    expected = row_gain.numpy()[:, None] * (left.numpy() @ inside) * column_gain.numpy()[None, :]
    np.testing.assert_allclose(first.total().numpy(), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(first.total().numpy(), expected, rtol=1e-12, atol=1e-12)
