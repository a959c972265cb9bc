"""Resources: where the data lives and how the analysis is sized, made from a StudyConfig (dagster_project/launch.py).

``AnalysisSettings`` is generated from :data:`resdyn.dagster_project.settings.SETTINGS` (one field per
setting, same default), so the CLI, the UI and the tests share one definition of every setting.
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


def _settings_class():
    annotations = {setting.name: setting.kind for setting in SETTINGS}
    namespace = {"__annotations__": annotations, "__module__": __name__,
                 "__doc__": "How the analysis is sized and computed: one field per setting of "
                            "dagster_project/settings.py (flag, variable, default and meaning there).",
                 **{setting.name: setting.default for setting in SETTINGS}}

    def values(self) -> dict:
        """Every setting's value, checked (a bad value typed into run config fails here, before any write)."""
        return validate({setting.name: getattr(self, setting.name) for setting in SETTINGS})

    def hash(self) -> str:
        return settings_hash(self.values())

    namespace.update(values=values, hash=hash)
    return type("AnalysisSettings", (dg.ConfigurableResource,), namespace)


AnalysisSettings = _settings_class()
