"""One run's work on one partition: a lease, a provenance record, staged tables, one publication.

Every asset runs inside :func:`partition_run`:

- the settings are checked first (a bad value fails the step before anything is written);
- the partition's lease is taken (``_locks/<model>@<checkpoint>.json``): a second run of the same
  partition stops at once with a message naming the run that holds it, unless that run is dead
  (its process is gone, or the Dagster instance says it has ended), which is then recorded as
  ``killed``;
- the run's row of the ``runs`` table is written when its first step for the partition starts;
- what the step yields is staged by the IO manager (which only stores and loads); then, as its own step
  after the body has yielded everything, the step that completes the run's selection for the partition
  publishes it all (one manifest swap), records ``success`` and frees the lease;
- on an exception the files the run wrote for the partition are removed, the run is recorded ``failed`` with
  the first line of the error, the lease is freed, nothing is published;
- the first step of a run for a partition sweeps what failed or killed runs of it left
  (store/leftovers.py) before it writes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn

from resdyn import interrupts
from resdyn.dagster_project.asset_layer.steps import STEP_RETRIES
from resdyn.dagster_project.configuration.settings import IN_HASH, settings_hash
from resdyn.dagster_project.store.errors import LeaseLostError, PartitionBusyError, SchemaMismatchError
from resdyn.dagster_project.store.leases import now
from resdyn.dagster_project.store.manifests import run_ending
from resdyn.dagster_project.store.outputs import PartitionOutputs
from resdyn.dagster_project.store.run_records import corpus_record, record_run_row
from resdyn.dagster_project.store.schema import TABLES
from resdyn.dagster_project.store.table_identity import expected_identities
from resdyn.models.registry import split_partition_key

log = logging.getLogger(__name__)

OPTIONAL_TABLES = {name for name, table in TABLES.items() if not table.required}


def selected_tables(context) -> set[str]:
    """The tables this run will write for the partition: its selected assets (each writes its own table)."""
    run = context.dagster_run if hasattr(context, "dagster_run") else context.run  # a step's or an asset's context
    keys = run.asset_selection or context.job_def.asset_layer.executable_asset_keys
    # a table not every partition has (training_loss: the tiny suite only) is published when staged, never awaited
    return {key.to_user_string() for key in keys if key.to_user_string() not in OPTIONAL_TABLES}


@dataclass(frozen=True)
class PartitionRun:
    """One run's hold on one partition: the bound warehouse and what its provenance record needs."""

    store: object  # the Warehouse (a folder's) or ObjectWarehouse (an object store's), bound to the run
    model: str
    checkpoint: str
    values: dict
    executor: str
    corpus: str | None

    def record(self, **fields) -> None:
        record_run_row(self.store, self.model, self.checkpoint, self.values, self.executor, self.corpus, **fields)

    def fail(self, step: str, error: BaseException, attempt: int = STEP_RETRIES.max_retries) -> None:
        """Record the run ``failed`` with the first line of ``error`` and free the lease. On the step's last attempt
        (``attempt``: 0 for the first) also remove what the run wrote for the partition and did not publish
        (first: on a full disk that frees the room its record needs); a step that will be retried keeps what the
        run's other steps staged, so that its retry can still publish them."""
        message = (str(error).strip().splitlines() or [type(error).__name__])[0]
        left = []  # what could not be done, and why: said in one line (a full disk, an object store out of reach)
        try:
            if attempt >= STEP_RETRIES.max_retries:
                self.store.discard_run(self.model, self.checkpoint)
            # stopped after its publication (a signal between the manifest swap and the record): the generation
            # is the run's, and its record says so rather than `failed`
            ending = run_ending(self.store.manifest_state(self.model, self.checkpoint)[0], self.store.run_id, "failed",
                                f"{step}: {type(error).__name__}: {message}")
            self.record(status=ending["status"], ended_at=now(), error=ending["error"][:2000])
        except Exception as failure:  # noqa: BLE001 - the step's own error is the one to report (botocore's errors
            left.append(("recorded `failed`", failure))  # are no OSError)
        finally:
            self._free_lease(left)

    def _free_lease(self, left: list) -> None:
        """Free the lease, then say in one line what of the failure's bookkeeping could not be done (``left``)."""
        try:
            self.store.release_lease(self.model, self.checkpoint)
        except Exception as failure:  # noqa: BLE001 - as above
            left.append(("its lease freed", failure))
        if left:
            cause = left[0][1]
            log.warning("%s@%s: run %s could not be %s (%s: %s); the next run of the partition finds it ended, records "
                        "it and takes the lease over (`resdyn check` lists what it left)", self.model, self.checkpoint,
                        self.store.run_id, " nor ".join(what for what, _ in left), type(cause).__name__,
                        (str(cause).strip().splitlines() or [""])[0])

    def publish_if_complete(self, context) -> None:
        """Publish the partition when this run has staged every table of its selection (one manifest swap, the
        run's figures with it: every asset draws its figures before it yields its tables), record ``success``
        and free the lease."""
        if selected_tables(context) <= set(self.store.staged(self.model, self.checkpoint)):
            interrupts.check(f"the publication of {self.model}@{self.checkpoint}")
            self.store.publish(self.model, self.checkpoint)
            self.record(status="success", ended_at=now())
            self.store.release_lease(self.model, self.checkpoint)


