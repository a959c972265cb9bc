"""What every asset module shares: partition parsing, the checkpoint, samples, mean Jacobians, metadata."""


import base64
import logging
import time
from pathlib import Path

import dagster as dg
import numpy as np

from resdyn.corpus import Sample
from resdyn.dagster_project import interrupts
from resdyn.dagster_project.resources import AnalysisSettings, WarehouseResource
from resdyn.files import atomic_path
from resdyn.models.registry import split_partition_key

log = logging.getLogger(__name__)

def partition(context) -> tuple[str, str]:
    return split_partition_key(context.partition_key)


def checkpoint_source(warehouse: WarehouseResource, model: str, checkpoint: str) -> tuple[str, str | None]:
    """(path or hub id, revision) of a partition's weights; tiny-suite checkpoints are local dirs."""
    spec, revision = warehouse.registry().resolve(f"{model}@{checkpoint}")
    if spec.is_tiny:
        return str(warehouse.open().models_directory / model / checkpoint), None
    if spec.is_gguf:  # imported (or initialised) by model_checkpoints
        from resdyn.models.registry import MADE_REVISIONS
        from resdyn.models.sources import gguf_checkpoint_label, store_directory

        label = checkpoint if revision in MADE_REVISIONS else gguf_checkpoint_label(spec)
        directory = store_directory(warehouse.open().models_directory, spec, label)
        if not (directory / "config.json").is_file():
            raise FileNotFoundError(f"{model}@{checkpoint} has not been imported into {directory} yet: materialize "
                                    "its model_checkpoints asset first (resdyn run does)")
        return str(directory), None
    if Path(spec.source).expanduser().is_dir():
        return spec.source, None
    return spec.source, revision


def open_layerwise(warehouse: WarehouseResource, settings: AnalysisSettings, model: str, checkpoint: str):
    """The partition's checkpoint, opened for layer-by-layer reading (no weights read yet)."""
    from resdyn.models.layerwise import LayerwiseModel

    source, revision = checkpoint_source(warehouse, model, checkpoint)
    return LayerwiseModel(source, revision, dtype=settings.dtype, device=settings.device)


def read_samples(samples) -> list[Sample]:
    """The partition's samples with their analysed positions, from its ``samples`` table (a handle)."""
    data = samples.read()
    sample_ids = data.column("sample_id").to_numpy()
    positions = data.column("position").to_numpy()
    tokens = data.column("token_ids").combine_chunks()
    windows = tokens.flatten().to_numpy().reshape(len(data), -1) if len(data) else np.zeros((0, 0), np.int64)
    samples = []
    for sample_id in np.unique(sample_ids):
        rows = np.flatnonzero(sample_ids == sample_id)
        samples.append(Sample(int(sample_id), tuple(windows[rows[0]].tolist()), tuple(sorted(positions[rows].tolist()))))
    return samples


INLINE_FIGURE_WIDTH = 480  # px: fits the asset sidebar and the event table of a 1280 px window


def figure(path: Path, label: str | None = None) -> dict:
    """Metadata that shows a PNG in the Dagster UI: inline, and embedded behind "[Show Markdown]".

    Dagster renders markdown inline only under 1,000 characters, so the inline copy is a short link
    to a thumbnail that ``resdyn ui`` serves (dagster_project/ui.py); the link opens the full figure.
    The embedded copy (base64 of the thumbnail) works under a plain ``dagster dev`` too. The metadata keys are
    named after ``label`` (default: the file's stem).
    """
    from PIL import Image

    from resdyn.dagster_project.store.artefacts import artefact_url

    path = Path(path)
    thumbnail = path.with_name(f"{path.stem}.inline.png")
    with Image.open(path) as image:
        image.thumbnail((INLINE_FIGURE_WIDTH, INLINE_FIGURE_WIDTH * 4))
        with atomic_path(thumbnail) as temporary:
            image.save(temporary, format="PNG")
    encoded = base64.b64encode(thumbnail.read_bytes()).decode()
    metadata, label = {}, label or path.stem
    small, full = artefact_url(thumbnail), artefact_url(path)
    if small and full:
        metadata[f"figure_{label}"] = dg.MetadataValue.md(f"[![{label}]({small})]({full})")
    metadata[f"figure_{label}_embedded"] = dg.MetadataValue.md(f"![{label}](data:image/png;base64,{encoded})")
    metadata[f"figure_{label}_path"] = dg.MetadataValue.path(str(path))
    return metadata


def n_layers(model_checkpoints) -> int:
    """Decoder layers of the partition's checkpoint (its ``model_checkpoints`` row)."""
    return int(model_checkpoints.first("n_layers"))


class StageProgress:
    """One line per finished item of an analysis stage in the step's log: done / total and seconds so far
    (a partition's analysis runs for minutes at large d; the UI and ``resdyn run`` show these lines)."""

    def __init__(self, context, stage: str, total: int) -> None:
        self.context, self.stage, self.total, self.done_count = context, stage, total, 0
        self.started = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def done(self, what: str) -> None:
        """Log the item, then stop here if a stop was asked for (every stage's loop reports each item: the one
        place that bounds how long a stop waits to the slowest item)."""
        self.done_count += 1
        self.context.log.info(f"{self.context.partition_key}: {self.stage} {self.done_count}/{self.total} ({what}) "
                              f"done, {self.seconds():.0f} s")
        interrupts.check(f"{self.stage} of {self.context.partition_key}")
