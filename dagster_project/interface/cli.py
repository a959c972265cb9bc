"""``resdyn``: run the study, ask the warehouse SQL, list and check partitions, without opening the UI.

    resdyn run --suite tiny|smollm2|default
    resdyn run --model PATH_OR_HUB_ID_OR_NAME_OR_GGUF [--model ...] [--checkpoint C ...] [--revision R] [--name N]
               [--null-model]
               [analysis settings: resdyn run --help] [--warehouse DIR] [--summary FILE]
    resdyn sql "SELECT ..." | FILE.sql [--warehouse DIR] [--csv]
    resdyn models [--warehouse DIR]
    resdyn questions [--warehouse DIR]
    resdyn check [--warehouse DIR] [--reclaim] [--restore]
    resdyn forget MODEL@CHECKPOINT [--yes] [--warehouse DIR]
    resdyn report [--warehouse DIR] [--output FILE]
    resdyn claims MODEL [--null CHECKPOINT] [--trained CHECKPOINT] [--output DIR] [--warehouse DIR]
                 [--save-inputs DIR | --inputs DIR]
    resdyn ui [--warehouse DIR] [--host H] [--port P] [--no-daemon]

Every --warehouse takes a folder or s3://BUCKET/PREFIX (docs/configuration.md).
Settings: a flag, else its RESDYN_* variable, else the default (dagster_project/configuration/settings.py).
Exit codes: 0 ok, 1 a partition failed or a check found problems, 2 bad input, 130/143 stopped by
Ctrl-C / SIGTERM (after the current step cleaned up).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from resdyn.dagster_project.configuration.config import SQL_DIRECTORY, dagster_home
from resdyn.dagster_project.interface.check import command_check
from resdyn.dagster_project.interface.outputs import Spool, Upload
from resdyn.dagster_project.launch.console import configure_logging
from resdyn.dagster_project.store import open_for_reading, open_warehouse
from resdyn.dagster_project.store.errors import PartitionBusyError, QueryError, ReadOnlySqlError
from resdyn.dagster_project.store.views import sql_text
from resdyn.dagster_project.store.warehouse import Warehouse
from resdyn.models.registry import partition_key, split_partition_key

log = logging.getLogger("resdyn")


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
    store = open_for_reading(arguments.warehouse)
    table = store.query(sql_text(arguments.query))
    _warn_problems(store)
    print(_format(table, arguments.csv))
    return 0


def command_questions(arguments) -> int:
    """Every named question over the complete partitions; the others are named, not mixed in."""
    store = open_for_reading(arguments.warehouse)
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
    store = open_for_reading(arguments.warehouse)
    registry = store.registry()
    status = {(r["model"], r["checkpoint"]): r for r in store.query("SELECT * FROM partitions").to_pylist()}
    _warn_problems(store)
    # what the UI offers: what a run of each model makes by default, and whatever has data (the sensor's rule)
    _register_with_dagster(sorted(set(registry.default_partition_keys())
                                  | {partition_key(model, checkpoint) for model, checkpoint in status}))
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
    store = open_warehouse(arguments.warehouse)  # a folder, or s3://BUCKET/PREFIX
    if store.arrow_filesystem is None:  # a folder that is not there (a mistyped --warehouse): said, not "unknown"
        store.require_existing()
    model, checkpoint = split_partition_key(arguments.partition)
    known = set(store.registry().partition_keys())
    dagster_keys = set(_dagster_partition_keys())
    if arguments.partition not in known | dagster_keys and (model, checkpoint) not in set(store.partitions()):
        print(f"resdyn: unknown partition {arguments.partition!r}; known: {', '.join(sorted(known))}", file=sys.stderr)
        return 2
    if not arguments.yes:
        answer = _ask(f"remove partition {arguments.partition} and all its data under {store}? [y/N] ",
                      f"give --yes to remove {arguments.partition} without asking")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return 1
    removed = store.forget(model, checkpoint)
    with store.writable_registry() as registry:
        dropped = registry.forget(arguments.partition)
    if dagster_home():
        import dagster as dg

        from resdyn.dagster_project.asset_layer.partitions import model_checkpoint_partitions

        instance = dg.DagsterInstance.get()
        if instance.has_dynamic_partition(model_checkpoint_partitions.name, arguments.partition):
            instance.delete_dynamic_partition(model_checkpoint_partitions.name, arguments.partition)
    print(f"forgot {arguments.partition}: {len(removed)} data path(s) removed"
          + ("; removed from the registry" if dropped else "")
          + ("" if dropped or arguments.partition not in known else " (a built-in checkpoint: still registered)"))
    return 0


def _ask(question: str, otherwise: str) -> str:
    """The answer typed to ``question``; where there is no one to ask (stdin closed or at its end: a script, a
    pipe), a one-line refusal saying ``otherwise`` (what to give instead)."""
    if sys.stdin is None or sys.stdin.closed:
        raise ValueError(f"nothing removed: stdin is closed, so there is no one to ask; {otherwise}")
    try:
        return input(question)
    except EOFError:
        print(flush=True)  # the question's line ends here
        raise ValueError(f"nothing removed: stdin ended before an answer; {otherwise}") from None


def _dagster_partition_keys() -> list[str]:
    if not dagster_home():
        return []
    import dagster as dg

    from resdyn.dagster_project.asset_layer.partitions import model_checkpoint_partitions

    return dg.DagsterInstance.get().get_dynamic_partitions(model_checkpoint_partitions.name)


def command_report(arguments) -> int:
    """The study across every complete partition: five tables with figures, one report.html, and each model's
    figures comparing its checkpoints. ``--output s3://BUCKET/KEY``: written in a local temporary folder, then
    uploaded (the report, and the figures an object-store warehouse's report draws beside it)."""
    from resdyn.dagster_project.configuration.config import warehouse_location
    from resdyn.dagster_project.configuration.locations import ObjectLocation, parse_output
    from resdyn.dagster_project.study.report import (
        build_report,
        checkpoint_comparisons,
        report_artefacts,
        report_needs_output,
    )

    target = parse_output(arguments.output, "--output", file=True) if arguments.output else None
    if target is not None and not isinstance(target, ObjectLocation) and target.path.is_dir():
        raise ValueError(f"--output {target.path} is a folder: give the report's FILE (e.g. "
                         f"{target.path / 'report.html'})")
    location = warehouse_location(arguments.warehouse)
    if target is None and isinstance(location, ObjectLocation):  # said before the store is asked anything
        raise ValueError(report_needs_output(location))
    upload = Upload(target) if isinstance(target, ObjectLocation) else None
    store = open_for_reading(arguments.warehouse)  # a folder, or s3://BUCKET/PREFIX (then --output FILE)
    with Spool(upload) as spool:
        requested = spool / target.prefix.rsplit("/", 1)[-1] if upload else target.path if target else None
        artefacts = report_artefacts(store, requested)
        output, results = build_report(store, requested)
        _warn_problems(store)
        comparisons = checkpoint_comparisons(store, artefacts)
        shown = upload.send(spool) if upload else {}
        for name, (table, figure) in results.items():
            print(f"{name}: {table.num_rows} rows, {shown.get(figure, figure)}")
        for name, by_model in comparisons.items():
            for model, figure in by_model.items():
                print(f"{name} of {model}: {shown.get(figure, figure)}")
        print(f"report: {shown.get(output, output)}")
    return 0


def command_claims(arguments) -> int:
    """The paper's claims on one model: null-model checkpoint beside trained, verdicts by fixed rules.
    ``--output s3://BUCKET/PREFIX``: written in a local temporary folder, then uploaded under the prefix."""
    from resdyn.dagster_project.configuration.config import warehouse_location
    from resdyn.dagster_project.configuration.locations import ObjectLocation, parse_output
    from resdyn.dagster_project.study.claims import build_claims, claim_pairs, claims_need_output
    from resdyn.dagster_project.study.claims_inputs import (
        claims_inputs,
        keep_claims_inputs,
        kept_checkpoints,
        load_claims_inputs,
        simex_inputs,
    )

    if arguments.inputs and arguments.save_inputs:
        raise ValueError("--inputs DIR reads kept inputs and --save-inputs DIR keeps a warehouse's: give one "
                         "(to add a warehouse's checkpoints to DIR: --warehouse W --save-inputs DIR)")
    target = parse_output(arguments.output, "--output") if arguments.output else None
    kept = Path(arguments.inputs or arguments.save_inputs) if arguments.inputs or arguments.save_inputs else None
    for option, folder in (("--output", None if isinstance(target, ObjectLocation) else target and target.path),
                           ("--save-inputs", arguments.save_inputs and kept)):
        if folder is not None and folder.exists() and not folder.is_dir():
            raise ValueError(f"{option} {folder} is a file, not a folder: give a DIR (made if missing)")
    if kept is not None and target is not None and not isinstance(target, ObjectLocation) and \
            target.path.is_relative_to(kept.resolve()):
        option = "--inputs" if arguments.inputs else "--save-inputs"
        raise ValueError(f"--output {target} is inside the kept inputs folder {kept} ({option}): the claims written "
                         "there would be read as a kept checkpoint; give a folder outside it")
    location = None if arguments.inputs else warehouse_location(arguments.warehouse)
    if target is None and isinstance(location, ObjectLocation):  # before anything is kept (--save-inputs)
        raise ValueError(claims_need_output(location))
    upload = Upload(target) if isinstance(target, ObjectLocation) else None
    recovered: list[str] = []
    with Spool(upload) as spool:
        output = spool if upload else target.path if target else None
        try:
            simex_kept = Path(arguments.simex_inputs) if arguments.simex_inputs else None

            left_out: dict[str, str] = {}

            def keep_simex_set(store) -> None:  # the warehouse's SIMEX set beside the draws kept before
                found, excluded = simex_inputs(store, arguments.model)
                left_out.update(excluded)
                ready = sorted(set(found["sublayers"]["checkpoint"].to_list()))
                if ready:
                    for folder in keep_claims_inputs(found, simex_kept, recovered, checkpoints=ready):
                        print(f"claims inputs kept (SIMEX set): {folder}")

            def kept_simex_set():  # None where nothing was kept (the claims then say why there is no reading)
                held = simex_kept is not None and kept_checkpoints(simex_kept)
                return load_claims_inputs(simex_kept, arguments.model, recovered) if held else None
            if arguments.inputs:  # the small frames kept by --save-inputs: no warehouse, no matrices
                frames = load_claims_inputs(kept, arguments.model, recovered)
                null, trained = _kept_pair(frames, arguments)
                if simex_kept is not None and arguments.warehouse:  # the SIMEX set measured in another warehouse
                    keep_simex_set(open_for_reading(arguments.warehouse))
                report, figure = build_claims(None, arguments.model, null, trained, output, frames=frames,
                                              simex_frames=kept_simex_set(), simex_left_out=left_out)
            else:
                store = open_for_reading(arguments.warehouse)  # a folder, or s3://BUCKET/PREFIX (then --output)
                pair = next((p for p in claim_pairs(store) if p["model"] == arguments.model), {})
                _warn_problems(store)
                null = arguments.null or pair.get("null_checkpoint") or "init"
                trained = arguments.trained or pair.get("trained_checkpoint") or "trained"
                frames = None
                if kept is not None:  # keep this warehouse's checkpoints beside those kept before, judge them all
                    for folder in keep_claims_inputs(claims_inputs(store, arguments.model), kept, recovered):
                        print(f"claims inputs kept: {folder}")
                    frames = load_claims_inputs(kept, arguments.model, recovered)
                simex_frames = None
                if simex_kept is not None:  # the SIMEX set kept beside the draws kept before, judged from there
                    keep_simex_set(store)
                    simex_frames = kept_simex_set()
                report, figure = build_claims(store, arguments.model, null, trained, output, frames=frames,
                                              simex_frames=simex_frames, simex_left_out=left_out)
        finally:
            for line in recovered:  # what a keep that was stopped left in the kept folder, and what was done
                print(f"resdyn: warning: {line}", file=sys.stderr)
        print((figure.parent / "claims.md").read_text().rstrip())
        shown = upload.send(spool, into_prefix=True) if upload else {}
        written = [figure.parent / "claims.md", figure.parent / "claims.json", figure]
        print("\nclaims: " + ", ".join(str(shown.get(path, path)) for path in written))
    return 0


def _kept_pair(frames, arguments) -> tuple[str, str]:
    """--null and --trained, else the kept checkpoints' null model (``init``) and their one trained end (a GGUF
    file's is ``local``): the controls and rounding doses are neither."""
    from resdyn.models.registry import MADE_REVISIONS

    kept = frames["partitions"]["checkpoint"].to_list()
    ends = [c for c in kept if c not in MADE_REVISIONS]
    trained = arguments.trained or ("trained" if "trained" in ends else ends[0] if len(ends) == 1 else None)
    if trained is None:
        raise ValueError(f"the kept inputs hold {', '.join(kept)}: name the trained checkpoint with --trained NAME")
    return arguments.null or "init", trained


def _register_with_dagster(keys: list[str]) -> None:
    """Add the keys to the Dagster instance's partitions when there is a persistent instance (DAGSTER_HOME)."""
    if not dagster_home():
        return
    import dagster as dg

    from resdyn.dagster_project.asset_layer.partitions import register_partitions

    register_partitions(dg.DagsterInstance.get(), keys)


def command_ui(arguments) -> int:
    from resdyn.dagster_project.configuration.config import StudyConfig, set_for_this_process, warehouse_location
    from resdyn.dagster_project.configuration.locations import ObjectLocation
    from resdyn.dagster_project.interface.ui import serve

    config = StudyConfig.resolve({"warehouse": arguments.warehouse})
    location = warehouse_location(config.warehouse)
    if isinstance(location, ObjectLocation):  # asked now, not at the first figure: the store answers these credentials
        from resdyn.dagster_project.store.object_store import ObjectStore

        ObjectStore(location).list("registry.json")
    set_for_this_process(config.environment())  # the code server and daemon load the definitions by module name
    return serve(location if isinstance(location, ObjectLocation) else location.path, arguments.host, arguments.port,
                 daemon=not arguments.no_daemon)


def command_run(arguments) -> int:
    """``resdyn run``: the partitions of a suite or of models, then (for a suite) every named question."""
    from resdyn.dagster_project.configuration.settings import SETTINGS
    from resdyn.models.registration import Request
    from resdyn.models.registry import SIMEX_REVISIONS

    checkpoints = tuple(arguments.checkpoint or ())
    if arguments.simex:
        if arguments.suite or arguments.null_model or checkpoints:
            print("resdyn: --simex runs the SIMEX set of registered --model(s): not with --suite (`--suite simex` is "
                  "that set for the study's models), --null-model (register the file first) or --checkpoint",
                  file=sys.stderr)
            return 2
        checkpoints = tuple(SIMEX_REVISIONS)
    request = Request(suite=arguments.suite, models=tuple(arguments.model or ()), checkpoints=checkpoints,
                      revision=arguments.revision, name=arguments.name, null_model=arguments.null_model)
    flags = {setting.name: getattr(arguments, setting.name) for setting in SETTINGS}
    from resdyn.dagster_project.launch.run_loop import run_request

    outcome = run_request(request, {**flags, "warehouse": arguments.warehouse, "executor": arguments.executor,
                                    "ray_address": arguments.ray_address, "preset": arguments.preset},
                          selection=arguments.select, resume=arguments.resume, fresh=arguments.fresh,
                          log_level=arguments.log_level,
                          parallel_runs=arguments.parallel_runs, summary_file=arguments.summary)
    if outcome.stopped:
        return outcome.stopped
    if arguments.suite:
        command_questions(argparse.Namespace(warehouse=arguments.warehouse))
    if outcome.failed:
        print(f"resdyn: {len(outcome.failed)} partition(s) failed: {', '.join(outcome.failed)}")
    return outcome.exit_code


def build_parser() -> argparse.ArgumentParser:
    from resdyn.dagster_project.configuration.settings import SETTINGS

    parser = argparse.ArgumentParser(prog="resdyn", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="materialize every asset for some model checkpoints")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--suite", help="an embedded suite: 'tiny' (the tiny model suite), 'smollm2' (SmolLM2-135M, "
                        "init, init-quantized and trained), 'default' (the tiny suite and SmolLM2's init and trained), "
                        "'study' (SmolLM2-135M's and Gemma 3 270M's init and trained) or 'simex' (their SIMEX sets)")
    source.add_argument("--model", action="append", help="registered name, local HF directory, hub id, or a GGUF file "
                        "(or a directory holding one .gguf) (repeatable)")
    run.add_argument("--checkpoint", action="append", help="checkpoint(s) to run (repeatable); default: all. For a new "
                     "local directory: its label (default 'local'); for a new hub id: its revisions")
    run.add_argument("--revision", help="hub revision for a new hub --model (becomes its checkpoint name)")
    run.add_argument("--name", help="name for a new --model (default: the directory or repository name, or the GGUF "
                     "file's stem)")
    run.add_argument("--null-model", action="store_true", help="with a new GGUF --model: also its checkpoint 'init', "
                     "the same config with freshly initialised weights (HF's initialisation, seed 0), and "
                     "'init-quantized', those weights rounded through the file's own tensor types; --checkpoint "
                     "selects which run (e.g. --checkpoint local --checkpoint init). Its SIMEX set (the file's "
                     "weights with their own rounding noise added, from which the claims extrapolate to no "
                     "rounding) is registered too and runs with --simex")
    run.add_argument("--simex", action="store_true", help="run the SIMEX set of a registered GGUF --model (rules v5's "
                     "zero-rounding readings): its file's weights (simex-x0) and 5 noise draws at each of 3 doses of "
                     "its own rounding (simex-xD-K), each measured for the spectral tables only, at the settings given "
                     "(the default n = 128; the readings pair each draw with simex-x0 on the same samples)")
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
    run.add_argument("--log-level", default=None, help="show Dagster's events on the console from this level (DEBUG: "
                     "every event, with stack traces) instead of the progress display; every event is in the event "
                     "log file either way (its path is printed first)")
    run.add_argument("--summary", help="write per-partition step seconds and peak memory as JSON to this file")
    run.add_argument("--preset", help="a named set of settings below the flags and RESDYN_* variables: "
                     "'paper' (1,000 windows, the study's sample size) [RESDYN_PRESET]")
    run.add_argument("--resume", action="store_true", help="what a plain run does, said for scripts: of a partition "
                     "the warehouse holds, only the tables that are not current (their code version, the settings "
                     "their stage reads or their inputs changed, or never published) and their downstream are made, "
                     "each named with why; a stopped study goes on where it stopped")
    run.add_argument("--fresh", action="store_true", help="make every table of the partitions named again, current "
                     "or not")
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
    report.add_argument("--output", help="where to write the HTML (default: <warehouse>/report.html; required for an "
                                         "s3:// warehouse, its figures then drawn in a folder beside it)")
    report.set_defaults(handler=command_report)

    claims = commands.add_parser("claims", help="the paper's claims on one model: null model vs trained, with verdicts")
    claims.add_argument("model", help="a model with two complete partitions, e.g. smollm2-135m")
    claims.add_argument("--null", help="the null-model (untrained) checkpoint (default: the model's first complete "
                        "checkpoint in training order: init, step 0)")
    claims.add_argument("--trained", help="the trained checkpoint (default: its last complete checkpoint)")
    claims.add_argument("--output", help="directory for claims.json, claims.md, claims.png "
                        "(default: <warehouse>/_artefacts/claims/MODEL)")
    claims.add_argument("--warehouse")
    claims.add_argument("--save-inputs", metavar="DIR", help="keep what the claims are computed from (small Parquet "
                        "frames, one folder per complete checkpoint) under DIR, beside checkpoints kept there before "
                        "(a study run over several sessions), and judge from all of them")
    claims.add_argument("--inputs", metavar="DIR", help="compute the claims from frames kept by --save-inputs (every "
                        "checkpoint folder under DIR) instead of the warehouse; needs --output")
    claims.add_argument("--simex-inputs", metavar="DIR", help="the SIMEX set's frames (resdyn run --model M --simex): "
                        "keep the warehouse's in DIR (with --inputs: only where --warehouse is given), beside draws "
                        "kept there before, and read them from there (default: the warehouse's, not kept)")
    claims.set_defaults(handler=command_claims)

    forget = commands.add_parser("forget", help="remove a partition MODEL@CHECKPOINT and its data")
    forget.add_argument("partition", help="MODEL@CHECKPOINT")
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    forget.add_argument("--warehouse")
    forget.set_defaults(handler=command_forget)

    check = commands.add_parser("check", help="read every published file's footer and schema; list problems")
    check.add_argument("--warehouse")
    check.add_argument("--reclaim", action="store_true", help="first remove the unpublished files that failed or "
                       "killed runs left (a live run's are kept, and so is every file of a partition whose manifest "
                       "is damaged)")
    check.add_argument("--restore", action="store_true", help="first restore each damaged or missing manifest: from "
                       "the copy of its last generation kept beside it (its files checked against the sha256 it "
                       "records), else rebuilt from the table files of the runs recorded `success`, each read back "
                       "before it is named")
    check.set_defaults(handler=command_check)  # interface/check.py

    ui = commands.add_parser("ui", help="the Dagster UI with figures inline (webserver + daemon; needs DAGSTER_HOME)")
    ui.add_argument("--warehouse")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=3000)
    ui.add_argument("--no-daemon", action="store_true", help="no dagster-daemon (runs then need an immediate "
                                                                 "run coordinator: sensors and the queue stay idle)")
    ui.set_defaults(handler=command_ui)
    return parser


