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

    from resdyn.dagster_project.launch.assets_index import (
        ALL_ASSETS,  # the partitioned assets only: the study assets are not among them
    )

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


def check_inputs(selection: str, chosen, published_tables: set[str], partition: str) -> None:
    """Refuse, before the first step, a selection whose assets read a table that neither the selection
    holds nor the warehouse has published for ``partition``; name what is missing and a selection that
    would run (the given one plus the missing upstream steps, transitively)."""
    from resdyn.dagster_project.launch.assets_index import ALL_ASSETS

    steps = {key: definition for definition in ALL_ASSETS for key in definition.keys}
    upstream = {key: set(definition.asset_deps[key]) for key, definition in steps.items()}
    have = set(chosen)
    missing = {key: {dep for dep in upstream.get(key, ()) if dep not in have and dep.path[-1] not in published_tables}
               for key in sorted(have)}
    missing = {key: deps for key, deps in missing.items() if deps}
    if not missing:
        return
    added: set = set()
    frontier = {dep for deps in missing.values() for dep in deps}
    while frontier:
        key = frontier.pop()
        for sibling in (steps[key].keys if not steps[key].can_subset else {key}):
            if sibling not in have | added:
                added.add(sibling)
                frontier |= {dep for dep in upstream[sibling]
                             if dep not in have | added and dep.path[-1] not in published_tables}
    needs = "; ".join(f"{key.to_user_string()} reads {', '.join(sorted(d.to_user_string() for d in deps))}"
                      for key, deps in sorted(missing.items()))
    suggestion = " or ".join([selection] + [f"key:{key.to_user_string()}" for key in sorted(added)])
    raise SelectionError(f"--select {selection!r} cannot run on {partition}: {needs}, which the selection does not "
                         f"hold and the warehouse has not published for it; run --select '{suggestion}'")
