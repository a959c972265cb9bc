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

import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import platform
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from resdyn.models.registry import split_partition_key

from .. import interrupts
from ..config import REPOSITORY_ROOT
from ..settings import settings_hash
from ..steps import STEP_RETRIES
from .errors import PartitionBusyError
from .leases import acquire_lease, now, release_lease
from .leftovers import discard_run, sweep_partition
from .outputs import PartitionOutputs
from .schema import TABLES
from .warehouse import Warehouse

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def code_environment() -> dict:
    """Versions of the code that computes (package, git commit, libraries), once per process."""
    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    commit = ""
    if (REPOSITORY_ROOT / ".git").exists():
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPOSITORY_ROOT, capture_output=True, text=True,
                                    timeout=10).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPOSITORY_ROOT,
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            commit += "+dirty" if dirty else ""
        except (OSError, subprocess.SubprocessError):
            commit = ""
    return {"resdyn_version": version("resdyn"), "git_commit": commit, "torch_version": version("torch"),
            "transformers_version": version("transformers"), "dagster_version": version("dagster"),
            "python_version": platform.python_version(), "host": socket.gethostname()}


@functools.lru_cache(maxsize=4)
def corpus_record(directory: str | None) -> dict:
    """The analysis corpus, resolved once per process (and setting), by label and content hash."""
    from resdyn.corpus import load_wikitext

    corpus = load_wikitext("test", directory=directory)
    return {"corpus": corpus.label, "corpus_sha256": hashlib.sha256(corpus.text.encode()).hexdigest()[:16]}


def model_source(store: Warehouse, model: str, checkpoint: str) -> str:
    """The registry's account of a partition's checkpoint, as JSON (``runs.model_source``)."""
    from resdyn.models.registry import ModelRegistry
    from resdyn.models.sources import directory_fingerprint, registered_origin

    try:
        spec, revision = ModelRegistry(store.registry_file).resolve(f"{model}@{checkpoint}")
    except KeyError:
        return json.dumps({"source": None, "error": "not in the registry"})
    origin = {key: value for key, value in registered_origin(spec, checkpoint).as_dict().items() if value}
    fingerprint = directory_fingerprint(spec.source)  # a local directory: --resume sees it rewritten in place
    return json.dumps({"source": spec.source, "family": spec.family, "revision": revision, **origin,
                       **({"init_config": spec.init_config} if spec.init_config else {}),
                       **({"directory_fingerprint": fingerprint} if fingerprint else {})}, sort_keys=True)


def map_conventions(store: Warehouse, model: str, checkpoint: str) -> str | None:
    """What the family's sublayer maps hold fixed, as JSON (``runs.map_conventions``)."""
    from resdyn.models.adapters import adapter_for
    from resdyn.models.registry import ModelRegistry

    try:
        spec, _ = ModelRegistry(store.registry_file).resolve(f"{model}@{checkpoint}")
        return json.dumps(adapter_for(spec.family).conventions, sort_keys=True)
    except (KeyError, ValueError):
        return None


def _record(store: Warehouse, model: str, checkpoint: str, settings_values: dict, executor: str,
            corpus_directory: str | None, **fields) -> None:
    existing = {r["run_id"]: r for r in store.run_records(model, checkpoint)}.get(store.run_id)
    row = existing or {
        "run_id": store.run_id, "settings_hash": store.settings_hash, "settings": json.dumps(settings_values,
                                                                                             sort_keys=True),
        **corpus_record(corpus_directory), "dtype": settings_values["dtype"],
        "backend": settings_values["backend"], "device": settings_values["device"], "executor": executor,
        "model_source": model_source(store, model, checkpoint),
        "map_conventions": map_conventions(store, model, checkpoint), **code_environment(),
        "tables_code_version": TABLES_CODE_VERSION, "pid": os.getpid(),
        "started_at": now(), "ended_at": None, "status": "started", "error": None,
    }
    store.record_run(model, checkpoint, {**row, **fields})


# every asset's code version, hashed: set by assets_index when it collects the assets (every process that runs a
# step has), so that this module need not import the assets above it
TABLES_CODE_VERSION: str | None = None


