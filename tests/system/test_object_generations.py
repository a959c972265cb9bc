"""A partition's tables on a real S3 server (SeaweedFS, the ``s3_server`` fixture), published as generations: the
same files as on disk, staged tables invisible until one manifest put, publishers that never lose each other's
tables, a writer killed mid-publication leaving a consistent partition and leftovers a sweep removes, and reads that
refuse an object that is not the one published."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import numpy as np
import pytest

from resdyn.dagster_project.store.errors import CorruptPartitionError
from resdyn.dagster_project.store.object_generations import ObjectTables, manifest_key, staging_prefix
from resdyn.dagster_project.store.object_store import ObjectStore, ObjectStoreError
from resdyn.dagster_project.store.schema import rows_table
from resdyn.dagster_project.store.warehouse import Warehouse


def _singular_values(rng, n_rows: int, mark: float | None = None):
    sigma = rng.standard_normal(n_rows) if mark is None else np.full(n_rows, mark)
    return rows_table("singular_values", [{"layer": i % 7, "sublayer": "attn" if i % 2 else "mlp", "depth": i % 14,
                                           "idx": i, "sigma": float(s)} for i, s in enumerate(sigma)])


def _eigenvalues(rng, n_rows: int, mark: float | None = None):
    values = rng.standard_normal((n_rows, 2)) if mark is None else np.full((n_rows, 2), mark)
    return rows_table("eigenvalues", [{"layer": 0, "sublayer": "mlp", "depth": 1, "idx": i, "re": float(a),
                                       "im": float(b), "modulus": float(np.hypot(a, b))}
                                      for i, (a, b) in enumerate(values)])


def test_a_run_on_s3_publishes_the_same_files_as_on_disk_and_reads_them_back(s3_warehouse, tmp_path):
    rng = np.random.default_rng()
    tables = {"singular_values": _singular_values(rng, int(rng.integers(50, 500))),
              "eigenvalues": _eigenvalues(rng, int(rng.integers(50, 500)))}
    disk = Warehouse(tmp_path / "warehouse", run_id="run-a", settings_hash="abc")
    s3 = ObjectTables(ObjectStore(s3_warehouse), run_id="run-a", settings_hash="abc")
    for name, table in tables.items():
        disk.write(name, "m", "c", table)
        s3.write(name, "m", "c", table)
    on_disk, on_s3 = disk.publish("m", "c"), s3.publish("m", "c")
    assert on_s3["generation"] == on_disk["generation"] == 1
    for name, table in tables.items():
        disk_entry, s3_entry = on_disk["tables"][name], on_s3["tables"][name]
        # the same writer, the same provenance: byte-equal files, so equal sha256 and size
        assert (s3_entry["sha256"], s3_entry["bytes"], s3_entry["rows"]) == \
               (disk_entry["sha256"], disk_entry["bytes"], disk_entry["rows"])
        assert s3_entry["file"] == disk_entry["file"]  # the same key as the folder's path
        assert s3.read(name, "m", "c").equals(disk.read(name, "m", "c"))
        assert s3.read(name, "m", "c", columns=list(table.column_names)).equals(table)
        assert s3.content_hash(name, "m", "c") == disk.content_hash(name, "m", "c")
        rows = sum(group.num_rows for group in s3.row_groups(name, "m", "c"))
        assert rows == table.num_rows
    assert not ObjectStore(s3_warehouse).list(staging_prefix("run-a", "m", "c"))  # staging emptied by publication


def test_staged_tables_are_invisible_until_the_one_manifest_put(s3_warehouse):
    rng = np.random.default_rng()
    store = ObjectStore(s3_warehouse)
    first = ObjectTables(store, run_id="run-1")
    for name, make in (("singular_values", _singular_values), ("eigenvalues", _eigenvalues)):
        first.write(name, "m", "c", make(rng, 40, mark=1.0))
    first.publish("m", "c")
    second = ObjectTables(store, run_id="run-2")
    for name, make in (("singular_values", _singular_values), ("eigenvalues", _eigenvalues)):
        second.write(name, "m", "c", make(rng, 40, mark=2.0))
    reader = ObjectTables(store)
    assert set(reader.read("singular_values", "m", "c")["sigma"].to_pylist()) == {1.0}  # staged: not seen
    assert set(reader.read("eigenvalues", "m", "c")["re"].to_pylist()) == {1.0}
    assert set(second.read("singular_values", "m", "c")["sigma"].to_pylist()) == {2.0}  # the run sees its own
    second.publish("m", "c")
    assert set(reader.read("singular_values", "m", "c")["sigma"].to_pylist()) == {2.0}
    assert set(reader.read("eigenvalues", "m", "c")["re"].to_pylist()) == {2.0}
    manifest = reader.manifest("m", "c")
    assert manifest["generation"] == 2
    assert manifest["previous"] == {name: f"{name}/model=m/checkpoint=c/run-1.parquet"
                                    for name in ("singular_values", "eigenvalues")}


def test_racing_publishers_never_lose_each_others_tables(s3_warehouse):
    """Writers without a run each publish one table of one partition at once: compare-and-swap on the manifest's ETag
    keeps every table (a lost update would drop one)."""
    rng = np.random.default_rng()
    names = ["singular_values", "eigenvalues", "cumulative_rank", "schur_surgery", "pseudospectra",
             "transient_growth"]
    data = {name: rows_table(name, []) if name not in ("singular_values", "eigenvalues") else
            (_singular_values if name == "singular_values" else _eigenvalues)(rng, 30) for name in names}
    barrier, errors = threading.Barrier(len(names)), []

    class AtOnce(ObjectStore):
        """Every publisher's first read of the manifest released together: all read the same (absent) manifest,
        so all but one lose their first compare-and-swap, every run (a lost update would drop a table)."""

        first = True

        def get(self, relative):
            if relative.startswith("_published/") and self.first:
                self.first = False
                barrier.wait(timeout=120)
            return super().get(relative)

    def publisher(name: str) -> None:
        tables = ObjectTables(AtOnce(s3_warehouse))
        try:
            tables.write(name, "m", "c", data[name])
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append((name, error))

    threads = [threading.Thread(target=publisher, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    manifest = ObjectTables(ObjectStore(s3_warehouse)).manifest("m", "c")
    assert set(manifest["tables"]) == set(names)
    assert manifest["generation"] == len(names)
    assert sorted(entry["generation"] for entry in manifest["tables"].values()) == list(range(1, len(names) + 1))


_PUBLISHER = """
import sys
import numpy as np
from resdyn.dagster_project.configuration.locations import parse_location
from resdyn.dagster_project.store.object_generations import ObjectTables
from resdyn.dagster_project.store.object_store import ObjectStore, ObjectStoreError
from resdyn.dagster_project.store.schema import rows_table

