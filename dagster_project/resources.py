"""Resources: where the data lives and how the analysis is sized, made from a StudyConfig (dagster_project/launch.py).

``AnalysisSettings`` declares one field per setting of :data:`resdyn.dagster_project.settings.SETTINGS`, with
the same default (tests/unit/test_settings.py keeps them equal), so the CLI, the UI and the tests share one
definition of every setting.
"""

from __future__ import annotations

import dagster as dg

from resdyn.models.registry import ModelRegistry

from .settings import SETTINGS, settings_hash, validate
from .store.warehouse import Warehouse


class WarehouseResource(dg.ConfigurableResource):
    """Where the data lives: the Parquet root, and the corpus directories (StudyConfig: flag > variable > default)."""

    root: str = ""
    wikitext_directory: str = ""  # holds wiki.test.raw (else: datasets, else the fallback corpus)
    wikitext_tokenized_directory: str = ""  # holds valid.txt, the tiny suite's training text

    def open(self, run_id: str | None = None) -> Warehouse:
        """The warehouse; with ``run_id``, reads see that run's own staged tables before published ones."""
        return Warehouse(self.root or None, run_id=run_id)

    def registry(self) -> ModelRegistry:
        return ModelRegistry(self.open().registry_file)


class AnalysisSettings(dg.ConfigurableResource):
    """How the analysis is sized and computed: one field per setting of dagster_project/settings.py (flag,
    variable, default, check and meaning there; a test keeps these fields and defaults equal to SETTINGS)."""

    n_samples: int = 128
    sequence_length: int = 64
    seed: int = 0
    bos: str = "auto"
    positions: str = "last"
    warmup: int = 16
    batch_size: int = 16
    dtype: str = "float64"
    backend: str = "structured"
    device: str = "auto"
    workers: int = 0
    per_sample_subsample: int = 8
    graph_construction: str = "knn"
    graph_k: int = 0
    graph_threshold: float = 0.3
    leiden_seeds: int = 5
    n_permutations: int = 1000
    folds: int = 8
    fold_max_width: int = 1024

    def values(self) -> dict:
        """Every setting's value, checked (a bad value typed into run config fails here, before any write)."""
        return validate({setting.name: getattr(self, setting.name) for setting in SETTINGS})

    def hash(self) -> str:
        return settings_hash(self.values())
