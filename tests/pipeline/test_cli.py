"""The CLI on a model the suite did not train, SQL in and out, and clear errors."""

import re

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from resdyn.dagster_project.interface.cli import main
from resdyn.dagster_project.store.warehouse import Warehouse
from resdyn.models.byte_tokenizer import build_byte_tokenizer
from resdyn.models.tiny_configs import tiny_config


def test_run_on_a_saved_model_directory_then_sql(tmp_path, capsys, fresh_seed):
    torch.manual_seed(fresh_seed)
    directory = tmp_path / "my-gemma"
    AutoModelForCausalLM.from_config(tiny_config("gemma3", hidden_size=32, n_layers=2)).save_pretrained(directory)
    build_byte_tokenizer().save_pretrained(directory)
    warehouse = tmp_path / "warehouse"
    code = main(["run", "--model", str(directory), "--samples", "6", "--seq-len", "16",
                 "--warehouse", str(warehouse), "--log-level", "WARNING"])
    output = capsys.readouterr().out
    assert code == 0, output
    assert "registered my-gemma" in output
    passed = re.search(r"checks (\d+)/(\d+) passed", output)
    assert passed and passed.group(1) == passed.group(2) and int(passed.group(2)) >= 6, output
    rows = Warehouse(warehouse).query("SELECT model, checkpoint, family, d_model, n_layers FROM model_checkpoints")
    assert rows.to_pylist() == [{"model": "my-gemma", "checkpoint": "local", "family": "gemma3",
                                 "d_model": 32, "n_layers": 2}]
    assert main(["sql", "SELECT count(*) AS n FROM jacobians", "--warehouse", str(warehouse), "--csv"]) == 0
    assert capsys.readouterr().out.strip().splitlines() == ['"n"', str(2 * 2 * 32)]
    assert main(["models", "--warehouse", str(warehouse)]) == 0
    assert "my-gemma@local" in capsys.readouterr().out


def test_clear_errors_for_unknown_models(tmp_path, capsys):
    assert main(["run", "--model", str(tmp_path / "nowhere"), "--warehouse", str(tmp_path)]) == 2
    assert "no model directory" in capsys.readouterr().err
    assert main(["run", "--model", "tiny-llama", "--checkpoint", "step-999", "--warehouse", str(tmp_path)]) != 0
    assert main(["sql", "no_such_file.sql", "--warehouse", str(tmp_path)]) != 0


def test_registered_paper_model_fails_clearly_without_its_weights(tmp_path, capsys):
    code = main(["run", "--model", "olmo-3-7b", "--checkpoint", "stage1-step0", "--warehouse", str(tmp_path),
                 "--log-level", "CRITICAL"])
    output = capsys.readouterr().out
    assert code == 1
    assert "olmo-3-7b@stage1-step0 FAILED" in output
    assert "hf download allenai/Olmo-3-1025-7B --revision stage1-step0" in output


def test_gemma4_with_per_layer_inputs_and_shared_kv_runs_structured_and_equals_autodiff(tmp_path, capsys,
                                                                                          fresh_seed):
    from ..pipeline_helpers import read_mean_jacobians
    from ..tiny_models import random_tiny_model

    directory = tmp_path / "gemma4"
    random_tiny_model("gemma4", fresh_seed, n_layers=4, layer_types=["sliding_attention", "full_attention"] * 2,
                      num_kv_shared_layers=2, sliding_window=5).save_pretrained(directory)
    build_byte_tokenizer().save_pretrained(directory)
    means = {}
    for backend in ("structured", "autodiff"):
        warehouse = tmp_path / backend
        code = main(["run", "--model", str(directory), "--samples", "5", "--seq-len", "12", "--backend", backend,
                     "--per-sample", "1", "--leiden-seeds", "2", "--permutations", "50", "--warehouse",
                     str(warehouse), "--log-level", "ERROR"])
        assert code == 0, capsys.readouterr().out[-3000:]
        store = Warehouse(warehouse)
        assert store.query("SELECT DISTINCT backend FROM jacobians").to_pylist() == [{"backend": backend}]
        means[backend] = read_mean_jacobians(store, "gemma4", "local")
    assert set(means["structured"]) == set(means["autodiff"]) and len(means["autodiff"]) == 8
    worst = max(float(np.abs(means["structured"][key] - means["autodiff"][key]).max()) for key in means["autodiff"])
    assert worst <= 1e-10, worst


def test_select_runs_part_of_a_partition_then_the_rest_from_its_tables(tmp_path, capsys, fresh_seed, monkeypatch):
    """--select 'group:inputs or group:measurements' writes only the model's tables (on the multiprocess
    executor: each partition's run in a process of its own, each step in a subprocess); a second run selecting
    key:layer_metrics (its whole step) reads those jacobians back, and its spectral radii equal numpy's."""
    from ..pipeline_helpers import read_mean_jacobians

    torch.manual_seed(fresh_seed)
    directory = tmp_path / "my-llama"
    AutoModelForCausalLM.from_config(tiny_config("llama", hidden_size=16, n_layers=2)).save_pretrained(directory)
    build_byte_tokenizer().save_pretrained(directory)
    warehouse = tmp_path / "warehouse"
    common = ["--model", str(directory), "--samples", "4", "--seq-len", "12", "--warehouse", str(warehouse),
              "--log-level", "WARNING"]
    monkeypatch.delenv("DAGSTER_HOME", raising=False)  # a persistent instance beside the warehouse
    monkeypatch.delenv("RESDYN_EXECUTOR", raising=False)
    assert main(["run", *common, "--select", "group:inputs or group:measurements", "--executor", "multiprocess"]) == 0
    monkeypatch.setenv("RESDYN_EXECUTOR", "in_process")
    output = capsys.readouterr().out
    passed = re.search(r"checks (\d+)/(\d+) passed", output)
    assert passed and passed.group(1) == passed.group(2) and int(passed.group(2)) >= 3, output
    assert "spectral_analysis" not in output and "measurements" in output, output
    store = Warehouse(warehouse)
    assert not store.partition_directory("layer_metrics", "my-llama", "local").exists()
    assert store.query("SELECT DISTINCT executor FROM runs").column("executor").to_pylist() == ["multiprocess"]

    assert main(["run", *common, "--select", "key:layer_metrics"]) == 0
    output = capsys.readouterr().out
    assert "spectral_analysis" in output and "measurements" not in output, output
    rows = store.query("SELECT layer, sublayer, spectral_radius FROM layer_metrics ORDER BY depth").to_pylist()
    jacobians = read_mean_jacobians(store, "my-llama", "local")
    assert [(row["layer"], row["sublayer"]) for row in rows] == list(jacobians)
    for row, matrix in zip(rows, jacobians.values(), strict=True):
        assert row["spectral_radius"] == pytest.approx(np.abs(np.linalg.eigvals(matrix)).max(), rel=1e-10)


def test_bad_selection_is_a_clear_error(tmp_path, capsys):
    assert main(["run", "--suite", "tiny", "--select", "group:nonexistent", "--warehouse", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert "names none of a partition's assets" in error and "measurements" in error, error
    assert main(["run", "--suite", "tiny", "--select", "((", "--warehouse", str(tmp_path)]) == 2
    assert "is not an asset selection" in capsys.readouterr().err
