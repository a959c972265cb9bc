"""A stage's result as the asset's outputs: rows conformed to each table's schema, streams written to the warehouse,
the figures and counts as metadata a person sees in the UI.

The stage (resdyn/stages/) knows no schema, no warehouse and no Dagster; here :class:`AssetStageTools` gives it the
step's log (the progress lines ``resdyn run`` draws), the run's figure folder, streamed writers of the partition's
tables and the worker count the run's settings allow, and :func:`stage_outputs` turns what it returns into one
``dg.Output`` per table, in the order of the asset's specs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import dagster as dg
import pyarrow as pa

from resdyn.dagster_project.asset_layer.io_manager import table_output, versioned_output, written_output
from resdyn.dagster_project.asset_layer.metadata import figure, first_rows, preview
from resdyn.dagster_project.asset_layer.stage_messages import stage_message
from resdyn.dagster_project.store.arrow_tables import record_batch
from resdyn.dagster_project.store.schema import conform, rows_table
from resdyn.stages import Figure, Preview, StageResult, StageTools


class WarehouseStream:
    """A stage's stream into the partition's table: each column batch conformed (record_batch) and written; the
    first rows kept (``head``, a copy: a slice would keep the whole batch alive) for the preview."""

    def __init__(self, writer, table: str, width: int | None) -> None:
        self.writer, self.table, self.width, self.head = writer, table, width, None

    def __enter__(self) -> WarehouseStream:
        self.writer.__enter__()
        return self

    def __exit__(self, *exc):
        return self.writer.__exit__(*exc)

    def write(self, columns: dict) -> None:
        batch = record_batch(self.table, self.width, columns)
        self.writer.write(batch)
        if self.head is None and batch.num_rows:
            self.head = first_rows(batch)

    @property
    def result(self):
        return self.writer.result


class AssetStageTools(StageTools):
    """The tools of a stage run by an asset step: its log, its outputs (figures, streamed tables), its workers."""

    def __init__(self, context, outputs, workers: int) -> None:
        super().__init__(context.partition_key, None, workers)
        self.context, self.outputs = context, outputs

    @property
    def figures(self):
        return self.outputs.figures

    def report(self, stage: str, done: int, total: int, item: str, seconds: float) -> None:
        self.context.log.info(stage_message(self.label, stage, done, total, item, seconds))

    def log(self, message: str) -> None:
        self.context.log.info(f"{self.label}: {message}")

    def stream(self, table: str, width: int | None = None) -> WarehouseStream:
        return WarehouseStream(self.outputs.writer(table, width=width), table, width)


def _metadata(values: dict, table: pa.Table | None) -> dict:
    """A stage's metadata of one table as Dagster's: a Figure its thumbnail and links, a Preview markdown, a dict JSON."""
    metadata = {}
    for key, value in values.items():
        if isinstance(value, Figure):
            metadata.update(figure(value.path, value.label))
        elif isinstance(value, Preview):
            shown = value.table if value.table is not None else table
            if shown is None:  # a stream with no rows, or column batches the IO manager previews itself
                continue
            metadata[key] = preview(shown.drop_columns([c for c in value.without if c in shown.column_names]))
        elif isinstance(value, dict):
            metadata[key] = dg.MetadataValue.json(value)
        else:
            metadata[key] = value
    return metadata


def stage_outputs(result: StageResult, tables: list[str], single: bool, skippable: frozenset,
                  identity: Callable[[str], str | None]) -> list:
    """One output per table the stage returned, in its order; ``tables``: the asset's (a table of ``skippable`` may
    be left out: training_loss, which only a tiny-suite member has); ``single``: the asset writes one table (its
    output is Dagster's ``result``). A table the stage did not return, or one the asset does not declare, is an
    error naming both lists.

    Each output's data version is the table's ``identity`` (its code version, declared settings and inputs'
    identities, as this run makes it): what the views judge current is what Dagster's staleness compares, so a
    table rematerialized under a new identity marks its consumers stale in the UI (upstream data version changed)
    exactly where the rerun plan reruns them."""
    returned = set(result.tables)
    if not returned <= set(tables) or set(tables) - returned - set(skippable):
        raise ValueError(f"the stage returned tables {sorted(returned)}; its asset declares {sorted(tables)}")
    outputs = []
    for name in result.tables:
        value, extra = result.tables[name], result.metadata.get(name, {})
        output_name = "result" if single else name
        version = identity(name)
        if isinstance(value, WarehouseStream):
            outputs.append(written_output(value.result, output_name, _metadata(extra, value.head), version))
        elif isinstance(value, (list, pa.Table)):
            table = rows_table(name, value) if isinstance(value, list) else conform(name, value)
            outputs.append(table_output(table, output_name, _metadata(extra, table), version))
        elif isinstance(value, Iterable):
            batches = (record_batch(name, None, columns) for columns in value)
            outputs.append(versioned_output(batches, output_name, _metadata(extra, None),
                                   dg.DataVersion(version) if version else None))
        else:
            raise TypeError(f"table {name}: rows (a list of dicts), a pyarrow.Table, column batches or a stream, "
                            f"not {type(value).__name__}")
    return outputs


__all__ = ["AssetStageTools", "WarehouseStream", "stage_outputs"]
