"""The study across every complete partition (dagster_project/study/report.py): five tables with a
figure each, and one self-contained report.html. Unpartitioned, downstream of all partitions."""

import dagster as dg

from resdyn.dagster_project.asset_layer import SECTIONS, figure, preview, study_asset

UPSTREAM = ["coupling_tests", "layer_metrics", "cumulative_rank", "schur_surgery"]


@study_asset(
    group_name="study",
    specs=[dg.AssetSpec(section.name, code_version="1", deps=UPSTREAM, description=section.title)
           for section in SECTIONS] + [
        dg.AssetSpec("study_report", code_version="1", deps=[section.name for section in SECTIONS],
                     description="One self-contained report.html beside the tables: every study figure embedded, "
                                 "its table beside it, settings and provenance of every partition used.")],
)
def study(context: dg.AssetExecutionContext, published):
    results, report_file = published.report()
    for section in SECTIONS:
        table, path = results[section.name]
        yield dg.MaterializeResult(asset_key=section.name, metadata={
            "rows": table.num_rows, "preview": preview(table, rows=12), **figure(path)})
    yield dg.MaterializeResult(asset_key="study_report", metadata={
        **report_file, "partitions": results["study_fdr_layers"][0].num_rows})  # one row per complete partition
