"""GGUF import at paper scale: peak memory against the largest tensor (a benchmark, not a test).

    python benchmarks/gguf_import.py [--layers 2] [--directory DIR]

Writes a Llama-3.1-8B-shaped GGUF file (the public shapes of benchmarks/paper_scale.py, truncated
to ``--layers`` decoder layers; the embedding and the untied LM head are full size: 128256 x 4096,
the largest tensors of the real model) with random weights, every matrix Q8_0 and the norms F32,
tensor by tensor with the ``gguf`` writer; then imports it with ``resdyn.models.gguf_import`` in a
fresh process under ``/usr/bin/time -v``. Peak RSS of the import beside the largest tensor's float32
bytes says whether the import holds "one tensor at a time" at the real model's largest tensor; an
8B Q4 file differs only by more layers of the same (smaller) tensors. Writes
benchmarks/results/gguf_import.json.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results") / "gguf_import.json"


def write_file(path: Path, n_layers: int) -> dict:
    import gguf
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    sys.path.insert(0, str(REPOSITORY / "benchmarks"))
    sys.path.insert(0, str(REPOSITORY))
    from paper_scale import PAPER_SHAPES, truncated_config

    from tests.gguf_files import vocabulary

    config = truncated_config("llama-3.1-8b", n_layers)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    shape = PAPER_SHAPES["llama-3.1-8b"]
    writer = gguf.GGUFWriter(str(path), "llama", use_temp_file=True)
    writer.add_name("llama-3.1-8b-shaped random")
    writer.add_context_length(8192)
    writer.add_embedding_length(shape["hidden_size"])
    writer.add_block_count(n_layers)
    writer.add_feed_forward_length(shape["intermediate_size"])
    writer.add_head_count(shape["num_attention_heads"])
    writer.add_head_count_kv(shape["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(shape["rms_norm_eps"])
    writer.add_rope_freq_base(shape["rope_theta"])
    writer.add_rope_dimension_count(shape["head_dim"])
    writer.add_vocab_size(shape["vocab_size"])
    symbols = vocabulary()[:-1]  # byte symbols and merges; the rest of the 128256 ids as plain tokens
    tokens = symbols + [f"<t{i}>" for i in range(shape["vocab_size"] - len(symbols) - 1)] + ["<|endoftext|>"]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.NORMAL] * (len(tokens) - 1) + [gguf.TokenType.CONTROL])
    writer.add_token_merges(["Ġ t"])
    writer.add_bos_token_id(len(tokens) - 1)
    writer.add_eos_token_id(len(tokens) - 1)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_layers)
    rng = np.random.default_rng(0)
    largest = 0
    for hf_name, tensor in skeleton.state_dict().items():
        base, suffix = hf_name.rsplit(".", 1)
        gguf_name = names.get_name(base)
        if gguf_name is None:
            continue
        data = (0.02 * rng.standard_normal(tuple(tensor.shape), dtype=np.float32)) if tensor.ndim == 2 else \
            np.ones(tuple(tensor.shape), np.float32)
        largest = max(largest, data.nbytes)
        if data.ndim == 2:
            writer.add_tensor(f"{gguf_name}.{suffix}", gguf.quantize(data, gguf.GGMLQuantizationType.Q8_0),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(f"{gguf_name}.{suffix}", data)
        del data
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {"largest_tensor_float32_bytes": largest, "file_bytes": path.stat().st_size}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--directory", type=Path, default=REPOSITORY / "benchmarks" / ".gguf_import")
    arguments = parser.parse_args()
    shutil.rmtree(arguments.directory, ignore_errors=True)
    arguments.directory.mkdir(parents=True)
    path = arguments.directory / "llama-3.1-8b-shaped.gguf"
    started = time.perf_counter()
    written = write_file(path, arguments.layers)
    write_seconds = time.perf_counter() - started
    script = ("import sys; from resdyn.models.gguf_import import import_gguf; "
              f"r = import_gguf({str(path)!r}, {str(arguments.directory / 'imported')!r}, progress=print); "
              "print('RECORD', r.seconds, r.largest_tensor_bytes, r.n_tensors_written)")
    process = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", script], capture_output=True, text=True,
                             cwd=REPOSITORY)
    peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", process.stderr).group(1)) * 1024
    record = {"layers": arguments.layers, **written, "write_seconds": round(write_seconds, 1),
              "returncode": process.returncode, "import_peak_rss_bytes": peak,
              "import_peak_rss_gib": round(peak / 2**30, 2),
              "peak_over_largest_tensor": round(peak / written["largest_tensor_float32_bytes"], 2),
              "imported_bytes": sum(p.stat().st_size for p in (arguments.directory / "imported").glob("*.safetensors"))
              if process.returncode == 0 else None,
              "import_output_tail": process.stdout[-600:]}
    RESULTS.write_text(json.dumps(record, indent=2))
    print(json.dumps(record, indent=2))
    shutil.rmtree(arguments.directory, ignore_errors=True)
    return process.returncode


if __name__ == "__main__":
    sys.exit(main())
