"""Per-sample Jacobians: closed form (structured) against autodiff, side by side (a benchmark, not a test).

    python benchmarks/per_sample.py [--width 4096] [--d-ff 14336] [--heads 32] [--kv-heads 8] [--tokens 32]

One random-init Llama-shaped decoder layer (default: Llama-3.1-8B's, d 4096, d_ff 14336, 32 heads,
8 KV heads), float64, one sample of T tokens, the last position: the per-sample Jacobian of the
attention and of the MLP map by resdyn's autodiff backend (reverse mode vmapped over the d basis
cotangents, what the subsample used before) and by the structured backend's closed form over one
observation, in the same process one after the other; their largest relative difference; the ratio.

Writes benchmarks/results/per_sample.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jacobians import build_layer  # noqa: E402 - the benchmarks' shared layer builder

RESULTS = Path(__file__).resolve().parent / "results" / "per_sample.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--d-ff", type=int, default=14336)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    arguments = parser.parse_args()
    from resdyn.jacobians.autodiff import AutodiffBackend
    from resdyn.jacobians.structured import StructuredBackend

    shape = {"d": arguments.width, "d_ff": arguments.d_ff, "heads": arguments.heads, "kv_heads": arguments.kv_heads}
    model, adapter = build_layer(shape)
    layer = adapter.decoder_layers(model)[0]
    inputs = adapter.capture_layer_inputs(model, torch.randint(0, 256, (1, arguments.tokens)))[0]
    position = arguments.tokens - 1
    rows = []
    for sublayer in ("attn", "mlp"):
        seconds, matrices = {}, {}
        for name, backend in (("structured", StructuredBackend()), ("autodiff", AutodiffBackend())):
            started = time.perf_counter()
            with torch.no_grad() if name == "structured" else torch.enable_grad():
                matrices[name] = backend.sample_jacobians(adapter, layer, inputs, sublayer, position)
            seconds[name] = time.perf_counter() - started
            print(f"{sublayer} {name}: {seconds[name]:.2f} s", flush=True)
        difference = float(torch.linalg.matrix_norm(matrices["structured"] - matrices["autodiff"]).max()
                           / torch.linalg.matrix_norm(matrices["autodiff"]).max())
        rows.append({"sublayer": sublayer, "structured_seconds": round(seconds["structured"], 3),
                     "autodiff_seconds": round(seconds["autodiff"], 3),
                     "autodiff_over_structured": round(seconds["autodiff"] / seconds["structured"], 2),
                     "relative_difference": difference})
        del matrices
    total = {key: sum(row[key] for row in rows) for key in ("structured_seconds", "autodiff_seconds")}
    record = {"d": shape["d"], "d_ff": shape["d_ff"], "heads": shape["heads"], "kv_heads": shape["kv_heads"],
              "tokens": arguments.tokens, "torch_threads": torch.get_num_threads(), "sublayers": rows,
              "per_sample_structured_seconds": round(total["structured_seconds"], 3),
              "per_sample_autodiff_seconds": round(total["autodiff_seconds"], 3),
              "autodiff_over_structured": round(total["autodiff_seconds"] / total["structured_seconds"], 2),
              "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}
    RESULTS.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
