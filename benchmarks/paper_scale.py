"""Paper scale on one machine (a benchmark, not a test).

    python benchmarks/paper_scale.py [--models llama-3.1-8b olmo-3-7b gemma-4-e4b] [--layers 2 4]
                                     [--samples 64] [--seq-len 64] [--per-sample 1] [--directory DIR]
                                     [--select 'group:inputs or group:measurements']

For each model, random-init checkpoints with the model's public layer shapes (``PAPER_SHAPES``,
written down from each model's config.json) truncated to 2 and 4 decoder layers are saved like a
hub download (sharded bf16 safetensors, a byte-level BPE tokenizer trained on the WikiText-2 test
split), then ``resdyn run --model DIR`` analyses n samples of T tokens under ``/usr/bin/time -v``
(peak RSS of the run) while a sampler adds up the resident memory of the whole process tree (the
run plus its spectral and Leiden worker processes). Per stage it records seconds and the process's
peak RSS, and, from the measurement stage itself, the seconds of the mean Jacobians beside the
seconds of the same layers' forward pass over the same samples (both timed in one pass).

With ``--select`` (``resdyn run --select``: Dagster's asset selection syntax) only those stages run and
the records go under ``<model>.selected.<selection>``: ``--select 'group:inputs or group:measurements'``
measures the one stage that loads the model (the stage whose memory could grow with depth) for 2 and 4
layers in minutes instead of hours.

Extrapolation to full depth L and n = 1000 samples, from the 2- and 4-layer runs:
    per_layer(stage) = (t_4(stage) - t_2(stage)) / 2,   fixed(stage) = t_2(stage) - 2 per_layer(stage)
    t(L, n) = fixed + L per_layer x (n / n_measured if the stage scales with samples else 1)
(graph construction scales with n; spectral work and Leiden do not; the measurement stage goes part
by part: forward, mean Jacobians, probe and activations scale with n, the per-sample Jacobians with
resdyn's default subsample of 8 over the measured one, reading weights with depth only).
``--summarize-only`` recomputes these from the stored records without running anything. A GPU
estimate scales the measurement stage by FLOPs: the layers' forward FLOPs over n x T tokens times
the measured mean-Jacobian/forward ratio, at an assumed fraction of an H100/H200's float64
tensor-core peak (67 TFLOP/s). Writes benchmarks/results/paper_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results") / "paper_scale.json"

# Public layer shapes, from each model's config.json on the hub (text part for Gemma 4 E4B).
PAPER_SHAPES = {
    "llama-3.1-8b": {  # meta-llama/Llama-3.1-8B
        "model_type": "llama", "full_depth": 32, "hidden_size": 4096, "intermediate_size": 14336,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 131072, "tie_word_embeddings": False,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
    },
    "olmo-3-7b": {  # allenai/Olmo-3-1025-7B (7,298,011,136 parameters: reproduced by these shapes)
        "model_type": "olmo3", "full_depth": 32, "hidden_size": 4096, "intermediate_size": 11008,
        "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 100278, "rms_norm_eps": 1e-6,
        "rope_theta": 500000.0, "max_position_embeddings": 65536, "tie_word_embeddings": False,
        "sliding_window": 4096, "layer_pattern": ["sliding_attention"] * 3 + ["full_attention"],
        "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192,
                         "attention_factor": 1.2079441541679836, "beta_fast": 32.0, "beta_slow": 1.0},
    },
    "gemma-4-e4b": {  # google/gemma-4-E4B, text_config
        "model_type": "gemma4_text", "full_depth": 42, "hidden_size": 2560, "intermediate_size": 10240,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "global_head_dim": 512,
        "vocab_size": 262144, "vocab_size_per_layer_input": 262144, "hidden_size_per_layer_input": 256,
        "rms_norm_eps": 1e-6, "sliding_window": 512, "max_position_embeddings": 131072,
        "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
        "layer_pattern": ["sliding_attention"] * 5 + ["full_attention"], "full_depth_kv_shared_layers": 18,
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                               "rope_theta": 1000000.0}},
    },
}
FP64_PEAK_TFLOPS = 67.0  # H100 / H200 SXM float64 tensor cores
GPU_EFFICIENCY = 0.4
SCALES_WITH_SAMPLES = {"measurements", "graph_edges", "samples"}


def truncated_config(name: str, n_layers: int):
    """The model's config with its public shapes and ``n_layers`` decoder layers."""
    from transformers import AutoConfig

    shape = {key: value for key, value in PAPER_SHAPES[name].items()
             if key not in ("model_type", "full_depth", "layer_pattern", "full_depth_kv_shared_layers")}
    pattern = PAPER_SHAPES[name].get("layer_pattern")
    extra = {}
    if pattern:
        layer_types = [pattern[i % len(pattern)] for i in range(n_layers)]
        if name == "gemma-4-e4b":  # keep both layer types and the shared-KV tail in a short stack
            layer_types = ["sliding_attention", "full_attention"] * (n_layers // 2)
            extra["num_kv_shared_layers"] = n_layers // 2 if n_layers >= 4 else 0
        extra["layer_types"] = layer_types
    return AutoConfig.for_model(PAPER_SHAPES[name]["model_type"], num_hidden_layers=n_layers,
                                bos_token_id=1, eos_token_id=2, pad_token_id=0, **shape, **extra)


def train_tokenizer(directory: Path):
    """A byte-level BPE tokenizer (32k merges) trained on the WikiText-2 test split, saved once."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    target = directory / "tokenizer"
    if (target / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(target)
    from resdyn.corpus import load_wikitext

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=32000, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(load_wikitext("test").text.splitlines(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(target)
    return fast


def build_checkpoint(name: str, n_layers: int, directory: Path) -> Path:
    """Random-init bf16 checkpoint of ``name``'s shapes at ``n_layers``, sharded like a hub download."""
    import torch
    from transformers import AutoModelForCausalLM

    target = directory / f"{name}-{n_layers}l"
    if (target / "config.json").is_file():
        return target
    torch.manual_seed(0)
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_config(truncated_config(name, n_layers), dtype=torch.bfloat16)
    staging = target.with_name(target.name + ".inprogress")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging, max_shard_size="1GB")
    train_tokenizer(directory).save_pretrained(staging)
    staging.rename(target)
    print(f"built {target.name}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters "
          f"in {time.perf_counter() - started:.0f} s", flush=True)
    return target


