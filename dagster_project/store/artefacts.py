"""Where figures live (``_artefacts/`` under the warehouse root), and their address in the UI.

``resdyn ui`` serves the PNGs under ``_artefacts/`` at :data:`ARTEFACT_ROUTE` (dagster_project/interface/ui.py),
so materialization metadata can link a figure by a short same-origin URL.
"""

from __future__ import annotations

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
