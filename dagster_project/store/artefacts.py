"""Where figures live (``_artefacts/`` under the warehouse root), and their address in the UI.

``resdyn ui`` serves the PNGs under ``_artefacts/`` at :data:`ARTEFACT_ROUTE` (dagster_project/interface/ui.py),
so materialization metadata can link a figure by a short same-origin URL.
"""

from __future__ import annotations

from collections.abc import Callable
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
    """Where the study-level assets (the report, the checkpoint comparisons) draw: ``directory`` holds
    ``report.html`` and ``_artefacts/`` as a warehouse folder does; ``location`` names where a file drawn there is
    kept, as a person finds it (the file itself on disk; ``s3://bucket/prefix/<key>`` on an object store)."""

    directory: Path
    location: Callable[[Path], str] = str

    @property
    def report(self) -> Path:
        return self.directory / "report.html"

    @property
    def figures(self) -> Path:
        return self.directory / "_artefacts"
