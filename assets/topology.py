"""Functional topology: correlation graphs and signed Leiden communities per boundary (resdyn/stages/topology.py)."""

import dagster as dg

from resdyn.dagster_project.asset_layer import ANALYSIS, partition_asset
from resdyn.stages import topology

graph_edges = partition_asset(
    ANALYSIS, code_version="2", group_name="topology", settings=("graph_construction", "graph_k", "graph_threshold"),
    description="Signed correlation graph of residual units per layer and boundary (kNN by |r| by default).",
)(topology.graph_edges)

community_tables = partition_asset(ANALYSIS, group_name="topology", settings=("leiden_seeds", "seed", "workers"), tables=[
    dg.AssetSpec("communities", code_version="5",
                 description="Signed Leiden CPM community, participation and boundary flags of every unit."),
    dg.AssetSpec("gamma_scan", code_version="5",
                 description="The resolution scan behind each graph's chosen gamma (modularity, stability)."),
])(topology.community_tables)
