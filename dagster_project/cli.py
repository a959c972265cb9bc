"""``resdyn``: run the study, ask the warehouse SQL, list models, without opening the UI.

    resdyn run --suite tiny
    resdyn run --model PATH_OR_HUB_ID_OR_NAME [--checkpoint C ...] [--revision R] [--name N]
               [--samples N] [--seq-len T] [--warehouse DIR]
    resdyn sql "SELECT ..." | FILE.sql [--warehouse DIR] [--csv]
    resdyn models [--warehouse DIR]
    resdyn questions [--warehouse DIR]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from resdyn.models.registry import ModelRegistry, ModelSpec, check_name, partition_key

from .warehouse import SQL_DIRECTORY, Warehouse

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


def _sql_text(argument: str) -> str:
    path = Path(argument)
    if argument.endswith(".sql"):
        if not path.is_file():
            path = SQL_DIRECTORY / "questions" / argument
        if not path.is_file():
            raise FileNotFoundError(f"no SQL file {argument} (looked here and in sql/questions/)")
        return path.read_text()
    return argument


def command_sql(arguments) -> int:
    store = Warehouse(arguments.warehouse)
    print(_format(store.query(_sql_text(arguments.query)), arguments.csv))
    return 0


def command_questions(arguments) -> int:
    store = Warehouse(arguments.warehouse)
    for path in sorted((SQL_DIRECTORY / "questions").glob("*.sql")):
        header = next((line[3:].strip() for line in path.read_text().splitlines() if line.startswith("--")), "")
        print(f"\n== {path.stem}: {header}")
        try:
            print(_format(store.query(path.read_text()), False))
        except Exception as error:  # noqa: BLE001 - one failing question must not hide the others
            print(f"(not answerable yet: {str(error).splitlines()[0]})")
    return 0


def command_models(arguments) -> int:
    store = Warehouse(arguments.warehouse)
    registry = ModelRegistry(store.registry_file)
    for name in sorted(registry.specs):
        spec = registry.specs[name]
        for checkpoint, revision in spec.checkpoints.items():
            done = store.partition_path("jacobians", name, checkpoint).is_file()
            print(f"{partition_key(name, checkpoint):45s} {spec.family:8s} {spec.source:35s} "
                  f"revision={revision:20s} {'materialized' if done else '-'}")
    return 0


def _partitions_for(arguments, registry: ModelRegistry) -> list[str]:
    if arguments.suite:
        if arguments.suite != "tiny":
            raise ValueError(f"unknown suite {arguments.suite!r}; the embedded suite is 'tiny'")
        names = registry.tiny_suite()
        return [key for key in registry.partition_keys(names)
                if not arguments.checkpoint or key.split("@")[1] in arguments.checkpoint]
    model = arguments.model
    if model in registry.specs:
        spec = registry.get(model)
        checkpoints = arguments.checkpoint or list(spec.checkpoints)
        unknown = [c for c in checkpoints if c not in spec.checkpoints]
        if unknown:
            raise ValueError(f"model {model} has no checkpoint {unknown}; known: {list(spec.checkpoints)}")
        return [partition_key(model, c) for c in checkpoints]
    # a path or hub id the registry does not know yet: record it, then run it
    from resdyn.models.adapters import family_of
    from resdyn.models.loading import load_config

    config = load_config(model, arguments.revision)
    is_directory = Path(model).expanduser().is_dir()
    source = str(Path(model).expanduser().resolve()) if is_directory else model
    name = check_name(arguments.name or Path(source.rstrip("/")).name, "model name")
    revisions = arguments.checkpoint or [arguments.revision or ("local" if is_directory else "main")]
    spec = ModelSpec(name, family_of(config.model_type), source, {check_name(r, "checkpoint"): r for r in revisions})
    registry.add(spec)
    print(f"registered {name} -> {source} ({spec.family}), checkpoints {list(spec.checkpoints)}")
    return [partition_key(name, c) for c in spec.checkpoints]


def _step_summary(result) -> dict:
    """Per step: seconds, and the peak resident memory its materializations reported."""
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


def command_run(arguments) -> int:
    import dagster as dg

    from .assets_index import ALL_ASSETS
    from .checks import ALL_CHECKS
    from .partitions import register_partitions
    from .resources import AnalysisSettings, WarehouseResource

    if arguments.warehouse:
        os.environ["RESDYN_WAREHOUSE"] = str(Path(arguments.warehouse).resolve())
    store = Warehouse(arguments.warehouse)
    registry = ModelRegistry(store.registry_file)
    keys = _partitions_for(arguments, registry)
    settings = AnalysisSettings(
        n_samples=arguments.samples, sequence_length=arguments.seq_len, seed=arguments.seed,
        positions=arguments.positions, warmup=arguments.warmup, dtype=arguments.dtype, backend=arguments.backend,
        per_sample_subsample=min(arguments.samples, arguments.per_sample), device=arguments.device,
        workers=arguments.workers,
    )
    resources = {"warehouse": WarehouseResource(root=str(store.root)), "settings": settings}
    instance = dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else dg.DagsterInstance.ephemeral()
    register_partitions(instance, keys)
    print(f"resdyn: {len(keys)} partition(s) into {store.root}: {', '.join(keys)}")
    failed, summary = [], {}
    for number, key in enumerate(keys, 1):
        started = time.perf_counter()
        print(f"[{number}/{len(keys)}] {key} ...", flush=True)
        result = dg.materialize([*ALL_ASSETS, *ALL_CHECKS], partition_key=key, resources=resources,
                                instance=instance, raise_on_error=False, tags={"resdyn/cli": "run"},
                                run_config={"loggers": {"console": {"config": {"log_level": arguments.log_level}}}})
        checks = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        failing = [c.check_name for c in checks if not c.passed]
        steps = _step_summary(result)
        summary[key] = {"seconds": round(time.perf_counter() - started, 2), "success": result.success and not failing,
                        "steps": steps, "failing_checks": failing}
        if steps:
            print("    steps: " + ", ".join(f"{name} {step['seconds']:.1f} s" for name, step in steps.items()), flush=True)
        status = "ok" if result.success and not failing else "FAILED"
        print(f"[{number}/{len(keys)}] {key} {status} in {time.perf_counter() - started:.1f} s; "
              f"checks {len(checks) - len(failing)}/{len(checks)} passed{' (failing: ' + ', '.join(failing) + ')' if failing else ''}",
              flush=True)
        if not result.success or failing:
            for event in result.all_events:
                if event.is_step_failure:
                    error = event.event_specific_data.error
                    error = error.cause or error  # Dagster wraps the user's exception: show that one
                    print(f"    {event.step_key}: {error.message.strip()}")
            failed.append(key)
    if arguments.summary:
        import json

        Path(arguments.summary).write_text(json.dumps(summary, indent=2))
    if arguments.suite:
        command_questions(argparse.Namespace(warehouse=str(store.root)))
    if failed:
        print(f"resdyn: {len(failed)} partition(s) failed: {', '.join(failed)}")
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="resdyn", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="materialize every asset for some model checkpoints")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--suite", help="'tiny': the embedded tiny model suite")
    source.add_argument("--model", help="registered name, local HF directory, or hub id")
    run.add_argument("--checkpoint", action="append", help="checkpoint(s) to run (repeatable); default: all")
    run.add_argument("--revision", help="hub revision for a new --model (becomes its checkpoint name)")
    run.add_argument("--name", help="name for a new --model (default: the directory or repository name)")
    run.add_argument("--samples", type=int, default=int(os.environ.get("RESDYN_SAMPLES", "128")))
    run.add_argument("--seq-len", type=int, default=int(os.environ.get("RESDYN_SEQ_LEN", "64")))
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--positions", choices=["last", "all"], default="last")
    run.add_argument("--warmup", type=int, default=16, help="first analysed position when --positions all")
    run.add_argument("--dtype", choices=["float64", "float32", "bfloat16"], default="float64")
    run.add_argument("--backend", default=os.environ.get("RESDYN_BACKEND", "structured"),
                     help="structured (default: closed-form exact means, autodiff where no closed form "
                          "applies), autodiff (adds per-entry variance), or autodiff-forward")
    run.add_argument("--device", default=os.environ.get("RESDYN_DEVICE", "auto"),
                     help="auto (cuda when available, else cpu), cpu, cuda, cuda:N or mps")
    run.add_argument("--workers", type=int, default=int(os.environ.get("RESDYN_WORKERS", "0")),
                     help="processes for spectral and topology work (0: one per core)")
    run.add_argument("--per-sample", type=int, default=8, help="samples whose per-sample Jacobians are kept")
    run.add_argument("--warehouse", help="warehouse root (default: $RESDYN_WAREHOUSE or ./warehouse)")
    run.add_argument("--log-level", default="INFO", help="Dagster console log level (DEBUG shows every event)")
    run.add_argument("--summary", help="write per-partition step seconds and peak memory as JSON to this file")
    run.set_defaults(handler=command_run)

    sql = commands.add_parser("sql", help="run SQL (a string or a .sql file) over the warehouse views")
    sql.add_argument("query")
    sql.add_argument("--warehouse")
    sql.add_argument("--csv", action="store_true")
    sql.set_defaults(handler=command_sql)

    models = commands.add_parser("models", help="list registered model checkpoints (partitions)")
    models.add_argument("--warehouse")
    models.set_defaults(handler=command_models)

    questions = commands.add_parser("questions", help="answer every named question in sql/questions/")
    questions.add_argument("--warehouse")
    questions.set_defaults(handler=command_questions)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    arguments = build_parser().parse_args(argv)
    try:
        return arguments.handler(arguments)
    except (KeyError, ValueError, FileNotFoundError, OSError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
        print(f"resdyn: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
