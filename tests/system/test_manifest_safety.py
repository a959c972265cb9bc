"""What a damaged manifest hides is never deleted, and a run whose lease was taken over never publishes: on a folder
and on a real S3 server (SeaweedFS, the ``s3_server`` fixture), through the store and through ``resdyn check``."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

from resdyn.dagster_project.store.errors import LeaseLostError
from resdyn.dagster_project.store.object_generations import manifest_key
from resdyn.dagster_project.store.object_warehouse import ObjectWarehouse
from resdyn.dagster_project.store.schema import rows_table, table_spec
from resdyn.dagster_project.store.warehouse import Warehouse

from ..cli_helpers import run_cli_in_process

KINDS = ["folder", "s3"]
GARBAGE = b'{"generation": "abc"'  # the drill's damage: a manifest cut off after its first field


def _warehouse(kind, tmp_path, s3_location, run_id=None):
    if kind == "folder":
        return Warehouse(tmp_path / "warehouse", run_id=run_id, settings_hash="s")
    return ObjectWarehouse(s3_location, run_id=run_id, settings_hash="s")


@pytest.fixture
def location(request, tmp_path):
    """The warehouse the test runs on: a folder, or a fresh prefix of the test S3 server."""
    if request.param == "folder":
        return "folder", None
    return "s3", request.getfixturevalue("s3_warehouse")


def _argument(kind, tmp_path, s3_location) -> str:
    return str(tmp_path / "warehouse") if kind == "folder" else str(s3_location)


def _values(rng, n: int, mark: float):
    """``n`` singular values, all ``mark`` (which run's table a reader sees), at random depths."""
    return rows_table("singular_values", [{"layer": 0, "sublayer": "mlp", "depth": int(depth), "idx": i,
                                           "sigma": mark} for i, depth in enumerate(rng.integers(0, 5, n))])


def _eigenvalues(n: int, mark: float):
    return rows_table("eigenvalues", [{"layer": 0, "sublayer": "mlp", "depth": 1, "idx": i, "re": mark, "im": 0.0,
                                       "modulus": abs(mark)} for i in range(n)])


def _record(store, status: str, ended_at: str) -> None:
    """The run's row of the runs table, as a run records it when it ends."""
    row = {name: None for name in table_spec("runs").column_names}
    store.record_run("m", "c", {**row, "run_id": store.run_id, "settings_hash": "s", "status": status,
                                "host": socket.gethostname(), "pid": 1, "started_at": ended_at, "ended_at": ended_at})


def _listing(store) -> dict[str, int]:
    """Every table file and figure of the partition, with its size."""
    if isinstance(store, Warehouse):
        return {str(path.relative_to(store.root)): path.stat().st_size for pattern in ("*.parquet", "*.png")
                for path in store.root.rglob(pattern) if "runs" not in path.parts}
    return {found.relative: found.size for prefix in ("singular_values/", "eigenvalues/", "_artefacts/figures/")
            for found in store.store.list(prefix)}


def _draw(run, name: str, shade: int) -> None:
    """A figure of the run's partition, as an asset draws one (on S3: staged as a step stages its figures)."""
    from PIL import Image

    Image.new("RGB", (8, 8), (shade, 0, 0)).save(run.artefact_directory("figures", "m", "c") / f"{name}.png")
    run.stage_figures("m", "c", step_ended=True)  # on S3: uploaded and staged, its spool removed


def _figure(store, name: str) -> bytes:
    file = store.manifest("m", "c")["figures"][name]
    return (store.root / file).read_bytes() if isinstance(store, Warehouse) else store.store.get(file).data


def _damage(store) -> None:
    if isinstance(store, Warehouse):
        store.manifest_path("m", "c").write_bytes(GARBAGE)
    else:
        store.store.put(manifest_key("m", "c"), GARBAGE)


def _remove_manifest(store) -> None:
    if isinstance(store, Warehouse):
        store.manifest_path("m", "c").unlink()
    else:
        store.store.delete(manifest_key("m", "c"))


def _flip_a_byte(store, relative: str) -> None:
    if isinstance(store, Warehouse):
        data = bytearray((store.root / relative).read_bytes())
        data[-5] ^= 0xFF
        (store.root / relative).write_bytes(bytes(data))
    else:
        data = bytearray(store.store.get(relative).data)
        data[-5] ^= 0xFF
        store.store.put(relative, bytes(data))


def _drop_kept_copies(store) -> int:
    if isinstance(store, Warehouse):
        copies = [path for path in store.manifest_path("m", "c").parent.glob("checkpoint=c.json.*")
                  if path.name.rsplit(".", 1)[1].isdigit()]
        for path in copies:
            path.unlink()
        return len(copies)
    copies = store.store.list(manifest_key("m", "c") + ".")
    for found in copies:
        store.store.delete(found.relative)
    return len(copies)


def _publish_two_generations(kind, tmp_path, s3_location, rng):
    """Run a publishes both tables, run b then singular_values alone: the manifest names a's eigenvalues, b's
    singular_values and (as previous) a's singular_values. Run c stages a table and dies (a leftover)."""
    first = _warehouse(kind, tmp_path, s3_location, "run-a")
    first.write("singular_values", "m", "c", _values(rng, 30, 1.0))
    first.write("eigenvalues", "m", "c", _eigenvalues(20, 1.0))
    _draw(first, "spectra", 10)
    first.publish("m", "c")
    _record(first, "success", "2026-01-01T00:00:01+0000")
    second = _warehouse(kind, tmp_path, s3_location, "run-b")
    second.write("singular_values", "m", "c", _values(rng, 40, 2.0))
    _draw(second, "spectra", 20)
    second.publish("m", "c")
    _record(second, "success", "2026-01-01T00:00:02+0000")
    dead = _warehouse(kind, tmp_path, s3_location, "run-c")
    dead.write("eigenvalues", "m", "c", _eigenvalues(10, 3.0))
    _record(dead, "started", "2026-01-01T00:00:03+0000")
    return _warehouse(kind, tmp_path, s3_location)


def _published_values(store) -> tuple[set, set]:
    return (set(store.read("singular_values", "m", "c")["sigma"].to_pylist()),
            set(store.read("eigenvalues", "m", "c")["re"].to_pylist()))


@pytest.mark.parametrize("location", KINDS, indirect=True)
def test_a_damaged_manifest_keeps_every_file_from_reclaim_and_is_restored_from_its_copy_or_its_files(location,
                                                                                                   tmp_path):
    kind, s3_location = location
    rng = np.random.default_rng()
    store = _publish_two_generations(kind, tmp_path, s3_location, rng)
    where = _argument(kind, tmp_path, s3_location)
    assert _published_values(store) == ({2.0}, {1.0})
    files = _listing(store)
    leftover = next(name for name in files if "run-c" in name)

    _damage(store)
    checked = run_cli_in_process("check", "--warehouse", where)
    assert checked.returncode == 1, checked.stdout
    assert f"kept: {len(files)} file(s)" in checked.stdout and "`resdyn check --restore` restores it" in checked.stdout
    assert "unpublished:" not in checked.stdout, checked.stdout  # nothing of the partition is called a leftover
    reclaimed = run_cli_in_process("check", "--reclaim", "--warehouse", where)
    assert "removed 0 unpublished" in reclaimed.stdout, reclaimed.stdout
    assert _listing(store) == files  # every file kept, the dead run's too: the manifest might have named it

    restored = run_cli_in_process("check", "--restore", "--warehouse", where)
    assert "restored from the copy of generation 2" in restored.stdout, restored.stdout
    assert _published_values(store) == ({2.0}, {1.0})
    assert store.manifest_state("m", "c")[1] == []
    assert "unpublished:" in restored.stdout and leftover.rsplit("/", 1)[1] in restored.stdout  # a leftover again

    # no copy left (a warehouse from before copies were kept): rebuilt from the files of the runs recorded success,
    # the latest one's for each table, each file read back and hashed before it is named
    _damage(store)
    assert _drop_kept_copies(store) == 2
    restored = run_cli_in_process("check", "--restore", "--warehouse", where)
    assert "restored from the files of 2 run(s) the runs table records `success`" in restored.stdout, restored.stdout
    assert _published_values(store) == ({2.0}, {1.0})
    manifest = store.manifest("m", "c")
    assert {table: entry["run_id"] for table, entry in manifest["tables"].items()} == \
        {"singular_values": "run-b", "eigenvalues": "run-a"}
    assert _figure(store, "spectra")[:8] == b"\x89PNG\r\n\x1a\n"  # run b's figure, checked to be a PNG
    assert run_cli_in_process("check", "--reclaim", "--warehouse", where).returncode == 0
    assert leftover not in _listing(store) and len(_listing(store)) == 3  # only now: the leftover, and the
    # generation before (its table and figure), which the rebuilt manifest does not keep as previous


@pytest.mark.parametrize("location", KINDS, indirect=True)
def test_a_missing_manifest_or_a_damaged_file_of_its_newest_copy_never_rolls_the_partition_back(location, tmp_path):
    """A manifest deleted while its kept copy (or a successful run) says the partition was published keeps every file;
    a restoration whose newest copy names one damaged file restores that copy (naming the damage), never the
    generation before, which would leave the newer files unnamed and removable."""
    kind, s3_location = location
    rng = np.random.default_rng()
    store = _publish_two_generations(kind, tmp_path, s3_location, rng)
    where = _argument(kind, tmp_path, s3_location)
    files = _listing(store)

    _remove_manifest(store)
    checked = run_cli_in_process("check", "--warehouse", where)
    assert checked.returncode == 1 and "missing manifest:" in checked.stdout and "its copy of generation 2" in \
        checked.stdout, checked.stdout
    assert "unpublished:" not in checked.stdout and f"kept: {len(files)} file(s)" in checked.stdout, checked.stdout
    run_cli_in_process("check", "--reclaim", "--warehouse", where)
    assert _listing(store) == files
    restored = run_cli_in_process("check", "--restore", "--warehouse", where)
    assert "restored from the copy of generation 2" in restored.stdout, restored.stdout
    assert _published_values(store) == ({2.0}, {1.0})

    _flip_a_byte(store, store.manifest("m", "c")["figures"]["spectra"])  # run b's figure, and then the manifest
    _damage(store)
    restored = run_cli_in_process("check", "--restore", "--warehouse", where)
    assert "restored from the copy of generation 2" in restored.stdout and "1 of its files damaged" in \
        restored.stdout, restored.stdout
    assert _published_values(store) == ({2.0}, {1.0})  # not generation 1's {1.0}
    run_cli_in_process("check", "--reclaim", "--warehouse", where)
    assert all("run-b" not in name or name in _listing(store) for name in files)  # run b's files all kept


@pytest.mark.parametrize("location", KINDS, indirect=True)
def test_a_run_publishing_over_a_damaged_manifest_restores_it_first_and_loses_no_table(location, tmp_path):
    kind, s3_location = location
    rng = np.random.default_rng()
    _publish_two_generations(kind, tmp_path, s3_location, rng)
    store = _warehouse(kind, tmp_path, s3_location)
    _damage(store)
    rerun = _warehouse(kind, tmp_path, s3_location, "run-d")  # a partial rerun: one table
    rerun.write("singular_values", "m", "c", _values(rng, 25, 4.0))
    rerun.publish("m", "c")
    assert _published_values(store) == ({4.0}, {1.0})  # run a's eigenvalues, which the damaged manifest hid, kept
    assert store.manifest_state("m", "c")[1] == []


def _hold_as_dead_run(kind, tmp_path, s3_location, run_id: str):
    """A run holding the partition's lease whose process is gone: a single-process lease naming a pid that exists no
    longer, as a killed run leaves it."""
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    run = _warehouse(kind, tmp_path, s3_location, run_id)
    run.acquire_lease("m", "c", single_process=True)
    lease = {**json.loads(_lease_text(run)), "pid": int(gone)}
    lease.pop("owner_pid", None)
    if kind == "folder":
        run.lease_path("m", "c").write_text(json.dumps(lease))
    else:
        run.store.put("_locks/m@c.json", json.dumps(lease).encode())
    return run, lease["fence"]


def _lease_text(run) -> str:
    if isinstance(run, Warehouse):
        return run.lease_path("m", "c").read_text()
    return run.store.get("_locks/m@c.json").data.decode()


@pytest.mark.parametrize("location", KINDS, indirect=True)
def test_a_writer_whose_lease_was_taken_over_can_never_publish(location, tmp_path):
    kind, s3_location = location
    rng = np.random.default_rng()
    old, old_token = _hold_as_dead_run(kind, tmp_path, s3_location, "run-old")
    old.write("singular_values", "m", "c", _values(rng, 10, 1.0))  # staged: it may publish once everything is

    new = _warehouse(kind, tmp_path, s3_location, "run-new")
    new.acquire_lease("m", "c", single_process=True)  # the old run is judged dead: taken over, the partition fenced
    token = json.loads(_lease_text(new))["fence"]
    assert token > old_token and new.manifest_state("m", "c")[0]["fenced_below"] == token
    with pytest.raises(LeaseLostError, match="taken over by run 'run-new'"):
        old.publish("m", "c")
    reader = _warehouse(kind, tmp_path, s3_location)
    assert reader.partitions() == []  # the fence alone publishes nothing

    new.write("singular_values", "m", "c", _values(rng, 12, 2.0))
    new.publish("m", "c")
    new.release_lease("m", "c")
    with pytest.raises(LeaseLostError, match="holds no lease and the partition was fenced"):
        old.publish("m", "c")  # not even once the new run is done and its lease is gone
    assert set(reader.read("singular_values", "m", "c")["sigma"].to_pylist()) == {2.0}
    assert reader.manifest("m", "c")["fencing_token"] == token

    later = _warehouse(kind, tmp_path, s3_location, "run-later")  # a lease taken afresh gets a larger token
    later.acquire_lease("m", "c", single_process=True)
    assert json.loads(_lease_text(later))["fence"] > reader.manifest("m", "c")["fencing_token"]
    later.write("singular_values", "m", "c", _values(rng, 14, 3.0))
    later.publish("m", "c")
    assert set(reader.read("singular_values", "m", "c")["sigma"].to_pylist()) == {3.0}


@pytest.mark.parametrize("location", KINDS, indirect=True)
def test_a_takeover_over_a_damaged_manifest_fences_the_restored_one_and_a_lost_lease_cannot_publish(location,
                                                                                                      tmp_path):
    """The takeover restores a damaged manifest before it fences it, so the old run is refused even after the new one
    has finished; and a run that held a lease and finds none (deleted by hand, as the busy message allows) is refused
    by its runs row, whatever its token."""
    kind, s3_location = location
    rng = np.random.default_rng()
    _publish_two_generations(kind, tmp_path, s3_location, rng)
    old, _ = _hold_as_dead_run(kind, tmp_path, s3_location, "run-old")
    _record(old, "started", "2026-01-01T00:00:04+0000")
    old.write("singular_values", "m", "c", _values(rng, 10, 9.0))
    reader = _warehouse(kind, tmp_path, s3_location)
    _damage(reader)

    new = _warehouse(kind, tmp_path, s3_location, "run-new")
    new.acquire_lease("m", "c", single_process=True)
    token = json.loads(_lease_text(new))["fence"]
    assert reader.manifest_state("m", "c") [1] == [] and reader.manifest("m", "c")["fenced_below"] == token
    assert {row["run_id"]: row["status"] for row in reader.run_records("m", "c")}["run-old"] == "killed"
    new.release_lease("m", "c")
    with pytest.raises(LeaseLostError, match="its lease is gone"):
        old.publish("m", "c")
    assert _published_values(reader) == ({2.0}, {1.0})

    by_hand = _warehouse(kind, tmp_path, s3_location, "run-by-hand")  # a live run whose lease a person deletes
    by_hand.acquire_lease("m", "c", single_process=True)
    _record(by_hand, "started", "2026-01-01T00:00:05+0000")
    by_hand.write("singular_values", "m", "c", _values(rng, 10, 7.0))
    if kind == "folder":
        by_hand.lease_path("m", "c").unlink()
    else:
        by_hand.store.delete("_locks/m@c.json")
    with pytest.raises(LeaseLostError, match="its lease is gone"):
        by_hand.publish("m", "c")
    assert _published_values(reader) == ({2.0}, {1.0})


def test_on_s3_the_old_run_is_fenced_out_before_its_lease_is_replaced(s3_warehouse, tmp_path):
    """On an object store the lease and the manifest are two objects: the takeover fences the manifest first, so in
    the moment between the two (the old lease still names the old run) its publication is already refused."""
    rng = np.random.default_rng()
    old, _ = _hold_as_dead_run("s3", tmp_path, s3_warehouse, "run-old")
    old.write("singular_values", "m", "c", _values(rng, 10, 1.0))
    new = _warehouse("s3", tmp_path, s3_warehouse, "run-new")
    tried = []
    fence_out = new.tables.fence_out

    def fence_then_publish_as_the_old_run(model, checkpoint, token):
        fence_out(model, checkpoint, token)
        assert json.loads(_lease_text(old))["run_id"] == "run-old"  # the lease is not replaced yet
        with pytest.raises(LeaseLostError, match=r"fencing token 1\) was taken over"):
            old.publish("m", "c")
        tried.append(token)

    new.tables.fence_out = fence_then_publish_as_the_old_run
    new.acquire_lease("m", "c", single_process=True)
    assert tried and json.loads(_lease_text(new))["run_id"] == "run-new"
    assert new.partitions() == []

