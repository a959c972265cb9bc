"""One SmolLM2-135M partition, stage by stage, beside each stage's floor (a benchmark, not a test).

    python benchmarks/smollm2.py [--samples 128 256] [--checkpoint trained] [--markdown]

For each sample count n, ``resdyn run --model smollm2-135m --checkpoint C --samples n`` (the other
settings at their defaults: T = 64, last position, float64, structured backend) runs into a fresh
warehouse one stage at a time (``--select``, in-process, each a command of its own under
``/usr/bin/time -v`` with a sampler of its process tree), so that each stage's seconds are its own
(the multiprocess executor would run independent steps side by side) and so is its peak RSS.
Then, in this process and on the partition's own matrices, the floors:

- measurements: the forward pass of the 30 decoder layers over the same n x T tokens, timed inside
  the measurement stage itself (``seconds_by_part.forward``);
- spectral_analysis, transient_analysis, layer_metrics_per_sample: one real Schur form
  (``scipy.linalg.schur(J, output="real")``, LAPACK dgees with vectors) of each sublayer's 576 x 576
  mean Jacobian, summed over the 60 sublayers;
- community_tables: one signed Leiden run per graph at its chosen gamma (the scan makes
  len(gammas) x seeds of them), summed over the 60 graphs.

Writes benchmarks/results/smollm2.json; ``--markdown`` prints the README table from it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results") / "smollm2.json"
SCHUR_STAGES = ("spectral_analysis", "transient_analysis", "layer_metrics_per_sample")
STAGES = ("model_checkpoints", "samples", "measurements", "graph_edges", "spectral_analysis", "unit_amplification",
          "community_tables", "transient_analysis", "coupling_tests", "layer_metrics_per_sample")  # steps, not checks
STAGE_SELECTIONS = {  # one resdyn run each, in dependency order (a selection runs its step whole)
    "inputs": "key:model_checkpoints or key:samples", "measurements": "key:activations", "graph_edges": "key:graph_edges",
    "spectral_analysis": "key:layer_metrics", "unit_amplification": "key:unit_amplification",
    "community_tables": "key:communities", "transient_analysis": "key:transient_dynamics",
    "coupling_tests": "key:coupling_tests", "layer_metrics_per_sample": "key:layer_metrics_per_sample"}


def run_partition(samples: int, checkpoint: str, directory: Path) -> dict:
    """Each stage a ``resdyn run --select`` of its own, one after another, in-process: its seconds (Dagster's step
    time), its process's peak RSS and its process tree's (the spectral and Leiden workers included)."""
    sys.path.insert(0, str(REPOSITORY / "benchmarks"))
    from paper_scale import run_measured

    warehouse = directory / f"n{samples}" / "warehouse"
    shutil.rmtree(warehouse.parent, ignore_errors=True)
    warehouse.mkdir(parents=True)
    record = {"samples": samples, "checkpoint": checkpoint, "stages": {}, "checks": [], "warehouse": str(warehouse)}
    for stage, selection in STAGE_SELECTIONS.items():
        summary = warehouse.parent / f"{stage}.summary.json"
        measured = run_measured(["run", "--model", "smollm2-135m", "--checkpoint", checkpoint, "--samples",
                                 str(samples), "--select", selection, "--warehouse", str(warehouse), "--summary",
                                 str(summary), "--log-level", "WARNING"])
        output = measured.pop("output")
        record["checks"] += measured["checks"]
        if measured["returncode"] != 0:
            record.update(returncode=measured["returncode"], failed_stage=stage, output_tail=output[-3000:])
            return record
        steps = next(iter(json.loads(summary.read_text()).values()))["steps"]
        for name, step in steps.items():
            if name in STAGES:
                record["stages"][name] = {"seconds": step["seconds"], "peak_rss_gib": measured["peak_rss_gb"],
                                          "peak_tree_rss_gib": measured["peak_tree_rss_gb"],
                                          "command_seconds": measured["seconds"],
                                          **({"seconds_by_part": step["seconds_by_part"]} if "seconds_by_part" in step
                                             else {})}
        print(f"n = {samples}: {stage} {record['stages'].get(stage, {}).get('seconds')} s", flush=True)
    record["returncode"] = 0
    record["seconds"] = round(sum(stage["seconds"] for stage in record["stages"].values()), 1)
    record["peak_tree_rss_gib"] = max(stage["peak_tree_rss_gib"] for stage in record["stages"].values())
    return record


def floors(warehouse: Path, checkpoint: str) -> dict:
    """Seconds of the floors (module docstring), measured here on the partition's own matrices and graphs."""
    import numpy as np
    import scipy.linalg
    from threadpoolctl import threadpool_limits

    sys.path.insert(0, str(REPOSITORY))
    from resdyn import topology
    from resdyn.dagster_project.store.handles import table_handle
    from resdyn.dagster_project.store.warehouse import Warehouse
    from resdyn.stages.topology import edges_by_boundary

    store = Warehouse(warehouse)
    schur = 0.0
    with threadpool_limits(os.cpu_count()):
        for _, matrix in store.matrix_table("jacobians", "smollm2-135m", checkpoint).matrices():
            started = time.perf_counter()
            scipy.linalg.schur(np.asarray(matrix, dtype=np.float64), output="real")
            schur += time.perf_counter() - started
    gammas = {(row["layer"], row["boundary"]): row["gamma"] for row in store.query(
        "SELECT DISTINCT layer, boundary, gamma FROM communities").to_pylist()}
    leiden = 0.0
    graphs = (table_handle(store, name, "smollm2-135m", checkpoint)
              for name in ("graph_edges", "activations", "model_checkpoints"))
    for key, edges in edges_by_boundary(*graphs):
        started = time.perf_counter()
        topology.signed_leiden(edges, gammas[key], 0)
        leiden += time.perf_counter() - started
    return {"schur_per_sublayer_summed": round(schur, 2), "one_leiden_per_graph_summed": round(leiden, 2)}