class TreeMemory(threading.Thread):
    """Peak of the summed RSS of a process and all its descendants, sampled from /proc."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak_kb, self.running = pid, interval, 0, True

    @staticmethod
    def _children() -> dict[int, list[int]]:
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(parent, []).append(int(entry.name))
        return children

    def run(self) -> None:
        while self.running:
            children, total, stack = self._children(), 0, [self.pid]
            while stack:
                pid = stack.pop()
                stack.extend(children.get(pid, []))
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                    total += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
                except (OSError, AttributeError):
                    pass
            self.peak_kb = max(self.peak_kb, total)
            time.sleep(self.interval)


def run_measured(command: list[str]) -> dict:
    """Run ``resdyn ...`` under /usr/bin/time -v with the process-tree sampler: its output, seconds, return code,
    the largest process's peak RSS (GiB) and the tree's peak summed RSS (GiB)."""
    environment = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    started = time.perf_counter()
    process = subprocess.Popen(["/usr/bin/time", "-v", str(Path(sys.executable).parent / "resdyn"), *command],
                               cwd=REPOSITORY, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = TreeMemory(process.pid)
    sampler.start()
    output = process.communicate()[0]
    sampler.running = False
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", output)
    return {"output": output, "returncode": process.returncode, "seconds": round(time.perf_counter() - started, 1),
            "peak_rss_gb": round(int(peak.group(1)) / 2**20, 2) if peak else None,
            "peak_tree_rss_gb": round(sampler.peak_kb / 2**20, 2),
            "checks": re.findall(r"checks (\d+/\d+) passed", output)}


def run_resdyn(checkpoint: Path, warehouse: Path, arguments) -> dict:
    summary = warehouse / f"{checkpoint.name}.summary.json"
    command = ["run", "--model", str(checkpoint), "--samples", str(arguments.samples), "--seq-len",
               str(arguments.seq_len), "--per-sample", str(arguments.per_sample), "--warehouse", str(warehouse),
               "--summary", str(summary), "--log-level", "WARNING", "--device", arguments.device]
    if arguments.select:
        command += ["--select", arguments.select]
    measured = run_measured(command)
    output = measured.pop("output")
    record = {"checkpoint": checkpoint.name, **measured}
    if summary.is_file():
        record["partitions"] = json.loads(summary.read_text())
    if record["returncode"] != 0:
        record["output_tail"] = output[-3000:]
    return record


def forward_flops_per_token(name: str, n_layers: int) -> float:
    """Matmul FLOPs of n_layers decoder layers per token (projections and MLP; attention scores are small at T = 64)."""
    shape = PAPER_SHAPES[name]
    d, d_ff = shape["hidden_size"], shape["intermediate_size"]
    head_dim = shape.get("head_dim", d // shape["num_attention_heads"])
    q = shape["num_attention_heads"] * head_dim
    kv = shape["num_key_value_heads"] * head_dim
    per_layer = 2 * d * (2 * q + 2 * kv) + 2 * 3 * d * d_ff
    if shape.get("hidden_size_per_layer_input"):
        per_layer += 2 * 2 * d * shape["hidden_size_per_layer_input"]
    return float(n_layers * per_layer)


def default_per_sample() -> int:
    """resdyn's default per-sample subsample, from the one place settings are defined."""
    sys.path.insert(0, str(REPOSITORY))
    from dagster_project.configuration.settings import SETTINGS

    return next(setting.default for setting in SETTINGS if setting.name == "per_sample_subsample")


