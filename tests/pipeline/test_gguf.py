"""GGUF import: against transformers' own GGUF loading, the source weights, and damaged or foreign files.

The GGUF files are written here with the ``gguf`` package's writer (tests/gguf_files.py) from random
tiny models, F32 tensors and Q8_0 ones.
"""

import json
import os
import tracemalloc
from pathlib import Path

import gguf
import numpy as np
import polars as pl
import pytest
import torch

from resdyn.dagster_project.store.object_store import ObjectStore
from resdyn.models.gguf_import import IMPORT_RECORD, GGUFError, describe_gguf, find_gguf, import_gguf

from ..cli_helpers import run_cli, run_cli_in_process
from ..gguf_files import dequantized_reference, random_model, vocabulary, write_gguf
from ..s3_helpers import put_published_generation

QUANTIZED = ("attn_q", "ffn_up", "token_embd")  # stored as Q8_0, the rest F32
FAMILIES = ["llama", "qwen2", "qwen3", "gemma3"]


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = json.loads((directory / "model.safetensors.index.json").read_text())
    weights = {}
    for file in sorted(set(index["weight_map"].values())):
        weights.update(load_file(directory / file))
    assert set(weights) == set(index["weight_map"])
    return weights


@pytest.mark.parametrize("family", FAMILIES)
def test_import_equals_the_source_weights_and_transformers_gguf_loading(tmp_path, family, fresh_seed, monkeypatch):
    from transformers import AutoConfig, AutoModelForCausalLM

    model = random_model(family, fresh_seed)
    path = write_gguf(model, tmp_path / "model.gguf", quantize=QUANTIZED)
    built = []

    class CountedReader(gguf.GGUFReader):
        def __init__(self, *arguments, **keywords):
            built.append(arguments)
            super().__init__(*arguments, **keywords)

    monkeypatch.setattr(gguf, "GGUFReader", CountedReader)
    record = import_gguf(path, tmp_path / "imported")
    # the file's metadata parsed once (transformers' config and tokenizer readings get that reader), and gguf's
    # own names given back afterwards
    assert len(built) == 1 and gguf.GGUFReader is CountedReader
    n_tensors = len(gguf.GGUFReader(path).tensors)
    assert record.quantization == {"Q8_0": 2 * 2 + 1, "F32": n_tensors - 5}  # q and up of 2 layers, the embedding
    assert record.sha256 == describe_gguf(path).sha256 and record.tied_embeddings

    # the weights: what the file holds, in HF names and layout (q/k un-permuted, Gemma's norm offset undone)
    reference, ours = dequantized_reference(model, QUANTIZED), _weights(tmp_path / "imported")
    assert set(ours) == set(reference) - {"lm_head.weight"}
    for name, tensor in ours.items():
        assert tensor.dtype == torch.float32
        # Gemma norms went through float32 (1 + w) - 1: one rounding of a number near 1
        tolerance = 2.4e-7 if family == "gemma3" and name.endswith("norm.weight") else 0.0
        assert torch.max(torch.abs(tensor - reference[name])).item() <= tolerance, name

    # the model: transformers' own GGUF loading (the ecosystem's reference) gives the same logits
    imported = AutoModelForCausalLM.from_pretrained(tmp_path / "imported", dtype=torch.float32).eval()
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="model.gguf", dtype=torch.float32).eval()
    tokens = torch.from_numpy(np.random.default_rng(fresh_seed).integers(0, len(vocabulary()), (3, 17)))
    with torch.no_grad():
        ours_logits, their_logits = imported(tokens).logits, theirs(tokens).logits
    assert torch.max(torch.abs(ours_logits - their_logits)).item() <= 1e-6 * max(1.0, their_logits.abs().max().item())
    expected = AutoConfig.from_pretrained(tmp_path, gguf_file="model.gguf").to_dict()
    got = AutoConfig.from_pretrained(tmp_path / "imported").to_dict()
    ignored = {"_name_or_path", "dtype", "transformers_version"}
    assert {k: v for k, v in got.items() if k not in ignored} == {k: v for k, v in expected.items() if k not in ignored}


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_mean_jacobians_equal_those_of_the_same_weights_saved_as_safetensors(tmp_path, family, fresh_seed):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from resdyn.corpus import Sample
    from resdyn.jacobians.engine import MeasurementOptions, measure_layer_major
    from resdyn.jacobians.structured import StructuredBackend
    from resdyn.models.layerwise import LayerwiseModel

    model = random_model(family, fresh_seed)
    path = write_gguf(model, tmp_path / "model.gguf", quantize=QUANTIZED)
    import_gguf(path, tmp_path / "imported")
    # the same weights by transformers' GGUF loading, saved with save_pretrained
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="model.gguf", dtype=torch.float32)
    plain = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path, gguf_file="model.gguf"),
                                             dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    plain.save_pretrained(tmp_path / "saved")
    AutoTokenizer.from_pretrained(tmp_path, gguf_file="model.gguf").save_pretrained(tmp_path / "saved")

    rng = np.random.default_rng(fresh_seed)
    samples = [Sample(i, tuple(int(t) for t in rng.integers(0, len(vocabulary()), 12)), (11,)) for i in range(4)]
    options = MeasurementOptions(batch_size=2, keep_sample_jacobians=0, probe_directions=0)
    means = []
    for directory in ("imported", "saved"):
        layerwise = LayerwiseModel(str(tmp_path / directory), dtype="float64", device="cpu")
        means.append([layer.means for layer in measure_layer_major(layerwise, samples, backend=StructuredBackend(),
                                                                   options=options)])
    for ours, theirs in zip(*means):
        for sublayer in ("attn", "mlp"):
            scale = np.abs(theirs[sublayer]).max()
            assert np.abs(ours[sublayer] - theirs[sublayer]).max() <= 1e-12 * scale


