"""The issue-23 acceptance run: the whole pipeline on the 2-layer Llama-3.1-8B-shaped checkpoint (a benchmark).

    python benchmarks/acceptance_run.py [--directory DIR]     # build the checkpoint if needed, run, record
    python benchmarks/acceptance_run.py --from-log FILE       # record a run made by hand with the same command

The checkpoint is benchmarks/paper_scale.py's (real layer shapes, random init, bf16 shards, 2 decoder
layers); the run is ``resdyn run --model DIR --samples 8 --seq-len 32`` with every other setting at its
default (float64, per-sample subsample 8, one worker per core), under ``/usr/bin/time -v``. Recorded from
its output: the wall time and maximum RSS that time(1) reports, the exit status, the asset checks passed,
and the seconds of every step (the CLI's ``steps:`` line). Writes benchmarks/results/acceptance_run.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_log import parse_run_log  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS = REPOSITORY / "benchmarks" / "results" / "acceptance_run.json"
COMMAND = ["--samples", "8", "--seq-len", "32"]


def parse(log: str) -> dict:
    """The numbers of one ``/usr/bin/time -v resdyn run ...`` output, with this run's command and targets."""
    numbers = parse_run_log(log)
    stages = numbers.pop("stages")
    return {"command": "resdyn run --model DIR " + " ".join(COMMAND), **numbers,
            "target_minutes": 40, "target_rss_gb": 6, "stages": stages}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--directory", type=Path, default=REPOSITORY / "benchmarks" / ".paper_scale")
    parser.add_argument("--from-log", type=Path, help="record this log of the same command instead of running it")
    parser.add_argument("--conditions", default="", help="what else ran on the machine (recorded as said)")
    arguments = parser.parse_args()
    if arguments.from_log:
        log = arguments.from_log.read_text()
    else:
        import paper_scale

        checkpoint = paper_scale.build_checkpoint("llama-3.1-8b", 2, arguments.directory)
        warehouse = arguments.directory / "acceptance-warehouse"
        command = ["/usr/bin/time", "-v", str(Path(sys.executable).with_name("resdyn")), "run", "--model",
                   str(checkpoint), *COMMAND, "--warehouse", str(warehouse)]
        # one stream: the CLI's lines and time(1)'s report (on stderr) in order, kept beside the warehouse
        log = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ).stdout
        (arguments.directory / "acceptance-run.log").write_text(log)
    record = {**parse(log), "conditions": arguments.conditions}
    RESULTS.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0 if record["exit_status"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
