"""Figures that compare the checkpoints of each model: the metrics, the cumulative ranks and the coupling through
depth, one line per published checkpoint (init against trained, or every step of a training run:
dagster_project/study/report.py, ``checkpoint_comparisons``).

Unpartitioned and downstream of the partitioned tables they draw, so the asset graph shows what each figure
read; a partition's own step draws only its own checkpoint. ``resdyn report`` draws them too.
"""

import dagster as dg

from resdyn.dagster_project.asset_layer import COMPARISONS, figure, study_asset


@study_asset(group_name="study", specs=[dg.AssetSpec(name, code_version="1", deps=[table], description=description)
                                      for name, (table, _, description) in COMPARISONS.items()])
def checkpoint_comparison_figures(context: dg.AssetExecutionContext, published):
    drawn = published.comparison_figures()
    for name, by_model in drawn.items():
        metadata = {}
        for model, png in by_model.items():
            metadata.update(figure(png, label=f"{model}_{png.stem}"))
        context.log.info(f"{name}: {', '.join(by_model) or 'nothing published yet'}")
        yield dg.MaterializeResult(asset_key=name, metadata={"models": len(by_model), **metadata})
