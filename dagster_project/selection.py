"""``resdyn run --select``: which of a partition's assets a run materializes, in Dagster's selection syntax."""

from __future__ import annotations

import warnings


class SelectionError(ValueError):
    """A selection that is not valid or names none of a partition's assets."""


def partition_asset_keys(selection: str | None):
    """The asset keys ``selection`` names (``None``: every partitioned asset), widened to whole steps.

    ``selection`` is Dagster's asset selection syntax (``group:measurements``, ``key:jacobians+``,
    ``+key:layer_metrics``, ``... or ...``), the same the UI's asset graph filter takes. A step that
    writes several assets (``measurements``: activations, jacobians, sample_jacobians,
    finite_difference_probe) runs whole, so selecting one of its assets selects them all. The study
    assets (across partitions) are never part of a partition's run.
    """
    if not selection:
        return None
    import dagster as dg

    from .assets_index import STUDY_ASSET_KEYS
    from .definitions import defs  # builds the job: RESDYN_EXECUTOR must be set by now

    graph = defs.resolve_asset_graph()
    study = {dg.AssetKey(key) if isinstance(key, str) else key for key in STUDY_ASSET_KEYS}
    partitioned = {key for key in graph.materializable_asset_keys if key not in study}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            chosen = dg.AssetSelection.from_string(selection).resolve(graph)
    except Exception as error:  # Dagster's parser raises its own error types, by version
        raise SelectionError(f"--select {selection!r} is not an asset selection ({str(error).splitlines()[0]}); "
                             "examples: 'group:measurements', 'key:jacobians+', 'group:inputs or group:spectra'") from error
    chosen = {sibling for key in chosen & partitioned for sibling in graph.get(key).execution_set_asset_keys}
    if not chosen:
        groups = sorted({graph.get(key).group_name for key in partitioned})
        raise SelectionError(f"--select {selection!r} names none of a partition's assets; groups: {', '.join(groups)}; "
                             f"assets: {', '.join(sorted(key.to_user_string() for key in partitioned))}")
    return chosen
