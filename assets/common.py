"""What every asset module shares: partition parsing, the checkpoint, samples, mean Jacobians, metadata."""


import logging
import time

import numpy as np

from resdyn.corpus import Sample
from resdyn.dagster_project.asset_layer import interrupts
from resdyn.dagster_project.asset_layer.stage_messages import stage_message
from resdyn.models.registry import split_partition_key

log = logging.getLogger(__name__)

def partition(context) -> tuple[str, str]:
    return split_partition_key(context.partition_key)


def open_layerwise(checkpoint, settings):
    """The partition's checkpoint (a PartitionCheckpoint), opened for layer-by-layer reading (no weights read yet)."""
    from resdyn.models.layerwise import LayerwiseModel

    source, revision = checkpoint.weights()
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


def n_layers(model_checkpoints) -> int:
    """Decoder layers of the partition's checkpoint (its ``model_checkpoints`` row)."""
    return int(model_checkpoints.first("n_layers"))


class StageProgress:
    """One line per finished item of an analysis stage in the step's log: done / total and seconds so far
    (a partition's analysis runs for minutes at large d; the UI shows these lines, and ``resdyn run`` draws them as a
    bar with the time left: dagster_project/asset_layer/stage_messages.py)."""

    def __init__(self, context, stage: str, total: int) -> None:
        self.context, self.stage, self.total, self.done_count = context, stage, total, 0
        self.started = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def done(self, what: str) -> None:
        """Log the item, then stop here if a stop was asked for (every stage's loop reports each item: the one
        place that bounds how long a stop waits to the slowest item)."""
        self.done_count += 1
        self.context.log.info(stage_message(self.context.partition_key, self.stage, self.done_count, self.total, what,
                                            self.seconds()))
        interrupts.check(f"{self.stage} of {self.context.partition_key}")
