"""docs/performance.md, generated from benchmarks/results/*.json (the numbers are never typed by hand).

    python docs/tools/performance_tables.py           # rewrite docs/performance.md
    python docs/tools/performance_tables.py --check   # exit 1 when it is not what the results say

Each benchmark script writes its JSON; this renders every file into one section: scalar results as a
two-column table, lists of records (a file's, or each under a key of it) as one row per record (their scalar
fields), and the two nested benchmarks (SmolLM2-135M's stages, the paper-scale checkpoints) as one row per
stage or run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
RESULTS = REPOSITORY / "benchmarks" / "results"
OUTPUT = REPOSITORY / "docs" / "performance.md"
TITLES = {
    "analysis_floor": "All the analysis of one sublayer beside its floor (`benchmarks/analysis_floor.py`)",
    "gguf_import": "GGUF import of a Llama-3.1-8B-shaped file (`benchmarks/gguf_import.py`)",
    "jacobians": "Mean-Jacobian backends side by side (`benchmarks/jacobians.py`)",
    "matrix_read_threads": "Matrix row groups read with and without Arrow's column threads (`benchmarks/matrix_read_threads.py`)",
    "paper_scale": "Paper-scale checkpoints, truncated depth (`benchmarks/paper_scale.py`)",
    "per_sample": "Per-sample Jacobians at the Llama-3.1-8B shape: closed form against autodiff (`benchmarks/per_sample.py`)",
    "ray_executor": "Ray executor against in-process on a local cluster (`benchmarks/ray_executor.py`)",
    "scale": "Analysis stages by width d (`benchmarks/scale.py`)",
    "smollm2": "SmolLM2-135M partition, stage by stage (`benchmarks/smollm2.py`)",
    "transient": "Transient dynamics against the spectral stage (`benchmarks/transient.py`)",
    "study": "The study at the paper's n = 1000, one partition at a time (`benchmarks/study.py`)",
    "acceptance_run": "The 2-layer Llama-3.1-8B-shaped checkpoint end to end (`benchmarks/acceptance_run.py`)",
    "redesign_equivalence": "The code before and after a redesign (issue 32's assets, issue 44's layout, issue 60's stages), side by side (`benchmarks/redesign_equivalence.py`)",
    "test_durations": "The test suite, every test's seconds, the slowest 40 shown (`make test-durations`)",
    "communities_scan": "The gamma scan, coarse to fine against every seed at every gamma (`benchmarks/communities_scan.py`)",
    "caller_blas_threads": "The spectral stage with its own process at its share of the BLAS threads against every core, side by side (`benchmarks/caller_blas_threads.py`)",
    "object_store": "The tiny suite and one matrix table on the test S3 server against local disk, side by side (`benchmarks/object_store.py`)",
    "reruns": "Rerun only what changed: one SmolLM2-135M partition made whole, then each change's rerun (`benchmarks/reruns.py`)",
}


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(_cell, value))
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def _scalars(values: dict) -> list[str]:
    rows = [(key, value) for key, value in values.items() if not isinstance(value, dict)
            and not (isinstance(value, list) and value and isinstance(value[0], dict))
            and not (isinstance(value, str) and len(value) > 120)]
    return ["| result | value |", "|---|---|", *(f"| {key} | {_cell(value)} |" for key, value in rows)]


def _object_store(results: dict) -> list[str]:
    suite, equality, speeds = results["suite"], results["equality"], results["throughput"]
    lines = ["| the tiny suite | disk | S3 | S3 / disk |", "|---|---|---|---|",
             f"| `{suite['s3']['command']}`, seconds | {_cell(suite['disk']['seconds'])} | "
             f"{_cell(suite['s3']['seconds'])} | {_cell(suite['s3_over_disk_seconds'])} |", "",
             f"Equal on both: {equality['partitions']} partitions, {equality['tables_compared']} tables (hash of the data "
             f"columns), {equality['figures_compared']} figures by name; all equal: {equality['all_equal']}"
             f"{' (differing: ' + ', '.join(equality['differing']) + ')' if equality['differing'] else ''}. "
             f"`resdyn sql` over S3: {' '.join(results['sql_partitions'])}; `resdyn check` exit "
             f"{results['check']['exit_code']}.", "",
             f"| {_cell(speeds['mebibytes'])} MiB matrix table, median of {speeds['repeats']} | disk MiB/s | S3 MiB/s "
             "| S3 / disk (seconds) |", "|---|---|---|---|"]
    for kind, meaning in (("write", "write (S3: spool and upload)"), ("read", "read whole"),
                          ("row_groups", "read a row group at a time")):
        lines.append(f"| {meaning} | {_cell(speeds['disk'][kind]['mib_per_second'])} | "
                     f"{_cell(speeds['s3'][kind]['mib_per_second'])} | {_cell(speeds['s3_over_disk_seconds'][kind])} |")
    return lines


def _records(records: list[dict]) -> list[str]:
    columns = [key for key in records[0] if all(not isinstance(r.get(key), (dict, list)) for r in records)]
    for record in records[1:]:
        columns += [key for key in record if key not in columns and not isinstance(record[key], (dict, list))]
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(_cell(record.get(column)) for column in columns) + " |" for record in records)]


def _smollm2(results: dict) -> list[str]:
    lines = []
    for run, values in results.items():
        if not isinstance(values, dict) or "stages" not in values:
            continue
        ratios = values.get("ratios", {})
        lines += [f"**{run}**: {values['samples']} samples, checkpoint `{values['checkpoint']}`, partition "
                  f"{_cell(values['seconds'])} s, peak {_cell(values['peak_tree_rss_gib'])} GiB (process tree)", "",
                  "| stage | seconds | peak RSS GiB | floor | floor seconds | stage / floor |", "|---|---|---|---|---|---|"]
        for stage, numbers in values["stages"].items():
            ratio = ratios.get(stage, {})
            lines.append(f"| {stage} | {_cell(numbers.get('seconds'))} | {_cell(numbers.get('peak_rss_gib'))} | "
                         f"{_cell(ratio.get('floor'))} | {_cell(ratio.get('floor_seconds'))} | "
                         f"{_cell(ratio.get('ratio'))} |")
        lines.append("")
    return lines


def _analysis_floor(records: list[dict]) -> list[str]:
    lines = []
    for record in records:
        lines += [f"**d = {record['d']}** ({record['samples']} observations, {record['per_sample']} per-sample "
                  f"matrices, k = {record['k']}): the whole sublayer {_cell(record['sublayer_seconds'])} s = "
                  f"{_cell(record['sublayer_over_one_schur'])}x one real Schur form with vectors "
                  f"({_cell(record['floors']['schur_with_vectors'])} s)", "",
                  "| stage | seconds | floor | floor seconds | stage / floor |", "|---|---|---|---|---|"]
        lines += [f"| {stage} | {_cell(numbers['seconds'])} | {numbers['floor']} | {_cell(numbers['floor_seconds'])} | "
                  f"{_cell(numbers['ratio'])} |" for stage, numbers in record["stages"].items()]
        if record.get("transient_parts"):
            lines += ["", "Transient parts alone: " + ", ".join(
                f"{name.removeprefix('transient_').replace('_', ' ')} {_cell(seconds)} s"
                for name, seconds in record["transient_parts"].items())]
        lines.append("")
    return lines


def _redesign(results: dict) -> list[str]:
    """One row per run of a target: the commits compared, seconds of each tree, their ratio, tables that differ."""
    lines = ["| target | samples | before | after | before (s) | after (s) | after / before | tables compared | "
             "tables differing |", "|---|---|---|---|---|---|---|---|---|"]
    runs = [run for target in results.values() for run in target]
    for run in runs:
        seconds, commits, differing = run["seconds"], run["commits"], run["tables_differing"]
        lines.append(f"| `{run['target']}` | {run['samples']} | {commits['before']} | {commits['after']} | "
                     f"{_cell(seconds['before'])} | {_cell(seconds['after'])} | {_cell(run['ratio_after_over_before'])} | "
                     f"{run['tables_compared']} | {len(differing)}{': ' + _cell(differing) if differing else ''} |")
    notes = {run.get("note") for run in runs if run.get("note")}
    columns = [f"- `{run['target']}` ({run['commits']['after']}): {table} differs in {', '.join(names) or 'no column'}"
               for run in runs for table, names in run.get("columns_differing", {}).items()]
    explained = [f"- `{run['target']}` ({run['commits']['after']}): {run['differences_explained']}"
                 for run in runs if run.get("differences_explained")]
    conditions = [f"- `{run['target']}` ({run['commits']['after']}): {run['conditions']}"
                  for run in runs if run.get("conditions")]
    return [*lines, "", *sorted(notes), *([""] + columns if columns else []), *([""] + explained if explained else []),
            *([""] + conditions if conditions else []), *_redesign_steps(runs)]


def _redesign_steps(runs: list[dict]) -> list[str]:
    """Per run with step seconds (--summary): each step's seconds in the first round of each tree, side by side."""
    lines = []
    for run in runs:
        steps = run.get("step_seconds")
        if not steps or not steps.get("before") or not steps.get("after"):
            continue
        before, after = steps["before"][0], steps["after"][0]
        for partition in sorted(set(before) | set(after)):
            old, new = before.get(partition, {}), after.get(partition, {})
            lines += ["", f"Steps of `{partition}`, {run['commits']['before']} -> {run['commits']['after']} "
                          "(seconds, steps of at least 1 s):", "",
                      "| step | before (s) | after (s) | after / before |", "|---|---|---|---|"]
            for step in sorted(set(old) | set(new), key=lambda name: -max(old.get(name, 0), new.get(name, 0))):
                ratio = new[step] / old[step] if step in old and step in new and old[step] else None
                lines.append(f"| {step} | {_cell(old.get(step))} | {_cell(new.get(step))} | "
                             f"{_cell(round(ratio, 3) if ratio is not None else None)} |")
    return lines


