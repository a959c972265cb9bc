"""Dagster's IO layer over the warehouse: what an asset returns is staged, and a partition is published
when its run has staged every table of its selection.

An asset step runs inside :func:`~resdyn.dagster_project.asset_layer.partition_run.partition_run` (lease, provenance
record, interrupt checks) and yields one ``dg.Output`` per table. The value is one of

    pyarrow.Table                 a whole table: written here (one row group per record batch)
    iterable of RecordBatch       a stream: written here batch by batch, one batch in memory at a time
    WrittenTable                  a table the step streamed itself through ``store.open_writer`` because
                                  it produces several tables at once (one pass over the model writes
                                  activations, Jacobians and probes layer by layer)

Each is staged under the run (``_staging/<run>/``). This manager only stores and loads: publication
(one manifest swap: readers see the previous generation or this one) is a step of its own, taken by
:func:`~.partition_run.partition_run` once the step has yielded everything and the run's selection is staged. A
failure here is recorded on the run and frees the lease, as a failure of the step's own code does.
Inputs are loaded as lazy handles (:mod:`resdyn.dagster_project.store.handles`): an asset that takes ``jacobians`` as an argument
gets a :class:`~resdyn.dagster_project.store.handles.MatrixTable` over this partition's table as the run sees it, and streams it
row group by row group, which no in-memory value could do for a 4096 x 4096 matrix per sublayer.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Iterable

import dagster as dg
import pyarrow as pa

from resdyn.dagster_project.asset_layer.metadata import first_rows, written_metadata
from resdyn.dagster_project.asset_layer.partition_run import bind, fail_step
from resdyn.dagster_project.store.handles import TableHandle, table_handle
from resdyn.dagster_project.store.warehouse import WrittenTable, hash_batch
from resdyn.models.registry import split_partition_key


def content_version(table: pa.Table) -> dg.DataVersion:
    """A data version from the table's content, hashed as the writer hashes it: equal data, equal version."""
    digest = hashlib.sha256()
    for batch in table.to_batches():
        hash_batch(digest, batch)
    return dg.DataVersion(digest.hexdigest()[:16])


def versioned_output(value, name: str, metadata: dict | None, version: dg.DataVersion | None) -> dg.Output:
    """``value`` as the output ``name`` with ``metadata`` and the data version ``version`` (None: Dagster's own)."""
    with warnings.catch_warnings():  # Output's data_version is "beta"; MaterializeResult's, used before, is not
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.Output(value, output_name=name, metadata=metadata or {}, data_version=version)


def table_output(table: pa.Table, name: str = "result", metadata: dict | None = None,
                 version: str | None = None) -> dg.Output:
    """The output ``name`` (an asset's own: ``result``; a multi-asset's: its table) with its data version: ``version``
    (the table's identity, store/table_identity.py) where given, else its content's."""
    return versioned_output(table, name, metadata, dg.DataVersion(version) if version else content_version(table))


def written_output(written: WrittenTable, name: str = "result", metadata: dict | None = None,
                   version: str | None = None) -> dg.Output:
    """The output of a table the step streamed itself (:data:`WrittenTable`), versioned as :func:`table_output`."""
    return versioned_output(written, name, metadata, dg.DataVersion(version or written.content_hash))


class WarehouseIOManager(dg.ConfigurableIOManager):
    """Stages what partitioned assets return in the warehouse, and loads their inputs as lazy handles. The warehouse
    and the settings are the step's own resources (every partitioned asset asks for both), the ones its body ran with
    as a run's config (the UI's launchpad) made them: a copy held here would keep the definitions' values."""

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        if obj is None:  # an asset without a table of its own (the study report)
            return
        step = context.step_context
        run = bind(step, step.resources.warehouse, step.resources.settings)
        table = context.asset_key.to_user_string()
        try:
            # a body draws its figures before it yields its tables: on an object store they are uploaded and staged
            # now, before this table is, so that no step that finds the selection staged publishes without them
            run.store.stage_figures(run.model, run.checkpoint)
            if isinstance(obj, WrittenTable):
                written, head = obj, None
            elif isinstance(obj, pa.Table):
                written, head = run.store.write(table, run.model, run.checkpoint, obj), obj.slice(0, 5)
            elif isinstance(obj, Iterable):
                written, head = self._stream(run, table, obj)
            else:
                raise TypeError(f"asset {table} returned {type(obj).__name__}: return a pyarrow.Table, record "
                                "batches or the WrittenTable of a writer")
            context.add_output_metadata(written_metadata(written, head))
        except BaseException as error:
            fail_step(run, step, error)

    @staticmethod
    def _stream(run, table: str, batches: Iterable[pa.RecordBatch]) -> tuple[WrittenTable, pa.Table | None]:
        head = None
        with run.store.open_writer(table, run.model, run.checkpoint) as writer:
            for batch in batches:
                writer.write(batch)
                if head is None and batch.num_rows:
                    head = first_rows(batch)
        return writer.result, head

    def load_input(self, context: dg.InputContext) -> TableHandle:
        """A lazy handle over the upstream table of this partition as this run sees it (its own staged table, else
        the published one); nothing is read until the asset asks, one row group (one matrix) at a time."""
        if not context.has_asset_partitions:
            raise TypeError(f"{context.asset_key.to_user_string()}: resdyn's tables are partitioned by model@checkpoint")
        model, checkpoint = split_partition_key(context.asset_partition_key)
        store = context.step_context.resources.warehouse.open(run_id=context.step_context.run_id)
        return table_handle(store, context.asset_key.to_user_string(), model, checkpoint)


def table_outs(specs: list[dg.AssetSpec]) -> dict:
    """A multi-asset's ``outs``, ``deps`` and ``internal_asset_deps`` from one spec per table: outputs that carry
    values for this IO manager (a multi-asset declared with ``specs=`` has outputs of type Nothing, which cannot
    carry a table), each keeping its own upstream tables."""
    outs, deps, internal = {}, set(), {}
    for spec in specs:
        name = spec.key.to_python_identifier()
        upstream = {dep.asset_key for dep in spec.deps}
        outs[name] = dg.AssetOut.from_spec(spec.replace_attributes(deps=[]), dagster_type=dg.Any,
                                           is_required=not spec.skippable)  # a skippable table may be left out
        deps |= upstream
        internal[name] = upstream
    return {"outs": outs, "deps": sorted(deps, key=lambda key: key.to_user_string()), "internal_asset_deps": internal}
