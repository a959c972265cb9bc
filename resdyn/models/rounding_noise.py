"""The trained model's own quantization as a dose-response: its weights with more rounding noise added.

A 4-bit GGUF file's weights carry rounding error the trained model's measures cannot be separated from; the
null model rounded through the same types (:mod:`resdyn.models.quantized_null_model`) does not answer what that
error does to *these* weights. Simulation-extrapolation (SIMEX; Cook & Stefanski 1994, J. Am. Stat. Assoc.
89:1314) does: add independent pseudo-errors of ``lambda`` times the rounding error's own variance, measure at
each ``lambda``, and extrapolate the measures back to ``lambda = -1``, no rounding at all
(:func:`resdyn.claims.with_zero_rounding`).

The rounding error of a GGML integer-grid type. Its values are a grid per block of ``b`` weights along a row
(the last Hugging Face dimension): Q4_1 stores ``d q + m`` with q in 0..15 (asymmetric: the block's minimum and
maximum are the grid's ends), Q4_0 ``d (q - 8)`` with d = -max|w| / 8 (symmetric: the weight of largest modulus is
the grid's end; the other end is wherever the block's other extreme fell), the K-quants the same per sub-block of
16 or 32 weights. A rounding to a grid of step Delta leaves an error close to uniform on [-Delta / 2, Delta / 2],
variance Delta^2 / 12 (Widrow & Kollar 2008, Quantization Noise, ch. 4: exact when the weights' density is smooth
over a step). The quantizers of ``gguf.quants`` (and llama.cpp's) put a block's extremes on the grid's ends, so the
step is read off the dequantized block itself:

    asymmetric types: Delta = (max_block - min_block) / (levels - 1)
    symmetric types:  Delta = max_block |w| / (number of steps from 0 to the grid's end that |w| max is put on)

exactly so for the legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; up to the f16 storage of d); for the K-quants,
whose sub-block scales are themselves rounded to 6 or 8 bits, approximately (tests/unit/test_rounding_noise.py
checks the legacy types against the error the ``gguf`` package made). F16 / BF16 round to a relative step: Delta_i = 2^(e_i - p)
with e_i = floor(log2 |w_i|) and p = 10 / 7 mantissa bits. F32 tensors (norms) are left as they are.

Pseudo-errors are Gaussian, N(0, lambda Delta^2 / 12) per weight (SIMEX's usual choice: only their variance
matters to the extrapolant's first order), drawn from numpy's default_rng seeded by the dose and the tensor's
name, so a dose is the same on every machine. Made once per (file sha256, dose, seed, version); built beside its
place and renamed into it (:mod:`resdyn.models.directories`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROUNDING_NOISE_RECORD = "resdyn_rounding_noise.json"
ROUNDING_NOISE_VERSION = "1"
# GGML type -> (weights sharing one grid step along a row, steps spanned by the block's range or modulus, symmetric)
INTEGER_GRIDS: dict[str, tuple[int, int, bool]] = {
    "Q4_0": (32, 8, True), "Q4_1": (32, 15, False), "Q5_0": (32, 16, True), "Q5_1": (32, 31, False),
    "Q8_0": (32, 127, True), "Q2_K": (16, 3, False), "Q3_K": (16, 4, True), "Q4_K": (32, 15, False),
    "Q5_K": (32, 31, False), "Q6_K": (16, 32, True), "Q8_K": (256, 127, True),
}
FLOAT_MANTISSA_BITS = {"F16": 10, "BF16": 7}
UNROUNDED = {"F32", "F64"}


class RoundingNoiseError(ValueError):
    """A tensor type whose rounding error this module cannot model (its message names the type)."""


def grid_steps(weights: np.ndarray, kind: str) -> np.ndarray:
    """The rounding step Delta of every weight of ``weights`` (dequantized from GGML type ``kind``, blocks along
    the last dimension), the shape of ``weights`` (module docstring); zeros for an unrounded type."""
    weights = np.asarray(weights, dtype=np.float64)
    if kind in UNROUNDED:
        return np.zeros_like(weights)
    if kind in FLOAT_MANTISSA_BITS:
        magnitude = np.abs(weights)
        with np.errstate(divide="ignore"):
            exponent = np.floor(np.log2(magnitude, where=magnitude > 0, out=np.full_like(magnitude, -np.inf)))
        return np.where(magnitude > 0, np.exp2(exponent - FLOAT_MANTISSA_BITS[kind]), 0.0)
    if kind not in INTEGER_GRIDS:
        raise RoundingNoiseError(f"GGML type {kind}: no rounding-error model (resdyn.models.rounding_noise knows "
                                 f"{', '.join(sorted(INTEGER_GRIDS) + sorted(FLOAT_MANTISSA_BITS))} and leaves F32 "
                                 "as it is); the dose-response cannot be made for this file")
    block, steps, symmetric = INTEGER_GRIDS[kind]
    rows = weights.reshape(-1, weights.shape[-1]) if weights.ndim > 1 else weights.reshape(1, -1)
    if rows.shape[-1] % block:
        raise RoundingNoiseError(f"a row of {rows.shape[-1]} weights is not whole blocks of {block} ({kind})")
    blocks = rows.reshape(rows.shape[0], -1, block)
    span = np.abs(blocks).max(axis=-1) if symmetric else blocks.max(axis=-1) - blocks.min(axis=-1)
    step = span / steps
    return np.repeat(step, block, axis=-1).reshape(weights.shape)


def with_rounding_noise(weights: np.ndarray, kind: str, multiple: float, rng: np.random.Generator) -> np.ndarray:
    """``weights`` plus N(0, multiple Delta^2 / 12) per weight (float32), Delta from :func:`grid_steps`."""
    if multiple < 0:
        raise ValueError(f"a dose is a multiple of the rounding variance >= 0, got {multiple}")
    scale = np.sqrt(multiple / 12.0) * grid_steps(weights, kind)
    if not np.any(scale):
        return np.asarray(weights, dtype=np.float32)
    return (np.asarray(weights, dtype=np.float64) + scale * rng.standard_normal(scale.shape)).astype(np.float32)


def _tensor_seed(seed: int, multiple: float, name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{multiple!r}:{name}".encode()).digest()[:8], "little")


def rounding_noise_checkpoint(gguf_file: str | os.PathLike, trained: str | os.PathLike,
                              destination: str | os.PathLike, multiple: float, *, seed: int = 0,
                              expected_sha256: str | None = None,
                              progress: Callable[[str], None] | None = None) -> dict:
    """``destination``: the imported trained checkpoint ``trained`` (the GGUF file ``gguf_file`` dequantized)
    with rounding noise of ``multiple`` times each tensor's own rounding variance added (module docstring). Made
    once: a destination made from the same file, dose, seed and version is left as it is."""
    import importlib.metadata

    from safetensors import safe_open

    from .directories import locked, replacing
    from .gguf_import import GGUFError, _SafetensorsWriter, file_sha256, hf_tensor_types
    from .null_model import read_null_model_record

    gguf_file, trained, destination = Path(gguf_file).resolve(), Path(trained), Path(destination)
    progress = progress or (lambda line: None)
    sha256 = expected_sha256 or file_sha256(gguf_file)
    with locked(destination):
        wanted = {"source_sha256": sha256, "multiple": float(multiple), "seed": int(seed),
                  "rounding_noise_version": ROUNDING_NOISE_VERSION, "gguf_version": importlib.metadata.version("gguf")}
        existing = read_null_model_record(destination, ROUNDING_NOISE_RECORD)
        if existing is not None and all(existing.get(key) == value for key, value in wanted.items()) \
                and (destination / "config.json").is_file():
            return existing
        if not (trained / "config.json").is_file():
            raise FileNotFoundError(f"no imported checkpoint at {trained}: import the GGUF file first")
        started = time.perf_counter()
        description, types = hf_tensor_types(gguf_file)
        if description.sha256 != sha256:
            raise GGUFError(f"{gguf_file} changed (sha256 {description.sha256[:16]}..., imported "
                            f"{sha256[:16]}...): import it again before making its rounding-noise doses")
        noised, kept = Counter(), Counter()
        with replacing(destination) as staging:
            for file in sorted(trained.glob("*.safetensors")):
                with safe_open(file, framework="np") as source:
                    names = list(source.keys())
                    layout = [(name, tuple(source.get_slice(name).get_shape())) for name in names]
                    with _SafetensorsWriter(staging / file.name, layout) as writer:
                        for name in names:
                            weights = np.ascontiguousarray(source.get_tensor(name), dtype=np.float32)
                            kind = types.get(name, "F32")  # not in the file (none in a complete one): unrounded
                            (kept if kind in UNROUNDED else noised)[kind] += 1
                            rng = np.random.default_rng(_tensor_seed(seed, float(multiple), name))
                            writer.write(name, with_rounding_noise(weights, kind, float(multiple), rng))
                            del weights
            for file in sorted(trained.iterdir()):
                if file.is_file() and file.suffix != ".safetensors" and not file.name.startswith("resdyn_"):
                    shutil.copyfile(file, staging / file.name)
            summary = ",".join(f"{kind}:{count}" for kind, count in sorted(noised.items()))
            record = {**wanted, "source": str(gguf_file), "trained": str(trained), "noised": dict(noised),
                      "unrounded": dict(kept),
                      "initialization": f"the trained file's weights plus Gaussian noise of {multiple:g} times each "
                                        f"tensor's own rounding variance Delta^2 / 12 ({summary}; seed {seed})",
                      "seconds": round(time.perf_counter() - started, 2)}
            (staging / ROUNDING_NOISE_RECORD).write_text(json.dumps(record, indent=2))
        progress(f"{destination.name}: {gguf_file.name}'s weights with {multiple:g}x their rounding variance added "
                 f"({summary}) in {record['seconds']:.1f} s")
        return record
