"""The study across every complete partition (dagster_project/report.py): five tables with a
figure each, and report.html in the warehouse. Unpartitioned, downstream of all partitions."""

import dagster as dg

from resdyn.dagster_project.metadata import preview
from resdyn.dagster_project.report import SECTIONS, build_report
from resdyn.dagster_project.resources import WarehouseResource

from .common import figure

UPSTREAM = ["coupling_tests", "layer_metrics", "cumulative_rank", "schur_surgery"]


@dg.multi_asset(
    can_subset=False, group_name="study",
    specs=[dg.AssetSpec(section.name, code_version="1", deps=UPSTREAM, description=section.title)
           for section in SECTIONS] + [
        dg.AssetSpec("study_report", code_version="1", deps=[section.name for section in SECTIONS],
                     description="One self-contained report.html in the warehouse: every study figure embedded, "
                                 "its table beside it, settings and provenance of every partition used.")],
)
def study(context: dg.AssetExecutionContext, warehouse: WarehouseResource):
    output, results = build_report(warehouse.open())
    for section in SECTIONS:
        table, path = results[section.name]
        yield dg.MaterializeResult(asset_key=section.name, metadata={
            "rows": table.num_rows, "preview": preview(table, rows=12), **figure(path)})
    yield dg.MaterializeResult(asset_key="study_report", metadata={
        "path": dg.MetadataValue.path(str(output)), "bytes": output.stat().st_size,
        "partitions": results["study_fdr_layers"][0].num_rows})  # one row per complete partition
