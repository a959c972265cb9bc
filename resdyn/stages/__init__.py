"""The stages of a partition's analysis, each a pure function of its input frames and the settings it declares.

A stage takes its input tables by name (``jacobians``, ``layer_metrics``: anything with the reading methods of
:mod:`.frames`), the ``settings`` it declares and the :class:`~.tools.StageTools` of where it runs, and returns a
:class:`~.result.StageResult`: per table, its rows (or a stream of column batches), and what a person should see
of it (figures, counts). A stage never writes a file of the warehouse, never chooses a worker count and never knows
an orchestrator: the asset factory (dagster_project/asset_layer/partition_assets.py) conforms the rows to each
table's schema, draws the figures' metadata, and publishes; a test calls the stage with frames it builds.
"""

from resdyn.stages.frames import MatrixFrames, TableFrame
from resdyn.stages.result import Figure, Preview, StageResult
from resdyn.stages.tools import CollectedStream, StageTools

__all__ = ["CollectedStream", "Figure", "MatrixFrames", "Preview", "StageResult", "StageTools", "TableFrame"]
