"""``resdyn claims``: the paper's claims on one model, null-model checkpoint beside trained (resdyn/claims/).

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

from resdyn.claims import (
    RULES_VERSION,
    CheckpointData,
    ClaimsReport,
    coupling_power_table,
    diagnostics,
    evaluate,
    rules_hash,
    rules_table,
    with_quantization_control,
    with_zero_rounding,
)
from resdyn.dagster_project.configuration.config import SQL_DIRECTORY
from resdyn.dagster_project.configuration.settings import BY_NAME
from resdyn.dagster_project.store.artefacts import index_figures
from resdyn.dagster_project.store.warehouse import Warehouse
from resdyn.dagster_project.study.claims_inputs import claims_inputs, describe, differences, identity, simex_inputs
from resdyn.depth import RANK_DEFINITIONS as RANKS
from resdyn.depth import SCHUR_ORDERINGS as ORDERINGS
from resdyn.models.registry import INIT_QUANTIZED_REVISION as QUANTIZED_CHECKPOINT
from resdyn.models.registry import SIMEX_BASELINE, SIMEX_REVISIONS
from resdyn.sampling import cumulative_quantity, surgery_quantity


def _floats(frame: pl.DataFrame, column: str) -> np.ndarray:
    """A column as float64 with NULL as NaN."""
    return frame[column].cast(pl.Float64).fill_null(float("nan")).to_numpy()


def _by_checkpoint(frame: pl.DataFrame) -> dict[str, dict]:
    return {row["checkpoint"]: row for row in frame.iter_rows(named=True)}


MEASURES = ("asymmetry_index", "rotation_share", "henrici_rel_j_minus_i", "henrici_rel_j", "frac_complex", "update_size",
            "mean_absolute_argument")


def _by_depth(intervals: pl.DataFrame, quantity: str, column: str) -> dict:
    """depth -> ``column`` of the sampling_intervals rows of ``quantity``."""
    rows = intervals.filter(pl.col("quantity") == quantity)
    return dict(zip(rows["depth"].to_list(), rows[column].to_list()))


def _replicates(intervals: pl.DataFrame, quantity: str, depths: np.ndarray) -> np.ndarray | None:
    """(folds x depths) leave-one-fold-out values of ``quantity`` in the order of ``depths``; None without folds."""
    by_depth = _by_depth(intervals, quantity, "replicates")
    if not by_depth or any(by_depth.get(int(depth)) is None or len(by_depth[int(depth)]) < 2 for depth in depths):
        return None
    return np.asarray([by_depth[int(depth)] for depth in depths], dtype=np.float64).T


def checkpoint_data(frames: dict[str, pl.DataFrame]) -> tuple[dict[str, CheckpointData],
                                                              dict[str, dict[float, np.ndarray]]]:
    """Every complete checkpoint in ``frames`` (:func:`claims_inputs`) as CheckpointData, and its surgery ranks
    through depth per alpha."""
    sublayers, cumulative, surgery, intervals = (frames[name]
                                                 for name in ("sublayers", "cumulative", "surgery", "intervals"))
    sizes, graphs = _by_checkpoint(frames["checkpoints"]), _by_checkpoint(frames["graphs"])
    surgery_by_depth = frames["surgery_by_depth"].sort("depth")
    data, products = {}, {}
    for checkpoint in sorted(set(sublayers["checkpoint"].to_list())):
        rows = sublayers.filter(pl.col("checkpoint") == checkpoint)
        size, graph = sizes.get(checkpoint, {}), graphs.get(checkpoint, {})
        depths = rows["depth"].to_numpy().astype(int)
        ranks = cumulative.filter(pl.col("checkpoint") == checkpoint)
        folds = intervals.filter(pl.col("checkpoint") == checkpoint)
        full_depth = surgery.filter(pl.col("checkpoint") == checkpoint)
        rank_depths = ranks["depth"].to_numpy().astype(int)
        surgery_full = {}
        for row in full_depth.iter_rows(named=True):
            for rank in RANKS:
                surgery_full[(row["schur_ordering"], float(row["alpha"]), rank)] = row[rank]
        surgery_replicates = {}
        for ordering in ORDERINGS:
            for rank in RANKS:
                replicates = _replicates(folds, surgery_quantity(ordering, rank), rank_depths[-1:])
                if replicates is not None:
                    surgery_replicates[(ordering, rank)] = replicates[:, -1]
        data[checkpoint] = CheckpointData(
            depth=depths, sublayer=np.asarray(rows["sublayer"].to_list()),
            measures={name: _floats(rows, name) for name in MEASURES},
            replicates={name: r for name in MEASURES if (r := _replicates(folds, name, depths)) is not None},
            operator_type=np.asarray(rows["operator_type"].to_list()),
            operator_type_henrici=np.asarray(rows["operator_type_henrici"].fill_null("other").to_list()),
            cumulative={rank: _floats(ranks, rank) for rank in RANKS},
            cumulative_replicates={rank: r for rank in RANKS
                                   if (r := _replicates(folds, cumulative_quantity(rank), rank_depths)) is not None},
            surgery_full_depth=surgery_full, surgery_replicates=surgery_replicates,
            coupling_effect=_floats(rows, "coupling_effect"),
            coupling_significant=rows["coupling_significant"].fill_null(False).to_numpy().astype(bool),
            community_rho=_floats(rows, "community_rho"),
            community_significant=rows["community_significant"].fill_null(False).to_numpy().astype(bool),
            n_boundary=_counts(rows, "n_boundary"), n_interior=_counts(rows, "n_interior"),
            n_communities=_counts(rows, "n_communities"), unit_strata=_strata(rows),
            n_permutations=_setting(frames["runs"], checkpoint, "n_permutations", BY_NAME["n_permutations"].default),
            missing=tuple(column for column in V4_COLUMNS
                          if column not in rows.columns or rows[column].null_count() == rows.height),
            noise_to_signal=_noise(folds, depths),
            eigenvector_condition=(None if rows["eigenvector_condition_number"].null_count() == rows.height
                                   else _floats(rows, "eigenvector_condition_number")),
            d_model=int(size.get("d_model") or 0), n_samples=int(size.get("n_samples") or 0),
            n_observations=int(graph.get("n_observations") or 0),
            median_edge_correlation=float(graph.get("median_edge_correlation", float("nan"))),
            graph_k=int(graph.get("graph_k") or 0) if graph.get("construction") == "knn" else 0)
        by_alpha = surgery_by_depth.filter(pl.col("checkpoint") == checkpoint)
        products[checkpoint] = {alpha: rows_of_alpha["effective_rank"].to_numpy()
                                for (alpha,), rows_of_alpha in by_alpha.group_by("alpha", maintain_order=True)}
    return data, products


# sql/claims/sublayers.sql's columns since rules v4: inputs saved before lack them (or, joined with newer folders,
# hold only nulls there); the claims that need one say so, naming it
V4_COLUMNS = ("n_boundary", "n_interior", "n_communities", "coupling_q_permutation")


def _strata(frame: pl.DataFrame) -> list[tuple[tuple[int, int], ...]] | None:
    """Per sublayer the unit test's degree strata, ((boundary, interior) per bin), () where the test has none; None
    where the inputs were kept before the strata were recorded (the power is then computed over one stratum, and
    its note says so)."""
    if frame["stratum_boundary"].null_count() == frame.height:
        return None
    return [tuple(zip(boundary or (), interior or ()))
            for boundary, interior in zip(frame["stratum_boundary"].to_list(), frame["stratum_interior"].to_list())]


def _counts(frame: pl.DataFrame, column: str) -> np.ndarray | None:
    """An integer column (NULL as 0: an undefined test has no size), or None where the inputs predate it (inputs
    saved before rules v4: the claims that need it say so, naming the column)."""
    if column not in frame.columns or frame[column].null_count() == frame.height:
        return None
    return frame[column].fill_null(0).to_numpy().astype(int)


def _setting(runs: pl.DataFrame, checkpoint: str, name: str, default):
    """One analysis setting of the run that made ``checkpoint`` (runs.settings, JSON), or ``default``."""
    rows = runs.filter(pl.col("checkpoint") == checkpoint) if "checkpoint" in runs.columns else runs.clear()
    for text in rows["settings"].to_list() if rows.height else []:
        value = json.loads(text).get(name) if text else None
        if value is not None:
            return value
    return default


def _noise(intervals: pl.DataFrame, depths: np.ndarray) -> np.ndarray | None:
    by_depth = _by_depth(intervals, "noise_to_signal", "value")
    return np.asarray([by_depth.get(int(d), float("nan")) for d in depths], dtype=np.float64) if by_depth else None


def claims_need_output(where) -> str:
    """Why claims of the object-store warehouse ``where`` without --output are refused."""
    return (f"claims of the object-store warehouse {where} are not written into it: give --output DIR (a local "
            "folder, or s3://BUCKET/PREFIX to upload them there)")


def claim_pairs(store: Warehouse) -> list[dict]:
    """(model, null_checkpoint, trained_checkpoint) of every model with two or more complete partitions."""
    return store.query((SQL_DIRECTORY / "claims" / "pairs.sql").read_text()).to_pylist()


def build_claims(store: Warehouse | None, model: str, null_checkpoint: str, trained_checkpoint: str,
                 output: Path | None = None, *, frames: dict[str, pl.DataFrame] | None = None,
                 simex_frames: dict[str, pl.DataFrame] | None = None, simex_left_out: dict[str, str] | None = None
                 ) -> tuple[ClaimsReport, Path]:
    """The claims of ``model`` from the warehouse ``store`` or, when ``frames`` is given, from those frames
    (:func:`load_claims_inputs`); their zero-rounding readings from the SIMEX set's frames ``simex_frames`` (kept
    ones), else the warehouse's (:func:`zero_rounding`); without a warehouse, ``output`` is required."""
    from resdyn.figures import claims_panels

    if null_checkpoint == trained_checkpoint:
        raise ValueError(f"--null and --trained both name {model}@{null_checkpoint}: a claim compares two checkpoints "
                         "(the null model's and the trained one's); `resdyn models` lists them")
    if output is None and store is None:
        raise ValueError("claims from saved inputs need --output DIR (there is no warehouse to write them into)")
    if output is None and store.results_folder is None:  # said before anything is read from the store
        raise ValueError(claims_need_output(store))
    if frames is None:
        _require_partitions(store, model)
        frames = claims_inputs(store, model)
    partitions = {row["checkpoint"]: row for row in frames["partitions"].iter_rows(named=True)}
    data, products = checkpoint_data(frames)
    control = QUANTIZED_CHECKPOINT if QUANTIZED_CHECKPOINT in data and null_checkpoint == "init" else None
    compared = [null_checkpoint, trained_checkpoint, *([control] if control else [])]
    stale = [c for c in compared if partitions.get(c, {}).get("status") == "stale"]
    if stale:
        row = partitions[stale[0]]
        raise ValueError(f"{model}@{', '.join(stale)} was made from a file (sha256 {row['source_sha256'][:12]}) that is no "
                         f"longer the one {model} is registered with ({row['registered_sha256'][:12]}): rerun it "
                         f"(`resdyn run --model {model} --checkpoint {' --checkpoint '.join(stale)}`)")
    missing = [c for c in (null_checkpoint, trained_checkpoint) if c not in data]
    if missing:
        known = ", ".join(sorted(data)) or "none"
        if store is None:
            raise ValueError(f"{model}: the kept inputs hold no checkpoint {', '.join(missing)} (kept: {known}); name "
                             "the pair with --null NAME --trained NAME")
        raise ValueError(f"{model}: no complete partition for checkpoint(s) {', '.join(missing)} (complete: {known}); "
                         f"run `resdyn run --model {model} --checkpoint {' --checkpoint '.join(missing)}` first")
    sources = {c: (partitions.get(c) or {}).get("source_sha256") or "" for c in compared}
    widths = {c: data[c].d_model for c in compared}
    if len(set(widths.values())) > 1 or len({sha for sha in sources.values() if sha}) > 1:
        described = ", ".join(f"{c}: d = {widths[c]}" + (f", sha256 {sources[c][:12]}" if sources[c] else "")
                              for c in compared)
        raise ValueError(f"{model}'s checkpoints were made from different models ({described}): a claim compares one "
                         f"architecture before and after training; rerun the odd one out (`resdyn run --model {model} "
                         "--checkpoint NAME`)")
    warnings = _check_comparable(model, frames, [null_checkpoint, trained_checkpoint, *([control] if control else [])],
                                 data)
    claims = evaluate(data[null_checkpoint], data[trained_checkpoint])
    if control is not None:
        claims = with_quantization_control(claims, data[control], data[trained_checkpoint])
    left_out = dict(simex_left_out or {})
    if simex_frames is None and store is not None:
        simex_frames, excluded = simex_inputs(store, model)
        left_out.update(excluded)
    claims, rounding_note, simex_checkpoints = zero_rounding(
        claims, model, data[null_checkpoint], simex_frames, identity(frames, trained_checkpoint), null_checkpoint,
        from_kept_inputs=store is None, left_out=left_out)
    report = ClaimsReport(model, null_checkpoint, trained_checkpoint, claims,
                          diagnostics(data[null_checkpoint], data[trained_checkpoint]), control,
                          coupling_power_table(data[null_checkpoint], data[trained_checkpoint]), rounding_note)
    output = Path(output) if output else store.root / "_artefacts" / "claims" / model
    output.mkdir(parents=True, exist_ok=True)
    pair = {null_checkpoint: data[null_checkpoint], **({control: data[control]} if control else {}),
            trained_checkpoint: data[trained_checkpoint]}
    figure = claims_panels(pair, output, title=f"{model}: {null_checkpoint} vs {trained_checkpoint}",
                           surgery_products=products)
    runs = frames["runs"].to_dicts()
    record = {"model": model, "null_checkpoint": null_checkpoint, "trained_checkpoint": trained_checkpoint,
              "quantized_null_checkpoint": control, "simex_checkpoints": simex_checkpoints,
              "zero_rounding_note": rounding_note,
              "d_model": data[trained_checkpoint].d_model, "n_samples": data[trained_checkpoint].n_samples,
              "settings": {r["checkpoint"]: json.loads(r["settings"]) for r in runs},
              "settings_hash": {r["checkpoint"]: r["settings_hash"] for r in runs},
              "code_version": {r["checkpoint"]: {"git_commit": r["git_commit"], "resdyn_version": r["resdyn_version"],
                                                 "tables_code_version": r.get("tables_code_version")} for r in runs},
              "corpus": {r["checkpoint"]: {"label": r.get("corpus"), "sha256": r.get("corpus_sha256")} for r in runs},
              "source_sha256": {c: (partitions.get(c) or {}).get("source_sha256") for c in compared},
              "rules": {key: {"version": version, "rule": text} for key, (version, text) in rules_table().items()},
              "rules_version": RULES_VERSION, "rules_hash": rules_hash(),
              "claims": [{**claim.row(), "null_estimate": asdict(claim.null_model) if claim.null_model else None,
                          "trained_estimate": asdict(claim.trained) if claim.trained else None,
                          "effect_estimate": asdict(claim.effect) if claim.effect else None,
                          "zero_rounding_estimate": asdict(claim.zero_rounding) if claim.zero_rounding else None,
                          "quantized_null_estimate": asdict(claim.quantized_null_model) if claim.quantized_null_model
                          else None, "quantized_comparison_estimate": asdict(claim.quantized_comparison)
                          if claim.quantized_comparison else None}
                         for claim in report.claims], "diagnostics": report.diagnostics,
              "coupling_power": report.power}
    record["warnings"] = warnings
    (output / "claims.json").write_text(json.dumps(record, indent=2))
    # the warnings above the table, where a reader starts
    (output / "claims.md").write_text("".join(f"> **warning:** {line}\n\n" for line in warnings)
                                      + report.markdown() + "\n")
    # each coupling test's power as a table of its own (one row per checkpoint and sublayer)
    pl.DataFrame(report.power, infer_schema_length=None).write_parquet(output / "coupling_power.parquet")
    index_figures(output, [figure])  # what names the figure for the UI (store/artefacts.py)
    return report, figure


