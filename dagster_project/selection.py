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
    assets (across partitions) are never part of a partition's run. Resolved against the asset
    definitions, not the Definitions object: that one builds the job, whose executor comes from
    RESDYN_EXECUTOR when first imported.
    """
    if not selection:
        return None
    import dagster as dg

    from .assets_index import ALL_ASSETS  # the partitioned assets only: the study assets are not among them

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            chosen = dg.AssetSelection.from_string(selection).resolve(ALL_ASSETS)
    except Exception as error:  # Dagster's parser raises its own error types, by version
        raise SelectionError(f"--select {selection!r} is not an asset selection ({str(error).splitlines()[0]}); "
                             "examples: 'group:measurements', 'key:jacobians+', 'group:inputs or group:spectra'") from error
    steps = {key: definition for definition in ALL_ASSETS for key in definition.keys}
    chosen = {sibling for key in chosen if key in steps
              for sibling in (steps[key].keys if not steps[key].can_subset else {key})}
    if not chosen:
        groups = sorted({group for definition in ALL_ASSETS for group in definition.group_names_by_key.values()})
        raise SelectionError(f"--select {selection!r} names none of a partition's assets; groups: {', '.join(groups)}; "
                             f"assets: {', '.join(sorted(key.to_user_string() for key in steps))}")
    return chosen
