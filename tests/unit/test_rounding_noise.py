"""The trained file's rounding as a dose-response (SIMEX): steps read off dequantized blocks against the rounding
error the ``gguf`` package actually made, doses of the stated variance, and the extrapolation to no rounding."""

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from resdyn import claims
from resdyn.models.gguf_import import import_gguf
from resdyn.models.rounding_noise import (
    ROUNDING_NOISE_RECORD,
    RoundingNoiseError,
    grid_steps,
    rounding_noise_checkpoint,
    with_rounding_noise,
)

from ..gguf_files import vocabulary, write_gguf


def _round_trip(array: np.ndarray, kind: str) -> np.ndarray:
    qtype = gguf.GGMLQuantizationType[kind]
    return gguf.quants.dequantize(gguf.quants.quantize(array, qtype), qtype)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"])
def test_the_step_read_off_a_dequantized_block_predicts_the_rounding_error_gguf_made(kind, fresh_seed):
    """var(w - deq(q(w))) over a weight matrix, computed from the original weights that the file no longer has,
    against mean(Delta^2) / 12 read from the dequantized weights alone (heavy-tailed weights, like trained ones)."""
    rng = np.random.default_rng(fresh_seed)
    weights = (0.02 * rng.standard_t(5, size=(256, 512))).astype(np.float32)
    dequantized = _round_trip(weights, kind)
    error = weights.astype(np.float64) - dequantized
    predicted = np.mean(grid_steps(dequantized, kind) ** 2) / 12
    assert np.var(error) == pytest.approx(predicted, rel=0.12)
    # nearly every error within half a step (a symmetric grid clamps its far end; d and m are stored as f16)
    assert np.mean(np.abs(error) <= 0.5 * grid_steps(dequantized, kind) * 1.01) > 0.99


