"""Two code trees side by side on the same partitions: wall time of each, and whether every published table is
equal (content hashes of the data columns: run ids and settings hashes are provenance, not data).

    python benchmarks/redesign_equivalence.py --before PYTHON_OF_OLD_TREE [--after PYTHON] [--suite tiny]
        [--model NAME --checkpoint C] [--samples N] [--rounds 2] [--executor multiprocess] [--preset paper]

Each ``PYTHON`` is an interpreter whose ``resdyn`` imports one code tree (a venv with that tree installed
editable); both run ``python -m resdyn run`` into fresh warehouses, alternating before/after for ``--rounds``
rounds so that a machine's changing load falls on both alike. Written for the orchestration redesign (issue 32:
assets that declare their inputs), which must change neither a number nor the speed; ``--executor`` and
``--preset`` are passed to both runs (issue 43: step processes forked from a preloaded server, a paper-n partition).

Appends its result to benchmarks/results/redesign_equivalence.json (one list of runs per target).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS = REPOSITORY / "benchmarks" / "results" / "redesign_equivalence.json"
HASHES = """
import hashlib, json, sys
from resdyn.dagster_project.store.schema import TABLES, table_spec
from resdyn.dagster_project.store.warehouse import Warehouse
store = Warehouse(sys.argv[1])
hashes, columns = {}, {}
for model, checkpoint in sorted(store.partitions()):
    for table in sorted(store.manifest(model, checkpoint)["tables"]):
        if table not in TABLES:
            continue
        names = table_spec(table).column_names
        whole, each = hashlib.sha256(), {name: hashlib.sha256() for name in names}
        for group in store.row_groups(table, model, checkpoint, columns=names):
            for batch in group.to_batches():  # the order of Warehouse.content_hash, one pass for both
                for name, column in zip(batch.schema.names, batch.columns):
                    for buffer in column.buffers():
                        if buffer is not None:
                            whole.update(memoryview(buffer))
                            each[name].update(memoryview(buffer))
        key = f"{model}@{checkpoint}/{table}"
        hashes[key] = whole.hexdigest()[:16]
        columns[key] = {name: digest.hexdigest()[:16] for name, digest in each.items()}
print(json.dumps({"tables": hashes, "columns": columns}))
"""

def _run(python: str, root: Path, target: list[str], samples: int | None, options: list[str]) -> tuple[float, dict]:
    """(wall seconds, {partition: {step: seconds}} from the run's --summary) of one `resdyn run`."""
    environment = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    summary = root.parent / f"{root.name}-summary.json"
    started = time.perf_counter()
    # cwd outside both trees: `python -m` puts the working directory first on sys.path
    sample_flag = ["--samples", str(samples)] if samples is not None else []  # else resdyn's default or the preset's
    subprocess.run([python, "-m", "resdyn", "run", *target, *options, *sample_flag, "--warehouse",
                    str(root), "--log-level", "ERROR", "--summary", str(summary)], env=environment, check=True,
                   stdout=subprocess.DEVNULL, cwd=root.parent)
    seconds = time.perf_counter() - started
    steps = {partition: {step: numbers["seconds"] for step, numbers in run.get("steps", {}).items()
                         if numbers.get("seconds", 0) >= 1.0}
             for partition, run in json.loads(summary.read_text()).items()}
    return seconds, steps


def _hashes(python: str, root: Path) -> dict[str, dict]:
    """{"tables": {partition/table: hash}, "columns": {partition/table: {column: hash}}} of a warehouse."""
    output = subprocess.run([python, "-c", HASHES, str(root)], capture_output=True, text=True, check=True,
                            cwd=root.parent).stdout
    return json.loads(output)


def _commit(python: str) -> str:
    """The commit of the code tree this interpreter imports (a worktree's HEAD), so a result names what it measured."""
    package = subprocess.run([python, "-c", "import resdyn; print(resdyn.__file__)"], capture_output=True, text=True,
                             check=True, cwd=tempfile.gettempdir()).stdout.strip()
    return subprocess.run(["git", "-C", str(Path(package).resolve().parent), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="python of the code tree before the change")
    parser.add_argument("--after", default=sys.executable, help="python of the code tree after (default: this one)")
    parser.add_argument("--suite", default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--samples", type=int, default=None, help="default: resdyn's (128), or the preset's")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--executor", default=None, help="passed to both runs")
    parser.add_argument("--preset", default=None, help="passed to both runs (--samples, if given, overrides its n)")
    arguments = parser.parse_args()
    options = [*(["--executor", arguments.executor] if arguments.executor else []),
               *(["--preset", arguments.preset] if arguments.preset else [])]
    target = (["--suite", arguments.suite] if arguments.suite else
              ["--model", arguments.model, *(["--checkpoint", arguments.checkpoint] if arguments.checkpoint else [])])
    commits = {"before": _commit(arguments.before), "after": _commit(arguments.after)}  # what runs, read before it does
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    steps: dict[str, list[dict]] = {"before": [], "after": []}  # each round's step seconds (>= 1 s), per partition
    hashes: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="resdyn-equivalence-") as scratch:
        for round_number in range(arguments.rounds):
            for label, python in (("before", arguments.before), ("after", arguments.after)):
                root = Path(scratch) / f"{label}-{round_number}"
                wall, of_steps = _run(python, root, target, arguments.samples, options)
                seconds[label].append(round(wall, 1))
                steps[label].append(of_steps)
                hashes[label] = _hashes(python, root)
                print(f"round {round_number + 1}: {label} {seconds[label][-1]} s, {len(hashes[label]['tables'])} tables",
                      flush=True)
    before, after = hashes["before"], hashes["after"]
    differing = sorted(key for key in set(before["tables"]) | set(after["tables"])
                       if before["tables"].get(key) != after["tables"].get(key))
    # which columns differ says whether a difference is data or where a file was (e.g. each venv's path to a wheel)
    columns_differing = {key: sorted(name for name in set(before["columns"].get(key, {})) |
                                     set(after["columns"].get(key, {}))
                                     if before["columns"].get(key, {}).get(name) != after["columns"].get(key, {}).get(name))
                         for key in differing}
    result = {"target": " ".join(target), "samples": arguments.samples, "options": " ".join(options),
              "commits": commits,
              "seconds": seconds, "step_seconds": steps,
              "ratio_after_over_before": round(sum(seconds["after"]) / sum(seconds["before"]), 3),
              "tables_compared": len(after["tables"]), "tables_differing": differing,
              "columns_differing": columns_differing,
              "note": "content hashes of every published table's data columns; seconds of `resdyn run`, rounds "
                      "alternating before/after on the same machine"}
    print(json.dumps(result, indent=1))
    previous = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    # every invocation is kept (a later one is another sample of the same ratio, which is how its noise is seen)
    previous.setdefault(" ".join([result["target"], *options]), []).append(result)
    RESULTS.write_text(json.dumps(previous, indent=1) + "\n")


if __name__ == "__main__":
    main()