store = ObjectStore(parse_location(sys.argv[1]))
for generation in range(1, 10_000):
    tables = ObjectTables(store, run_id=f"run-{generation:05d}")
    for name in ("singular_values", "eigenvalues"):
        rows = [{"layer": 0, "sublayer": "mlp", "depth": 1, "idx": i, "sigma": float(generation)} for i in range(200)]
        if name == "eigenvalues":
            rows = [{"layer": 0, "sublayer": "mlp", "depth": 1, "idx": i, "re": float(generation), "im": 0.0,
                     "modulus": float(generation)} for i in range(200)]
        tables.write(name, "m", "c", rows_table(name, rows))
    tables.publish("m", "c")
"""


def _generation_seen(tables: ObjectTables) -> tuple[float, float]:
    return (set(tables.read("singular_values", "m", "c")["sigma"].to_pylist()).pop(),
            set(tables.read("eigenvalues", "m", "c")["re"].to_pylist()).pop())


def test_a_writer_killed_while_writing_and_publishing_leaves_one_generation_and_a_rerun_recovers(s3_warehouse, s3_environment):
    """Kill drill: a writer uploading, staging and publishing generation after generation is killed at a moment the
    test does not choose (after it has published at least twice: mostly amid uploads, sometimes between a manifest
    put and the removal of its staged entries); the partition shows one whole generation, the leftovers are swept,
    a rerun publishes over it."""
    store = ObjectStore(s3_warehouse)
    writer = subprocess.Popen([sys.executable, "-c", _PUBLISHER, str(s3_warehouse)],
                              env={**os.environ, **s3_environment})
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and writer.poll() is None:  # an event: two publications seen
            stored = store.get(manifest_key("m", "c"))
            if stored is not None and json.loads(stored.data)["generation"] >= 2:
                break
            time.sleep(0.05)
        time.sleep(float(np.random.default_rng().uniform(0, 0.5)))  # somewhere inside a later generation
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert writer.returncode == -signal.SIGKILL, "the writer ended by itself: the drill did not kill it"
    tables = ObjectTables(store)
    sigma, re = _generation_seen(tables)
    assert sigma == re >= 1  # both tables of the same generation: never a mix
    manifest = tables.manifest("m", "c")
    assert {entry["run_id"] for entry in manifest["tables"].values()} == {f"run-{int(sigma):05d}"}

    found = {item.relative for item in tables.leftovers(grace=timedelta(0))}
    removed = {item.relative for item in tables.sweep("m", "c", grace=timedelta(0))}
    assert removed == found
    named = {entry["file"] for entry in manifest["tables"].values()} | set(manifest["previous"].values())
    assert not removed & named  # what readers see is never swept
    left = {found.relative for table in ("singular_values", "eigenvalues")
            for found in store.list(f"{table}/model=m/checkpoint=c/")}
    assert left == named  # everything else is gone: unpublished tables of the killed run, older generations
    assert not store.list("_staging/")
    assert _generation_seen(tables) == (sigma, re)  # the sweep changed nothing a reader sees

    rerun = ObjectTables(store, run_id="rerun")
    rng = np.random.default_rng()
    rerun.write("singular_values", "m", "c", _singular_values(rng, 10, mark=-1.0))
    rerun.write("eigenvalues", "m", "c", _eigenvalues(rng, 10, mark=-1.0))
    rerun.publish("m", "c")
    assert _generation_seen(tables) == (-1.0, -1.0)


def test_an_object_that_is_not_the_one_published_is_refused_on_read(s3_warehouse):
    rng = np.random.default_rng()
    store = ObjectStore(s3_warehouse)
    tables = ObjectTables(store)
    tables.write("singular_values", "m", "c", _singular_values(rng, 300))
    entry = tables.manifest("m", "c")["tables"]["singular_values"]
    data = bytearray(store.get(entry["file"]).data)
    data[len(data) // 2] ^= 0xFF  # same size, one byte flipped, put in place by someone else
    store.put(entry["file"], bytes(data))
    with pytest.raises(CorruptPartitionError, match="sha256"):
        tables.read("singular_values", "m", "c")
    with pytest.raises(CorruptPartitionError, match="ETag"):
        next(tables.row_groups("singular_values", "m", "c"))
    store.delete(entry["file"])
    with pytest.raises(CorruptPartitionError, match="missing"):
        tables.read("singular_values", "m", "c")


def test_a_manifest_without_etags_is_read_by_size_and_a_swept_upload_is_never_published(s3_warehouse):
    """A folder copied to the store by other tools has manifests without ETags: reads check the size; and a staged
    table removed before its run publishes (a sweep, a person) makes the publication fail, never name a lost
    object."""
    rng = np.random.default_rng()
    store = ObjectStore(s3_warehouse)
    tables = ObjectTables(store)
    table = _singular_values(rng, 50)
    tables.write("singular_values", "m", "c", table)
    key = manifest_key("m", "c")
    manifest = json.loads(store.get(key).data)
    del manifest["tables"]["singular_values"]["etag"]
    store.put(key, json.dumps(manifest).encode())
    assert sum(group.num_rows for group in tables.row_groups("singular_values", "m", "c")) == 50
    run = ObjectTables(store, run_id="run-swept")
    run.write("singular_values", "m", "c", _singular_values(rng, 20))
    store.delete(run.staged("m", "c")["singular_values"]["file"])
    with pytest.raises(ObjectStoreError, match="nothing was published"):
        run.publish("m", "c")
    assert tables.manifest("m", "c")["tables"]["singular_values"]["rows"] == 50


def test_the_study_assets_folder_is_uploaded_only_after_its_block_and_a_killed_ones_is_swept(s3_warehouse, fresh_seed):
    import tempfile
    from pathlib import Path

    from resdyn.dagster_project.store.artefacts import kept_location
    from resdyn.dagster_project.store.object_warehouse import ObjectWarehouse
    from resdyn.files import HOST

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # a pid no process holds now: a folder named after it was left by a killed process
    left = Path(tempfile.mkdtemp(prefix=f"resdyn-study-{HOST}-{ended.pid}-"))
    (left / "report.html").write_text("a killed materialization's")
    rng = np.random.default_rng(fresh_seed)
    figure, page = rng.bytes(300), rng.bytes(200)
    objects = ObjectWarehouse(s3_warehouse)
    with objects.study_artefacts() as artefacts:
        assert not left.exists()
        (artefacts.figures / "report").mkdir(parents=True)
        (artefacts.figures / "report" / "x.png").write_bytes(figure)
        artefacts.report.write_bytes(page)
        assert objects.store.list() == []  # nothing is uploaded while the body may still fail
        assert kept_location(artefacts.report) == f"{s3_warehouse}/report.html"
        directory = artefacts.directory
    assert objects.store.get("report.html").data == page
    assert objects.store.get("_artefacts/report/x.png").data == figure
    assert not directory.exists() and kept_location(directory / "report.html") == str(directory / "report.html")

    with pytest.raises(RuntimeError, match="a failed body"):
        with objects.study_artefacts() as artefacts:
            artefacts.report.write_bytes(b"never uploaded")
            raise RuntimeError("a failed body")
    assert objects.store.get("report.html").data == page and not artefacts.directory.exists()
