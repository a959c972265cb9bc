"""``resdyn check``: every published file read back against its manifest, what failed or killed runs left (removed
with ``--reclaim``), the partitions whose manifest is damaged or missing, whose files are kept until ``--restore``
restores it (dagster_project/store/manifest_recovery.py), and the published tables that are not current (stale:
listed, not counted as problems)."""

from __future__ import annotations

from pathlib import Path

from resdyn.dagster_project.store import open_for_reading


def command_check(arguments) -> int:
    """Restore damaged manifests (``--restore``), remove leftovers (``--reclaim``), then one line per problem."""
    from resdyn.dagster_project.store.integrity import scan

    store = open_for_reading(arguments.warehouse)
    if arguments.restore:
        for model, checkpoint, _ in store.damaged_manifests():
            print(f"resdyn check --restore: the manifest of {model}@{checkpoint} "
                  f"{restoration_said(store.restore_manifest(model, checkpoint), model, checkpoint)}")
    kept = kept_behind_damaged_manifests(store)
    if arguments.reclaim:
        print(f"resdyn check --reclaim: {store.reclaim_unpublished()}")
    problems = scan(store) + kept + store.unpublished_problems()
    for problem in problems:
        print(problem)
    print(f"resdyn check: {len(problems)} problem(s)" if problems else "resdyn check: every published file is readable")
    stale = stale_tables_said(store)
    for line in stale:
        print(line)
    if stale:
        print(f"resdyn check: {len(stale)} stale table(s) (not damage: `resdyn run` of their partition makes them and "
              "what reads them again, nothing else)")
    return 1 if problems else 0


def stale_tables_said(store) -> list[str]:
    """One line per published table that is not current (store/table_identity.py): no recorded identity, another
    code version than its stage's now, or made from an input that has changed since."""
    if not store.exists():
        return []
    rows = store.query("SELECT model, checkpoint, table_name, stale_reason FROM published_tables "
                       "WHERE NOT current AND intact ORDER BY model, checkpoint, table_name").to_pylist()
    return [f"stale: {row['model']}@{row['checkpoint']} {row['table_name']}: {row['stale_reason']}; `resdyn run "
            f"--model {row['model']} --checkpoint {row['checkpoint']}` remakes it" for row in rows]


def restoration_said(restored, model: str, checkpoint: str) -> str:
    """What became of a damaged manifest ``--restore`` took on, in words."""
    if restored.manifest is not None:
        return f"restored {restored.summary()}"
    if not restored.passed_over:  # a run restored or republished it, or published, while this one worked
        return f"was left as it is: {restored.source}"
    return (f"was not restored: {restored.summary()}; its files are kept: rerun the partition (`resdyn run --model "
            f"{model} --checkpoint {checkpoint}`)")


def kept_behind_damaged_manifests(store) -> list[str]:
    """Per partition whose manifest is damaged or missing: a missing one's problem (a damaged one's the scan names),
    then that its files are kept, and what ``--restore`` would try first."""
    lines = []
    for model, checkpoint, problems in store.damaged_manifests():
        lines += [problem for problem in problems if problem.startswith("missing manifest")]
        files = store.unknown_files(model, checkpoint)
        size = sum(item.stat().st_size if isinstance(item, Path) else item.size for item in files)
        copies = store.kept_manifest_copies(model, checkpoint)
        source = (f"from the copy of generation {copies[0][0]} kept beside it, each of its files checked against the "
                  "sha256 it records" if copies else
                  "rebuilt from the table files of the runs recorded `success`, each read back and hashed")
        lines.append(f"kept: {len(files)} file(s) ({size} bytes) of {model}@{checkpoint}, which its damaged manifest "
                     f"may name: none is reclaimed while it is damaged; `resdyn check --restore` restores it (first "
                     f"{source})")
    return lines