def _check_comparable(model: str, frames: dict[str, pl.DataFrame], compared: list[str], data: dict) -> list[str]:
    """Refuse checkpoints measured on different samples (another n or corpus: their difference would be the
    samples', not training's); return a warning for each other difference that may change a number (other analysis
    settings, another table code version, or one not recorded), printed in the table itself."""
    identities = {checkpoint: identity(frames, checkpoint) for checkpoint in compared}
    first, *others = compared
    for other in others:
        for key, what in (("n_samples", "n"), ("corpus_sha256", "corpus")):
            a, b = (data[first].n_samples, data[other].n_samples) if key == "n_samples" else \
                (identities[first][key], identities[other][key])
            if a and b and a != b:
                raise ValueError(f"{model}@{first} and {model}@{other} were measured on different samples (another "
                                 f"{what}: {describe(identities[first])}; {describe(identities[other])}): a claim "
                                 f"compares one set of windows before and after training; rerun {other} with "
                                 f"{first}'s settings (`resdyn run --model {model} --checkpoint {other} ...`)")
    warnings = []
    if not all(identities[checkpoint]["corpus_sha256"] for checkpoint in compared):
        warnings.append("the corpus of some checkpoints is not recorded ("
                        + ", ".join(c for c in compared if not identities[c]["corpus_sha256"])
                        + "): they may have been measured on other text")
    hashes = {checkpoint: identities[checkpoint]["settings_hash"] for checkpoint in compared}
    if len(set(hashes.values())) > 1:
        warnings.append("the checkpoints were analysed with different settings ("
                        + ", ".join(f"{c}: {h or 'unknown'}" for c, h in hashes.items())
                        + "; their `settings` in claims.json differ): a difference may be the settings'")
    runs = {row["checkpoint"]: row for row in frames["runs"].iter_rows(named=True)}
    # the tables' code version where every run recorded one, else the commit (the same commit made the same tables)
    for column, meaning in (("tables_code_version", "table code versions"), ("git_commit", "code commits")):
        versions = {checkpoint: (runs.get(checkpoint) or {}).get(column) or "" for checkpoint in compared}
        if all(versions.values()):
            if len(set(versions.values())) > 1:
                warnings.append(f"the checkpoints' tables were made at different {meaning} ("
                                + ", ".join(f"{c}: {v[:12]}" for c, v in versions.items())
                                + "): a difference may be the code's; rerun the older ones to compare like with like")
            break
    else:
        warnings.append("the code version of some checkpoints' tables is not recorded: a difference may be the code's")
    return warnings


