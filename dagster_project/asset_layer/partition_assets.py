"""The partition-asset factory: what every asset of a ``model@checkpoint`` partition repeats, said once.

An asset module declares a stage (resdyn/stages/: a pure function of its input tables, the settings it declares
and its tools, returning a StageResult)::

    spectral_analysis = partition_asset(ANALYSIS, settings=("workers",), tables=[
        dg.AssetSpec("eigenvalues", ...), ...])(spectral.spectral_analysis)

and the factory owns the rest: the stage's tools (the worker count the run's settings allow, the step's log,
streamed writers, the figure folder: asset_layer/stage_outputs.py), each table conformed to its schema, the
figures and counts as metadata, the partitions, the step kind and its tags, the retry policy, the
model-runner pool of model steps, and the body's run inside :func:`~.partition_run.partition_run` (the
partition's lease, the run's provenance row, interrupt checks, the failure recorded on the run, and the
publication once the run's selection is staged). A stage asks for ``settings``, ``tools`` and its input tables by
parameter name, and the model steps also for ``checkpoint`` and ``corpus``. A body that yields its outputs itself
(a test's toy asset) may also ask for ``context``, ``outputs`` (:class:`~resdyn.dagster_project.store.outputs.PartitionOutputs`: streamed writers and the figure folder),
``settings``, ``checkpoint`` (:class:`~.body_inputs.PartitionCheckpoint`: the registry entry and the weights to
load), ``corpus`` (:class:`~.body_inputs.Corpora`: the analysis and training texts), and its input tables: a parameter
named after a table (``jacobians``, ``layer_metrics``) is an input of the asset, which the IO manager loads as
a lazy handle (:mod:`resdyn.dagster_project.store.handles`); lineage shows it as a dependency.

Dagster takes an op's tags only when the asset is defined (no public API changes them afterwards), and
what a step asks a Ray cluster for depends on the run's configuration, so the factory returns a
:class:`PartitionAsset` whose :meth:`~PartitionAsset.definition` is made per set of tags
(:func:`resdyn.dagster_project.launch.study_definitions.study_assets` passes :func:`~resdyn.dagster_project.launch.study_definitions.step_tags` of the configuration).
"""

import inspect
from collections.abc import Callable, Mapping
from functools import cache

import dagster as dg

from resdyn.dagster_project.asset_layer.body_inputs import PublishedStudy, corpora, partition_checkpoint
from resdyn.dagster_project.asset_layer.io_manager import table_outs
from resdyn.dagster_project.asset_layer.partition_run import partition_run
from resdyn.dagster_project.asset_layer.partitions import model_checkpoint_partitions
from resdyn.dagster_project.asset_layer.resources import AnalysisSettings, WarehouseResource
from resdyn.dagster_project.asset_layer.stage_outputs import AssetStageTools, stage_outputs
from resdyn.dagster_project.asset_layer.steps import MODEL_RUNNER_POOL, STEP_KIND_TAG, STEP_RETRIES
from resdyn.dagster_project.configuration.settings import BY_NAME
from resdyn.dagster_project.store.schema import TABLES
from resdyn.dagster_project.store.table_identity import StageDeclaration, declare
from resdyn.parallel import default_workers
from resdyn.stages import StageResult

MODEL, ANALYSIS = "model", "analysis"  # loads and runs the network / numerics on tables
BODY_PARAMETERS = ("context", "outputs", "settings", "checkpoint", "corpus", "tools")


class DeclaredSettings:
    """The settings a stage declared, and only those: reading another is an error naming the declaration to
    change, so a table's identity (store/table_identity.py) can never miss a setting its stage reads."""

    def __init__(self, resource: AnalysisSettings, stage: str, declared: tuple[str, ...]) -> None:
        self._resource, self._stage, self._declared = resource, stage, frozenset(declared)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._declared:
            raise AttributeError(f"{self._stage} reads the setting {name!r} without declaring it: add it to "
                                 f"settings=(...) of its @partition_asset (a setting a stage reads is part of its "
                                 "tables' identity)")
        return getattr(self._resource, name)


