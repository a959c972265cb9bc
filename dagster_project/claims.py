"""``resdyn claims``: the paper's claims on one model, null-model checkpoint beside trained (resdyn/claims.py).

Reads the complete partitions through the read-only views (``sql/claims/*.sql``), evaluates every
claim, and writes ``claims.json``, ``claims.md`` (the table) and ``claims.png`` into the output
directory (default ``<warehouse>/_artefacts/claims/<model>/``).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from resdyn.claims import CheckpointData, ClaimsReport, diagnostics, evaluate

from .store.warehouse import SQL_DIRECTORY, Warehouse


def _rows(store: Warehouse, name: str, model: str) -> list[dict]:
    table = store.query((SQL_DIRECTORY / "claims" / f"{name}.sql").read_text(), complete_only=True)
    return [row for row in table.to_pylist() if row["model"] == model]


def checkpoint_data(store: Warehouse, model: str) -> tuple[dict[str, CheckpointData], dict[str, dict[float, np.ndarray]]]:
    """Every complete checkpoint of ``model`` as CheckpointData, and its surgery ranks through depth per alpha."""
    sublayers, cumulative = _rows(store, "sublayers", model), _rows(store, "cumulative", model)
    surgery, sizes = _rows(store, "surgery", model), {r["checkpoint"]: r for r in _rows(store, "checkpoints", model)}
    graphs = {r["checkpoint"]: r for r in _rows(store, "graphs", model)}
    surgery_by_depth = store.query("SELECT model, checkpoint, alpha, depth, effective_rank FROM schur_surgery "
                                   "ORDER BY depth", complete_only=True).to_pylist()
    data, products = {}, {}
    for checkpoint in sorted({r["checkpoint"] for r in sublayers}):
        rows = [r for r in sublayers if r["checkpoint"] == checkpoint]
        column = lambda name, rows=rows: np.asarray([np.nan if r[name] is None else r[name] for r in rows])  # noqa: E731
        data[checkpoint] = CheckpointData(
            depth=column("depth").astype(int), henrici=column("henrici"), complex_fraction=column("complex_fraction"),
            operator_type=np.asarray([r["operator_type"] for r in rows]),
            cumulative_rank=np.asarray([r["effective_rank"] for r in cumulative if r["checkpoint"] == checkpoint]),
            surgery_full_depth={r["alpha"]: r["full_depth_rank"] for r in surgery if r["checkpoint"] == checkpoint},
            coupling_effect=column("coupling_effect").astype(float),
            coupling_significant=np.asarray([bool(r["coupling_significant"]) for r in rows]),
            d_model=int(sizes.get(checkpoint, {}).get("d_model", 0)),
            n_samples=int(sizes.get(checkpoint, {}).get("n_samples", 0)),
            n_observations=int(graphs.get(checkpoint, {}).get("n_observations", 0)),
            median_edge_correlation=float(graphs.get(checkpoint, {}).get("median_edge_correlation", float("nan"))),
            graph_k=int(graphs.get(checkpoint, {}).get("graph_k", 0))
            if graphs.get(checkpoint, {}).get("construction") == "knn" else 0)
        products[checkpoint] = {}
        for row in surgery_by_depth:
            if row["model"] == model and row["checkpoint"] == checkpoint:
                products[checkpoint].setdefault(row["alpha"], []).append(row["effective_rank"])
        products[checkpoint] = {alpha: np.asarray(ranks) for alpha, ranks in products[checkpoint].items()}
    return data, products


def claim_pairs(store: Warehouse) -> list[dict]:
    """(model, null_checkpoint, trained_checkpoint) of every model with two or more complete partitions."""
    return store.query((SQL_DIRECTORY / "claims" / "pairs.sql").read_text()).to_pylist()


def build_claims(store: Warehouse, model: str, null_checkpoint: str, trained_checkpoint: str,
                 output: Path | None = None) -> tuple[ClaimsReport, Path]:
    from resdyn.figures import claims_panels

    data, products = checkpoint_data(store, model)
    missing = [c for c in (null_checkpoint, trained_checkpoint) if c not in data]
    if missing:
        known = ", ".join(sorted(data)) or "none"
        raise ValueError(f"{model}: no complete partition for checkpoint(s) {', '.join(missing)} (complete: {known}); "
                         f"run `resdyn run --model {model}` first")
    report = ClaimsReport(model, null_checkpoint, trained_checkpoint,
                          evaluate(data[null_checkpoint], data[trained_checkpoint]),
                          diagnostics(data[null_checkpoint], data[trained_checkpoint]))
    output = Path(output) if output else store.root / "_artefacts" / "claims" / model
    output.mkdir(parents=True, exist_ok=True)
    pair = {null_checkpoint: data[null_checkpoint], trained_checkpoint: data[trained_checkpoint]}
    figure = claims_panels(pair, output, title=f"{model}: {null_checkpoint} vs {trained_checkpoint}",
                           surgery_products=products)
    settings = store.query("SELECT model, checkpoint, arg_max(settings, started_at) AS settings FROM runs "
                           "WHERE status = 'success' GROUP BY ALL").to_pylist()
    record = {"model": model, "null_checkpoint": null_checkpoint, "trained_checkpoint": trained_checkpoint,
              "d_model": data[trained_checkpoint].d_model, "n_samples": data[trained_checkpoint].n_samples,
              "settings": {r["checkpoint"]: json.loads(r["settings"]) for r in settings if r["model"] == model},
              "claims": [{**claim.row(), "null_estimate": asdict(claim.null_model) if claim.null_model else None,
                          "trained_estimate": asdict(claim.trained) if claim.trained else None}
                         for claim in report.claims], "diagnostics": report.diagnostics}
    (output / "claims.json").write_text(json.dumps(record, indent=2))
    (output / "claims.md").write_text(report.markdown() + "\n")
    return report, figure
