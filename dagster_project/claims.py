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
import polars as pl

from resdyn.claims import CheckpointData, ClaimsReport, diagnostics, evaluate

from .config import SQL_DIRECTORY
from .store.warehouse import Warehouse


def _frame(store: Warehouse, name: str, model: str) -> pl.DataFrame:
    """The answer of sql/claims/<name>.sql over the complete partitions, for ``model``."""
    table = store.query((SQL_DIRECTORY / "claims" / f"{name}.sql").read_text(), complete_only=True)
    return pl.from_arrow(table).filter(pl.col("model") == model)


def _floats(frame: pl.DataFrame, column: str) -> np.ndarray:
    """A column as float64 with NULL as NaN."""
    return frame[column].cast(pl.Float64).fill_null(float("nan")).to_numpy()


def _by_checkpoint(frame: pl.DataFrame) -> dict[str, dict]:
    return {row["checkpoint"]: row for row in frame.iter_rows(named=True)}


def checkpoint_data(store: Warehouse, model: str) -> tuple[dict[str, CheckpointData], dict[str, dict[float, np.ndarray]]]:
    """Every complete checkpoint of ``model`` as CheckpointData, and its surgery ranks through depth per alpha."""
    sublayers, cumulative, surgery = (_frame(store, name, model) for name in ("sublayers", "cumulative", "surgery"))
    sizes, graphs = _by_checkpoint(_frame(store, "checkpoints", model)), _by_checkpoint(_frame(store, "graphs", model))
    surgery_by_depth = pl.from_arrow(store.query(
        "SELECT model, checkpoint, alpha, depth, effective_rank FROM schur_surgery ORDER BY depth",
        complete_only=True)).filter(pl.col("model") == model)
    data, products = {}, {}
    for checkpoint in sorted(set(sublayers["checkpoint"].to_list())):
        rows = sublayers.filter(pl.col("checkpoint") == checkpoint)
        size, graph = sizes.get(checkpoint, {}), graphs.get(checkpoint, {})
        full_depth = surgery.filter(pl.col("checkpoint") == checkpoint)
        data[checkpoint] = CheckpointData(
            depth=rows["depth"].to_numpy().astype(int), henrici=_floats(rows, "henrici"),
            complex_fraction=_floats(rows, "complex_fraction"), operator_type=np.asarray(rows["operator_type"].to_list()),
            cumulative_rank=cumulative.filter(pl.col("checkpoint") == checkpoint)["effective_rank"].to_numpy(),
            surgery_full_depth=dict(zip(full_depth["alpha"].to_list(), full_depth["full_depth_rank"].to_list())),
            coupling_effect=_floats(rows, "coupling_effect"),
            coupling_significant=rows["coupling_significant"].fill_null(False).to_numpy().astype(bool),
            d_model=int(size.get("d_model") or 0), n_samples=int(size.get("n_samples") or 0),
            n_observations=int(graph.get("n_observations") or 0),
            median_edge_correlation=float(graph.get("median_edge_correlation", float("nan"))),
            graph_k=int(graph.get("graph_k") or 0) if graph.get("construction") == "knn" else 0)
        ranks = surgery_by_depth.filter(pl.col("checkpoint") == checkpoint)
        products[checkpoint] = {alpha: rows_of_alpha["effective_rank"].to_numpy()
                                for (alpha,), rows_of_alpha in ranks.group_by("alpha", maintain_order=True)}
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
