"""Putting a warehouse folder's published generation on an S3 server, for tests that compare reads over both."""

from __future__ import annotations

import json
from pathlib import Path

from resdyn.dagster_project.store.object_store import ObjectStore


def put_published_generation(root: Path, store: ObjectStore) -> None:
    """The published generation of the warehouse folder ``root`` (tables and figures), its runs table and its registry
    under the same keys on ``store``; each manifest entry gains the ETag its upload got, as a publication on the store
    records it."""
    for manifest_path in sorted(root.glob("_published/model=*/checkpoint=*.json")):
        manifest = json.loads(manifest_path.read_text())
        for entry in manifest["tables"].values():
            store.upload(root / entry["file"], entry["file"])
            entry["etag"] = store.info(entry["file"]).etag
        for file in manifest.get("figures", {}).values():
            store.upload(root / file, file)
        store.put(manifest_path.relative_to(root).as_posix(), json.dumps(manifest).encode())
    for path in sorted(root.glob("runs/model=*/checkpoint=*/*.parquet")):
        store.upload(path, path.relative_to(root).as_posix())
    if (root / "registry.json").is_file():
        store.put("registry.json", (root / "registry.json").read_bytes())