def _reruns(results: dict) -> list[str]:
    lines = [f"{results['model']}, {results['settings']}, {results['executor']} executor, {results['machine']}, "
             f"corpus {results['corpus']}.", "", "| run | seconds | / full run | stages run (seconds) | measurement "
             "files unchanged |", "|---|---|---|---|---|"]
    for case in ("full", "code_version_bumped", "permutations_halved"):
        run = results[case]
        stages = ", ".join(f"{name} {seconds:.1f}" for name, seconds in run["stages_run"].items())
        lines.append(f"| {case} | {run['seconds']:.1f} | {_cell(run.get('over_full', 1.0))} | {stages} | "
                     f"{_cell(run.get('measurement_files_unchanged', ''))} |")
    return lines


def _paper_scale(results: dict) -> list[str]:
    lines = ["| checkpoint | selection | run | seconds | peak RSS GB | checks |", "|---|---|---|---|---|---|"]
    for model, runs in results.items():
        if model == "settings" or not isinstance(runs, dict):
            continue
        for name, run in runs.items():
            selections = run.items() if name == "selected" else [("every asset", {name: run})]
            for selection, by_depth in selections:
                for depth, numbers in by_depth.items():
                    if isinstance(numbers, dict) and "seconds" in numbers:
                        lines.append(f"| {model} | {selection} | {depth} | {_cell(numbers['seconds'])} | "
                                     f"{_cell(numbers.get('peak_rss_gb'))} | {_cell(numbers.get('checks'))} |")
    settings = results.get("settings", {})
    return [*lines, "", "Settings: " + ", ".join(f"{key} {_cell(value)}" for key, value in settings.items())]