def record_interrupted(store: Warehouse, model: str, checkpoint: str, reason: str) -> None:
    """Close this process's runs of the partition that a signal stopped between steps (no step was there to
    record the failure): status ``failed`` with ``reason``, and the lease freed."""
    for row in store.run_records(model, checkpoint):
        row = {key: value for key, value in row.items() if key not in ("model", "checkpoint")}
        if row["status"] == "started" and row["pid"] == os.getpid() and row["host"] == socket.gethostname():
            bound = Warehouse(store.root, run_id=row["run_id"], settings_hash=row["settings_hash"])
            store.record_run(model, checkpoint, {**row, "status": "failed", "ended_at": now(), "error": reason})
            release_lease(bound, model, checkpoint)


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

    store: Warehouse
    model: str
    checkpoint: str
    values: dict
    executor: str
    corpus: str | None

    def record(self, **fields) -> None:
        _record(self.store, self.model, self.checkpoint, self.values, self.executor, self.corpus, **fields)

    def fail(self, step: str, error: BaseException, attempt: int = STEP_RETRIES.max_retries) -> None:
        """Record the run ``failed`` with the first line of ``error`` and free the lease. On the step's last attempt
        (``attempt``: 0 for the first) also remove what the run wrote for the partition and did not publish
        (first: on a full disk that frees the room its record needs); a step that will be retried keeps what the
        run's other steps staged, so that its retry can still publish them."""
        message = (str(error).strip().splitlines() or [type(error).__name__])[0]
        try:
            if attempt >= STEP_RETRIES.max_retries:
                discard_run(self.store, self.model, self.checkpoint)
            self.record(status="failed", ended_at=now(), error=f"{step}: {type(error).__name__}: {message}"[:2000])
        except OSError as failure:  # the step's own error is the one to report; the next run sweeps what is left
            log.warning("%s@%s: could not record the failed run %s (%s)", self.model, self.checkpoint,
                        self.store.run_id, failure)
        finally:
            release_lease(self.store, self.model, self.checkpoint)

    def publish_if_complete(self, context) -> None:
        """Publish the partition when this run has staged every table of its selection (one manifest swap, the
        run's figures with it: every asset draws its figures before it yields its tables), record ``success``
        and free the lease."""
        if selected_tables(context) <= set(self.store.staged(self.model, self.checkpoint)):
            interrupts.check(f"the publication of {self.model}@{self.checkpoint}")
            self.store.publish(self.model, self.checkpoint)
            self.record(status="success", ended_at=now())
            release_lease(self.store, self.model, self.checkpoint)


def bind(context, warehouse, settings) -> PartitionRun:
    """This run's hold on the context's partition (no lease taken: :func:`partition_run` takes it)."""
    model, checkpoint = split_partition_key(context.partition_key)
    values = settings.values()
    store = Warehouse(warehouse.open().root, run_id=context.run_id, settings_hash=settings_hash(values))
    return PartitionRun(store, model, checkpoint, values, context.job_def.executor_def.name,
                        warehouse.wikitext_directory or None)


def attempt_number(context) -> int:
    """Which attempt of its step ``context`` (an asset's or a step's) is: 0 for the first."""
    number = getattr(context, "retry_number", None)
    return int(number if number is not None else getattr(context, "previous_attempt_count", 0) or 0)


def step_name(context) -> str:
    return getattr(getattr(context, "op_def", None), "name", "a step")


@contextmanager
def partition_run(context, warehouse, settings) -> Iterator[PartitionOutputs]:
    """What one asset step may write for this run and partition (module docstring). What the step
    yields inside this block is staged by the IO manager (store/io_manager.py) as it is yielded; when the block
    ends without an error, the partition is published if the run has now staged its whole selection."""
    run = bind(context, warehouse, settings)
    store, model, checkpoint = run.store, run.model, run.checkpoint
    single_process = "in_process" in run.executor or "in-process" in run.executor
    try:
        acquire_lease(store, model, checkpoint, single_process=single_process, instance=context.instance)
    except PartitionBusyError as error:  # another run holds the partition: a retry a second later would too
        import dagster as dg

        raise dg.Failure(description=str(error), allow_retries=False) from None
    try:
        if not store.partition_directory("runs", model, checkpoint).joinpath(f"{store.run_id}.parquet").is_file():
            sweep_partition(store, model, checkpoint)  # what failed or killed runs left, before this one writes
            run.record()
        interrupts.check(f"the start of {step_name(context)}")
        yield PartitionOutputs(store, model, checkpoint)
        run.publish_if_complete(context)  # every output of the step is staged by now: publication is its own step
    except GeneratorExit:
        # the step's generator closed where it yielded an output: the IO manager failed on it and recorded why
        release_lease(store, model, checkpoint)
        raise
    except BaseException as error:
        run.fail(step_name(context), error, attempt_number(context))
        raise
