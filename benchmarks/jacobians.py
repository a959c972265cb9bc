"""Mean-Jacobian backends side by side (a benchmark, not a test).

    python benchmarks/jacobians.py [--widths 128 256 512 1024] [--samples 256] [--tokens 128]
                                   [--autograd-samples 2] [--autodiff-batches 1]
                                   [--llama-samples 1000] [--skip-llama]

For each width d: a random-init Llama-shaped layer (d_ff = 3.5 d rounded to 64, head_dim 64,
KV heads = heads / 4), float64 with full-precision norms and softmax, n samples of T random
tokens, the last position analysed. Time per checkpoint-layer (both sublayers, excluding the
forward pass that captures the layer inputs, which every backend shares) of

  (a) ``autograd``: ``torch.autograd.functional.jacobian`` per sample through the whole sequence,
      what a user would write;
  (b) ``autodiff``: the strongest per-sample method, resdyn's reference backend: reverse mode
      vmapped over the d basis cotangents on a batch, through the one-row function (only the
      analysed row recomputed; the other positions' keys and values held fixed);
  (c) ``structured``: resdyn's closed-form mean.

(a) and (b) are timed on ``--autograd-samples`` samples and ``--autodiff-batches`` batches of 16
and scaled linearly to n (their cost is linear in n by construction); (c) runs on all n, and its
ratio against both baselines is printed. Each
(d, backend) runs in its own process so that its peak resident memory is its own. The FLOP floor
is one forward pass of the layer over the n x T tokens; fraction_of_flop_floor = floor /
(seconds x measured float64 matmul GFLOP/s). Then one Llama-3.1-8B-shaped layer (d 4096, d_ff
14336, 32 heads, 8 KV heads; n samples of T = 32, last position): structured mean-Jacobian time
vs the time of that layer's forward pass over the same samples.

Writes benchmarks/results/jacobians.json: a list of records {"d", "n", "backend", "seconds",
"ratio_vs_autograd", "fraction_of_flop_floor", "peak_rss_mb", ...}.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import time
from pathlib import Path

import torch

BATCH = 16


def matmul_gflops() -> float:
    a, b = torch.randn(2048, 2048, dtype=torch.float64), torch.randn(2048, 2048, dtype=torch.float64)
    a @ b
    started = time.perf_counter()
    for _ in range(5):
        a @ b
    return 2 * 2048**3 * 5 / (time.perf_counter() - started) / 1e9


def layer_shape(d: int) -> dict:
    heads = max(1, d // 64)
    return {"d": d, "d_ff": int(round(3.5 * d / 64)) * 64, "heads": heads, "kv_heads": max(1, heads // 4)}


def gemma4_shape(d: int) -> dict:
    """Gemma 4 E4B's proportions at width d: 8 heads of d / 10 (sliding) or d / 5 (full), 2 KV heads, d_ff = 4 d,
    per-layer inputs of 256."""
    return {"d": d, "d_ff": 4 * d, "heads": 8, "kv_heads": 2, "family": "gemma4", "head_dim": max(8, d // 10 // 2 * 2)}


def build_layer(shape: dict, seed: int = 0):
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig

    from resdyn.models.adapters import adapter_for
    from resdyn.models.precision import use_full_precision

    torch.manual_seed(seed)
    if shape.get("family") == "gemma4":  # one full-attention layer with the per-layer-input branch and v_norm
        config = AutoConfig.for_model(
            "gemma4_text", vocab_size=256, hidden_size=shape["d"], intermediate_size=shape["d_ff"],
            num_hidden_layers=1, num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
            head_dim=shape["head_dim"], global_head_dim=2 * shape["head_dim"], layer_types=["full_attention"],
            hidden_size_per_layer_input=256, vocab_size_per_layer_input=256, max_position_embeddings=512)
    else:
        config = LlamaConfig(vocab_size=256, hidden_size=shape["d"], intermediate_size=shape["d_ff"],
                             num_hidden_layers=1, num_attention_heads=shape["heads"],
                             num_key_value_heads=shape["kv_heads"], head_dim=shape["d"] // shape["heads"],
                             max_position_embeddings=512)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float64, attn_implementation="eager").eval()
    with torch.no_grad():  # norms and the layer scalar off their constant initial values
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(0.1 * torch.randn_like(parameter))
    use_full_precision(model)
    return model, adapter_for(config.model_type)


def forward_flops(shape: dict, n: int, tokens: int) -> float:
    d, d_ff, heads, kv = shape["d"], shape["d_ff"], shape["heads"], shape["kv_heads"]
    head_dim = shape.get("head_dim", d // heads)
    projections = 2 * d * (2 * heads * head_dim + 2 * kv * head_dim) + 3 * 2 * d * d_ff
    attention = 2 * 2 * tokens * heads * head_dim / 2  # causal: about half the keys per query
    return float(n * tokens * (projections + attention))


def _captured_batches(model, adapter, n: int, tokens: int, seed: int, batch: int = BATCH):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 256, (n, tokens), generator=generator)
    for start in range(0, n, batch):
        yield adapter.capture_layer_inputs(model, ids[start : start + batch])[0]


def _run(backend: str, shape: dict, n: int, tokens: int, measured: int, queue) -> None:
    torch.set_num_threads(torch.get_num_threads())
    from resdyn.jacobians import make_backend
    from resdyn.jacobians.streaming import RunningMoments

    model, adapter = build_layer(shape)
    layer = adapter.decoder_layers(model)[0]
    position = tokens - 1
    seconds = 0.0
    observed = 0
    if backend == "autograd":
        batch = next(_captured_batches(model, adapter, measured, tokens, 1))
        for sublayer in ("attn", "mlp"):
            function, x0 = adapter.positional_function(layer, batch, sublayer, position)
            for sample in range(measured):
                def single(x, sample=sample, x0=x0, function=function):
                    rows = x0.clone()
                    rows[sample] = x
                    return function(rows)[sample]

                started = time.perf_counter()
                torch.autograd.functional.jacobian(single, x0[sample])
                seconds += time.perf_counter() - started
        observed = measured
    else:
        engine = make_backend(backend)
        moments = {sublayer: RunningMoments() for sublayer in ("attn", "mlp")}
        for number, inputs in enumerate(_captured_batches(model, adapter, n, tokens, 1, BATCH)):
            if backend == "autodiff" and number >= measured:
                break
            started = time.perf_counter()
            for sublayer in ("attn", "mlp"):
                engine.accumulate(adapter, layer, inputs, sublayer, position, moments[sublayer])
            seconds += time.perf_counter() - started
            observed += inputs.hidden.shape[0]
    queue.put({"seconds_measured": seconds, "samples_measured": observed,
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def _collect(process, queue, what: str) -> dict:
    """The child's result, or an error as soon as it dies without one (e.g. killed for memory)."""
    import queue as queues

    while True:
        try:
            result = queue.get(timeout=5)
            process.join()
            return result
        except queues.Empty:
            if not process.is_alive():
                raise RuntimeError(f"{what} died (exit code {process.exitcode}); out of memory?") from None