# the options that name a place on this machine only (every --warehouse, report --output and claims --output take
# s3:// as well): each goes through the one parser (configuration/locations.py), an s3:// value refused in one line
LOCAL_ONLY = {
    ("run", "summary"): ("--summary", "the summary is written on this machine: give a local FILE (and copy it to the "
                                      "store afterwards if you want it there)"),
    ("claims", "save_inputs"): ("--save-inputs", "kept inputs are a local folder (swapped in by renames under a "
                                                 "lock, which an object store has not): give a local DIR (copy it "
                                                 "to the store afterwards if you want it there)"),
    ("claims", "inputs"): ("--inputs", "kept inputs are read from a local folder: copy them from the store first "
                                       "(e.g. `aws s3 sync s3://BUCKET/PREFIX DIR`), then give --inputs DIR"),
}


def _local_options(arguments) -> None:
    from resdyn.dagster_project.configuration.locations import local_path

    for (command, name), (option, why) in LOCAL_ONLY.items():
        if arguments.command == command and getattr(arguments, name, None) is not None:
            setattr(arguments, name, str(local_path(getattr(arguments, name), option, why)))


_STOPPED_BY: list[int] = []


def _interrupt(signum, frame) -> None:
    """SIGTERM, until a run installs its own handling (run_loop.SignalRecorder): a stop like Ctrl-C that
    remembers which signal asked for it (the exit code is 128 + it)."""
    _STOPPED_BY.append(signum)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    import signal

    configure_logging()
    arguments = build_parser().parse_args(argv)
    _STOPPED_BY.clear()
    previous = signal.signal(signal.SIGTERM, _interrupt) if _main_thread() else None
    try:
        _local_options(arguments)
        return arguments.handler(arguments)
    except KeyboardInterrupt:  # Ctrl-C, or a SIGTERM this process recorded (_interrupt)
        if _STOPPED_BY:
            print(f"resdyn: stopped by {signal.Signals(_STOPPED_BY[-1]).name}", file=sys.stderr)
            return 128 + _STOPPED_BY[-1]
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
    except Exception as error:
        if not _from_the_object_store(error):
            raise
        print(f"resdyn: error: the object store: {str(error).strip().splitlines()[0] or type(error).__name__} (check "
              "the bucket, the credentials and AWS_ENDPOINT_URL_S3: docs/configuration.md)", file=sys.stderr)
        return 2
    finally:
        if previous is not None and signal.getsignal(signal.SIGTERM) is _interrupt:
            signal.signal(signal.SIGTERM, previous)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _from_the_object_store(error: Exception) -> bool:
    """An error of the S3 client (no credentials, no such bucket, endpoint unreachable) or of the store layer."""
    from resdyn.dagster_project.store.object_store import ObjectStoreError

    return isinstance(error, ObjectStoreError) or type(error).__module__.startswith(("botocore", "boto3"))


if __name__ == "__main__":
    sys.exit(main())
