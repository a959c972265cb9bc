"""Resources: where the warehouse lives and how the analysis is sized, configured through EnvVar.

``AnalysisSettings`` is generated from :data:`resdyn.dagster_project.settings.SETTINGS` (one field per
setting, same default), so the CLI, the UI and the tests share one definition of every setting.
"""

from __future__ import annotations

import os

import dagster as dg

from resdyn.models.registry import ModelRegistry

from .settings import SETTINGS, WAREHOUSE_VARIABLE, SettingError, resolve, settings_hash, validate
from .warehouse import Warehouse


class WarehouseResource(dg.ConfigurableResource):
    """The Parquet root (``RESDYN_WAREHOUSE``, default ``warehouse/`` in the repository)."""

    root: str = ""

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


def _environment(variable: str, kind: type):
    """EnvVar (resolved by Dagster, shown in the UI) for a variable that is set; None otherwise."""
    if os.environ.get(variable, "") == "":
        return None
    return dg.EnvVar.int(variable) if kind is int else (dg.EnvVar.float(variable) if kind is float else dg.EnvVar(variable))


def default_resources() -> dict:
    """Resources for ``dagster dev``: every RESDYN_* variable checked now, so a bad one is named at load time."""
    try:
        resolve()
    except SettingError as error:
        raise SettingError(f"resdyn settings: {error}") from None
    settings = {setting.name: value for setting in SETTINGS
                if (value := _environment(setting.variable, setting.kind)) is not None}
    root = _environment(WAREHOUSE_VARIABLE, str)
    return {
        "warehouse": WarehouseResource(root=root) if root is not None else WarehouseResource(),
        "settings": AnalysisSettings(**settings),
    }
