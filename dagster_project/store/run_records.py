"""The ``runs`` table: one row per run and partition, what made its tables (settings, corpus, code, model
source, machine) and how it ended. Written when a run's first step for a partition starts and rewritten as it
ends (:mod:`resdyn.dagster_project.asset_layer.partition_run`); read by ``--resume``, ``check`` and the claims.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import platform
import socket
import subprocess

from resdyn.dagster_project.configuration.config import REPOSITORY_ROOT
from resdyn.dagster_project.store.leases import now

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def code_environment() -> dict:
    """Versions of the code that computes (package, git commit, libraries), once per process."""
    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    commit = ""
    if (REPOSITORY_ROOT / ".git").exists():
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPOSITORY_ROOT, capture_output=True, text=True,
                                    timeout=10).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPOSITORY_ROOT,
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            commit += "+dirty" if dirty else ""
        except (OSError, subprocess.SubprocessError):
            commit = ""
    return {"resdyn_version": version("resdyn"), "git_commit": commit, "torch_version": version("torch"),
            "transformers_version": version("transformers"), "dagster_version": version("dagster"),
            "python_version": platform.python_version(), "host": socket.gethostname()}


@functools.lru_cache(maxsize=4)
def corpus_record(directory: str | None) -> dict:
    """The analysis corpus, resolved once per process (and setting), by label and content hash."""
    from resdyn.corpus import load_wikitext

    corpus = load_wikitext("test", directory=directory)
    return {"corpus": corpus.label, "corpus_sha256": hashlib.sha256(corpus.text.encode()).hexdigest()[:16]}


def model_source(registry, model: str, checkpoint: str) -> str:
    """The registry's account of a partition's checkpoint, as JSON (``runs.model_source``)."""
    from resdyn.models.sources import directory_fingerprint, registered_origin

    try:
        spec, revision = registry.resolve(f"{model}@{checkpoint}")
    except KeyError:
        return json.dumps({"source": None, "error": "not in the registry"})
    origin = {key: value for key, value in registered_origin(spec, checkpoint).as_dict().items() if value}
    fingerprint = directory_fingerprint(spec.source)  # a local directory: --resume sees it rewritten in place
    return json.dumps({"source": spec.source, "family": spec.family, "revision": revision, **origin,
                       **({"init_config": spec.init_config} if spec.init_config else {}),
                       **({"directory_fingerprint": fingerprint} if fingerprint else {})}, sort_keys=True)


def map_conventions(registry, model: str, checkpoint: str) -> str | None:
    """What the family's sublayer maps hold fixed, as JSON (``runs.map_conventions``)."""
    from resdyn.models.adapters import adapter_for

    try:
        spec, _ = registry.resolve(f"{model}@{checkpoint}")
        return json.dumps(adapter_for(spec.family).conventions, sort_keys=True)
    except (KeyError, ValueError):
        return None


def record_run_row(store, model: str, checkpoint: str, settings_values: dict, executor: str,
            corpus_directory: str | None, **fields) -> None:
    existing = {r["run_id"]: r for r in store.run_records(model, checkpoint)}.get(store.run_id)
    registry = None if existing else store.registry()  # read once (on an object store: a GET of registry.json)
    row = existing or {
        "run_id": store.run_id, "settings_hash": store.settings_hash, "settings": json.dumps(settings_values,
                                                                                             sort_keys=True),
        **corpus_record(corpus_directory), "dtype": settings_values["dtype"],
        "backend": settings_values["backend"], "device": settings_values["device"], "executor": executor,
        "model_source": model_source(registry, model, checkpoint),
        "map_conventions": map_conventions(registry, model, checkpoint), **code_environment(),
        "tables_code_version": TABLES_CODE_VERSION, "pid": os.getpid(),
        "started_at": now(), "ended_at": None, "status": "started", "error": None,
    }
    store.record_run(model, checkpoint, {**row, **fields})


# every asset's code version, hashed: set by assets_index when it collects the assets (every process that runs a
# step has), so that this module need not import the assets above it
TABLES_CODE_VERSION: str | None = None
