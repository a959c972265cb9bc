"""GGUF files that ship in parts: a file too large for one PyPI wheel, split across several (Gemma 3 270M's Q4_K_M
file comes as four wheels of one part each).

A registry entry with ``parts`` lists them in order, each as ``package:DISTRIBUTION/PATH`` (located like a
``package:`` source, through the distribution's installed metadata), with the whole file's ``size`` and
``sha256``. :func:`assembled_gguf` concatenates them once into a cache file (written atomically:
resdyn.files) and checks the result against both; a ``.verified`` stamp beside it (the file's size,
mtime and sha256) lets later calls reuse it without reading the parts again. The importer hashes the
file it imports anyway (resdyn.models.gguf_import), so a cache file changed behind the stamp's back
is still caught there.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from ..files import atomic_path, atomic_write_text, file_lock
from .registry import MissingPackageError, ModelSpec, resolve_gguf_source

STAMP_SUFFIX = ".verified"
COPY_CHUNK = 8 * 1024**2


class AssembledFileError(ValueError):
    """The parts do not make the registered file; the message names the fix."""


def locate_parts(spec: ModelSpec) -> list[Path]:
    """The installed part files of ``spec``, in order; a missing one is a :class:`MissingPackageError` naming
    ``make install``."""
    located = []
    for number, part in enumerate(spec.parts, 1):
        try:
            located.append(resolve_gguf_source(part))
        except FileNotFoundError as error:  # MissingPackageError, or a plain path that is gone
            raise MissingPackageError(
                f"part {number}/{len(spec.parts)} of {spec.name}'s GGUF file is missing ({error}); `make install` "
                "installs every part (the pinned wheels are in requirements-models.txt)") from None
    return located


def check_gguf_source(spec: ModelSpec) -> None:
    """Is ``spec``'s GGUF file, or every part of it, installed? Reads no bytes; a missing one names the fix (what
    ``resdyn run`` checks before it starts)."""
    if spec.parts:
        locate_parts(spec)
    else:
        resolve_gguf_source(spec.source)


def cache_file(spec: ModelSpec, cache_directory: str | os.PathLike) -> Path:
    """Where ``spec``'s parts are concatenated: ``<cache_directory>/<source's file name>``."""
    return Path(cache_directory) / Path(spec.source.rpartition("/")[2] or f"{spec.name}.gguf").name


def _stamp(path: Path) -> dict:
    status = path.stat()
    return {"size": status.st_size, "mtime_ns": status.st_mtime_ns}


def _verified(path: Path, spec: ModelSpec) -> bool:
    """Is ``path`` the registered file, by its stamp (no bytes read)?"""
    stamp_path = path.with_name(path.name + STAMP_SUFFIX)
    if not path.is_file() or not stamp_path.is_file():
        return False
    try:
        stamp = json.loads(stamp_path.read_text())
    except (OSError, ValueError):
        return False
    return stamp == {**_stamp(path), "sha256": spec.sha256} and (not spec.size or stamp["size"] == spec.size)


def assembled_gguf(spec: ModelSpec, cache_directory: str | os.PathLike, *,
                   progress: Callable[[str], None] | None = None) -> Path:
    """``spec``'s GGUF file, concatenated from its parts into ``cache_directory`` on first use and checked against the
    registered size and sha256; a verified cache file is returned as it is (module docstring). Concurrent calls
    wait for each other."""
    if not spec.parts:
        raise ValueError(f"model {spec.name} has no parts: its GGUF file is {spec.source}")
    if not spec.sha256:
        raise ValueError(f"model {spec.name} lists parts but no sha256: the assembled file could not be checked")
    target = cache_file(spec, cache_directory)
    if _verified(target, spec):
        return target
    with file_lock(target.with_name(target.name + ".lock")):
        if _verified(target, spec):  # another process assembled it while we waited
            return target
        parts = locate_parts(spec)
        total = sum(part.stat().st_size for part in parts)
        if spec.size and total != spec.size:
            raise AssembledFileError(
                f"the {len(parts)} parts of {spec.name}'s GGUF file hold {total:,} bytes, not the registered "
                f"{spec.size:,}: reinstall the pinned wheels (`make install`; requirements-models.txt)")
        if progress:
            progress(f"{spec.name}: concatenating {len(parts)} parts into {target} ({total:,} bytes)")
        digest = hashlib.sha256()
        with atomic_path(target) as temporary:
            with open(temporary, "wb") as output:
                for part in parts:
                    with open(part, "rb") as stream:
                        while chunk := stream.read(COPY_CHUNK):
                            digest.update(chunk)
                            output.write(chunk)
            if digest.hexdigest() != spec.sha256:
                raise AssembledFileError(
                    f"the parts of {spec.name}'s GGUF file concatenate to sha256 {digest.hexdigest()[:16]}..., not the "
                    f"registered {spec.sha256[:16]}...: reinstall the pinned wheels (`make install`; "
                    "requirements-models.txt)")
        atomic_write_text(target.with_name(target.name + STAMP_SUFFIX),
                          json.dumps({**_stamp(target), "sha256": spec.sha256}, sort_keys=True))
    return target
