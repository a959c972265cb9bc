"""Fencing tokens: a run whose lease was taken over can never publish, on disk or on an object store.

A lease judged dead may belong to a run that is not dead (a process nobody here can see, a machine that paused), so a
takeover alone cannot stop its writes. Each lease therefore carries a fencing token (Kleppmann, *Designing
Data-Intensive Applications*, ch. 8, "Fencing tokens"): a whole number larger than any token the partition's lease had
before (:func:`next_token`). The manifest, the one object a publication changes, keeps two of them:

- ``fencing_token``: the token of the lease whose run published the current generation;
- ``fenced_below``: the smallest token that may still publish. A run that takes a dead run's lease over raises it to
  its own token *before* it writes anything (:func:`fenced_out`).

Every publication reads its lease's token and compares it with ``fenced_below`` inside the manifest's compare-and-swap
(under the manifest's lock on disk, with If-Match on the manifest's ETag on S3): a takeover that lands between the
comparison and the put changes the manifest, so the put fails and is tried again against the raised fence
(:func:`publication_refusal`); a run that held the lease and finds none (taken over and freed since, or deleted by
hand) may not publish either. A writer bound to no run (a script's) is not fenced; one bound to a run that never took
a lease (a test's) may publish until a takeover has fenced the partition.
"""

from __future__ import annotations

from resdyn.dagster_project.store.errors import LeaseLostError


def token_of(record: dict | None, field: str = "fence") -> int:
    """A whole-number token from a lease (``fence``) or a manifest field; 0 where there is none."""
    value = (record or {}).get(field)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def next_token(previous_lease: dict | None, manifest: dict) -> int:
    """The token of a lease taken now: larger than the previous holder's, the published generation's and the fence."""
    return max(token_of(previous_lease), token_of(manifest, "fencing_token"), token_of(manifest, "fenced_below")) + 1


def fenced_out(manifest: dict, token: int) -> dict:
    """``manifest`` with every token below ``token`` refused (a takeover by the lease that holds ``token``)."""
    return {**manifest, "fenced_below": max(token_of(manifest, "fenced_below"), token)}


def publication_refusal(run_id: str, lease: dict | None, manifest: dict, recorded: bool) -> str | None:
    """Why run ``run_id``, whose partition's lease is ``lease`` (None: no lease there), may not publish over
    ``manifest``; None when it may. ``recorded``: the run has a row in the partition's runs table, so it held the
    lease once (every run takes it before its first record): with no lease now, it lost it."""
    if lease is not None and lease.get("run_id") != run_id:
        return f"its lease was taken over by run {lease.get('run_id')!r}"
    if lease is None and recorded:
        return "its lease is gone (taken over and freed since, or deleted by hand)"
    token, fence = token_of(lease), token_of(manifest, "fenced_below")
    if token < fence:
        return (f"its lease (fencing token {token}) was taken over (the partition takes tokens from {fence} on)"
                if lease is not None else f"it holds no lease and the partition was fenced (tokens from {fence} on)")
    return None


def check_may_publish(run_id: str | None, lease: dict | None, manifest: dict, recorded: bool, key: str) -> None:
    """Raise :class:`LeaseLostError` when run ``run_id`` may not publish partition ``key`` over ``manifest``
    (:func:`publication_refusal`); a writer bound to no run is not fenced."""
    refusal = publication_refusal(run_id, lease, manifest, recorded) if run_id else None
    if refusal is not None:
        raise LeaseLostError(f"run {run_id} may not publish {key}: {refusal}; nothing of this run was published")


def stamped(manifest: dict, lease: dict | None) -> dict:
    """The manifest a publication under ``lease`` writes: it records the lease's token."""
    return {**manifest, "fencing_token": token_of(lease)} if lease is not None else manifest
