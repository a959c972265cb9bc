"""Thin Dagster assets, one module per stage: take input tables, call resdyn, return tables (the asset layer,
dagster_project/asset_layer/, does the rest, and is all they import of dagster_project); dagster_project/launch/assets_index.py collects every module here."""