# the analysis settings the spectral tables depend on besides n: a SIMEX set measured at others than the study's
# is noted (its shift is carried to the study's estimate as a property of the weights)
SPECTRAL_SETTINGS = ("sequence_length", "positions", "warmup", "bos", "dtype", "backend", "seed")


def zero_rounding(claims: list, model: str, null: CheckpointData, simex_frames: dict[str, pl.DataFrame] | None,
                  trained: dict, null_checkpoint: str, *, from_kept_inputs: bool = False,
                  left_out: dict[str, str] | None = None) -> tuple[list, str, list[str]]:
    """(``claims`` with their zero-rounding readings, a note, the SIMEX checkpoints read) from the SIMEX set's
    frames (:func:`simex_inputs`, or kept ones): its baseline (the file's own weights) and its draws, all of one
    study (file, width, settings, corpus) and made from the trained checkpoint's file (``trained``: its
    :func:`identity`), each draw paired with the baseline (resdyn.claims.with_zero_rounding). The note names the
    set's checkpoints ``left_out`` (with why) and the spectral settings or corpus in which the set differs from the
    trained checkpoint. Without a usable set every claim stays as it is and the note says why and what to run."""
    run = f"`resdyn run --model {model} --simex`"
    left = "; ".join(f"{checkpoint} left out: {why}" for checkpoint, why in (left_out or {}).items())
    if null_checkpoint != "init":
        return claims, "no zero-rounding reading: the SIMEX set goes with a GGUF file's null model (--null init)", []
    if simex_frames is None and from_kept_inputs:
        return claims, ("no zero-rounding reading: no SIMEX set in the kept inputs (--simex-inputs DIR, kept from a "
                        f"warehouse where {run} ran)"), []
    if simex_frames is None or simex_frames["sublayers"].height == 0:
        return claims, "; ".join(filter(None, [f"no zero-rounding reading: {model}'s SIMEX set is not measured (run "
                                               f"it: {run})", left])), []
    data, _ = checkpoint_data(simex_frames)
    if SIMEX_BASELINE not in data:
        return claims, "; ".join(filter(None, [
            f"no zero-rounding reading: the SIMEX set lacks its paired baseline {SIMEX_BASELINE}, the file's own "
            f"weights (run it: {run})", left])), []
    draws = [checkpoint for checkpoint in SIMEX_REVISIONS if checkpoint != SIMEX_BASELINE and checkpoint in data]
    baseline = identity(simex_frames, SIMEX_BASELINE)
    odd = {checkpoint: differing for checkpoint in draws
           if (differing := differences(baseline, identity(simex_frames, checkpoint)))}
    if odd:
        return claims, ("no zero-rounding reading: " + "; ".join(f"{c} differs from {SIMEX_BASELINE} in "
                                                                 f"{', '.join(d)}" for c, d in odd.items())
                        + f" (a draw is paired with the baseline on the same samples: rerun them at its settings, "
                        f"{run})"), []
    if baseline["source_sha256"] and trained["source_sha256"] and baseline["source_sha256"] != trained["source_sha256"]:
        return claims, (f"no zero-rounding reading: the SIMEX set was made from another file (sha256 "
                        f"{baseline['source_sha256'][:12]}) than the trained checkpoint "
                        f"({trained['source_sha256'][:12]}): rerun it ({run})"), []
    if data[SIMEX_BASELINE].d_model != null.d_model or not np.array_equal(data[SIMEX_BASELINE].depth, null.depth):
        return claims, (f"no zero-rounding reading: the SIMEX set's model (d = {data[SIMEX_BASELINE].d_model}) is not "
                        f"the null model's (d = {null.d_model})"), []
    judged, note = with_zero_rounding(claims, null, [(SIMEX_REVISIONS[c][0], data[c]) for c in draws],
                                      data[SIMEX_BASELINE])
    measured = f"the SIMEX set measured at n = {data[SIMEX_BASELINE].n_samples} (settings {baseline['settings_hash']})"
    return judged, "; ".join(filter(None, [note, measured, _set_against_study(baseline, trained), left])), \
        [SIMEX_BASELINE, *draws]


