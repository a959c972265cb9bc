"""How long `resdyn run` takes to stop after SIGTERM during its analysis steps, on an idle and on a loaded machine
(a benchmark, not a test: tests/system/test_kill_drills.py checks that a stop publishes nothing).

    python benchmarks/stop_latency.py [--repeats 3] [--width 192] [--layers 4] [--conditions idle loaded]

A random-init Llama of the given width and depth, saved once; each repeat runs `resdyn run` on it in a fresh
warehouse, waits until the spectral step has staged its tables (the analysis steps are then running), waits a
random further 0-3 s, sends SIGTERM and times the exit. "Loaded": as many busy processes as cores run beside it.

Writes benchmarks/results/stop_latency.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS = REPOSITORY / "benchmarks" / "results" / "stop_latency.json"
# the analysis settings' defaults (1,000 permutations, 5 Leiden seeds per gamma) on 32 windows: items of realistic cost
SETTINGS = ["--samples", "32", "--seq-len", "32", "--log-level", "ERROR"]


def _busy() -> None:
    while True:
        pass


def _save_model(directory: Path, width: int, layers: int) -> Path:
    import torch
    from transformers import AutoModelForCausalLM

    from resdyn.models.byte_tokenizer import build_byte_tokenizer
    from resdyn.models.tiny_configs import tiny_config

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(tiny_config("llama", hidden_size=width, n_layers=layers)).save_pretrained(directory)
    build_byte_tokenizer().save_pretrained(directory)
    return directory


def _one_stop(model: Path, root: Path, rng: random.Random) -> dict:
    environment = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    process = subprocess.Popen([sys.executable, "-m", "resdyn", "run", "--model", str(model), *SETTINGS,
                                "--warehouse", str(root)], cwd=REPOSITORY, env=environment,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 600
    while not list(root.glob("_staging/*/model=*/checkpoint=*/layer_metrics.json")) and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(rng.uniform(0.0, 3.0))
    if process.poll() is not None:
        return {"stopped": False, "reason": "the run ended before the signal"}
    sent = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=600)[0]
    seconds = time.perf_counter() - sent
    published = (root / "_published").exists() and any((root / "_published").rglob("*.json"))
    return {"stopped": process.returncode == 143 and "stopped by SIGTERM" in output, "seconds": round(seconds, 2),
            "published": published}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--width", type=int, default=192)
    parser.add_argument("--conditions", nargs="+", default=["idle", "loaded"], choices=["idle", "loaded"])
    parser.add_argument("--layers", type=int, default=4)
    arguments = parser.parse_args()
    rng = random.Random(int.from_bytes(os.urandom(4), "little"))
    results = {"width": arguments.width, "layers": arguments.layers, "settings": SETTINGS,
               "cores": os.cpu_count(), "runs": {}}
    with tempfile.TemporaryDirectory() as scratch:
        model = _save_model(Path(scratch) / "model", arguments.width, arguments.layers)
        for condition in arguments.conditions:
            load = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(os.cpu_count() or 1)] \
                if condition == "loaded" else []
            for process in load:
                process.start()
            try:
                runs = [_one_stop(model, Path(scratch) / f"{condition}-{number}", rng)
                        for number in range(arguments.repeats)]
            finally:
                for process in load:
                    process.terminate()
            seconds = [run["seconds"] for run in runs if run.get("stopped")]
            results["runs"][condition] = {"runs": runs, "max_seconds": max(seconds, default=None),
                                          "median_seconds": statistics.median(seconds) if seconds else None}
            results[f"{condition}_median_seconds"] = results["runs"][condition]["median_seconds"]
            results[f"{condition}_max_seconds"] = results["runs"][condition]["max_seconds"]
            print(condition, json.dumps(results["runs"][condition]), flush=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
