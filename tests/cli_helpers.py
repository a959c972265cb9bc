"""Driving the real CLI on a small random-init Llama saved to disk (shared by the pipeline and system tiers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from resdyn.dagster_project.store.warehouse import Warehouse
from resdyn.models.byte_tokenizer import build_byte_tokenizer
from resdyn.models.tiny_configs import tiny_config

REPOSITORY = Path(__file__).resolve().parents[1]
RESDYN = [sys.executable, "-m", "resdyn"]
QUICK = ["--seq-len", "12", "--per-sample", "2", "--leiden-seeds", "2", "--permutations", "50", "--log-level", "ERROR"]


def save_model(directory: Path, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(tiny_config("llama", hidden_size=32, n_layers=2)).save_pretrained(directory)
    build_byte_tokenizer().save_pretrained(directory)
    return directory


def environment(**extra) -> dict:
    values = {key: value for key, value in os.environ.items() if not key.startswith("RESDYN_") or
              key in ("RESDYN_WIKITEXT_DIR", "RESDYN_WIKITEXT_TOKENIZED_DIR")}
    values.pop("DAGSTER_HOME", None)
    return {**values, **extra}


def run_cli(*arguments, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([*RESDYN, *arguments], cwd=REPOSITORY, env=env or environment(), capture_output=True,
                          text=True, timeout=timeout)


def partition_state(root: Path, model: str = "m") -> dict:
    rows = Warehouse(root).query(f"SELECT * FROM partitions WHERE model = '{model}'").to_pylist()
    return rows[0] if rows else {}


def run_ids_by_table(root: Path, model: str = "m") -> dict:
    store = Warehouse(root)
    manifest = store.manifest(model, "local")
    return {table: entry["run_id"] for table, entry in manifest["tables"].items()}


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def published_side_files(root: Path) -> set:
    """Files outside a run's staging and the Dagster instance (whose SQLite journal churns)."""
    return {path for path in root.rglob("*") if path.is_file() and not {"_staging", "_dagster_home"} & set(path.parts)}
