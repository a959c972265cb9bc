"""Where figures live (``_artefacts/`` under the warehouse root), what names them, and their address in the UI.

``resdyn ui`` serves figures under ``_artefacts/`` at :data:`ARTEFACT_ROUTE` (dagster_project/interface/ui.py),
so materialization metadata can link a figure by a short same-origin URL; it serves only a figure something
current names with its sha256 (:func:`named_figure`):

- a partition's figures (``_artefacts/figures/<m>/<c>/<run_id>/``): its manifest (``figures`` with
  ``figure_files``; the previous generation's ``previous_figures`` with ``previous_figure_files``);
- the study's own figures, which ``resdyn report`` / ``resdyn claims`` and the study assets draw in place
  (``_artefacts/report/``, ``_artefacts/comparisons/<model>/``, ``_artefacts/claims/<model>/``): the
  ``figures.json`` index the drawing code writes beside them (:func:`index_figures`); a figure's thumbnail there
  (``<name>.inline.png``, drawn by the asset's metadata) is named through its figure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ARTEFACT_ROUTE = "/resdyn/artefacts"


def artefact_url(path: Path) -> str | None:
    """The UI's URL of a file under a warehouse's ``_artefacts/`` directory (None when it is not under one)."""
    parts = Path(path).resolve().parts
    if "_artefacts" not in parts:
        return None
    below = parts[len(parts) - parts[::-1].index("_artefacts"):]
    return ARTEFACT_ROUTE + "/" + "/".join(below)


@dataclass(frozen=True)
class StudyArtefacts:
    """Where the study-level assets (the report, the checkpoint comparisons, the claims it includes) draw:
    ``directory`` holds ``report.html`` and ``_artefacts/`` as a warehouse folder does."""

    directory: Path

    @property
    def report(self) -> Path:
        return self.directory / "report.html"

    @property
    def figures(self) -> Path:
        return self.directory / "_artefacts"


# local folders laid out as a warehouse whose files are kept elsewhere (an object store's spools, while they exist):
# folder -> the warehouse's location; what the metadata of a file drawn there names (:func:`kept_location`)
_KEPT_ELSEWHERE: dict[Path, str] = {}


def keep_elsewhere(directory: Path, location: str | None) -> None:
    """Say that the files under ``directory`` are kept at ``location/<their path below it>`` (None: no longer)."""
    if location is None:
        _KEPT_ELSEWHERE.pop(Path(directory), None)
    else:
        _KEPT_ELSEWHERE[Path(directory)] = str(location)


def kept_location(path: Path) -> str:
    """Where the file ``path`` is kept, as a person finds it: on an object store ``s3://bucket/prefix/<key>`` (a spool
    folder's file), else the file itself."""
    path = Path(path)
    for directory, location in _KEPT_ELSEWHERE.items():
        if path.is_relative_to(directory):
            return f"{location}/{path.relative_to(directory).as_posix()}"
    return str(path)


FIGURE_INDEX = "figures.json"  # beside the study's figures: file name -> bytes and sha256
STUDY_FIGURE_FOLDERS = {"report": 0, "comparisons": 1, "claims": 1}  # below _artefacts/: how many folders deeper
THUMBNAIL_SUFFIX = ".inline.png"  # the thumbnail of <name>.png that a figure's metadata links inline
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def index_figures(directory: Path, figures: Iterable[Path]) -> Path:
    """Name ``figures`` (just drawn into ``directory``) with their size and sha256 in ``directory/figures.json``,
    beside the entries of figures drawn there before that are still there; what names a study figure for the UI.
    Written after the figures (atomically): a figure rewritten since is no longer the one named, and not served."""
    from resdyn.dagster_project.store.manifest_recovery import figure_record
    from resdyn.files import atomic_write_text

    directory = Path(directory)
    index = directory / FIGURE_INDEX
    entries = {name: entry for name, entry in _index_entries(index.read_bytes() if index.is_file() else None).items()
               if (directory / name).is_file()}
    for path in figures:
        entries[Path(path).name] = figure_record(Path(path).read_bytes(), str(path))  # a figure: kilobytes
    atomic_write_text(index, json.dumps({"figures": dict(sorted(entries.items()))}, indent=1) + "\n")
    return index


def _index_entries(data: bytes | None) -> dict[str, dict]:
    try:
        figures = json.loads(data).get("figures") if data is not None else None
    except (ValueError, AttributeError):
        return {}
    return figures if isinstance(figures, dict) else {}


@dataclass(frozen=True)
class NamedFigure:
    """A figure something current names: the bytes at ``key`` (below the warehouse root) must have ``sha256`` and
    ``size`` (None: named without them, by an older resdyn), as ``named_by`` (a manifest or index key) says.
    ``thumbnail``: what is asked for is the thumbnail of that figure, drawn from its checked bytes."""

    key: str
    sha256: str | None
    size: int | None
    named_by: str
    thumbnail: bool = False


def _recorded(entry) -> tuple[str | None, int | None]:
    if not isinstance(entry, dict):
        return None, None
    sha256, size = entry.get("sha256"), entry.get("bytes")
    if not (isinstance(sha256, str) and _SHA256.match(sha256)) or not isinstance(size, int) or isinstance(size, bool):
        return None, None
    return sha256, size


def named_figure(relative: str, read: Callable[[str], bytes | None], places) -> NamedFigure | None:
    """What names the figure ``relative`` (its path below ``_artefacts/``, each part already a plain name), or None
    where nothing current does: the partition's manifest for ``figures/<m>/<c>/<run_id>/<name>.png`` (its published
    or previous generation), the folder's ``figures.json`` for the study's figures. ``read(key)``: the bytes of a key
    below the warehouse root (None where there is none); ``places``: the warehouse's
    :class:`~.manifests.FolderPlaces` or :class:`~.manifests.KeyPlaces`."""
    from resdyn.dagster_project.store.manifests import parse_manifest

    parts, key = relative.split("/"), "_artefacts/" + relative
    if parts[0] == "figures" and len(parts) == 5:
        model, checkpoint = parts[1], parts[2]
        manifest_key = f"_published/model={model}/checkpoint={checkpoint}.json"
        text = read(manifest_key)
        if text is None:
            return None
        manifest = parse_manifest(text, manifest_key, model, checkpoint, places)[0]
        for names, files in (("figures", "figure_files"), ("previous_figures", "previous_figure_files")):
            recorded = manifest.get(files) if isinstance(manifest.get(files), dict) else {}
            for name, file in manifest.get(names, {}).items():
                if file == key:
                    return NamedFigure(key, *_recorded(recorded.get(name)), manifest_key)
        return None
    if STUDY_FIGURE_FOLDERS.get(parts[0]) == len(parts) - 2:
        index_key = "/".join(["_artefacts", *parts[:-1], FIGURE_INDEX])
        entries, name = _index_entries(read(index_key)), parts[-1]
        if name in entries:
            return NamedFigure(key, *_recorded(entries[name]), index_key)
        full = name.removesuffix(THUMBNAIL_SUFFIX) + ".png"
        if name.endswith(THUMBNAIL_SUFFIX) and full in entries:
            return NamedFigure(key.removesuffix(name) + full, *_recorded(entries[full]), index_key, thumbnail=True)
    return None