def bind(context, warehouse, settings) -> PartitionRun:
    """This run's hold on the context's partition (no lease taken: :func:`partition_run` takes it)."""
    model, checkpoint = split_partition_key(context.partition_key)
    values = settings.values()
    store = warehouse.open(run_id=context.run_id, settings_hash=settings_hash(values),
                           identities=run_identities(values, warehouse.wikitext_directory or None))
    return PartitionRun(store, model, checkpoint, values, context.job_def.executor_def.name,
                        warehouse.wikitext_directory or None)


def run_identities(values: dict, corpus_directory: str | None) -> dict:
    """Every declared table's identity as this run makes it (store/table_identity.py): its stage's code version, the
    declared settings' values, its inputs' identities; the corpus's hash for the stages that read it."""
    return expected_identities(values, IN_HASH, corpus_record(corpus_directory)["corpus_sha256"])


def attempt_number(context) -> int:
    """Which attempt of its step ``context`` (an asset's or a step's) is: 0 for the first."""
    number = getattr(context, "retry_number", None)
    return int(number if number is not None else getattr(context, "previous_attempt_count", 0) or 0)


def step_name(context) -> str:
    return getattr(getattr(context, "op_def", None), "name", "a step")


@contextmanager
def partition_run(context, warehouse, settings) -> Iterator[PartitionOutputs]:
    """What one asset step may write for this run and partition (module docstring). What the step
    yields inside this block is staged by the IO manager (asset_layer/io_manager.py) as it is yielded; when the block
    ends without an error, the partition is published if the run has now staged its whole selection."""
    run = bind(context, warehouse, settings)
    store, model, checkpoint = run.store, run.model, run.checkpoint
    single_process = "in_process" in run.executor or "in-process" in run.executor
    try:
        store.acquire_lease(model, checkpoint, single_process=single_process, instance=context.instance)
    except PartitionBusyError as error:  # another run holds the partition: a retry a second later would too
        import dagster as dg

        raise dg.Failure(description=str(error), allow_retries=False) from None
    except BaseException as error:  # the lease could not be written (a full disk, a store out of reach): on the
        fail_step(run, context, error)  # last attempt what the run's earlier steps wrote is removed all the same
    try:
        if not store.has_run_record(model, checkpoint):
            store.sweep_partition(model, checkpoint)  # what failed or killed runs left, before this one writes
            run.record()
        interrupts.check(f"the start of {step_name(context)}")
        yield PartitionOutputs(store, model, checkpoint)
        store.stage_figures(model, checkpoint, step_ended=True)  # an object store's: drawn in a spool, uploaded
        run.publish_if_complete(context)  # every output of the step is staged by now: publication is its own step
    except GeneratorExit:
        # the step's generator closed where it yielded an output: the IO manager failed on it and recorded why
        store.release_lease(model, checkpoint)
        raise
    except BaseException as error:
        fail_step(run, context, error)


def fail_step(run: PartitionRun, context, error: BaseException) -> NoReturn:
    """Record ``error``, the exception being handled, as the failure of ``context``'s step on ``run``, and raise. A
    schema mismatch (the same data would not fit a second time) and a lost lease (another run took the partition
    over: store/fencing.py) become a Dagster failure its retry policy does not rerun, recorded as the last attempt;
    any other error is raised again as it is, recorded with its attempt (a retry may still publish). A requested
    stop (resdyn/interrupts.py) is such a failure too, described by its own message."""
    if isinstance(error, (SchemaMismatchError, LeaseLostError, interrupts.StopRequested)):
        import dagster as dg

        run.fail(step_name(context), error)
        description = str(error) if isinstance(error, interrupts.StopRequested) else f"{type(error).__name__}: {error}"
        raise dg.Failure(description=description, allow_retries=False) from error
    run.fail(step_name(context), error, attempt_number(context))
    raise  # noqa: PLE0704 - called inside the caller's except block: re-raises ``error`` with its traceback
