"""Thin Dagster assets, one module per stage: take input tables, call resdyn, return tables (dagster_project/
partition_assets.py does the rest); dagster_project/assets_index.py collects every module here."""
