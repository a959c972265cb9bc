"""Drill: a GGUF file changed in place. The checkpoints derived from it (its null model and their quantized control)
carry the file's sha256; a changed file makes them `stale` in `partitions`, `resdyn check` lists them, `resdyn
claims` refuses them naming the rerun, and the next `resdyn run` of the file remakes them. Also: claims never
compare a partition with itself or two checkpoints of different widths, and an unknown model is named as such."""

import json
from dataclasses import replace
from pathlib import Path

from resdyn.dagster_project.store.warehouse import Warehouse
from resdyn.models.gguf_import import IMPORT_RECORD, describe_gguf
from resdyn.models.registry import ModelRegistry

from ..cli_helpers import QUICK, run_cli, run_cli_in_process
from ..gguf_files import random_model, write_gguf

SMALL = ["--samples", "8", "--folds", "2", *QUICK]


def _statuses(warehouse: Path, model: str) -> dict:
    rows = Warehouse(warehouse).query(f"SELECT checkpoint, status FROM partitions WHERE model = '{model}'").to_pylist()
    return {row["checkpoint"]: row["status"] for row in rows}


def _origins(warehouse: Path, model: str, complete_only: bool = True) -> dict:
    rows = Warehouse(warehouse).query("SELECT checkpoint, d_model, source_sha256 FROM model_checkpoints "
                                      f"WHERE model = '{model}'", complete_only=complete_only).to_pylist()
    return {row["checkpoint"]: (row["d_model"], row["source_sha256"]) for row in rows}


MADE = ("local", "init", "init-quantized")  # what --null-model registers and runs (its SIMEX set runs with --simex)


def test_a_gguf_file_changed_in_place_makes_its_derived_checkpoints_stale_until_the_next_run(tmp_path, fresh_seed):
    warehouse, path = tmp_path / "warehouse", tmp_path / "W" / "t.gguf"
    path.parent.mkdir()
    write_gguf(random_model("llama", fresh_seed, hidden_size=32), path)
    # the first run only as far as the table that records each partition's origin (a whole run: below)
    first = run_cli_in_process("run", "--model", str(path), "--null-model", *SMALL, "--select",
                               "key:model_checkpoints", "--warehouse", str(warehouse))
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    old = describe_gguf(path).sha256
    assert _origins(warehouse, "t", complete_only=False) == {c: (32, old) for c in MADE}
    assert _statuses(warehouse, "t") == {c: "incomplete" for c in MADE}

    write_gguf(random_model("llama", fresh_seed + 1, hidden_size=64), path)  # another model, twice as wide
    new = describe_gguf(path).sha256
    # the state between registering the new file and remaking what came from the old one (as `resdyn run` registers
    # it before its partitions run; a run stopped there leaves exactly this)
    registry = ModelRegistry(warehouse / "registry.json")
    registry.add(replace(registry.get("t"), sha256=new))
    assert _statuses(warehouse, "t") == {c: "stale" for c in MADE}
    # figures that put the checkpoints side by side (notebook, report) mark each stale one in the legend
    assert Warehouse(warehouse).checkpoint_labels("t") == {c: f"{c} (stale: made from another file)" for c in MADE}
    check = run_cli_in_process("check", "--warehouse", str(warehouse))
    assert check.returncode == 1
    stale = [line for line in check.stdout.splitlines() if line.startswith("stale: ")]
    assert len(stale) == len(MADE) and all(old[:12] in line and new[:12] in line and "resdyn run --model t --checkpoint"
                                   in line for line in stale), check.stdout
    claims = run_cli("claims", "t", "--trained", "local", "--warehouse", str(warehouse))  # a process: one line
    assert claims.returncode == 2 and claims.stderr.count("\n") == 1, claims.stderr
    assert "no longer the one t is registered with" in claims.stderr and "`resdyn run --model t --checkpoint" in \
        claims.stderr

    again = run_cli_in_process("run", "--model", str(path), *SMALL, "--warehouse", str(warehouse))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "init, init-quantized made from another file: remade from this one" in again.stdout
    record = json.loads((warehouse / "_models" / "t" / "local" / IMPORT_RECORD).read_text())
    assert record["sha256"] == new
    assert _statuses(warehouse, "t") == {c: "complete" for c in MADE}
    assert _origins(warehouse, "t") == {c: (64, new) for c in MADE}
    assert run_cli_in_process("check", "--warehouse", str(warehouse)).returncode == 0
    assert Warehouse(warehouse).checkpoint_labels("t") == {c: c for c in MADE}
    claims = run_cli_in_process("claims", "t", "--trained", "local", "--warehouse", str(warehouse))
    assert claims.returncode == 0, claims.stderr[-2000:]

    itself = run_cli_in_process("claims", "t", "--null", "local", "--trained", "local", "--warehouse", str(warehouse))
    assert itself.returncode == 2 and "both name t@local" in itself.stderr and itself.stderr.count("\n") == 1
    unknown = run_cli_in_process("claims", "nosuch", "--warehouse", str(warehouse))
    assert unknown.returncode == 2 and "not a registered model; the models there: t" in unknown.stderr
    assert "resdyn run --model nosuch" not in unknown.stderr



def test_claims_refuse_two_checkpoints_of_different_widths(tmp_path):
    """A model directory changed in place between two labels (same source, another width): the claims refuse to
    compare the two checkpoints, naming both widths."""
    from transformers import AutoModelForCausalLM

    from resdyn.models.byte_tokenizer import build_byte_tokenizer
    from resdyn.models.tiny_configs import tiny_config

    warehouse, directory = tmp_path / "warehouse", tmp_path / "m"
    for width, label in ((32, "before"), (48, "after")):
        AutoModelForCausalLM.from_config(tiny_config("llama", hidden_size=width, n_layers=2)).save_pretrained(directory)
        build_byte_tokenizer().save_pretrained(directory)
        run = run_cli_in_process("run", "--model", str(directory), "--checkpoint", label, *SMALL, "--warehouse",
                                 str(warehouse))
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    claims = run_cli_in_process("claims", "m", "--null", "before", "--trained", "after", "--warehouse", str(warehouse))
    assert claims.returncode == 2 and claims.stderr.count("\n") == 1, claims.stderr
    assert "made from different models (before: d = 32, after: d = 48)" in claims.stderr
