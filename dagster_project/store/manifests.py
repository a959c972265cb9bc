"""What a partition manifest (``_published/model=<m>/checkpoint=<c>.json``) may say, and what its files hold.

A manifest is trusted by every reader (the views, the report, the UI), so it is checked before use:

- it is a JSON object whose ``model`` and ``checkpoint`` are those of its own path, whose
  ``generation`` is a whole number >= 0 and whose ``tables`` map known table names to entries;
- each entry names a ``file`` inside that table's folder *of this partition*
  (``<table>/model=<m>/checkpoint=<c>/<name>.parquet``: never another partition's file, never a
  path outside the warehouse), with whole-number ``rows`` and ``bytes`` and, for files published
  since content hashes were recorded, the file's ``sha256``.

:func:`read_manifest` returns the usable part of a manifest and one line per problem. A manifest with a problem is
damaged: what it names is unknown, so nothing of its partition is reclaimed (store/leftovers.py); ``resdyn check``
prints the problems, ``resdyn check --restore`` restores it (store/manifest_recovery.py), and a rerun restores it
before it publishes over it. :class:`VerifiedFiles` checks a published file against its entry (size, footer and
sha256), caching a verified hash by (size, mtime) so a view costs a stat per file once verified.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path

from resdyn.dagster_project.configuration.config import cache_directory
from resdyn.dagster_project.store.schema import TABLES
from resdyn.files import atomic_write_text

HASH_CHUNK = 1 << 22
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _fix(model: str, checkpoint: str) -> str:
    return (f"the partition's files are kept, none reclaimed, until `resdyn check --restore` restores it (from the copy "
            f"kept beside it, its files checked against the sha256 it records, or rebuilt from the files of successful "
            f"runs, each read back) or a rerun restores and publishes over it (`resdyn run --model {model} "
            f"--checkpoint {checkpoint}`)")


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_manifest(root: Path, path: Path, model: str, checkpoint: str, *, strict: bool = False
                  ) -> tuple[dict, list[str]]:
    """(the usable manifest, problems). A manifest that is missing is empty; one that cannot be parsed
    is empty with its problem; a bad entry is dropped with its problem, the good ones kept. ``strict``
    (the write path): a manifest that cannot be *read* (permissions, I/O) raises instead, so that a
    publication never replaces a sound manifest it could not see with one holding only its own tables."""
    if not path.is_file():
        return empty_manifest(model, checkpoint), []
    try:
        text = path.read_text()
    except OSError as error:
        if strict:
            raise
        return empty_manifest(model, checkpoint), [
            f"unreadable manifest: {path} ({type(error).__name__}: {error}); check its permissions"]
    return parse_manifest(text, path, model, checkpoint, FolderPlaces(root))


def empty_manifest(model: str, checkpoint: str) -> dict:
    return {"model": model, "checkpoint": checkpoint, "generation": 0, "tables": {}}


class FolderPlaces:
    """Where a manifest of a warehouse folder may point: files that resolve (links and ``..`` followed) into the
    partition's own folders under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def table_file(self, table: str, file, model: str, checkpoint: str) -> bool:
        return _resolves_into(self.root, file, self.root / table / f"model={model}" / f"checkpoint={checkpoint}",
                              ".parquet")

    def figure_file(self, file, model: str, checkpoint: str) -> bool:
        """A figure lies in one run's folder of the partition's figures: ``_artefacts/figures/<m>/<c>/<run_id>/``."""
        return _resolves_into(self.root, file, self.root / "_artefacts" / "figures" / model / checkpoint, ".png",
                              depth=2)


class KeyPlaces:
    """Where a manifest of an object-store warehouse may point: keys (relative to its prefix) in the partition's own
    folders, written in normal form (no ``.``, ``..`` or empty part: a key is not resolved, so none may need it)."""

    @staticmethod
    def _below(file, folder: str, suffix: str, depth: int) -> bool:
        if not isinstance(file, str) or not file.startswith(folder + "/") or not file.endswith(suffix):
            return False
        parts = file[len(folder) + 1:].split("/")
        return len(parts) == depth and all(part not in ("", ".", "..") and "\\" not in part and "\0" not in part
                                           for part in parts)

    def table_file(self, table: str, file, model: str, checkpoint: str) -> bool:
        return self._below(file, f"{table}/model={model}/checkpoint={checkpoint}", ".parquet", 1)

    def figure_file(self, file, model: str, checkpoint: str) -> bool:
        return self._below(file, f"_artefacts/figures/{model}/{checkpoint}", ".png", 2)


