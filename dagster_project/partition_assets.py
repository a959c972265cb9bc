"""The partition-asset factory: what every asset of a ``model@checkpoint`` partition repeats, said once.

An asset module writes only its body::

    @partition_asset(ANALYSIS, tables=[dg.AssetSpec("eigenvalues", ...), ...])
    def spectral_analysis(context, settings, outputs, jacobians: MatrixTable):
        ...yield table_output(table, "eigenvalues")...

and the factory owns the rest: the partitions, the step kind and its tags, the retry policy, the
model-runner pool of model steps, and the body's run inside :func:`~.store.runs.partition_run` (the
partition's lease, the run's provenance row, interrupt checks, the failure recorded on the run, and the
publication once the run's selection is staged). The body asks for what it needs by parameter name:
``context``, ``outputs`` (:class:`~.store.outputs.PartitionOutputs`: streamed writers and the figure folder),
``settings``, ``warehouse`` (the resource: registry, corpus directories), and its input tables: a parameter
named after a table (``jacobians``, ``layer_metrics``) is an input of the asset, which the IO manager loads as
a lazy handle (:mod:`.store.handles`); lineage shows it as a dependency.

Dagster takes an op's tags only when the asset is defined (no public API changes them afterwards), and
what a step asks a Ray cluster for depends on the run's configuration, so the factory returns a
:class:`PartitionAsset` whose :meth:`~PartitionAsset.definition` is made per set of tags
(:func:`resdyn.dagster_project.launch.study_assets` passes :func:`~.launch.step_tags` of the configuration).
"""

import inspect
from collections.abc import Callable, Mapping
from functools import cache

import dagster as dg

from .partitions import model_checkpoint_partitions
from .resources import AnalysisSettings, WarehouseResource
from .steps import MODEL_RUNNER_POOL, STEP_KIND_TAG, STEP_RETRIES
from .store.io_manager import table_outs
from .store.runs import partition_run
from .store.schema import TABLES

MODEL, ANALYSIS = "model", "analysis"  # loads and runs the network / numerics on tables
BODY_PARAMETERS = ("context", "outputs", "settings", "warehouse")


class PartitionAsset:
    """A partitioned asset (or multi-asset: ``tables``) whose Dagster definition is made per set of op tags."""

    def __init__(self, body: Callable, kind: str, tables: list[dg.AssetSpec] | None, arguments: dict) -> None:
        if kind not in (MODEL, ANALYSIS):
            raise ValueError(f"step kind {kind!r}: {MODEL!r} or {ANALYSIS!r}")
        asked = list(inspect.signature(body).parameters)
        unknown = [name for name in asked if name not in BODY_PARAMETERS and name not in TABLES]
        if unknown:
            raise TypeError(f"{body.__name__} asks for {unknown}: an asset body may ask for {BODY_PARAMETERS} and "
                            "its input tables by name (dagster_project/store/schema.py)")
        self.body, self.kind, self.tables, self.arguments, self.asked = body, kind, tables, arguments, asked
        self.inputs = [name for name in asked if name in TABLES]
        self.name = body.__name__
        self.__doc__ = body.__doc__

    def definition(self, tags: Mapping[str, str] | None = None) -> dg.AssetsDefinition:
        """The Dagster definition with ``tags`` added to the step kind's op tags."""
        return _definition(self, tuple(sorted((tags or {}).items())))

    def _compute(self, context: dg.AssetExecutionContext, warehouse: WarehouseResource, settings: AnalysisSettings,
                 inputs: dict):
        with partition_run(context, warehouse, settings) as outputs:
            given = {"context": context, "outputs": outputs, "settings": settings, "warehouse": warehouse, **inputs}
            result = self.body(**{name: given[name] for name in self.asked})
            if inspect.isgenerator(result):
                yield from result
            elif result is not None:
                yield result


@cache
def _definition(asset: PartitionAsset, tags: tuple[tuple[str, str], ...]) -> dg.AssetsDefinition:
    def compute(context: dg.AssetExecutionContext, warehouse: WarehouseResource, settings: AnalysisSettings,
                **inputs):
        yield from asset._compute(context, warehouse, settings, inputs)

    compute.__name__, compute.__doc__ = asset.name, asset.body.__doc__
    inputs = {name: dg.AssetIn(key=name) for name in asset.inputs}
    common = {"partitions_def": model_checkpoint_partitions, "op_tags": {STEP_KIND_TAG: asset.kind, **dict(tags)},
              "retry_policy": STEP_RETRIES, **({"pool": MODEL_RUNNER_POOL} if asset.kind == MODEL else {}),
              "ins": inputs, **asset.arguments}
    if asset.tables is not None:
        outs = table_outs(asset.tables)
        internal = {name: upstream | {dg.AssetKey(table) for table in asset.inputs}  # every table may read each input
                    for name, upstream in outs["internal_asset_deps"].items()}
        deps = [key for key in outs["deps"] if key.to_user_string() not in inputs]
        return dg.multi_asset(can_subset=False, outs=outs["outs"], deps=deps, internal_asset_deps=internal,
                              **common)(compute)
    deps = [dep for dep in asset.arguments.get("deps", []) if str(dep) not in inputs]
    return dg.asset(**{**common, "deps": deps})(compute)


def partition_asset(kind: str, *, tables: list[dg.AssetSpec] | None = None, **arguments) -> Callable:
    """Decorator: ``body`` as a :class:`PartitionAsset` of step ``kind`` (:data:`MODEL` or :data:`ANALYSIS`);
    ``tables``: one spec per table of a multi-asset; ``arguments``: the rest of ``dg.asset``'s (code_version,
    group_name, deps, description)."""
    def decorate(body: Callable) -> PartitionAsset:
        return PartitionAsset(body, kind, tables, arguments)

    return decorate


__all__ = ["ANALYSIS", "MODEL", "PartitionAsset", "partition_asset"]