def ratios(record: dict) -> dict:
    stages, floor = record["stages"], record["floors"]
    out = {}
    forward = stages["measurements"].get("seconds_by_part", {}).get("forward")
    if forward:
        out["measurements"] = {"floor": "forward pass", "floor_seconds": round(forward, 1),
                               "ratio": round(stages["measurements"]["seconds"] / forward, 2)}
    for stage in SCHUR_STAGES:
        if stage in stages:
            out[stage] = {"floor": "one real Schur form per sublayer", "floor_seconds": floor["schur_per_sublayer_summed"],
                          "ratio": round(stages[stage]["seconds"] / floor["schur_per_sublayer_summed"], 1)}
    if "community_tables" in stages:
        out["community_tables"] = {"floor": "one Leiden run per graph",
                                   "floor_seconds": floor["one_leiden_per_graph_summed"],
                                   "ratio": round(stages["community_tables"]["seconds"] /
                                                  floor["one_leiden_per_graph_summed"], 1)}
    return out


def markdown(results: dict) -> str:
    runs = [results[key] for key in sorted((k for k in results if k[:1] == "n" and k[1:].isdigit()), key=lambda k: int(k[1:]))]
    header = "| stage | " + " | ".join(f"n = {r['samples']}: s | peak GiB (tree) | x floor" for r in runs) + " | floor |"
    lines = [header, "|---|" + "---|---|---|" * len(runs) + "---|"]
    names = list(runs[0]["stages"])
    for name in names:
        cells = []
        for run in runs:
            stage, ratio = run["stages"].get(name, {}), run["ratios"].get(name, {})
            cells.append(f"{stage.get('seconds', '')} | {stage.get('peak_tree_rss_gib', '')} | {ratio.get('ratio', '')}")
        floor = runs[0]["ratios"].get(name, {}).get("floor", "")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {floor} |")
    lines.append("| all stages | " + " | ".join(f"{r['seconds']} | {r['peak_tree_rss_gib']} | " for r in runs) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", nargs="+", type=int, default=[128, 256])
    parser.add_argument("--checkpoint", default="trained", choices=["trained", "init"])
    parser.add_argument("--directory", type=Path, default=REPOSITORY / "benchmarks" / ".smollm2")
    parser.add_argument("--markdown", action="store_true", help="print the README table from the results; run nothing")
    arguments = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    if arguments.markdown:
        print(markdown(results))
        return 0
    results["machine"] = {"cores": os.cpu_count(), "note": "seconds on this machine, idle unless said"}
    for samples in arguments.samples:
        record = run_partition(samples, arguments.checkpoint, arguments.directory)
        if record["returncode"] == 0:
            record["floors"] = floors(Path(record["warehouse"]), arguments.checkpoint)
            record["ratios"] = ratios(record)
        print(json.dumps({k: v for k, v in record.items() if k != "output_tail"}, indent=1), flush=True)
        results[f"n{samples}"] = record
        RESULTS.write_text(json.dumps(results, indent=2))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