def _set_against_study(baseline: dict, trained: dict) -> str:
    """Where the SIMEX set's baseline was measured on another corpus or other spectral settings than the trained
    checkpoint (beside n, which the design lowers; both :func:`identity`), one clause saying so; else ""."""
    ours, theirs = baseline["settings"], trained["settings"]
    clauses = [f"{name} {ours[name]} (the trained checkpoint's: {theirs[name]})" for name in SPECTRAL_SETTINGS
               if name in ours and name in theirs and ours[name] != theirs[name]]
    if baseline["corpus_sha256"] and trained["corpus_sha256"] and baseline["corpus_sha256"] != trained["corpus_sha256"]:
        clauses.append(f"another corpus ({baseline['corpus']}; the trained checkpoint's: {trained['corpus']})")
    return ("the set was measured with " + ", ".join(clauses) + ": its shift is carried as a property of the weights"
            if clauses else "")


def _require_partitions(store: Warehouse, model: str) -> None:
    """A clear error when ``model`` has no partition in the warehouse at all."""
    if store.query("SELECT count(*) AS n FROM partitions WHERE model = $model",
                   parameters={"model": model}).to_pylist()[0]["n"]:
        return
    registered = model in store.registry_specs()
    models = sorted({row["model"] for row in store.query("SELECT DISTINCT model FROM partitions").to_pylist()})
    raise ValueError(f"{model} has no partition in {store}" + (
        f": run it first (`resdyn run --model {model}`)" if registered else
        f" and is not a registered model; the models there: {', '.join(models) or 'none'} (`resdyn models`)"))
