"""Resources: where the warehouse lives and how the analysis is sized, configured through EnvVar."""

from __future__ import annotations

import os

import dagster as dg

from resdyn.models.registry import ModelRegistry

from .warehouse import Warehouse


class WarehouseResource(dg.ConfigurableResource):
    """The Parquet root (``RESDYN_WAREHOUSE``, default ``warehouse/`` in the repository)."""

    root: str = ""

    def open(self) -> Warehouse:
        return Warehouse(self.root or None)

    def registry(self) -> ModelRegistry:
        return ModelRegistry(self.open().registry_file)


class AnalysisSettings(dg.ConfigurableResource):
    """How many samples, how long, which positions, which precision and backend."""

    n_samples: int = 128
    sequence_length: int = 64
    seed: int = 0
    positions: str = "last"  # or "all" (every position from ``warmup`` on)
    warmup: int = 16
    batch_size: int = 16
    dtype: str = "float64"
    backend: str = "structured"  # closed-form means where they apply, autodiff elsewhere
    device: str = "auto"  # auto = cuda when available, else cpu
    workers: int = 0  # processes for spectral and topology work; 0 = one per core
    per_sample_subsample: int = 8
    graph_construction: str = "knn"  # or "threshold", "dense"
    graph_k: int = 0  # 0: min(30, max(5, d_model // 4))
    graph_threshold: float = 0.3
    leiden_seeds: int = 5
    n_permutations: int = 1000


def _environment(name: str, default):
    """EnvVar when the variable is set (resolved by Dagster at run time), else the default."""
    if name not in os.environ:
        return default
    return dg.EnvVar.int(name) if isinstance(default, int) else dg.EnvVar(name)


def default_resources() -> dict:
    settings = {
        "n_samples": _environment("RESDYN_SAMPLES", 128),
        "sequence_length": _environment("RESDYN_SEQ_LEN", 64),
        "seed": _environment("RESDYN_SEED", 0),
        "positions": _environment("RESDYN_POSITIONS", "last"),
        "dtype": _environment("RESDYN_DTYPE", "float64"),
        "backend": _environment("RESDYN_BACKEND", "structured"),
        "device": _environment("RESDYN_DEVICE", "auto"),
        "workers": _environment("RESDYN_WORKERS", 0),
        "graph_construction": _environment("RESDYN_GRAPH", "knn"),
    }
    return {
        "warehouse": WarehouseResource(root=_environment("RESDYN_WAREHOUSE", "")),
        "settings": AnalysisSettings(**settings),
    }