def measure(backend: str, shape: dict, n: int, tokens: int, measured: int) -> dict:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_run, args=(backend, shape, n, tokens, measured, queue))
    process.start()
    result = _collect(process, queue, f"{backend} at d={shape['d']}")
    result["seconds"] = result["seconds_measured"] * n / result["samples_measured"]
    result["extrapolated"] = result["samples_measured"] < n
    return result


def _forward_only(shape: dict, n: int, tokens: int, queue) -> None:
    model, adapter = build_layer(shape)
    layer = adapter.decoder_layers(model)[0]
    seconds = 0.0
    with torch.no_grad():
        for inputs in _captured_batches(model, adapter, n, tokens, 1):
            started = time.perf_counter()
            layer(inputs.hidden, **inputs.arguments)
            seconds += time.perf_counter() - started
    queue.put({"seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def measure_forward(shape: dict, n: int, tokens: int) -> dict:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_forward_only, args=(shape, n, tokens, queue))
    process.start()
    return _collect(process, queue, "forward")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--autograd-samples", type=int, default=2)
    parser.add_argument("--autodiff-batches", type=int, default=1)
    parser.add_argument("--llama-samples", type=int, default=1000)
    parser.add_argument("--llama-tokens", type=int, default=32)
    parser.add_argument("--skip-llama", action="store_true")
    parser.add_argument("--gemma4-widths", type=int, nargs="*", default=[512],
                        help="Gemma-4-shaped layers (per-layer inputs, v_norm): structured vs autodiff")
    parser.add_argument("--autodiff-memory-widths", type=int, nargs="*", default=[1024, 4096],
                        help="peak memory of the autodiff backend for one sample (d = 4096: Llama-3.1-8B's layer)")
    parser.add_argument("--only-new-rows", action="store_true",
                        help="measure only the Gemma 4 and autodiff-memory rows, keeping the rest of the output file")
    parser.add_argument("--reuse-baselines", action="store_true",
                        help="take autograd/autodiff timings from the existing output file (same d, n, T) "
                             "instead of measuring them again; they take most of the run")
    parser.add_argument("--output", default=str(Path(__file__).with_name("results") / "jacobians.json"))
    arguments = parser.parse_args()

    previous = []
    if (arguments.reuse_baselines or arguments.only_new_rows) and Path(arguments.output).is_file():
        previous = json.loads(Path(arguments.output).read_text())
    if arguments.only_new_rows:
        arguments.widths, arguments.skip_llama = [], True
    gflops = matmul_gflops()
    print(f"float64 matmul: {gflops:.1f} GFLOP/s on {torch.get_num_threads()} threads")
    records = []
    header = (f"{'d':>5} {'n':>5} {'backend':>10} {'seconds':>10} {'x vs autograd':>14} {'x vs autodiff':>14} "
              f"{'floor frac':>10} {'peak MB':>8}")
    print(header)
    for d in arguments.widths:
        shape = layer_shape(d)
        floor = forward_flops(shape, arguments.samples, arguments.tokens)
        results = {}
        for backend, measured in (("autograd", arguments.autograd_samples),
                                  ("autodiff", arguments.autodiff_batches), ("structured", 0)):
            reused = [r for r in previous if (r["d"], r["n"], r.get("tokens"), r["backend"]) ==
                      (d, arguments.samples, arguments.tokens, backend) and not r.get("purpose")]
            if backend != "structured" and reused:
                results[backend] = {"seconds": reused[0]["seconds"], "peak_rss_mb": reused[0]["peak_rss_mb"],
                                    "samples_measured": reused[0]["extrapolated_from_samples"] or arguments.samples,
                                    "extrapolated": reused[0]["extrapolated_from_samples"] is not None}
                continue
            results[backend] = measure(backend, shape, arguments.samples, arguments.tokens, measured)
        for backend, result in results.items():
            record = {"d": d, "n": arguments.samples, "tokens": arguments.tokens, "d_ff": shape["d_ff"],
                      "backend": backend, "seconds": result["seconds"],
                      "reused_from_previous_run": backend != "structured" and arguments.reuse_baselines,
                      "ratio_vs_autograd": results["autograd"]["seconds"] / result["seconds"],
                      "ratio_vs_autodiff": results["autodiff"]["seconds"] / result["seconds"],
                      "fraction_of_flop_floor": floor / (result["seconds"] * gflops * 1e9),
                      "peak_rss_mb": result["peak_rss_mb"], "extrapolated_from_samples":
                      result["samples_measured"] if result["extrapolated"] else None, "matmul_gflops": gflops}
            records.append(record)
            print(f"{d:5d} {arguments.samples:5d} {backend:>10} {record['seconds']:10.2f} "
                  f"{record['ratio_vs_autograd']:14.1f} {record['ratio_vs_autodiff']:14.1f} "
                  f"{record['fraction_of_flop_floor']:10.3f} "
                  f"{record['peak_rss_mb']:8.0f}{'  (scaled from ' + str(result['samples_measured']) + ')' if result['extrapolated'] else ''}",
                  flush=True)
    for d in arguments.gemma4_widths:
        shape = gemma4_shape(d)
        autodiff = measure("autodiff", shape, arguments.samples, arguments.tokens, arguments.autodiff_batches)
        structured = measure("structured", shape, arguments.samples, arguments.tokens, 0)
        for backend, result in (("autodiff", autodiff), ("structured", structured)):
            records.append({"d": d, "n": arguments.samples, "tokens": arguments.tokens, "backend": backend,
                            "seconds": result["seconds"], "peak_rss_mb": result["peak_rss_mb"],
                            "purpose": "gemma-4-shaped layer", "ratio_vs_autodiff": autodiff["seconds"] / result["seconds"],
                            "extrapolated_from_samples": result["samples_measured"] if result["extrapolated"] else None})
        print(f"Gemma-4-shaped layer d={d}: autodiff {autodiff['seconds']:.1f} s (scaled from "
              f"{autodiff['samples_measured']}), structured {structured['seconds']:.2f} s, "
              f"{autodiff['seconds'] / structured['seconds']:.0f}x", flush=True)
    for d in arguments.autodiff_memory_widths:
        shape = {"d": 4096, "d_ff": 14336, "heads": 32, "kv_heads": 8} if d == 4096 else layer_shape(d)
        try:
            result = measure("autodiff", shape, 1, arguments.tokens, 1)
        except RuntimeError as error:  # killed by the kernel: the measurement is "more than this machine has"
            total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
            records.append({"d": d, "n": 1, "tokens": arguments.tokens, "backend": "autodiff", "seconds": None,
                            "peak_rss_mb": None, "exceeds_mb": round(total_mb), "error": str(error),
                            "purpose": "autodiff memory, one sample"})
            print(f"autodiff, one sample, d={d}: {error} (more than the {total_mb:.0f} MB here)", flush=True)
            continue
        records.append({"d": d, "n": 1, "tokens": arguments.tokens, "backend": "autodiff",
                        "seconds": result["seconds"], "peak_rss_mb": result["peak_rss_mb"],
                        "purpose": "autodiff memory, one sample"})
        print(f"autodiff, one sample, d={d}: {result['seconds']:.1f} s, peak {result['peak_rss_mb']:.0f} MB", flush=True)
    if arguments.only_new_rows:
        kept = [r for r in previous if r.get("purpose") not in ("gemma-4-shaped layer", "autodiff memory, one sample")]
        records = kept + records
    # memory of the streaming stage does not grow with n
    small = min(arguments.widths) if arguments.widths else None
    for n in (arguments.samples, 4 * arguments.samples) if small else ():
        result = measure("structured", layer_shape(small), n, arguments.tokens, 0)
        records.append({"d": small, "n": n, "backend": "structured", "seconds": result["seconds"],
                        "peak_rss_mb": result["peak_rss_mb"], "purpose": "memory vs n"})
        print(f"memory check d={small} n={n}: peak {result['peak_rss_mb']:.0f} MB, {result['seconds']:.1f} s")
    if not arguments.skip_llama:
        shape = {"d": 4096, "d_ff": 14336, "heads": 32, "kv_heads": 8}
        n, tokens = arguments.llama_samples, arguments.llama_tokens
        structured = measure("structured", shape, n, tokens, 0)
        forward = measure_forward(shape, n, tokens)
        for backend, result in (("structured", structured), ("forward", forward)):
            records.append({"d": 4096, "n": n, "tokens": tokens, "d_ff": 14336, "backend": backend,
                            "seconds": result["seconds"], "peak_rss_mb": result["peak_rss_mb"],
                            "purpose": "llama-3.1-8b-shaped layer",
                            "fraction_of_flop_floor": forward_flops(shape, n, tokens) / (result["seconds"] * gflops * 1e9)})
        print(f"Llama-3.1-8B-shaped layer, n={n}, T={tokens}: structured mean Jacobian {structured['seconds']:.1f} s, "
              f"layer forward {forward['seconds']:.1f} s, ratio {structured['seconds'] / forward['seconds']:.2f}")
    output = Path(arguments.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(records, indent=2))
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
