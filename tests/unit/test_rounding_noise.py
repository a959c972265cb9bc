"""The trained file's rounding as a dose-response (SIMEX): steps read off dequantized blocks against the rounding
error the ``gguf`` package actually made, doses of the stated variance, and the extrapolation to no rounding."""

import dataclasses
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


def _rounding_pair(fresh_seed, rotation_at):
    """A null model and the trained file's draws whose early rotation is ``rotation_at(dose, draw)`` (dose 0: the
    file itself); everything else as the file."""
    from .test_claims import _checkpoint

    n = 24
    kinds = ["rotation_dominated"] * n
    null = _checkpoint(np.random.default_rng(fresh_seed), asymmetry_start=0.7, asymmetry_end=0.7, rotation=0.3,
                       ranks=np.linspace(62, 58, n), significant=[False] * n, kinds=kinds, effects=np.zeros(n))

    def dose(lam, draw=0):
        return _checkpoint(np.random.default_rng(fresh_seed + 1), asymmetry_start=0.7, asymmetry_end=0.6,
                           rotation=rotation_at(lam, draw), ranks=np.geomspace(60, 3, n), significant=[False] * n,
                           kinds=kinds, effects=np.zeros(n))
    return null, dose


def test_a_verdict_that_rounding_alone_made_is_flagged_at_zero_rounding(fresh_seed):
    """The trained model's early rotation exceeds the null model's only through its rounding noise (0.3 + 0.1 (lambda
    + 1), nothing at lambda = -1, each draw scattered): the claim holds on the file, not at zero rounding, and says
    so; the extrapolation over 5 draws at each of 3 doses recovers the planted shift -0.1 within its interval."""
    scatter = np.random.default_rng(fresh_seed).normal(0.0, 0.003, (4, 5))
    null, dose = _rounding_pair(fresh_seed, lambda lam, draw: 0.3 + 0.1 * (lam + 1) + (scatter[int(lam), draw]
                                                                                      if lam else 0.0))
    trained = dose(0.0)
    plain = claims.evaluate(null, trained)
    assert {c.key: c for c in plain}["early_rotation"].verdict == "holds"
    draws = [(float(lam), dose(float(lam), draw)) for lam in (1, 2, 3) for draw in range(5)]
    controlled, note = claims.with_zero_rounding(plain, null, draws)
    rotation = {c.key: c for c in controlled}["early_rotation"]
    assert rotation.zero_rounding_verdict == "does not hold"
    low, high = rotation.zero_rounding.bounds()
    assert low <= 0.0 <= high and rotation.zero_rounding.value == pytest.approx(0.0, abs=0.02)
    assert "changes at zero rounding" in rotation.row()["zero_rounding"] and "15 draws" in note
    bottleneck = {c.key: c for c in controlled}["cumulative_bottleneck"]
    assert bottleneck.zero_rounding_verdict == bottleneck.verdict  # rounding does not touch the ranks here
    by_key = {c.key: c for c in controlled}
    # a composite, an ordering check, the null model's own claims, graph-typed and counted claims: no reading
    for key in ("late_near_symmetric", "surgery_dissolves", "init_near_symmetric", "init_near_symmetric@random",
                "spectral_gradient_attn", "coupling_near_symmetric", "coupling_strongly_non_normal",
                "coupling_absent_at_init", "coupling_learned"):
        assert not by_key[key].zero_rounding_verdict, key
    assert by_key["late_near_symmetric@relative"].zero_rounding_verdict
    assert by_key["surgery_dissolves@lapack-default/effective_rank"].zero_rounding_verdict
    report = claims.ClaimsReport("m", "init", "trained", controlled, rounding_note=note)
    assert "at zero rounding (SIMEX)" in report.markdown()


def test_too_few_draws_give_no_zero_rounding_reading_and_say_why(fresh_seed):
    """Rules v4's design (one draw at 1x and 2x: the quadratic through three points fits exactly, with no scatter
    to judge it by) carries no zero-rounding reading under v5."""
    null, dose = _rounding_pair(fresh_seed, lambda lam, draw: 0.3 + 0.1 * (lam + 1))
    plain = claims.evaluate(null, dose(0.0))
    kept, note = claims.with_zero_rounding(plain, null, [(1.0, dose(1.0)), (2.0, dose(2.0))])
    assert all(not c.zero_rounding_verdict for c in kept)
    assert "at least 5 draws at each of at least 3 doses" in note and "1 at 1x, 1 at 2x" in note
    four = [(float(lam), dose(float(lam))) for lam in (1, 2, 3) for _ in range(4)]
    assert "4 at 1x" in claims.with_zero_rounding(plain, null, four)[1]


def test_a_verdict_the_extrapolants_disagree_on_is_undecided_by_rounding(fresh_seed):
    """A curved dose response (rotation 0.4 + 0.1 lambda - 0.05 lambda^2): the linear extrapolant puts lambda = -1 at
    0.43, above the null model's 0.3 by more than the minimum, the quadratic at 0.25, below it: the zero-rounding
    verdict is undecided (rounding)."""
    scatter = np.random.default_rng(fresh_seed).normal(0.0, 0.001, (4, 5))

    def rotation(lam, draw):
        return 0.4 + 0.1 * lam - 0.05 * lam ** 2 + (scatter[int(lam), draw] if lam else 0.0)
    null, dose = _rounding_pair(fresh_seed, rotation)
    plain = claims.evaluate(null, dose(0.0))
    draws = [(float(lam), dose(float(lam), draw)) for lam in (1, 2, 3) for draw in range(5)]
    controlled = {c.key: c for c in claims.with_zero_rounding(plain, null, draws)[0]}
    assert controlled["early_rotation"].zero_rounding_verdict == claims.UNDECIDED_ROUNDING


