"""Float64 exactness and paper-shape speed on a GPU (a check to run where one is lent; no test needs it).

    python benchmarks/gpu_check.py [--device cuda] [--samples 64] [--seq-len 64] [--models ...] [--skip-paper-shapes]
    make gpu-check

1. Exactness on the device: for every supported family a tiny random float64 checkpoint is read
   layer by layer onto the device and its mean Jacobians are computed there (structured backend,
   every tensor on the device); they must equal the CPU autodiff reference to 1e-10 (relative) and
   the finite-difference probe recorded in the same pass to 1e-6.
2. Paper shapes: for each model of benchmarks/paper_scale.py a 2-layer random-init bf16 checkpoint
   with the public layer shapes is measured on the device (n samples of T tokens, float64): seconds
   of the mean Jacobians beside the seconds of the same layers' forward pass, and peak device memory.

Prints a table and writes benchmarks/results/gpu_check.json. ``--device cpu`` runs the same code on
the CPU (slowly at paper shapes), which is how it is kept working on machines without a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from resdyn.corpus import Sample  # noqa: E402
from resdyn.jacobians.autodiff import AutodiffBackend  # noqa: E402
from resdyn.jacobians.engine import MeasurementOptions, measure_layer_major, measure_whole_model  # noqa: E402
from resdyn.jacobians.probe import probe_error  # noqa: E402
from resdyn.jacobians.structured import StructuredBackend  # noqa: E402
from resdyn.models.byte_tokenizer import build_byte_tokenizer  # noqa: E402
from resdyn.models.layerwise import LayerwiseModel  # noqa: E402
from resdyn.models.loading import load_model  # noqa: E402
from resdyn.models.tiny_configs import tiny_config  # noqa: E402

FAMILIES = {"llama": {}, "mistral": {"sliding_window": 6}, "qwen2": {}, "qwen3": {}, "olmo2": {},
            "olmo3": {"sliding_window": 6}, "gemma3": {"sliding_window": 6},
            "gemma4": {"n_layers": 4, "layer_types": ["sliding_attention", "full_attention"] * 2,
                       "num_kv_shared_layers": 2, "sliding_window": 6}}


def _tiny_checkpoint(family: str, extra: dict, directory: Path) -> Path:
    from transformers import AutoModelForCausalLM

    extra = dict(extra)
    torch.manual_seed(0)
    config = tiny_config(family, hidden_size=64, n_layers=extra.pop("n_layers", 2), **extra)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float64)
    with torch.no_grad():  # norms and scalars off their constant initial values, so every term is seen
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    model.save_pretrained(directory)
    build_byte_tokenizer().save_pretrained(directory)
    return directory


def exactness(device: str) -> list[dict]:
    rng = np.random.default_rng(0)
    samples = [Sample(i, tuple(int(t) for t in rng.integers(0, 256, 24)), (15, 23)) for i in range(6)]
    options = MeasurementOptions(batch_size=3, probe_directions=2)
    rows = []
    for family, extra in FAMILIES.items():
        with tempfile.TemporaryDirectory() as directory:
            path = _tiny_checkpoint(family, extra, Path(directory))
            loaded = load_model(str(path), dtype="float64")
            reference = list(measure_whole_model(loaded.model, loaded.adapter, samples, backend=AutodiffBackend(),
                                                 options=options))
            measured = list(measure_layer_major(LayerwiseModel(str(path), device=device), samples,
                                                backend=StructuredBackend(), options=options))
        worst = worst_probe = 0.0
        for ours, theirs in zip(measured, reference):
            for sublayer in ("attn", "mlp"):
                difference = np.linalg.norm(ours.means[sublayer] - theirs.means[sublayer])
                worst = max(worst, difference / np.linalg.norm(theirs.means[sublayer]))
                worst_probe = max(worst_probe, probe_error(ours.means[sublayer], ours.probe_directions,
                                                           ours.probe_differences[sublayer]))
        rows.append({"check": f"exactness {family}", "device": device, "relative_error_vs_cpu_autodiff": worst,
                     "probe_error": worst_probe, "passed": bool(worst < 1e-10 and worst_probe < 1e-6)})
        print(f"{family:8s} on {device}: structured vs CPU autodiff {worst:.2e}, probe {worst_probe:.2e} "
              f"{'ok' if rows[-1]['passed'] else 'FAILED'}", flush=True)
    return rows


def paper_shapes(device: str, models: list[str], n: int, tokens: int, directory: Path) -> list[dict]:
    from paper_scale import build_checkpoint

    from resdyn.corpus import load_wikitext, sample_windows, tokenize

    rows = []
    for name in models:
        checkpoint = build_checkpoint(name, 2, directory)
        layerwise = LayerwiseModel(str(checkpoint), device=device)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        samples = sample_windows(tokenize(load_wikitext("test").text, tokenizer), n_samples=n,
                                 sequence_length=tokens, seed=0)
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        seconds: dict[str, float] = {}
        for measurement in measure_layer_major(layerwise, samples, backend=StructuredBackend(),
                                               options=MeasurementOptions(batch_size=16, probe_directions=2)):
            for part, value in measurement.seconds.items():
                seconds[part] = seconds.get(part, 0.0) + value
        row = {"check": f"paper shape {name} (2 layers)", "device": device, "n": n, "tokens": tokens,
               "seconds": round(time.perf_counter() - started, 2),
               "mean_jacobians_seconds": round(seconds.get("mean_jacobians", 0.0), 2),
               "forward_seconds": round(seconds.get("forward", 0.0), 2),
               "mean_jacobians_vs_forward": round(seconds.get("mean_jacobians", 0.0) / max(seconds["forward"], 1e-9), 2),
               "peak_device_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.startswith("cuda") else None}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--models", nargs="+", default=["llama-3.1-8b", "olmo-3-7b", "gemma-4-e4b"])
    parser.add_argument("--skip-paper-shapes", action="store_true")
    parser.add_argument("--directory", type=Path, default=Path(__file__).resolve().parent / ".paper_scale")
    parser.add_argument("--output", type=Path, default=Path(__file__).with_name("results") / "gpu_check.json")
    arguments = parser.parse_args()
    if arguments.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run it where one is lent (or pass --device cpu)", file=sys.stderr)
        return 2
    rows = exactness(arguments.device)
    if not arguments.skip_paper_shapes:
        arguments.directory.mkdir(parents=True, exist_ok=True)
        rows += paper_shapes(arguments.device, arguments.models, arguments.samples, arguments.seq_len,
                             arguments.directory)
    print(f"\n{'check':40s} {'device':8s} result")
    for row in rows:
        detail = (f"rel. error {row['relative_error_vs_cpu_autodiff']:.1e}, probe {row['probe_error']:.1e}"
                  if "probe_error" in row else
                  f"{row['mean_jacobians_seconds']} s mean Jacobians vs {row['forward_seconds']} s forward "
                  f"({row['mean_jacobians_vs_forward']}x), peak {row['peak_device_gb']} GB")
        print(f"{row['check']:40s} {row['device']:8s} {detail}")
    arguments.output.parent.mkdir(exist_ok=True)
    arguments.output.write_text(json.dumps({"device_name": torch.cuda.get_device_name() if
                                            arguments.device.startswith("cuda") else "cpu", "rows": rows}, indent=2))
    return 0 if all(row.get("passed", True) for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
