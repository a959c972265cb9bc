"""Orchestration, storage, DuckDB and the CLI around the framework-free ``resdyn`` package."""
