"""The warehouse: hive-partitioned Parquet under one root, published in generations, read through DuckDB. No
Dagster at module level (a test reads every module; leases.py asks a Dagster instance about a run inside a
function): the asset layer above stages, loads and publishes through it.

    schema        what each table is (Arrow schema and meaning): views, docs and writers derive from it; strict
                  (a column it lacks, one it needs or a value that does not cast is an error, never dropped)
    arrow_tables  numpy <-> Arrow without Python lists, record batches checked against the schema
    warehouse     reading and writing partitions: staged per run, published by one manifest swap
    handles       lazy handles over one partition's table; MatrixReference, a matrix a worker process loads
    matrices      the one matrix-table reader
    manifests     the published generation of each partition, and the sha256 of each of its files
    leases        which run may write a partition now
    leftovers     what failed or killed runs left, found and swept
    run_records   the runs table: one row per run and partition, what made its tables and how it ended
    outputs       what a body may write besides its yielded tables: streamed writers, the figure folder
    views         the DuckDB views over exactly the published files, and read-only SQL
    integrity     ``resdyn check``: every published file's footer and schema against its manifest
    artefacts     where figures live, and their URL in the UI
    object_store, object_leases, object_generations, object_warehouse
                  the same on S3: atomic and conditional puts, leases, generations, read-only SQL
    warehouse_interface
                  WarehouseStore: the one interface both implement (what every caller may call)
    table_identity
                  each table's identity (code version, declared settings, inputs) and when it is current
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from resdyn.dagster_project.store.warehouse_interface import WarehouseStore


def open_for_reading(given=None) -> WarehouseStore:
    """The warehouse ``given`` names (a --warehouse value; else RESDYN_WAREHOUSE, else the default), for reading:
    a :class:`~.warehouse.Warehouse` for a folder, an :class:`~.object_warehouse.ObjectWarehouse` for
    ``s3://BUCKET/PREFIX``; refused when it is not there."""
    from resdyn.dagster_project.configuration.config import warehouse_location
    from resdyn.dagster_project.configuration.locations import ObjectLocation

    location = warehouse_location(given)
    if isinstance(location, ObjectLocation):
        from resdyn.dagster_project.store.object_warehouse import ObjectWarehouse

        return ObjectWarehouse(location).require_existing()
    from resdyn.dagster_project.store.warehouse import Warehouse

    return Warehouse(location.path).require_existing()


def open_warehouse(given=None, *, run_id: str | None = None, settings_hash: str = "",
                   identities: dict | None = None) -> WarehouseStore:
    """The warehouse ``given`` names (as :func:`open_for_reading`), to write or read, whether or not it exists yet:
    a :class:`~.warehouse.Warehouse` for a folder, an :class:`~.object_warehouse.ObjectWarehouse` for ``s3://``;
    ``run_id`` binds its writes to one run."""
    from resdyn.dagster_project.configuration.config import warehouse_location
    from resdyn.dagster_project.configuration.locations import ObjectLocation

    location = warehouse_location(given)
    if isinstance(location, ObjectLocation):
        from resdyn.dagster_project.store.object_warehouse import ObjectWarehouse

        return ObjectWarehouse(location, run_id=run_id, settings_hash=settings_hash, identities=identities)
    from resdyn.dagster_project.store.warehouse import Warehouse

    return Warehouse(location.path, run_id=run_id, settings_hash=settings_hash, identities=identities)