def test_an_unchanged_file_is_not_imported_again_and_a_changed_one_is(tmp_path, fresh_seed):
    path = write_gguf(random_model("llama", fresh_seed), tmp_path / "model.gguf")
    first = import_gguf(path, tmp_path / "imported")
    shard = next((tmp_path / "imported").glob("*.safetensors"))
    stamp = shard.stat().st_mtime_ns
    second = import_gguf(path, tmp_path / "imported")
    assert second == first and shard.stat().st_mtime_ns == stamp  # same record, nothing rewritten

    other = random_model("llama", fresh_seed + 1)
    write_gguf(other, path)  # same size, other weights
    third = import_gguf(path, tmp_path / "imported")
    assert third.sha256 != first.sha256
    weights = _weights(tmp_path / "imported")
    assert torch.equal(weights["model.layers.0.mlp.down_proj.weight"], other.state_dict()["model.layers.0.mlp.down_proj.weight"])
    assert not [p for p in tmp_path.glob(".imported.*") if p.is_dir()]  # no staging or replaced directory left
    with pytest.raises(GGUFError, match="not the file that was registered"):
        import_gguf(path, tmp_path / "imported", expected_sha256=first.sha256)


def test_import_memory_is_bounded_by_a_few_tensors(tmp_path, fresh_seed, monkeypatch):
    import resdyn.models.gguf_import as importer

    monkeypatch.setattr(importer, "DEQUANTIZE_CHUNK_ELEMENTS", 16384)  # chunks far smaller than a tensor, as at 8B
    model = random_model("llama", fresh_seed, hidden_size=512, n_layers=6)
    # every large tensor Q8_0, so the largest is decoded on the heap (an F32 tensor is a view of the mapped file)
    path = write_gguf(model, tmp_path / "model.gguf", quantize=("ffn_up", "ffn_gate", "ffn_down", "attn_q", "attn_output"))
    sizes = [4 * tensor.numel() for name, tensor in model.state_dict().items() if name != "lm_head.weight"]
    largest, total = max(sizes), sum(sizes)
    del model
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        record = import_gguf(path, tmp_path / "imported", shard_bytes=total // 3)  # several shards
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert len(list((tmp_path / "imported").glob("*.safetensors"))) >= 3
    assert record.largest_tensor_bytes == largest
    # while tensors are converted: one float32 tensor (its Q8_0 rows dequantized a chunk at a time), the finiteness
    # mask, and a processed copy where the processor makes one (Llama's q/k un-permutation; not the largest here)
    assert record.traced_tensor_peak_bytes <= 1.5 * largest, (record.traced_tensor_peak_bytes, largest)
    # the whole import: that plus the metadata, config and tokenizer (a fixed few MB), never the model
    assert peak <= 4 * largest + 32 * 1024**2 and peak < total / 3, (peak, largest, total)


def test_damaged_and_foreign_files_give_one_line_errors_and_register_nothing(tmp_path, fresh_seed):
    good = write_gguf(random_model("llama", fresh_seed), tmp_path / "good.gguf")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size * 2 // 3])
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGML" + os.urandom(1000))
    foreign = tmp_path / "foreign.gguf"  # transformers reads phi3 GGUF files; resdyn has no phi3 sublayer maps
    writer = gguf.GGUFWriter(str(foreign), "phi3")
    writer.add_name("a phi3 model")
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    incomplete = write_gguf(random_model("llama", fresh_seed), tmp_path / "incomplete.gguf",
                            leave_out=("blk.1.ffn_up.weight",))  # a readable header, a tensor missing
    unknown = tmp_path / "unknown.gguf"  # an architecture transformers cannot read from GGUF at all
    writer = gguf.GGUFWriter(str(unknown), "olmo2")
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    several = tmp_path / "several"
    several.mkdir()
    (several / "a.gguf").write_bytes(good.read_bytes())
    (several / "b.gguf").write_bytes(good.read_bytes())
    warehouse = tmp_path / "warehouse"
    cases = {truncated: "truncated", garbage: "not a readable GGUF file", foreign: "not a family resdyn analyses",
             unknown: "cannot be read by transformers", several: "holds 2 .gguf files",
             incomplete: "lacks 1 tensor(s)",
             tmp_path / "missing.gguf": "no GGUF file at"}
    for number, (path, expected) in enumerate(cases.items()):
        arguments = ("run", "--model", str(path), "--warehouse", str(warehouse))
        # the first as a process of its own: all it prints (a warning at import included) is the one line
        result = run_cli(*arguments) if number == 0 else run_cli_in_process(*arguments)
        assert result.returncode == 2, (path, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (path, result.stderr)
        assert not (warehouse / "registry.json").exists()  # nothing registered
        assert not list((warehouse / "_models").glob("*")) if (warehouse / "_models").exists() else True
    with pytest.raises(GGUFError, match="truncated"):
        describe_gguf(truncated)
    assert find_gguf(several / "a.gguf") == (several / "a.gguf").resolve()


def test_resdyn_run_on_a_gguf_file_records_its_origin_and_does_not_reimport_an_unchanged_file(tmp_path, fresh_seed,
                                                                                             built, s3_warehouse,
                                                                                             s3_environment):
    from resdyn.dagster_project.store.warehouse import Warehouse
    from resdyn.dagster_project.study.claims_inputs import SIMEX_TABLES
    from resdyn.models.registry import SIMEX_REVISIONS, ModelRegistry

    path = write_gguf(random_model("llama", fresh_seed), tmp_path / "tiny-gguf.gguf", quantize=QUANTIZED)
    warehouse = tmp_path / "warehouse"
    # three partitions (the file, its null model, the quantization control), then two of its SIMEX set: the analysis
    # at the test's small settings (what is checked is the origin, the controls and the claims, not the analysis'
    # precision)
    settings = ("--samples", "6", "--seq-len", "16", "--per-sample", "2", "--leiden-seeds", "2", "--permutations", "50")
    arguments = ("run", "--model", str(path), "--null-model", *settings, "--warehouse", str(warehouse))
    first = run_cli_in_process(*arguments)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert "tiny-gguf@local ok" in first.stdout and "tiny-gguf@init ok" in first.stdout
    assert "tiny-gguf@init-quantized ok" in first.stdout  # the quantization control
    assert "simex" not in first.stdout.split("registered tiny-gguf", 1)[1].split("\n", 1)[1]  # registered, not run
    sha = describe_gguf(path).sha256
    spec = ModelRegistry(warehouse / "registry.json").get("tiny-gguf")
    assert (spec.source, spec.sha256, spec.checkpoints) == (str(path.resolve()), sha, {
        "local": "gguf", "init": "init", "init-quantized": "init-quantized", **{c: c for c in SIMEX_REVISIONS}})
    assert spec.quantization == "F32:15,Q8_0:5"
    # two of the SIMEX set (named: --simex runs all 16): only the tables its readings read, by themselves
    simex = run_cli_in_process("run", "--model", "tiny-gguf", "--checkpoint", "simex-x0", "--checkpoint", "simex-x2-1",
                               *settings, "--warehouse", str(warehouse))
    assert simex.returncode == 0, simex.stdout[-3000:] + simex.stderr[-2000:]
    assert "the SIMEX set: only the tables its zero-rounding readings read" in simex.stdout
    store = Warehouse(warehouse)
    assert {r["checkpoint"]: r["status"] for r in store.query("SELECT * FROM partitions").to_pylist()} == \
        {"local": "complete", "init": "complete", "init-quantized": "complete", "simex-x0": "incomplete",
         "simex-x2-1": "incomplete"}
    assert {r["table_name"] for r in store.query("SELECT table_name FROM published_tables WHERE checkpoint = "
                                                 "'simex-x2-1'").to_pylist()} >= set(SIMEX_TABLES)
    assert not store.query("SELECT * FROM published_tables WHERE checkpoint = 'simex-x2-1' AND table_name IN "
                           "('coupling_tests', 'communities', 'transient_dynamics')").num_rows
    rows = store.query("SELECT checkpoint, source_sha256, source_quantization, initialization "
                       "FROM model_checkpoints").to_pylist()
    assert all(r["source_sha256"] == sha and r["source_quantization"] == "F32:15,Q8_0:5" for r in rows)
    initialization = {r["checkpoint"]: r["initialization"] for r in rows}
    assert "seed 0" in initialization["init"] and initialization["init"] in initialization["init-quantized"]
    assert "(F32:15,Q8_0:5)" in initialization["init-quantized"] and initialization["local"] == ""
    assert "2 times each tensor's own rounding variance" in initialization["simex-x2-1"] and \
        "seed 1" in initialization["simex-x2-1"]
    assert "as they are" in initialization["simex-x0"]  # the file itself: the draws' paired baseline
    # the control's weights: the null model's, Q8_0-rounded where the file is Q8_0, unchanged where it is F32
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    models = warehouse / "_models" / "tiny-gguf"
    quantized, null = (load_file(models / c / "model.safetensors") for c in ("init-quantized", "init"))
    reference = dequantized_reference(AutoModelForCausalLM.from_pretrained(models / "init", dtype=torch.float32),
                                      QUANTIZED)
    assert set(quantized) == set(null) and all(torch.equal(quantized[n], reference[n]) for n in quantized)
    assert not torch.equal(quantized["model.layers.0.mlp.up_proj.weight"], null["model.layers.0.mlp.up_proj.weight"])
    assert all(sha in r["model_source"] for r in store.query("SELECT model_source FROM runs").to_pylist())
    # the claims of the paper on this pair (null model vs the file), recomputed here from the tables
    claims = run_cli_in_process("claims", "tiny-gguf", "--trained", "local", "--warehouse", str(warehouse))
    assert claims.returncode == 0, claims.stdout[-2000:] + claims.stderr[-2000:]
    claims_directory = warehouse / "_artefacts" / "claims" / "tiny-gguf"
    claims_record = json.loads((claims_directory / "claims.json").read_text())
    # the same claims from the small frames kept beside (then without the warehouse): a study run over several
    # sessions keeps each session's checkpoints there and is judged from them all
    inputs, simex_inputs = warehouse.parent / "claims-inputs", warehouse.parent / "simex-inputs"
    for source in (("--warehouse", str(warehouse), "--save-inputs", str(inputs)), ("--inputs", str(inputs))):
        output = inputs.parent / f"claims-from-{source[-2].strip('-')}"
        again = run_cli_in_process("claims", "tiny-gguf", "--trained", "local", *source, "--simex-inputs",
                                   str(simex_inputs), "--output", str(output))
        assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
        assert json.loads((output / "claims.json").read_text()) == claims_record, source
        assert (output / "claims.md").read_text() == (claims_directory / "claims.md").read_text()
    # the same claims from the same files on an object store (the session's S3 server)
    put_published_generation(warehouse, ObjectStore(s3_warehouse))
    over_s3 = run_cli_in_process("claims", "tiny-gguf", "--trained", "local", "--warehouse", str(s3_warehouse),
                                 "--output", str(inputs.parent / "claims-over-s3"),
                                 env={**os.environ, **s3_environment})
    assert over_s3.returncode == 0, over_s3.stderr[-2000:]
    assert json.loads((inputs.parent / "claims-over-s3" / "claims.json").read_text()) == claims_record
    assert sorted(path.name for path in inputs.iterdir()) == [".lock", "init", "init-quantized", "local"]
    assert sorted(path.name for path in simex_inputs.iterdir()) == [".lock", "simex-x0", "simex-x2-1"]
    # the kept frames have exactly the columns a kept folder is checked against (claims_inputs.COLUMNS)
    from resdyn.dagster_project.study.claims_inputs import COLUMNS, claims_inputs, keep_claims_inputs

    frames = claims_inputs(store, "tiny-gguf")
    assert {name: tuple(frame.columns) for name, frame in frames.items()} == COLUMNS
    assert claims_record["warnings"] == []  # one warehouse, one code version, one set of settings
    # the lost drill on these real frames: another file of another width is refused, the kept study untouched
    kept = {path: path.read_bytes() for path in inputs.rglob("*.parquet")}
    other = {**frames, "partitions": frames["partitions"].with_columns(d_model=pl.col("d_model") * 2,
                                                                       source_sha256=pl.lit("f" * 64))}
    with pytest.raises(ValueError, match="nothing was written"):
        keep_claims_inputs(other, inputs)
    assert {path: path.read_bytes() for path in inputs.rglob("*.parquet")} == kept
    # and with a second real warehouse (the session's m@local: another model, d = 32), through the CLI
    second = run_cli_in_process("claims", "m", "--warehouse", str(built[1]), "--save-inputs", str(inputs),
                  "--output", str(inputs.parent / "claims-of-m"))
    assert second.returncode == 2 and "nothing was written" in second.stderr, second.stdout[-2000:] + second.stderr
    assert second.stderr.strip().count("\n") == 0
    assert {path: path.read_bytes() for path in inputs.rglob("*.parquet")} == kept
    verdicts = {claim["key"]: claim["verdict"] for claim in claims_record["claims"]}
    from resdyn.claims import VERDICTS as RULE_VERDICTS
    from resdyn.claims import rules_table

    assert set(verdicts.values()) <= set(RULE_VERDICTS)
    primary = {claim["key"] for claim in claims_record["claims"] if claim["primary"]}
    assert {"early_rotation", "spectral_gradient_attn", "spectral_gradient_mlp", "late_near_symmetric",
            "init_near_symmetric", "training_adds_rotation", "cumulative_bottleneck", "bottleneck_learned",
            "surgery_dissolves", "coupling_near_symmetric", "coupling_strongly_non_normal", "coupling_absent_at_init",
            "coupling_learned", "community_coupling_near_symmetric", "community_coupling_strongly_non_normal",
            "community_coupling_learned", "surgery_installed_by_training",
            "community_coupling_operator_dependence"} == primary
    # every row says why and which sentence of PAPER.md it reads; the SIMEX set's baseline and one draw are read but
    # are too few for rules v5's extrapolation to zero rounding, which the record says
    assert all(claim["why"] and claim["reads"] for claim in claims_record["claims"])
    assert claims_record["simex_checkpoints"] == ["simex-x0", "simex-x2-1"]
    assert all(c["zero_rounding"] == "n/a" for c in claims_record["claims"])
    assert "at least 5 draws at each of at least 3 doses" in claims_record["zero_rounding_note"] and \
        "1 at 2x" in claims_record["zero_rounding_note"]
    assert (claims_directory / "coupling_power.parquet").is_file()
    assert claims_record["rules"] == {key: {"version": v, "rule": text} for key, (v, text) in rules_table().items()}
    assert set(claims_record["settings_hash"]) >= {"init", "local"}
    # the quantization control is the third checkpoint: its measures beside the null model's
    assert claims_record["quantized_null_checkpoint"] == "init-quantized"
    init_symmetry = next(c for c in claims_record["claims"] if c["key"] == "init_near_symmetric")
    assert init_symmetry["quantized_null_estimate"]["value"] != init_symmetry["null_estimate"]["value"]
    # every verdict that rests on the samples carries their interval (the tiny model runs with folds)
    rotation = next(c for c in claims_record["claims"] if c["key"] == "early_rotation")["trained_estimate"]
    assert rotation["sample_low"] is not None and rotation["sample_low"] <= rotation["value"] <= rotation["sample_high"]
    ranks = {r["checkpoint"]: r for r in store.query(
        "SELECT checkpoint, arg_min(effective_rank, depth) AS first, arg_max(effective_rank, depth) AS last "
        "FROM cumulative_rank GROUP BY checkpoint").to_pylist()}
    bottleneck = next(claim for claim in claims_record["claims"] if claim["key"] == "cumulative_bottleneck")
    assert bottleneck["trained_estimate"]["value"] == pytest.approx(ranks["local"]["first"] / ranks["local"]["last"])
    report = run_cli_in_process("report", "--warehouse", str(warehouse))
    assert report.returncode == 0 and "tiny-gguf: init vs local" in (warehouse / "report.html").read_text()
    record = warehouse / "_models" / "tiny-gguf" / "local" / IMPORT_RECORD
    stamp = record.stat().st_mtime_ns

    again = run_cli_in_process("run", "--model", str(path), *settings, "--warehouse", str(warehouse), "--select",
                    "key:model_checkpoints")
    assert again.returncode == 0 and record.stat().st_mtime_ns == stamp  # unchanged: not imported again
    # a changed file: tests/system/test_stale_sources.py (imported again, and what was derived from it remade)