def parse_manifest(text: str, where, model: str, checkpoint: str, places) -> tuple[dict, list[str]]:
    """(the usable manifest, problems) of a manifest's text; ``where`` names it in the problems and ``places``
    (:class:`FolderPlaces` or :class:`KeyPlaces`) says which files its entries may name."""
    empty = empty_manifest(model, checkpoint)
    path = where
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return empty, [f"unreadable manifest: {path} ({type(error).__name__}: {str(error).splitlines()[0]}); "
                       f"{_fix(model, checkpoint)}"]
    problems = []
    if not isinstance(data, dict):
        return empty, [f"damaged manifest: {path} is not a JSON object; {_fix(model, checkpoint)}"]
    if data.get("model") != model or data.get("checkpoint") != checkpoint:
        problems.append(f"damaged manifest: {path} names {data.get('model')!r}@{data.get('checkpoint')!r}, not its "
                        f"own partition {model}@{checkpoint}; {_fix(model, checkpoint)}")
    generation = data.get("generation")
    if not _whole(generation):
        problems.append(f"damaged manifest: {path} has generation {generation!r} (a whole number >= 0 expected); "
                        f"{_fix(model, checkpoint)}")
        generation = 0
    tables = data.get("tables") if isinstance(data.get("tables"), dict) else {}
    if not isinstance(data.get("tables"), dict):
        problems.append(f"damaged manifest: {path} has no table map; {_fix(model, checkpoint)}")
    usable = {}
    for table, entry in tables.items():
        reason = entry_problem(places, table, entry, model, checkpoint)
        if reason:
            problems.append(f"damaged manifest entry: {path}, table {table}: {reason}; {_fix(model, checkpoint)}")
        else:
            usable[table] = entry
    previous = data.get("previous") if isinstance(data.get("previous"), dict) else {}
    previous = {table: file for table, file in previous.items()
                if isinstance(file, str) and places.table_file(table, file, model, checkpoint)}
    figures = {}
    for key in ("figures", "previous_figures"):
        named = data.get(key) if isinstance(data.get(key), dict) else {}
        figures[key] = {name: file for name, file in named.items() if places.figure_file(file, model, checkpoint)}
        for name in set(named) - set(figures[key]):
            problems.append(f"damaged manifest entry: {path}, figure {name}: {named[name]!r} is not a figure of "
                            f"_artefacts/figures/{model}/{checkpoint}/; {_fix(model, checkpoint)}")
    return {**data, "model": model, "checkpoint": checkpoint, "generation": generation, "tables": usable,
            "previous": previous, **figures}, problems


def named_files(manifest: dict) -> set[str]:
    """Every file ``manifest`` names: its tables and figures, published and previous (the previous generation is kept
    for queries already reading it); nothing it names is a leftover."""
    return {entry["file"] for entry in manifest["tables"].values()} | set(manifest.get("previous", {}).values()) | \
        set(manifest.get("figures", {}).values()) | set(manifest.get("previous_figures", {}).values())


def published_by_run(manifest: dict, run_id: str | None) -> bool:
    """Does ``manifest`` publish a table of run ``run_id`` (its publication happened, whatever came after)?"""
    return run_id is not None and any(entry.get("run_id") == run_id for entry in manifest["tables"].values())


def run_ending(manifest: dict, run_id: str | None, unpublished: str, reason: str) -> dict:
    """The status and error the record of run ``run_id``, which has stopped, ends with: ``success`` ("published;
    then REASON") when ``manifest`` publishes its generation (it stopped between the manifest swap and its record),
    else ``unpublished`` with ``reason``."""
    if published_by_run(manifest, run_id):
        return {"status": "success", "error": f"published; then {reason}"}
    return {"status": unpublished, "error": reason}


def next_generation(manifest: dict, entries: dict[str, dict], figures: dict[str, str] | None = None,
                    figure_files: dict[str, dict] | None = None) -> dict:
    """The manifest that publishes ``entries`` (table -> entry) and ``figures`` (name -> file, each with its
    ``figure_files`` size and hash) over ``manifest``: one generation more; a replaced table's or figure's file is
    kept as ``previous`` (queries already reading it finish), the one before that is no longer named."""
    manifest = {**manifest, "tables": dict(manifest["tables"])}
    generation = manifest["generation"] + 1
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    previous = {}
    for table, entry in entries.items():
        if table in manifest["tables"] and manifest["tables"][table]["file"] != entry["file"]:
            previous[table] = manifest["tables"][table]["file"]
        manifest["tables"][table] = {**entry, "generation": generation, "published_at": stamp}
    manifest.update(generation=generation, published_at=stamp,
                    previous={**{t: f for t, f in manifest.get("previous", {}).items() if t not in previous},
                              **previous})
    if figures:
        published = dict(manifest.get("figures", {}))
        replaced = {name: published[name] for name in figures if published.get(name, figures[name]) != figures[name]}
        recorded = manifest.get("figure_files", {})  # a replaced figure keeps its size and hash, as `previous`
        manifest["previous_figure_files"] = {
            **{name: entry for name, entry in manifest.get("previous_figure_files", {}).items() if name not in replaced},
            **{name: recorded[name] for name in replaced if name in recorded}}
        manifest["figures"] = {**published, **figures}
        manifest["figure_files"] = {**{name: entry for name, entry in manifest.get("figure_files", {}).items()
                                       if name not in figures}, **(figure_files or {})}
        manifest["previous_figures"] = {**{name: file for name, file in manifest.get("previous_figures", {}).items()
                                           if name not in replaced}, **replaced}
    return manifest