def test_any_change_of_verdict_at_zero_rounding_is_flagged():
    """Rules v4 flagged only holds <-> does not hold; a change from undecided (or to it) is a change too."""
    base = claims.Claim("k", "s", "m", "p", "r", None, claims.Estimate(0.1), "undecided")
    for verdict, zero in (("undecided", "does not hold"), ("holds", "undecided"), ("holds", "does not hold"),
                          ("does not hold", claims.UNDECIDED_ROUNDING)):
        text = dataclasses.replace(base, verdict=verdict, zero_rounding=claims.Estimate(0.2),
                                   zero_rounding_verdict=zero).rounding_text()
        assert "changes at zero rounding" in text, (verdict, zero, text)
    same = dataclasses.replace(base, zero_rounding=claims.Estimate(0.2), zero_rounding_verdict="undecided")
    assert "changes" not in same.rounding_text()


def test_draws_on_other_samples_are_paired_with_the_files_own_weights_on_those_samples(fresh_seed):
    """The SIMEX set measures its draws and the file's own weights (the baseline) on a smaller sample set, whose
    values all sit `offset` away from the trained checkpoint's (another n): paired with the baseline, the planted
    shift -0.1 comes back and the claim is judged on the trained checkpoint's own value moved by it; paired with the
    trained checkpoint instead, the offset would pass for rounding."""
    offset = np.random.default_rng(fresh_seed).uniform(0.03, 0.06)
    scatter = np.random.default_rng(fresh_seed + 7).normal(0.0, 0.003, (4, 5))
    null, dose = _rounding_pair(fresh_seed, lambda lam, draw: 0.3 + 0.1 * (lam + 1) + (scatter[int(lam), draw]
                                                                                      if lam else 0.0))
    _, other_samples = _rounding_pair(fresh_seed, lambda lam, draw: offset + 0.3 + 0.1 * (lam + 1)
                                      + (scatter[int(lam), draw] if lam else 0.0))
    plain = claims.evaluate(null, dose(0.0))
    draws = [(float(lam), other_samples(float(lam), draw)) for lam in (1, 2, 3) for draw in range(5)]
    paired, note = claims.with_zero_rounding(plain, null, draws, baseline=other_samples(0.0))
    rotation = {c.key: c for c in paired}["early_rotation"]
    plain_rotation = {c.key: c for c in plain}["early_rotation"]
    shift = rotation.zero_rounding.value - plain_rotation.effect.value
    assert shift == pytest.approx(-0.1, abs=0.01) and rotation.zero_rounding_verdict == "does not hold"
    assert "paired with the file's own weights on the same samples" in note and "doses 1, 2, 3" in note
    unpaired = {c.key: c for c in claims.with_zero_rounding(plain, null, draws)[0]}["early_rotation"]
    assert abs(unpaired.zero_rounding.value - plain_rotation.effect.value + 0.1) > offset / 2


def test_a_ratio_of_ranks_carries_its_rounding_shift_as_a_factor_to_the_studys_level(fresh_seed):
    """The compression r_first / r_last at the SIMEX set's n sits at another level than the study's; rounding scales
    it by exp(0.05 lambda): paired on the log scale the zero-rounding compression is the study's own times
    exp(-0.05), where an additive shift measured at the set's level would move it by the set's amount instead."""
    from .test_claims import _checkpoint

    rng = np.random.default_rng(fresh_seed)
    n, study_level, set_level = 24, rng.uniform(8.0, 12.0), rng.uniform(3.0, 5.0)
    kinds = ["rotation_dominated"] * n

    def checkpoint(compression):
        return _checkpoint(np.random.default_rng(fresh_seed), asymmetry_start=0.7, asymmetry_end=0.6, rotation=0.4,
                           ranks=np.geomspace(60, 60 / compression, n), significant=[False] * n, kinds=kinds,
                           effects=np.zeros(n))
    null = _checkpoint(rng, asymmetry_start=0.7, asymmetry_end=0.7, rotation=0.3, ranks=np.linspace(62, 58, n),
                       significant=[False] * n, kinds=kinds, effects=np.zeros(n))
    plain = claims.evaluate(null, checkpoint(study_level))
    draws = [(float(lam), checkpoint(set_level * np.exp(0.05 * lam * (1 + 0.01 * draw))))
             for lam in (1, 2, 3) for draw in range(5)]
    judged = {c.key: c for c in claims.with_zero_rounding(plain, null, draws, baseline=checkpoint(set_level))[0]}
    compression = judged["cumulative_bottleneck@absolute"]
    assert compression.trained.value == pytest.approx(study_level)
    assert compression.zero_rounding.value == pytest.approx(study_level * np.exp(-0.0503), rel=2e-3)
    additive = study_level + set_level * (np.exp(-0.0503) - 1)
    assert abs(compression.zero_rounding.value - additive) > 0.05 * abs(study_level - set_level) * 0.04
    relative = judged["cumulative_bottleneck"]  # (trained / null compression): the same factor
    assert relative.zero_rounding.value == pytest.approx(relative.effect.value * np.exp(-0.0503), rel=2e-3)
