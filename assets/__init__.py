"""Thin Dagster assets, one module per stage: read inputs, call resdyn, write a table, report."""