def _resolves_into(root: Path, file, folder: Path, suffix: str, *, depth: int = 1) -> bool:
    """Does the relative path ``file`` name a ``suffix`` file ``depth`` levels below ``folder`` (never elsewhere,
    never outside the warehouse, whatever ``..`` or links it holds)?"""
    if not isinstance(file, str) or Path(file).is_absolute():
        return False
    try:
        resolved = (root / file).resolve()
        return resolved.parents[depth - 1] == folder.resolve() and resolved.suffix == suffix
    except (OSError, ValueError, IndexError):  # e.g. an embedded NUL byte
        return False


def entry_problem(places, table: str, entry, model: str, checkpoint: str) -> str | None:
    """Why a manifest entry cannot be used, or None (``places``: :class:`FolderPlaces` or :class:`KeyPlaces`)."""
    if table not in TABLES:
        return "not a table of the study"
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
        return "no file named"
    if not places.table_file(table, entry["file"], model, checkpoint):
        return (f"its file {entry['file']!r} is not in {table}/model={model}/checkpoint={checkpoint}/ (another "
                "partition's file, or a path outside the warehouse)")
    if not _whole(entry.get("rows")) or not _whole(entry.get("bytes")):
        return "rows and bytes must be whole numbers"
    if "sha256" in entry and not (isinstance(entry["sha256"], str) and _SHA256.match(entry["sha256"])):
        return "its sha256 is not a hex digest"
    return None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(HASH_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


class VerifiedFiles:
    """A published file checked against its manifest entry, with verified hashes cached by (size, mtime).

    The cache lives outside the warehouse (``$XDG_CACHE_HOME/resdyn/verified/<hash of the root>.json``,
    default ``~/.cache``), so reading SQL never writes into the warehouse; it holds only hashes this code
    computed or a writer computed while writing, and a file whose size or mtime changed is hashed again.
    Writing it is best effort: without a writable cache every view verifies again.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        base = cache_directory() / "verified"
        self.path = base / (hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:24] + ".json")
        try:
            self.cache = json.loads(self.path.read_text())
            if not isinstance(self.cache, dict):
                self.cache = {}
        except (OSError, ValueError):
            self.cache = {}
        self.changed = False

    @staticmethod
    def _stamp(path: Path) -> list:
        """Size, mtime, inode and ctime: ``cp -p`` / ``touch -r`` can restore an mtime, not a ctime."""
        status = path.stat()
        return [status.st_size, status.st_mtime_ns, status.st_ino, status.st_ctime_ns]

    def remember(self, path: Path, sha256: str) -> None:
        self.cache[str(path)] = [*self._stamp(path), sha256]
        self.changed = True

    def problem(self, path: Path, entry: dict) -> str | None:
        """Why ``path`` does not hold what ``entry`` published, or None."""
        if not path.is_file():
            return "missing"
        size = path.stat().st_size
        if size != entry["bytes"]:
            return f"damaged (size {size}, published {entry['bytes']})"
        expected = entry.get("sha256")
        if expected is None:
            return None  # published before content hashes were recorded: size only
        cached = self.cache.get(str(path))
        if isinstance(cached, list) and len(cached) == 5 and cached[:4] == self._stamp(path):
            actual = cached[4]
        else:
            actual = file_sha256(path)
            self.remember(path, actual)
        return None if actual == expected else "damaged (content differs from what was published: sha256)"

    def save(self) -> None:
        if not self.changed:
            return

        try:
            atomic_write_text(self.path, json.dumps(self.cache))
        except OSError:
            pass
        self.changed = False


def hashing_stream(stream):
    """``stream`` with a running sha256 of everything written (``.sha256``): the Parquet writer writes its
    file front to back, so this is the file's hash without reading it again."""
    return _HashingStream(stream)


class _HashingStream:
    def __init__(self, stream) -> None:
        self._stream = stream
        self._digest = hashlib.sha256()
        self._position = 0

    def write(self, data) -> int:
        self._digest.update(data)
        self._position += len(memoryview(data).cast("B")) if not isinstance(data, bytes) else len(data)
        return self._stream.write(data)

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        self._stream.flush()

    def fileno(self) -> int:
        return self._stream.fileno()

    def close(self) -> None:
        self._stream.close()

    @property
    def closed(self) -> bool:
        return self._stream.closed

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()