class PartitionAsset:
    """A partitioned asset (or multi-asset: ``tables``) whose Dagster definition is made per set of op tags."""

    def __init__(self, body: Callable, kind: str, tables: list[dg.AssetSpec] | None, arguments: dict,
                 settings: tuple[str, ...] = ()) -> None:
        if kind not in (MODEL, ANALYSIS):
            raise ValueError(f"step kind {kind!r}: {MODEL!r} or {ANALYSIS!r}")
        asked = list(inspect.signature(body).parameters)
        unknown = [name for name in asked if name not in BODY_PARAMETERS and name not in TABLES]
        if unknown:
            raise TypeError(f"{body.__name__} asks for {unknown}: an asset body may ask for {BODY_PARAMETERS} and "
                            "its input tables by name (dagster_project/store/schema.py)")
        self.body, self.kind, self.tables, self.arguments, self.asked = body, kind, tables, arguments, asked
        self.inputs = [name for name in asked if name in TABLES]
        declared = [(dep.asset_key if isinstance(dep, dg.AssetDep) else dg.AssetKey.from_coercible(dep)).to_user_string()
                    for dep in arguments.get("deps", [])]
        declared += [dep.asset_key.to_user_string() for spec in tables or [] for dep in spec.deps]
        twice = sorted(set(declared) & set(self.inputs))
        if twice:
            raise TypeError(f"{body.__name__} declares {twice} both as parameters and in deps: a parameter named "
                            "after a table is already an input; deps= is for a table it waits on without reading")
        self.name = body.__name__
        self.__doc__ = body.__doc__
        unknown_settings = sorted(set(settings) - set(BY_NAME))
        if unknown_settings:
            raise TypeError(f"{self.name} declares unknown settings {unknown_settings}: the settings are those of "
                            "dagster_project/configuration/settings.py")
        factory_reads = {"workers"} if "tools" in asked else set()  # the pool's size: the stage's tools hold it
        if set(settings) - factory_reads and "settings" not in asked:
            raise TypeError(f"{self.name} declares settings but does not ask for them (a `settings` parameter)")
        self.settings = tuple(settings)
        self.skippable = frozenset(spec.key.to_user_string() for spec in tables or [] if spec.skippable)
        self.declaration = StageDeclaration(self.name, self.table_versions(), self.settings,
                                            tuple(self.inputs) + tuple(declared), "corpus" in asked)
        declare(self.declaration)

    def table_versions(self) -> dict[str, str]:
        """Each table this asset writes, with its code version."""
        if self.tables is None:
            return {self.name: str(self.arguments.get("code_version") or "")}
        return {spec.key.to_user_string(): str(spec.code_version or "") for spec in self.tables}

    def definition(self, tags: Mapping[str, str] | None = None) -> dg.AssetsDefinition:
        """The Dagster definition with ``tags`` added to the step kind's op tags."""
        return _definition(self, tuple(sorted((tags or {}).items())))

    def _compute(self, context: dg.AssetExecutionContext, warehouse: WarehouseResource, settings: AnalysisSettings,
                 inputs: dict):
        with partition_run(context, warehouse, settings) as outputs:
            given = {"context": context, "outputs": outputs,
                     "settings": DeclaredSettings(settings, self.name, self.settings), **inputs}
            if "checkpoint" in self.asked:
                given["checkpoint"] = partition_checkpoint(warehouse, outputs.model, outputs.checkpoint)
            if "corpus" in self.asked:
                given["corpus"] = corpora(warehouse)
            if "tools" in self.asked:  # the pool is the factory's: a stage only says where a pool pays
                workers = (settings.workers or default_workers()) if "workers" in self.settings else 1
                given["tools"] = AssetStageTools(context, outputs, workers)
            result = self.body(**{name: given[name] for name in self.asked})
            if isinstance(result, StageResult):
                yield from stage_outputs(result, list(self.table_versions()), self.tables is None, self.skippable,
                                         outputs.identity)
            elif inspect.isgenerator(result):
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
        return dg.multi_asset(can_subset=False, outs=outs["outs"], deps=outs["deps"], internal_asset_deps=internal,
                              **common)(compute)
    return dg.asset(**common)(compute)


def study_asset(**arguments) -> Callable:
    """Decorator: ``body(context, published)`` as an unpartitioned multi-asset over every complete partition
    (``arguments``: ``dg.multi_asset``'s); ``published`` is a :class:`~.body_inputs.PublishedStudy`, so the body
    never holds the warehouse."""
    def decorate(body: Callable) -> dg.AssetsDefinition:
        def compute(context: dg.AssetExecutionContext, warehouse: WarehouseResource):
            store = warehouse.open()
            # the materializations are reported once what they describe is kept (on an object store, uploaded)
            with store.study_artefacts() as artefacts:
                results = list(body(context, PublishedStudy(store, artefacts)))
            yield from results

        compute.__name__, compute.__doc__ = body.__name__, body.__doc__
        return dg.multi_asset(can_subset=False, **arguments)(compute)

    return decorate


def partition_asset(kind: str, *, tables: list[dg.AssetSpec] | None = None, settings: tuple[str, ...] = (),
                    **arguments) -> Callable:
    """Decorator: ``body`` as a :class:`PartitionAsset` of step ``kind`` (:data:`MODEL` or :data:`ANALYSIS`);
    ``tables``: one spec per table of a multi-asset; ``settings``: the names of the settings the body reads (the
    only ones it can read; those that change numbers are part of its tables' identity); ``arguments``: the rest of
    ``dg.asset``'s (code_version, group_name, deps, description)."""
    def decorate(body: Callable) -> PartitionAsset:
        return PartitionAsset(body, kind, tables, arguments, settings)

    return decorate


__all__ = ["ANALYSIS", "MODEL", "DeclaredSettings", "PartitionAsset", "partition_asset", "study_asset"]
