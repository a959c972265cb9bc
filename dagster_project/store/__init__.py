"""The warehouse: hive-partitioned Parquet under one root, published in generations, read through DuckDB.

    schema      what each table is (Arrow schema and meaning): views, docs and writers derive from it
    warehouse   reading and writing partitions: staged per run, published by one manifest swap
    manifests   the published generation of each partition, and the sha256 of each of its files
    leases      which run may write a partition now
    runs        one run's work on one partition: lease, provenance record, publication
    views       the DuckDB views over exactly the published files, and read-only SQL
    integrity   ``resdyn check``: every published file's footer and schema against its manifest
    artefacts   where figures live, and their URL in the UI
    io_manager  Dagster's IO layer over all of the above: what an asset returns is staged and published
"""
