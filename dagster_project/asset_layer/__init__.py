"""The asset layer: everything an asset module (``assets/``) uses of the orchestration side, and nothing else.

An asset module imports from here only (a test reads every import of ``assets/``). What it gets:

- the decorators: :func:`partition_asset` (a stage of ``resdyn/stages/``, or a body, per ``model@checkpoint``,
  of step kind :data:`ANALYSIS` or :data:`MODEL`) and :func:`study_asset` (unpartitioned, over every complete
  partition, as ``published``);
- what a study asset shows a person: :func:`figure`, :func:`preview`, the study's comparisons and sections.

A stage needs nothing from here: the factory gives it its tools (asset_layer/stage_outputs.py). Below this layer:
``store/`` (the warehouse, no Dagster), ``study/`` (report and claims over published tables) and
``configuration/``. Above it: ``launch/`` (definitions, the run loop, executors) and ``interface/``.
"""

from resdyn.dagster_project.asset_layer.metadata import figure, preview
from resdyn.dagster_project.asset_layer.partition_assets import ANALYSIS, MODEL, partition_asset, study_asset
from resdyn.dagster_project.study.report import COMPARISONS, SECTIONS

__all__ = ["ANALYSIS", "COMPARISONS", "MODEL", "SECTIONS", "figure", "partition_asset", "preview", "study_asset"]
