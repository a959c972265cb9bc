"""The asset layer: everything an asset module (``assets/``) uses of the orchestration side, and nothing else.

An asset module imports from here only (a test reads every import of ``assets/``). What it gets:

- the decorators: :func:`partition_asset` (a body per ``model@checkpoint``, asking for ``context``,
  ``settings``, ``outputs``, ``checkpoint``, ``corpus`` and its input tables by name) and :func:`study_asset`
  (unpartitioned, over every complete partition, as ``published``);
- inputs: :class:`TableHandle` and :class:`MatrixTable` (lazy handles; ``MatrixTable.reference(row_group)`` is
  the picklable :class:`MatrixReference` a worker process loads);
- outputs: :func:`table_output` / :func:`written_output`, and the strict table builders :func:`rows_table`,
  :func:`conform`, :func:`record_batch` (a column the schema lacks, a missing one or a value that does not cast
  is an error naming the table and column), with :func:`fixed_size_lists`, :func:`nullable_lists`,
  :func:`matrix_rows` for matrix columns;
- what a person sees: :func:`figure`, :func:`preview`, the figure frames and the study's comparisons and sections;
- work: :func:`ordered_parallel_map`, :class:`ChainWorkers` (chains through depth in processes that keep their
  state), :func:`default_workers`, and :mod:`interrupts` (a stop checked between items).

Below it: ``store/`` (the warehouse, no Dagster), ``study/`` (report and claims over published tables) and
``configuration/``. Above it: ``launch/`` (definitions, the run loop, executors) and ``interface/``.
"""

from resdyn import figure_frames, interrupts
from resdyn.dagster_project.asset_layer.io_manager import table_output, written_output
from resdyn.dagster_project.asset_layer.metadata import figure, preview
from resdyn.dagster_project.asset_layer.partition_assets import ANALYSIS, MODEL, partition_asset, study_asset
from resdyn.dagster_project.store.arrow_tables import fixed_size_lists, matrix_rows, nullable_lists, record_batch
from resdyn.dagster_project.store.handles import MatrixReference, MatrixTable, TableHandle
from resdyn.dagster_project.store.schema import conform, rows_table
from resdyn.dagster_project.study.report import COMPARISONS, SECTIONS
from resdyn.parallel import ChainWorkers, default_workers, ordered_parallel_map

__all__ = ["ANALYSIS", "COMPARISONS", "MODEL", "SECTIONS", "ChainWorkers", "MatrixReference", "MatrixTable", "TableHandle", "conform",
           "default_workers", "figure", "figure_frames", "fixed_size_lists", "interrupts", "matrix_rows",
           "nullable_lists", "ordered_parallel_map", "partition_asset", "preview", "record_batch", "rows_table",
           "study_asset", "table_output", "written_output"]
