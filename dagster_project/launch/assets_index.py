"""Every asset of the study, collected from the modules of ``assets/``: the one place in dagster_project that
imports them. A new asset module is found here without being listed (docs/architecture.md, adding an asset)."""

import hashlib
import importlib
import json
import pkgutil

import dagster as dg

from resdyn.dagster_project.asset_layer.partition_assets import PartitionAsset
from resdyn.dagster_project.store import run_records
from resdyn.dagster_project.store.table_identity import DECLARATIONS_FILE, declarations_text


def _collect() -> tuple[list[PartitionAsset], list[dg.AssetsDefinition]]:
    """(partitioned assets, unpartitioned assets) defined at the top of any module of ``resdyn.assets``, each
    once, in module-name then definition order."""
    import resdyn.assets as package

    partitioned, unpartitioned, seen = [], [], set()
    for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda found: found.name):
        module = importlib.import_module(f"{package.__name__}.{module_info.name}")
        for value in vars(module).values():
            if id(value) in seen:
                continue
            if isinstance(value, PartitionAsset):
                partitioned.append(value)
            elif isinstance(value, dg.AssetsDefinition):
                unpartitioned.append(value)
            else:
                continue
            seen.add(id(value))
    return partitioned, unpartitioned


# partitioned assets (PartitionAsset: their definitions are made per configuration, launch.study_assets)
PARTITION_ASSETS, STUDY_ASSETS = _collect()  # STUDY_ASSETS: unpartitioned (group study), across partitions
ALL_ASSETS = [asset.definition() for asset in PARTITION_ASSETS]  # without step tags: keys, groups, selections


def tables_code_version() -> str:
    """A short hash of every partitioned asset's code version (``runs.tables_code_version``): an asset's version
    is bumped when what its table holds changes, so two partitions made at different hashes may differ for that
    reason alone."""
    versions = sorted((key.to_user_string(), version or "") for asset in ALL_ASSETS
                      for key, version in asset.code_versions_by_key.items())
    return hashlib.sha256(json.dumps(versions).encode()).hexdigest()[:12]


run_records.TABLES_CODE_VERSION = tables_code_version()  # what every run records (runs.tables_code_version)


def write_stage_declarations() -> bool:
    """Write store/stage_declarations.json from the assets (what a process that does not import them reads);
    True when it changed."""
    text = declarations_text({asset.name: asset.declaration for asset in PARTITION_ASSETS})
    if DECLARATIONS_FILE.is_file() and DECLARATIONS_FILE.read_text() == text:
        return False
    DECLARATIONS_FILE.write_text(text)
    return True


if __name__ == "__main__":
    print(f"{'rewrote' if write_stage_declarations() else 'unchanged:'} {DECLARATIONS_FILE}")

__all__ = ["ALL_ASSETS", "PARTITION_ASSETS", "STUDY_ASSETS", "tables_code_version", "write_stage_declarations"]