def render() -> str:
    lines = ["# Performance", "",
             "<!-- generated by docs/tools/performance_tables.py from benchmarks/results/*.json: do not edit -->",
             "", "Every number below is what a benchmark script wrote to `benchmarks/results/`, measured on the",
             "2-core development machine unless its settings say otherwise (times are wall seconds; compare",
             "ratios measured side by side in one run, not absolute times across runs). How the numbers are",
             "read, and what is extrapolated from them: [scale.md](scale.md).", ""]
    for path in sorted(RESULTS.glob("*.json")):
        results = json.loads(path.read_text())
        lines += [f"## {TITLES.get(path.stem, path.stem)}", "", f"From `benchmarks/results/{path.name}`.", ""]
        if path.stem == "smollm2":
            lines += _smollm2(results)
        elif path.stem == "paper_scale":
            lines += _paper_scale(results)
        elif path.stem == "redesign_equivalence":
            lines += _redesign(results)
        elif path.stem == "analysis_floor":
            lines += _analysis_floor(results)
        elif path.stem == "object_store":
            lines += _object_store(results)
        elif path.stem == "reruns":
            lines += _reruns(results)
        elif isinstance(results, list) and results:
            lines += _records(results)
        elif isinstance(results, dict):
            lines += _scalars(results)
            for values in results.values():  # each list of records (per_sample's sublayers, study's partitions)
                if isinstance(values, list) and values and isinstance(values[0], dict):
                    lines += ["", *_records(values)]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    arguments = parser.parse_args(argv)
    text = render()
    if arguments.check:
        current = OUTPUT.read_text() if OUTPUT.is_file() else ""
        if current != text:
            print(f"{OUTPUT} is not what benchmarks/results/ says: run python docs/tools/performance_tables.py")
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
