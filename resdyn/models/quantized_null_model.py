"""A quantization control: the null model's weights rounded through the trained GGUF file's own tensor types.

A 4-bit GGUF file (SmolLM2's Q4_1) analysed beside a float32 null model mixes two differences:
what training installed, and what rounding to 4 bits does to any matrix (it adds block-wise noise,
which by itself moves spectra toward those of random matrices). The checkpoint ``init-quantized``
isolates the second: :func:`quantized_checkpoint` takes the null model (``init``,
:mod:`resdyn.models.null_model`) and passes each tensor through the GGML type that the trained
file gives the tensor of the same name (GGUF -> HF names as the importer maps them,
:func:`resdyn.models.gguf_import.hf_tensor_types`), quantized and dequantized by the ``gguf``
package's own ``gguf.quants.quantize`` / ``gguf.quants.dequantize``. F32 tensors pass unchanged;
F16 and BF16 ones are rounded through that format.

The rounding happens in Hugging Face layout. GGML blocks run along a row (the last HF dimension, the
file's first), so the importer's only row-moving processing, Llama's q/k permutation of whole rows,
commutes with it; Gemma's ``1 + w`` norm offset does not, but norms are F32 in llama.cpp's files.

The package quantizes F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ1_0, TQ2_0 and MXFP4; the
K-quants, the IQ types and NVFP4 it only dequantizes. Those go through :data:`SUBSTITUTES`, and the
record (``resdyn_quantized_null_model.json``) counts the types requested and the types used. Made
once per (file sha256, null model, gguf version); built beside its place and renamed into it
(:mod:`resdyn.models.directories`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

QUANTIZED_NULL_MODEL_RECORD = "resdyn_quantized_null_model.json"
QUANTIZER_VERSION = "1"

# GGML types gguf.quants can dequantize but not quantize -> the type used instead, and why. The rule: the same
# rounding grid where the package has it (Q4_K and Q4_1 both round to 16 levels between a per-32-weight minimum and
# maximum; Q4_K's 4.5 bits per weight against Q4_1's 5.0 is only its 6-bit storage of those two), else the nearest
# in bits per weight (bpw) among the package's integer-grid types Q4_0 (4.5), Q4_1 (5.0), Q5_0 (5.5), Q5_1 (6.0) and
# Q8_0 (8.5). Not TQ1_0/TQ2_0 (ternary grids, for ternary-trained weights) nor MXFP4 (a floating-point grid) for
# integer-grid types. Below 4 bits the control rounds more finely than the file did: it understates quantization;
# Q6_K -> Q5_1 rounds more coarsely (32 levels for 64): there it overstates it.
SUBSTITUTES: dict[str, tuple[str, str]] = {
    "Q2_K": ("Q4_0", "2.625 bpw: no 2- or 3-bit integer type; Q4_0 (4.5 bpw) is the package's fewest bits"),
    "Q3_K": ("Q4_0", "3.44 bpw: no 3-bit integer type; Q4_0 (4.5 bpw) is the package's fewest bits"),
    "Q4_K": ("Q4_1", "same grid: 16 levels between a minimum and a maximum per 32 weights (4.5 vs 5.0 bpw: 6-bit vs "
                     "f16 storage of the two)"),
    "Q5_K": ("Q5_1", "same grid: 32 levels between a minimum and a maximum per 32 weights (5.5 vs 6.0 bpw)"),
    "Q6_K": ("Q5_1", "6.5625 bpw: no 6-bit type; nearest in bits per weight is Q5_1 (6.0; Q8_0 is 8.5): coarser than the file, so this control overstates Q6_K's rounding"),
    "IQ1_S": ("Q4_0", "1.56 bpw codebook: Q4_0 (4.5 bpw) is the package's fewest-bit integer type"),
    "IQ1_M": ("Q4_0", "1.75 bpw codebook: Q4_0 (4.5 bpw) is the package's fewest-bit integer type"),
    "IQ2_XXS": ("Q4_0", "2.06 bpw codebook: Q4_0 (4.5 bpw) is the package's fewest-bit integer type"),
    "IQ2_XS": ("Q4_0", "2.31 bpw codebook: Q4_0 (4.5 bpw) is the package's fewest-bit integer type"),
    "IQ2_S": ("Q4_0", "2.56 bpw codebook: Q4_0 (4.5 bpw) is the package's fewest-bit integer type"),
    "IQ3_XXS": ("Q4_0", "3.06 bpw codebook: Q4_0 (4.5 bpw) is the package's fewest-bit integer type"),
    "IQ3_S": ("Q4_0", "3.44 bpw codebook: Q4_0 (4.5 bpw) is the package's fewest-bit integer type"),
    "IQ4_NL": ("Q4_0", "4.5 bpw both: 16 levels and one scale per 32 weights (IQ4_NL's levels are non-uniform)"),
    "IQ4_XS": ("Q4_0", "4.25 bpw, 16 non-uniform levels: nearest integer type in bits per weight is Q4_0 (4.5)"),
    "NVFP4": ("MXFP4", "same FP4 (E2M1) grid: a power-of-two scale per 32 weights instead of an E4M3 one per 16 "
                       "(4.25 vs 4.5 bpw)"),
}


def can_quantize(kind: str) -> bool:
    """Does ``gguf.quants.quantize`` implement GGML type ``kind``? (Tried on one zero block: the package raises
    NotImplementedError for the types it only dequantizes.)"""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

    qtype = GGMLQuantizationType[kind]
    if qtype not in GGML_QUANT_SIZES:
        return False
    try:
        quants.quantize(np.zeros((1, GGML_QUANT_SIZES[qtype][0]), np.float32), qtype)
    except NotImplementedError:
        return False
    return True


def type_used(requested: str) -> str:
    """The GGML type the control rounds a tensor stored as ``requested`` through: itself, or its substitute."""
    if can_quantize(requested):
        return requested
    if requested in SUBSTITUTES and can_quantize(SUBSTITUTES[requested][0]):
        return SUBSTITUTES[requested][0]
    from .gguf_import import GGUFError

    raise GGUFError(f"the gguf package cannot quantize GGML type {requested} and resdyn has no substitute for it "
                    "(resdyn.models.quantized_null_model.SUBSTITUTES): the quantization control cannot be made")


def round_trip(weights: np.ndarray, kind: str) -> np.ndarray:
    """``weights`` (float32; GGML blocks along the last dimension) quantized to GGML type ``kind`` and dequantized,
    both by the gguf package."""
    from gguf import GGMLQuantizationType, quants

    qtype = GGMLQuantizationType[kind]
    if qtype == GGMLQuantizationType.F32:
        return weights
    return np.ascontiguousarray(quants.dequantize(quants.quantize(weights, qtype), qtype), dtype=np.float32)


def quantized_checkpoint(gguf_file: str | os.PathLike, null_model: str | os.PathLike,
                         destination: str | os.PathLike, *, expected_sha256: str | None = None,
                         progress: Callable[[str], None] | None = None) -> dict:
    """``destination``: the null model at ``null_model`` with every tensor rounded through the type the GGUF file
    ``gguf_file`` stores it in (module docstring). ``expected_sha256``: the file's hash as its import recorded it
    (spares hashing it again when the control is already made). Made once: a destination made from the same file,
    null model and gguf version is left as it is."""
    import importlib.metadata

    from safetensors import safe_open

    from .directories import locked, replacing
    from .gguf_import import GGUFError, _SafetensorsWriter, file_sha256, hf_tensor_types
    from .null_model import NULL_MODEL_RECORD, read_null_model_record

    gguf_file, null_model, destination = Path(gguf_file).resolve(), Path(null_model), Path(destination)
    progress = progress or (lambda line: None)
    sha256 = expected_sha256 or file_sha256(gguf_file)
    with locked(destination), locked(null_model):
        null_record = read_null_model_record(null_model)
        if null_record is None or not (null_model / "config.json").is_file():
            raise FileNotFoundError(f"no null model at {null_model}: make it first (resdyn.models.null_model)")
        wanted = {"source_sha256": sha256,
                  "null_model_of": {key: null_record.get(key) for key in ("seed", "config_json", "config_values")},
                  "quantizer_version": QUANTIZER_VERSION, "gguf_version": importlib.metadata.version("gguf"),
                  "substitutes": {kind: used for kind, (used, _) in SUBSTITUTES.items()}}
        existing = read_null_model_record(destination, QUANTIZED_NULL_MODEL_RECORD)
        if existing is not None and all(existing.get(key) == value for key, value in wanted.items()) \
                and (destination / "config.json").is_file():
            return existing
        started = time.perf_counter()
        description, types = hf_tensor_types(gguf_file)
        if description.sha256 != sha256:
            raise GGUFError(f"{gguf_file} changed (sha256 {description.sha256[:16]}..., imported "
                            f"{sha256[:16]}...): import it again before making its quantization control")
        requested, used, substituted, absent = Counter(), Counter(), {}, []
        with replacing(destination) as staging:
            for file in sorted(null_model.glob("*.safetensors")):
                with safe_open(file, framework="np") as source:
                    names = list(source.keys())
                    layout = []
                    for name in names:
                        piece = source.get_slice(name)
                        if piece.get_dtype() != "F32":
                            raise ValueError(f"{file}: {name} is {piece.get_dtype()}, not the float32 of a null model")
                        layout.append((name, tuple(piece.get_shape())))
                    with _SafetensorsWriter(staging / file.name, layout) as writer:
                        for name in names:
                            weights = np.ascontiguousarray(source.get_tensor(name), dtype=np.float32)
                            if name not in types:  # not stored in the file (none in a complete one): kept float32
                                absent.append(name)
                            else:
                                kind = type_used(types[name])
                                requested[types[name]] += 1
                                used[kind] += 1
                                if kind != types[name]:
                                    substituted[types[name]] = kind
                                weights = round_trip(weights, kind)
                            writer.write(name, weights)
                            del weights
            for file in sorted(null_model.iterdir()):
                if file.is_file() and file.suffix != ".safetensors" and file.name != NULL_MODEL_RECORD:
                    shutil.copyfile(file, staging / file.name)
            summary = ",".join(f"{kind}:{count}" for kind, count in sorted(used.items(), key=lambda i: (-i[1], i[0])))
            reasons = "; ".join(f"{kind} -> {kind_used} ({SUBSTITUTES[kind][1]})" for kind, kind_used in
                                sorted(substituted.items()))
            record = {**wanted, "source": str(gguf_file), "null_model": str(null_model),
                      "null_model_initialization": null_record.get("initialization", ""),
                      "requested": dict(sorted(requested.items())), "used": dict(sorted(used.items())),
                      "substituted": {kind: {"used": kind_used, "reason": SUBSTITUTES[kind][1]}
                                      for kind, kind_used in sorted(substituted.items())},
                      "not_in_file": absent,
                      "initialization": f"then rounded through the GGUF file's own tensor types by gguf "
                                        f"{wanted['gguf_version']} quantize/dequantize ({summary}"
                                        f"{'; substituted: ' + reasons if reasons else ''})",
                      "seconds": round(time.perf_counter() - started, 2)}
            (staging / QUANTIZED_NULL_MODEL_RECORD).write_text(json.dumps(record, indent=2))
        progress(f"{destination.name}: null model rounded through {gguf_file.name}'s types ({summary}) in "
                 f"{record['seconds']:.1f} s")
        return record
