"""The one Python launch API: :func:`run_request` (a request's partitions, registered if new, then run) and
:func:`run_partitions` (given partition keys).

``resdyn run`` (dagster_project/interface/cli.py) and ``resdyn.run`` (the notebook) both call it with Python values: the
configuration (:class:`~.config.StudyConfig`), the partition keys (:mod:`resdyn.models.registration` says which a
request names), an asset selection and a progress callback. Each partition is one Dagster run: in this process
for the in-process executor, else a run of the reconstructable job launched from a process of its own. A line is
printed as each partition starts and ends; SIGINT / SIGTERM stop at the running step's next check point (in this
process) or end every process of the runs at once (the other executors' run processes, their fork servers and steps),
and each stopped partition is then said as it is: published before the stop (its runs row ``success``) or not
published at all (``failed``, its files removed). The processes a launch starts end with it however it ends, a
SIGKILL included (resdyn/lifeline.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from resdyn import interrupts
from resdyn.dagster_project.configuration.config import StudyConfig, dagster_home, use_dagster_home
from resdyn.dagster_project.launch.console import TRACE_LEVEL_HINT, configure_logging, quiet_failures
from resdyn.dagster_project.launch.event_log_file import NO_CONSOLE_LEVEL, event_log_path, run_config_loggers
from resdyn.dagster_project.launch.stops import (
    close_abandoned_runs,
    close_stopped_runs,
    run_tags,
    start_quiet_resource_tracker,
)
from resdyn.dagster_project.launch.summary_table import peak_memory_mb, summary_table
from resdyn.dagster_project.store import open_warehouse
from resdyn.lifeline import die_with_parent, end_process_trees, owning_runs
from resdyn.models.registry import SIMEX_REVISIONS, SIMEX_SELECTION, split_partition_key

Progress = Callable[[int, int, str, bool], None]  # (number, total, key, done): told as each partition starts, ends


@dataclass
class RunOutcome:
    """What a launch did: the partitions that failed, per partition its seconds, steps and checks (``--summary``),
    and ``stopped``: 128 + the signal that stopped it (130 Ctrl-C, 143 SIGTERM), else 0."""

    failed: list[str] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    stopped: int = 0

    @property
    def exit_code(self) -> int:
        """0 every partition ok, 1 one failed, 128 + signal stopped."""
        return self.stopped or (1 if self.failed else 0)


def _stale_checkpoints(warehouse: str | None, model: str) -> set[str]:
    """The checkpoints of ``model`` whose published partition was made from another source file than the one
    registered now (``partitions.status = 'stale'``)."""
    store = open_warehouse(warehouse)
    if not store.exists():
        return set()
    rows = store.query("SELECT checkpoint FROM partitions WHERE model = $model AND status = 'stale'",
                       parameters={"model": model}).to_pylist()
    return {row["checkpoint"] for row in rows}


def run_request(request, flags: dict, progress=None, *, selection: str | None = None, resume: bool = False,
                log_level: str | None = None, parallel_runs: int = 0, summary_file: str | None = None,
                fresh: bool = False):
    """Resolve the configuration (``flags``: settings and the launch's own values, None where not given), find the
    partitions ``request`` names (registering a new source), and run them: what ``resdyn run`` and
    ``resdyn.run`` both do, with Python values. Returns the :class:`RunOutcome`."""
    from resdyn.dagster_project.launch.study_definitions import prepare
    from resdyn.models.registration import partitions_of

    config = prepare(StudyConfig.resolve(flags))  # every value checked (and a Ray address asked) before any write
    with open_warehouse(config.warehouse).writable_registry() as registry:
        keys = partitions_of(request, registry, stale_checkpoints=lambda model: _stale_checkpoints(config.warehouse,
                                                                                                    model))
        simex_only = bool(keys) and all(registry.get(model).checkpoints[checkpoint] in SIMEX_REVISIONS
                                        for model, checkpoint in map(split_partition_key, keys))
    if simex_only and selection is None:
        selection = SIMEX_SELECTION
        print(f"resdyn: the SIMEX set: only the tables its zero-rounding readings read ({SIMEX_SELECTION})", flush=True)
    return run_partitions(config, keys, selection, progress, resume=resume, log_level=log_level,
                          parallel_runs=parallel_runs, summary_file=summary_file, fresh=fresh)


def run_partitions(config: StudyConfig, keys: list[str], selection: str | None = None,
                  progress: Progress | None = None, *, resume: bool = False, log_level: str | None = None,
                   parallel_runs: int = 0, summary_file: str | Path | None = None, fresh: bool = False) -> RunOutcome:
    """Materialize ``keys`` under ``config`` (made ready by :func:`~.study_definitions.prepare`, as :func:`run_request` does):
    of each partition the tables that are not current at these settings and code (.rerun_plan: their stages and
    what is downstream; a partition with every table current is not run again), or with ``fresh`` every table, or
    the assets of ``selection`` (Dagster's selection syntax; their upstream tables must be published). ``resume`` is
    what a plain run does (kept for the flag). Every Dagster event of the runs goes to
    the launch's event-log file (its path printed first); ``log_level`` also shows them on the console at that level,
    and None draws resdyn's progress display instead (.progress). A table of the partitions ends it."""
    import dagster as dg

    from resdyn.dagster_project.asset_layer.partitions import register_partitions
    from resdyn.dagster_project.launch.selection import check_inputs, partition_asset_keys

    quiet_failures(log_level or NO_CONSOLE_LEVEL)  # each failed step is one line of this launch's own
    store = open_warehouse(config.warehouse)
    store.prepare_for_writing()  # an object store that ignores conditional writes is refused before any write
    if selection is None and not fresh:
        groups = _stale_groups(store, keys, config)
        if list(groups) != [None]:
            return _run_groups(config, groups, progress, log_level=log_level, parallel_runs=parallel_runs,
                               summary_file=summary_file)
    selected_keys = partition_asset_keys(selection)
    if selected_keys:
        for key in keys:
            check_inputs(selection, selected_keys, store.published_table_names(*split_partition_key(key)), key)
    if config.executor != "in_process":
        _persistent_dagster_home(store)
    elif dagster_home():
        write_instance_settings(Path(dagster_home()))
    instance = dg.DagsterInstance.get() if dagster_home() else dg.DagsterInstance.ephemeral()
    register_partitions(instance, keys)
    print(f"resdyn: {len(keys)} partition(s) into {store} ({config.executor} executor): {', '.join(keys)}")
    for line in close_abandoned_runs(instance):
        print(line, flush=True)
    event_log = _new_event_log(store, keys) if keys else None
    if event_log is not None:
        print(f"resdyn: event log (every Dagster event, DEBUG): {event_log}", flush=True)
    outcome = RunOutcome()
    run_config = {"loggers": run_config_loggers(event_log, log_level)}
    signals = SignalRecorder()
    interrupts.watch(signals)  # steps stop at their next check point, and nothing of the run is published
    display = None
    try:
        from resdyn.dagster_project.launch.study_definitions import partition_job, step_names

        # the steps the display counts, and (in this process) the job that runs each partition: built once
        job = partition_job(config, selected_keys) if keys and (log_level is None or config.executor == "in_process") \
            else None
        if log_level is None and keys:  # the console shows no Dagster event: resdyn's display does instead
            from resdyn.dagster_project.launch.progress import open_display

            display = open_display(event_log, keys, len(step_names(job)))
        if config.executor == "in_process":
            outcome.stopped = _run_in_process(keys, store, instance, job, run_config, signals, outcome, progress,
                                           display)
        else:
            outcome.stopped = _run_out_of_process(keys, config, instance, selected_keys, run_config, parallel_runs,
                                               outcome, signals, progress, display)
    except KeyboardInterrupt:  # a signal before a partition's run began (its job or the display being built)
        outcome.stopped = 128 + (signals.poll() or int(signal.SIGINT))
        print(f"resdyn: stopped by {signal.Signals(outcome.stopped - 128).name} before any partition's run began",
              flush=True)
    finally:
        if display is not None:
            display.close()
        interrupts.unwatch()
        signals.close()
        if summary_file:
            Path(summary_file).write_text(json.dumps(outcome.summary, indent=2))
    table = summary_table(outcome.summary, keys, outcome.stopped)
    if table:
        print("\n" + table, flush=True)
    return outcome


def _new_event_log(store, keys: list[str]) -> Path:
    """The launch's event-log file, made empty now: under the Dagster home's ``logs`` (DAGSTER_HOME, else the one
    beside the warehouse that the executors with processes of their own use), so that every process of the runs
    finds its folder."""
    home = Path(dagster_home()) if dagster_home() else store.local_state_directory / "_dagster_home"
    path = event_log_path(home, keys)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return path


def _step_summary(result) -> dict:
    """Per step: seconds, and the peak resident memory and timings its materializations reported."""
    steps: dict[str, dict] = {}
    for event in result.all_events:
        if event.event_type_value == "STEP_SUCCESS":
            steps.setdefault(event.step_key, {})["seconds"] = round(event.step_success_data.duration_ms / 1000, 2)
        elif event.event_type_value == "ASSET_MATERIALIZATION":
            metadata = event.step_materialization_data.materialization.metadata
            step = steps.setdefault(event.step_key, {})
            for name in ("peak_rss_mb", "seconds_by_part", "mean_jacobians_vs_forward"):
                if name in metadata:
                    step[name] = metadata[name].value
    return {name: step for name, step in steps.items() if "seconds" in step}


UNREACHABLE_STORE = ("the object store did not answer (check that it is up and reachable, AWS_ENDPOINT_URL_S3), "
                     "then run the same command again with --resume: what was published is kept, what the failed run "
                     "left is swept")


def _failure_lines(result) -> list[str]:
    """One line per failed step: its error's first line; a store that did not answer says what to do next."""
    lines = []
    for event in result.all_events:
        if event.is_step_failure:
            error = event.step_failure_data.error
            error = error.cause or error  # Dagster wraps the user's exception: show that one
            first = error.message.strip().splitlines()[0]
            unreachable = first.startswith("botocore.exceptions.") and ("connect" in first.lower()
                                                                        or "timeout" in first.lower())
            lines.append(f"    {event.step_key}: {first}" + (f"; {UNREACHABLE_STORE}" if unreachable else ""))
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
        self.listen()
        self.received: list[int] = []

    def listen(self) -> None:
        """A SIGTERM interrupts like Ctrl-C. Called again after each in-process Dagster run: on its way out,
        Dagster's ``capture_interrupts`` sets SIGTERM to the SIGINT handler it found, which is SIG_IGN in a process
        started in the background (``nohup``, ``cmd &`` in a script), so a SIGTERM before the next partition's run
        would be discarded (and every process spawned then would inherit the ignore).

        SIGINT gets Python's own handler back: polars' (signal-hook, installed at import) restarts an interrupted
        wait, so a SIGINT to this process alone went unseen while it waited for its run processes, and the run
        went on to publish."""
        import polars  # noqa: F401 - its handler is installed at import: after this nothing replaces ours

        signal.signal(signal.SIGTERM, signal.default_int_handler)
        if (handler := signal.getsignal(signal.SIGINT)) is not None:
            signal.signal(signal.SIGINT, handler)

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


SHIPPED_INSTANCE = Path(__file__).resolve().parents[2] / "dagster_home" / "dagster.yaml"


def _persistent_dagster_home(store) -> None:
    """Executors that run steps in other processes need an instance on disk: DAGSTER_HOME, else one beside
    the warehouse (an object store's: in its local state folder)."""
    if dagster_home():
        write_instance_settings(Path(dagster_home()))
        return
    home = store.local_state_directory / "_dagster_home"
    write_instance_settings(home)
    use_dagster_home(home)


def write_instance_settings(home: Path) -> None:
    """The shipped instance settings (telemetry off, run queue) in ``home``, made if new, unless it holds its own
    ``dagster.yaml``: without one, Dagster warns at every instance it opens there."""
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").is_file():
        shutil.copyfile(SHIPPED_INSTANCE, home / "dagster.yaml")


def _outcome(result) -> dict:
    """What the CLI reports of one partition's run, as plain data (it crosses a process boundary)."""
    checks = [e.asset_check_evaluation_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return {"success": bool(result.success), "run_id": result.run_id, "steps": _step_summary(result),
            "n_checks": len(checks), "failing_checks": [c.check_name for c in checks if not c.passed],
            "failure_lines": _failure_lines(result) if not result.success else []}


def _report(number: int, total: int, key: str, outcome: dict, started: float, launch: RunOutcome,
            display=None) -> None:
    """Record and print how partition ``key`` ended (after its last progress lines, where a display draws them)."""
    if display is not None:
        display.partition_ended(key)
    with display.printing() if display is not None else contextlib.nullcontext():
        _record_and_print(number, total, key, outcome, started, launch)


def _record_and_print(number: int, total: int, key: str, outcome: dict, started: float, launch: RunOutcome) -> None:
    failing, steps, n_checks = outcome["failing_checks"], outcome["steps"], outcome["n_checks"]
    success = outcome["success"] and not failing
    seconds = outcome.get("seconds", time.perf_counter() - started)  # a queued run's own time, not its wait
    launch.summary[key] = {"seconds": round(seconds, 2), "success": success,
                    "steps": steps, "failing_checks": failing, "run_id": outcome["run_id"],
                    "n_checks": n_checks, "peak_rss_mb": peak_memory_mb(steps)}
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
        launch.failed.append(key)


def _stale_groups(store, keys: list[str], config) -> dict[str | None, list[str]]:
    """Partitions grouped by the selection of tables they must make (.rerun_plan), each partition's plan said;
    ``{None: keys}`` where every partition is new to the warehouse (a whole run, said by nothing)."""
    from resdyn.dagster_project.launch.assets_index import ALL_ASSETS
    from resdyn.dagster_project.launch.rerun_plan import plan_partitions

    if not store.exists():
        return {None: keys}
    # the job's own tables: a stage declared elsewhere in this process (a test's toy asset) is no table of the run
    tables = {key.to_user_string() for definition in ALL_ASSETS for key in definition.keys}
    groups: dict[str | None, list[str]] = {}
    for plan in plan_partitions(store, keys, config, tables):
        if plan.reused or set(plan.reasons.values()) != {"not published"}:  # said unless wholly new
            for line in plan.lines():
                print(line, flush=True)
        if plan.run:
            groups.setdefault(None if not plan.reused else plan.selection(), []).append(plan.key)
    return groups


def _run_groups(config, groups: dict[str | None, list[str]], progress, **options) -> RunOutcome:
    """Each group of partitions run with its own selection (None: every table); one outcome for them all."""
    outcome = RunOutcome()
    summary_file = options.pop("summary_file", None)
    for selection, keys in groups.items():
        part = run_partitions(config, keys, selection, progress, fresh=True, **options)
        outcome.failed += part.failed
        outcome.summary.update(part.summary)
        if part.stopped:
            outcome.stopped = part.stopped
            break
    if not groups:
        print("resdyn: nothing to run: every table of every partition named is current", flush=True)
    if summary_file:
        Path(summary_file).write_text(json.dumps(outcome.summary, indent=2))
    return outcome


def _run_in_process(keys, store, instance, job, run_config, signals, launch, progress=None, display=None) -> int:
    launch_id = uuid.uuid4().hex
    for number, key in enumerate(keys, 1):
        started = time.perf_counter()
        print(f"[{number}/{len(keys)}] {key} ...", flush=True)
        if progress is not None:
            progress(number, len(keys), key, False)
        try:
            with owning_runs():
                result = job.execute_in_process(run_config=run_config, instance=instance, partition_key=key,
                                                raise_on_error=False, tags=run_tags(launch_id))
        except KeyboardInterrupt:
            result = None
        finally:
            signals.listen()
        received = signals.poll()
        if result is not None and result.success and received is not None:
            # A signal can land where Dagster catches it and then forgets it (capture_interrupts clears its flag
            # on the way out; seen under heavy load), so the run finished and published: say so, then stop.
            _report(number, len(keys), key, _outcome(result), started, launch, display)
            print(f"resdyn: {signal.Signals(received).name} arrived as {key} finished; stopping before the next "
                  "partition.", flush=True)
            return 128 + received
        if received is not None or result is None:
            received = received or int(signal.SIGINT)
            print(f"[{number}/{len(keys)}] {close_stopped_runs(store, instance, key, launch_id, received)} "
                  "Stopping.", flush=True)
            return 128 + received
        _report(number, len(keys), key, _outcome(result), started, launch, display)
        if progress is not None:
            progress(number, len(keys), key, True)
    return 0


def _execute_partition(key: str, config: str, run_config: dict, selected_keys, launch_id: str) -> dict:
    """One partition's run of the reconstructable job, in a process of its own (``_run_out_of_process``)."""
    import dagster as dg

    from resdyn.dagster_project.launch.study_definitions import reconstructable_job

    die_with_parent()  # the CLI owns this run: killed outright, it takes this process and its steps with it
    configure_logging()  # a spawned process starts with logging unconfigured: the CLI's own settings
    quiet_failures(run_config["loggers"]["console"]["config"]["log_level"])
    started = time.perf_counter()
    with dg.DagsterInstance.get() as instance:
        result = dg.execute_job(reconstructable_job(StudyConfig.from_json(config)), instance=instance,
                                run_config=run_config,
                                tags={"dagster/partition": key, **run_tags(launch_id)},
                                asset_selection=sorted(selected_keys) if selected_keys else None)
        return {**_outcome(result), "seconds": time.perf_counter() - started}


def _run_out_of_process(keys, config, instance, selected_keys, run_config, parallel_runs, launch, signals,
                        progress=None, display=None) -> int:
    """Each partition a run of the reconstructable job on the chosen executor, launched from a process of its
    own (``--parallel-runs`` at once), its model-running steps bounded by the model_runner pool.

    Processes, not threads: Dagster reconfigures ``logging`` (``logging.config.dictConfig``, which closes every
    handler under logging's module lock) at the start of each run, and a run started in one thread deadlocked
    against another thread's log emit (both locks taken in opposite order; seen as a hung ``--parallel-runs``)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from resdyn.dagster_project.asset_layer.steps import MODEL_RUNNER_POOL

    instance.event_log_storage.set_concurrency_slots(MODEL_RUNNER_POOL, config.model_runners)
    parallel = max(1, min(parallel_runs or len(keys), len(keys)))
    started, finished = {}, set()
    launch_id = uuid.uuid4().hex
    start_quiet_resource_tracker()
    with owning_runs(), ProcessPoolExecutor(parallel, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {}
        try:
            for number, key in enumerate(keys, 1):
                futures[pool.submit(_execute_partition, key, config.to_json(), run_config, selected_keys,
                                    launch_id)] = (number, key)
                started[key] = time.perf_counter()
            print(f"resdyn: {len(keys)} run(s), {parallel} at a time, each in a process of its own", flush=True)
            for future in as_completed(futures):
                number, key = futures[future]
                try:
                    outcome = future.result()
                except Exception as error:  # the partition's process died (killed, out of memory)
                    outcome = {"success": False, "run_id": None, "steps": {}, "n_checks": 0, "failing_checks": [],
                               "failure_lines": [f"    {type(error).__name__}: {error}"]}
                _report(number, len(keys), key, outcome, started[key], launch, display)
                finished.add(key)
                if progress is not None:
                    progress(number, len(keys), key, True)
        except KeyboardInterrupt:
            received = signals.poll() or int(signal.SIGINT)
            # every run worker, with its fork server and steps, ends now and is waited for: none publishes after this
            workers = list(pool._processes or {})  # no public way to stop a running task
            still = end_process_trees(workers)
            pool.shutdown(wait=False, cancel_futures=True)
            print(f"resdyn: {signal.Signals(received).name}: stopped the {len(workers)} run process(es) and every "
                  "process they started" + (f" but pids {still}, which did not end within 10 s" if still else ""),
                  flush=True)
            store = open_warehouse(config.warehouse)
            for number, key in [(number, key) for number, key in futures.values() if key not in finished]:
                print(f"[{number}/{len(keys)}] {close_stopped_runs(store, instance, key, launch_id, received)}",
                      flush=True)
            return 128 + received
    return 0