def extrapolate(name: str, runs: dict[int, dict], samples: int, per_sample: int) -> dict:
    """Full depth at n = 1000 from the 2- and 4-layer runs (module docstring). The measurement stage goes
    part by part: forward, mean Jacobians, probe and activations scale with n; the per-sample Jacobians
    (``subsample``) with the default subsample of 8 over the measured one; reading weights with depth only."""
    shape = PAPER_SHAPES[name]
    full_depth = shape["full_depth"]
    steps = [next(iter(runs[n]["partitions"].values()))["steps"] for n in (2, 4)]

    def full(t2: float, t4: float, scale: float) -> float:
        per_layer = max(0.0, (t4 - t2) / 2)
        return max(0.0, t2 - 2 * per_layer) + full_depth * per_layer * scale

    stages, parts, default_subsample = {}, {}, default_per_sample()
    for stage in steps[0]:
        t2, t4 = steps[0][stage]["seconds"], steps[1].get(stage, {}).get("seconds", steps[0][stage]["seconds"])
        by_part = [steps[0][stage].get("seconds_by_part"), steps[1].get(stage, {}).get("seconds_by_part")]
        if stage == "measurements" and all(by_part):
            for part in by_part[0]:
                scale = (default_subsample / per_sample if part == "subsample" else
                         1.0 if part == "read_weights" else 1000 / samples)
                parts[part] = full(by_part[0][part], by_part[1][part], scale)
            rest = full(t2 - sum(by_part[0].values()), t4 - sum(by_part[1].values()), 1.0)
            stages[stage] = sum(parts.values()) + rest
        else:
            stages[stage] = full(t2, t4, 1000 / samples if stage in SCALES_WITH_SAMPLES else 1.0)
    measured = steps[1]["measurements"]["seconds_by_part"]
    ratio = measured["mean_jacobians"] / max(measured["forward"], 1e-9)
    tokens = 1000 * 64
    gpu_forward = forward_flops_per_token(name, full_depth) * tokens / (FP64_PEAK_TFLOPS * 1e12 * GPU_EFFICIENCY)
    return {"full_depth": full_depth, "n_samples": 1000, "per_sample_subsample": default_subsample,
            "cpu_hours_by_stage": {k: round(v / 3600, 2) for k, v in stages.items() if v >= 18},  # >= 0.005 h
            "cpu_hours_by_measurement_part": {k: round(v / 3600, 2) for k, v in parts.items()},
            "cpu_hours_total": round(sum(stages.values()) / 3600, 1),
            "gpu_measurement_minutes": round(gpu_forward * (1 + ratio) / 60, 1),
            "gpu_assumption": f"float64 at {GPU_EFFICIENCY:.0%} of {FP64_PEAK_TFLOPS} TFLOP/s; forward + mean "
                              f"Jacobians (measured ratio {ratio:.2f}); per-sample Jacobians and probe not counted"}


def summarize(place: dict, runs: dict[int, dict], name: str, samples: int, per_sample: int) -> None:
    """Depth growth of peak memory and the extrapolation, where both depths ran and succeeded."""
    if {2, 4} <= set(runs) and all(run["returncode"] == 0 for run in runs.values()):
        place["rss_growth_2_to_4_layers"] = round(runs[4]["peak_tree_rss_gb"] / runs[2]["peak_tree_rss_gb"] - 1, 3)
        place["extrapolated"] = extrapolate(name, runs, samples, per_sample)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(PAPER_SHAPES), choices=list(PAPER_SHAPES))
    parser.add_argument("--layers", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--per-sample", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--summarize-only", action="store_true",
                        help="recompute growth and extrapolation from the stored records; run nothing")
    parser.add_argument("--select", help="only these stages (resdyn run --select); results under <model>.selected")
    parser.add_argument("--directory", type=Path, default=REPOSITORY / "benchmarks" / ".paper_scale")
    parser.add_argument("--keep-checkpoints", action="store_true", help="leave the (several GB) checkpoints on disk")
    arguments = parser.parse_args()
    arguments.directory.mkdir(parents=True, exist_ok=True)
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    results.setdefault("settings", {})
    results["settings"] = {"samples": arguments.samples, "seq_len": arguments.seq_len,
                           "per_sample": arguments.per_sample, "device": arguments.device, "cores": os.cpu_count()}
    for name in arguments.models:
        runs = {}
        place = results.setdefault(name, {})
        if arguments.select:
            place = place.setdefault("selected", {}).setdefault(arguments.select, {})
        if arguments.summarize_only:
            runs = {n: place[f"{n}_layers"] for n in arguments.layers if f"{n}_layers" in place}
            summarize(place, runs, name, arguments.samples, arguments.per_sample)
            continue
        for n_layers in arguments.layers:
            checkpoint = build_checkpoint(name, n_layers, arguments.directory)
            warehouse = arguments.directory / "warehouse"
            record = run_resdyn(checkpoint, warehouse, arguments)
            record["settings"] = {**results["settings"], "select": arguments.select}
            print(json.dumps({k: v for k, v in record.items() if k != "partitions"}), flush=True)
            runs[n_layers] = record
            place[f"{n_layers}_layers"] = record
            RESULTS.write_text(json.dumps(results, indent=2))
            if not arguments.keep_checkpoints:
                shutil.rmtree(checkpoint)
        summarize(place, runs, name, arguments.samples, arguments.per_sample)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
