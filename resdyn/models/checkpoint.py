"""A checkpoint's safetensors files, read one tensor (or a few embedding rows) at a time.

A Hugging Face checkpoint is a directory (local, or a snapshot in the HF cache) with
``config.json`` and either ``model.safetensors`` or shards listed in
``model.safetensors.index.json``. :class:`CheckpointFiles` maps every tensor name to its file,
reads shapes and dtypes from the file headers only (the parameter count needs no weights), and
reads single tensors, or a subset of an embedding table's rows, cast to the compute dtype on the
compute device. Nothing here ever holds more than the tensor being read.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from .hub import hub_is_reachable

log = logging.getLogger(__name__)

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
SNAPSHOT_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken"]


class CheckpointFormatError(FileNotFoundError):
    pass


def locate_checkpoint(source: str, revision: str | None = None) -> Path:
    """The local directory holding ``source`` (a directory, or a hub id at ``revision`` in the HF cache).

    Hub ids are downloaded (config, safetensors and tokenizer files only) when the hub is
    reachable and ``HF_HUB_OFFLINE`` is not set; otherwise only the local cache is consulted.
    """
    expanded = Path(os.path.expanduser(source))
    if expanded.is_dir():
        return expanded
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    from .loading import ModelNotReachableError

    try:
        return Path(snapshot_download(source, revision=revision, allow_patterns=SNAPSHOT_PATTERNS,
                                      local_files_only=not hub_is_reachable()))
    except (LocalEntryNotFoundError, OSError, ValueError) as error:
        raise ModelNotReachableError(
            f"cannot find the weights of {source!r} at revision {revision!r} ({type(error).__name__}): download them "
            f"where the hub is reachable (`hf download {source} --revision {revision or 'main'} --local-dir DIR`), "
            "copy DIR here and run `resdyn run --model DIR`, or set HF_HOME to a cache that holds them."
        ) from error


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model", "tokenizer.tiktoken")


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a complete safetensors file, or None. The format (huggingface/safetensors,
    docs "Format"): an 8-byte little-endian header length N, N bytes of JSON giving each tensor's ``dtype``,
    ``shape`` and ``data_offsets`` [begin, end) into the data that follows; the data must end where the file ends."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                return f"{size} bytes, shorter than a safetensors header"
            header_length = int.from_bytes(prefix, "little")
            if header_length > size - 8:
                return f"its header claims {header_length} bytes but the file has {size}"
            header = json.loads(handle.read(header_length))
    except (OSError, ValueError, UnicodeDecodeError) as error:
        return f"unreadable header ({type(error).__name__})"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    ends = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            return f"tensor {name!r} has no entry"
        offsets, shape = entry.get("data_offsets"), entry.get("shape")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(v, int) for v in offsets)):
            return f"tensor {name!r} has no valid data_offsets"
        if not isinstance(entry.get("dtype"), str):
            return f"tensor {name!r} has no dtype"
        if not (isinstance(shape, list) and all(isinstance(v, int) and v >= 0 for v in shape)):
            return f"tensor {name!r} has no valid shape"
        ends.append(offsets[1])
    expected = 8 + header_length + max(ends, default=0)
    if expected != size:
        return f"{size} bytes where its header needs {expected}"
    return None


def require_complete(path: Path) -> None:
    """A one-line error naming ``path`` and the fix when it is not a complete safetensors file."""
    problem = safetensors_problem(path)
    if problem:
        raise CheckpointFormatError(f"{path} is truncated or damaged ({problem}): copy it again from its source or "
                                    "re-save the model with `model.save_pretrained(DIR)`")


def check_checkpoint_directory(directory: str | os.PathLike) -> None:
    """Refuse, in one line naming the file and the fix, a directory whose weights or tokenizer cannot load:
    a truncated or damaged safetensors file, a shard the index lists but the directory lacks, no tokenizer."""
    directory = Path(directory)
    files = CheckpointFiles(directory)  # the index and its shards, or the single file (checked as it opens)
    for path in sorted(set(files.weight_map.values()) - {directory / SINGLE_FILE}):
        require_complete(path)
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise CheckpointFormatError(f"{directory} holds no tokenizer files (one of {', '.join(TOKENIZER_FILES)}): "
                                    "save the model's tokenizer beside it (`tokenizer.save_pretrained(DIR)`)")


class CheckpointFiles:
    """Tensor name -> safetensors file, with header-only shape queries and per-tensor reads."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        index = self.directory / INDEX_FILE
        if index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]
            self.weight_map = {name: self.directory / file for name, file in weight_map.items()}
        elif (self.directory / SINGLE_FILE).is_file():
            from safetensors import safe_open

            require_complete(self.directory / SINGLE_FILE)
            with safe_open(self.directory / SINGLE_FILE, framework="pt") as handle:
                self.weight_map = {name: self.directory / SINGLE_FILE for name in handle.keys()}
        else:
            raise CheckpointFormatError(
                f"{self.directory} holds neither {SINGLE_FILE} nor {INDEX_FILE}: resdyn reads safetensors "
                "checkpoints (re-save other formats with `model.save_pretrained(DIR)`)"
            )
        missing = sorted({str(path.name) for path in self.weight_map.values() if not path.is_file()})
        if missing:
            raise CheckpointFormatError(f"{self.directory}: shards listed in {INDEX_FILE} are missing: {missing}")
        self._handles: dict[Path, object] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.weight_map

    def names(self) -> list[str]:
        return list(self.weight_map)

    def _handle(self, path: Path):
        if path not in self._handles:
            from safetensors import safe_open

            self._handles[path] = safe_open(path, framework="pt")
        return self._handles[path]

    def shape(self, name: str) -> list[int]:
        return list(self._handle(self.weight_map[name]).get_slice(name).get_shape())

    def stored_dtype(self, name: str) -> str:
        return str(self._handle(self.weight_map[name]).get_slice(name).get_dtype())

    def parameter_count(self) -> int:
        """Elements over every stored tensor, from the headers alone (no weights read)."""
        return sum(math.prod(self.shape(name)) for name in self.weight_map)

    def stored_dtypes(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for name in self.weight_map:
            counts[self.stored_dtype(name)] = counts.get(self.stored_dtype(name), 0) + 1
        return counts

    def read(self, name: str, *, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """One tensor, cast to ``dtype`` on ``device``."""
        tensor = self._handle(self.weight_map[name]).get_tensor(name)
        return tensor.to(device=device, dtype=dtype)

    def read_rows(self, name: str, rows: Sequence[int], *, dtype: torch.dtype,
                  device: torch.device | str) -> torch.Tensor:
        """Rows ``rows`` (sorted, unique) of a 2-d tensor: an embedding table without the rest of it."""
        n_rows = self.shape(name)[0]
        if len(rows) and (min(rows) < 0 or max(rows) >= n_rows):
            raise IndexError(f"{name} has {n_rows} rows; asked for row {max(rows)} (a token id past the vocabulary)")
        block = self._handle(self.weight_map[name]).get_slice(name)[list(rows)]
        return block.to(device=device, dtype=dtype)

    def find(self, candidates: Iterable[str]) -> str | None:
        """The first name of ``candidates`` stored in the checkpoint."""
        return next((name for name in candidates if name in self.weight_map), None)

    def find_by_suffix(self, suffix: str) -> str | None:
        """The stored name ending in ``suffix`` (module paths differ between wrappers), if unique."""
        matches = [name for name in self.weight_map if name == suffix or name.endswith("." + suffix)]
        return matches[0] if len(matches) == 1 else None

    def close(self) -> None:
        """Drop the open files (and their memory maps); the next read reopens what it needs."""
        self._handles.clear()