def test_half_precision_steps_predict_float16_rounding(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    weights = rng.normal(0, 0.05, (128, 256))
    half = weights.astype(np.float16).astype(np.float64)
    assert np.var(weights - half) == pytest.approx(np.mean(grid_steps(half, "F16") ** 2) / 12, rel=0.1)


def test_a_dose_adds_its_multiple_of_the_rounding_variance(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    dequantized = _round_trip((0.02 * rng.standard_normal((512, 256))).astype(np.float32), "Q4_1")
    variance = np.mean(grid_steps(dequantized, "Q4_1") ** 2) / 12
    for multiple in (1.0, 2.0):
        noisy = with_rounding_noise(dequantized, "Q4_1", multiple, np.random.default_rng(fresh_seed + 1))
        added = noisy.astype(np.float64) - dequantized
        # the mean of 131072 squared normals: relative standard error sqrt(2 / n) = 0.4%
        assert np.mean(added ** 2) == pytest.approx(multiple * variance, rel=0.03)
    assert np.array_equal(with_rounding_noise(dequantized, "F32", 2.0, rng), dequantized)  # norms: unrounded
    with pytest.raises(RoundingNoiseError, match="IQ2_XXS"):
        with_rounding_noise(dequantized, "IQ2_XXS", 1.0, rng)
    with pytest.raises(ValueError, match=">= 0"):
        with_rounding_noise(dequantized, "Q4_1", -1.0, rng)


def test_the_doses_of_a_gguf_file_are_its_weights_plus_noise_of_their_own_types(tmp_path, fresh_seed):
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM

    from resdyn.models.tiny_configs import tiny_config

    size = len(vocabulary())
    config = tiny_config("llama", hidden_size=64, n_layers=2, intermediate_size=256, vocab_size=size,
                         bos_token_id=size - 1, eos_token_id=size - 1, pad_token_id=size - 1)
    torch.manual_seed(fresh_seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    path = write_gguf(model, tmp_path / "model.gguf", types={"attn_q": "Q4_1", "ffn_up": "Q4_0", "attn_v": "F16"})
    import_gguf(path, tmp_path / "trained")
    record = rounding_noise_checkpoint(path, tmp_path / "trained", tmp_path / "x2", 2.0, seed=fresh_seed)

    def weights(directory: Path) -> dict:
        merged = {}
        for file in sorted(directory.glob("*.safetensors")):
            merged.update(load_file(file))
        return merged
    trained, noisy = weights(tmp_path / "trained"), weights(tmp_path / "x2")
    assert set(trained) == set(noisy)
    stored = {tensor.name: tensor.tensor_type.name for tensor in gguf.GGUFReader(path).tensors}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    seen = set()
    for name, values in trained.items():
        base, suffix = name.rsplit(".", 1)
        kind = stored[f"{names.get_name(base)}.{suffix}"]
        added = noisy[name].astype(np.float64) - values
        if kind == "F32":
            assert np.array_equal(noisy[name], values), name
            continue
        seen.add(kind)
        expected = 2.0 * np.mean(grid_steps(values, kind) ** 2) / 12
        assert np.mean(added ** 2) == pytest.approx(expected, rel=0.25), (name, kind)  # 4096+ weights a tensor
    assert seen == {"Q4_1", "Q4_0", "F16"}
    assert record["multiple"] == 2.0 and json.loads((tmp_path / "x2" / ROUNDING_NOISE_RECORD).read_text()) == record
    assert (tmp_path / "x2" / "config.json").read_text() == (tmp_path / "trained" / "config.json").read_text()
    stamps = [shard.stat().st_mtime_ns for shard in sorted((tmp_path / "x2").glob("*.safetensors"))]
    assert rounding_noise_checkpoint(path, tmp_path / "trained", tmp_path / "x2", 2.0, seed=fresh_seed) == record
    assert [shard.stat().st_mtime_ns for shard in sorted((tmp_path / "x2").glob("*.safetensors"))] == stamps


def test_simex_extrapolates_a_quadratic_dose_response_exactly(fresh_seed):
    """Every per-sublayer number that is quadratic in the dose lambda comes back at lambda = -1 exactly (with its
    fold replicates), so a verdict that rounding alone produced is seen at zero rounding."""
    rng = np.random.default_rng(fresh_seed)
    n = 12
    depth = np.arange(n)
    clean = {"asymmetry_index": rng.uniform(0.3, 0.6, n), "rotation_share": rng.uniform(0.2, 0.5, n)}
    slope, curvature = rng.normal(size=n), rng.normal(size=n)

    def at(dose: float) -> claims.CheckpointData:
        shift = slope * (dose + 1) + curvature * (dose + 1) ** 2  # zero at lambda = -1
        measures = {name: values + 0.01 * shift for name, values in clean.items()}
        return claims.CheckpointData(
            depth=depth, measures=measures, operator_type=np.full(n, "other"),
            cumulative={"effective_rank": np.linspace(60, 10, n) + shift}, surgery_full_depth={
                ("polar-normal", 0.0, "effective_rank"): 30.0 + float(shift.sum())},
            coupling_effect=0.1 * shift, coupling_significant=np.zeros(n, bool),
            replicates={name: values[None, :] + np.arange(4)[:, None] * 0.001 for name, values in measures.items()})
    zero = claims.extrapolate_to_zero_rounding(at(0.0), at(1.0), at(2.0))
    for name, values in clean.items():
        assert zero.measures[name] == pytest.approx(values, abs=1e-12)
        assert zero.replicates[name] == pytest.approx(values[None, :] + np.arange(4)[:, None] * 0.001, abs=1e-12)
    assert zero.cumulative["effective_rank"] == pytest.approx(np.linspace(60, 10, n), abs=1e-9)
    assert zero.surgery_full_depth[("polar-normal", 0.0, "effective_rank")] == pytest.approx(30.0)
    assert zero.coupling_effect == pytest.approx(np.zeros(n), abs=1e-12)
    with pytest.raises(ValueError, match="different sublayers"):
        other = at(2.0)
        other.depth = depth + 1
        claims.extrapolate_to_zero_rounding(at(0.0), at(1.0), other)


def test_a_verdict_that_rounding_alone_made_is_flagged(fresh_seed):
    """The trained model's early rotation exceeds the null model's only through its rounding noise (it grows with
    the dose, from nothing at lambda = -1): the claim holds on the file, not at zero rounding, and says so."""
    from .test_claims import _checkpoint

    rng = np.random.default_rng(fresh_seed)
    n = 24
    kinds = ["rotation_dominated"] * n
    null = _checkpoint(rng, asymmetry_start=0.7, asymmetry_end=0.7, rotation=0.3, ranks=np.linspace(62, 58, n),
                       significant=[False] * n, kinds=kinds, effects=np.zeros(n))

    def dose(lam):  # rotation 0.3 + 0.1 (lambda + 1): 0.4 on the file, 0.3 (the null model's) without rounding
        return _checkpoint(np.random.default_rng(fresh_seed), asymmetry_start=0.7, asymmetry_end=0.6,
                           rotation=0.3 + 0.1 * (lam + 1), ranks=np.geomspace(60, 3, n), significant=[False] * n,
                           kinds=kinds, effects=np.zeros(n))
    trained = dose(0.0)
    plain = {c.key: c for c in claims.evaluate(null, trained)}
    assert plain["early_rotation"].verdict == "holds"
    zero = claims.extrapolate_to_zero_rounding(trained, dose(1.0), dose(2.0))
    controlled = {c.key: c for c in claims.with_rounding_control(list(plain.values()), null, zero)}
    rotation = controlled["early_rotation"]
    assert rotation.verdict == "holds" and rotation.zero_rounding_verdict == "does not hold"
    assert rotation.zero_rounding.value == pytest.approx(0.0, abs=1e-9)
    assert "quantization could explain the verdict" in rotation.row()["zero_rounding"]
    assert controlled["cumulative_bottleneck"].zero_rounding_verdict == controlled["cumulative_bottleneck"].verdict
    report = claims.ClaimsReport("m", "init", "trained", list(controlled.values()))
    assert "at zero rounding (SIMEX)" in report.markdown()
