"""Resources: where the data lives and how the analysis is sized, made from a StudyConfig (dagster_project/launch/study_definitions.py).

``AnalysisSettings`` declares one field per setting of :data:`resdyn.dagster_project.configuration.settings.SETTINGS`
(written out for go-to-definition and type checks), its default read from there: each default is written once,
in settings.py (tests/unit/test_settings.py keeps the fields and their types equal to SETTINGS), so the CLI,
the UI and the tests share one definition of every setting.
"""

from __future__ import annotations

import dagster as dg

from resdyn.dagster_project.configuration.settings import SETTINGS, settings_hash, validate
from resdyn.dagster_project.store import open_warehouse
from resdyn.models.registry import ModelRegistry

DEFAULTS = {setting.name: setting.default for setting in SETTINGS}


class WarehouseResource(dg.ConfigurableResource):
    """Where the data lives: the Parquet root, and the corpus directories (StudyConfig: flag > variable > default)."""

    root: str = ""
    wikitext_directory: str = ""  # holds wiki.test.raw (else: datasets, else the fallback corpus)
    wikitext_tokenized_directory: str = ""  # holds valid.txt, the tiny suite's training text

    def open(self, run_id: str | None = None, settings_hash: str = "", identities: dict | None = None):
        """The warehouse (a folder's or an object store's); with ``run_id``, writes are that run's and reads see its
        own staged tables before published ones, each table recorded with its identity in ``identities``."""
        return open_warehouse(self.root or None, run_id=run_id, settings_hash=settings_hash, identities=identities)

    def registry(self) -> ModelRegistry:
        return self.open().registry()


class AnalysisSettings(dg.ConfigurableResource):
    """How the analysis is sized and computed: one field per setting of dagster_project/configuration/settings.py (flag,
    variable, default, check and meaning there; a test keeps these fields and defaults equal to SETTINGS)."""

    n_samples: int = DEFAULTS["n_samples"]
    sequence_length: int = DEFAULTS["sequence_length"]
    seed: int = DEFAULTS["seed"]
    bos: str = DEFAULTS["bos"]
    positions: str = DEFAULTS["positions"]
    warmup: int = DEFAULTS["warmup"]
    batch_size: int = DEFAULTS["batch_size"]
    dtype: str = DEFAULTS["dtype"]
    backend: str = DEFAULTS["backend"]
    device: str = DEFAULTS["device"]
    workers: int = DEFAULTS["workers"]
    per_sample_subsample: int = DEFAULTS["per_sample_subsample"]
    graph_construction: str = DEFAULTS["graph_construction"]
    graph_k: int = DEFAULTS["graph_k"]
    graph_threshold: float = DEFAULTS["graph_threshold"]
    leiden_seeds: int = DEFAULTS["leiden_seeds"]
    n_permutations: int = DEFAULTS["n_permutations"]
    folds: int = DEFAULTS["folds"]
    fold_max_width: int = DEFAULTS["fold_max_width"]

    def values(self) -> dict:
        """Every setting's value, checked (a bad value typed into run config fails here, before any write)."""
        return validate({setting.name: getattr(self, setting.name) for setting in SETTINGS})

    def hash(self) -> str:
        return settings_hash(self.values())
