"""The study across partitions: five tables with a figure each, and one self-contained report.html.

(a) FDR-significant sublayers per model and checkpoint (the paper's 0 -> 14 -> 24),
(b) non-normality and complex fraction against relative depth, a line per model and checkpoint,
(c) cumulative effective rank against relative depth,
(d) the surgery effect (full-depth rank at alpha = 0 against alpha = 1),
(e) the coupling effect by operator type,
(f) the paper's claims for every model with two or more complete checkpoints, its first (the null
model) against its last (``resdyn claims``; verdicts by the rules of resdyn/claims/rules.py).
Every table is a named SQL file over the complete partitions only (sql/questions/, sql/study/);
the report embeds its figures (base64 PNG), shows each table beside its figure, and lists the
settings and provenance (run, settings hash, code commit, corpus) of every partition it used.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa

from resdyn.dagster_project.configuration.config import SQL_DIRECTORY
from resdyn.dagster_project.store.artefacts import index_figures
from resdyn.dagster_project.store.warehouse import Warehouse
from resdyn.figure_frames import partition_curves
from resdyn.figures import study_bars, study_lines
from resdyn.files import atomic_write_text


@dataclass(frozen=True)
class StudySection:
    name: str
    title: str
    sql_file: str  # relative to sql/


SECTIONS = (
    StudySection("study_fdr_layers", "(a) FDR-significant sublayers per model and checkpoint",
                 "questions/fdr_significant_layers.sql"),
    StudySection("study_nonnormality_by_depth", "(b) Non-normality and complex fraction vs relative depth",
                 "study/nonnormality_by_depth.sql"),
    StudySection("study_cumulative_rank_by_depth", "(c) Cumulative effective rank vs relative depth",
                 "study/cumulative_rank_by_depth.sql"),
    StudySection("study_surgery_effect", "(d) Surgery effect: full-depth rank at alpha = 0 vs 1",
                 "questions/surgery_effect.sql"),
    StudySection("study_coupling_by_operator", "(e) Coupling effect by operator type",
                 "questions/coupling_sign_rule.sql"),
)


def section_table(store: Warehouse, section: StudySection) -> pa.Table:
    return store.query((SQL_DIRECTORY / section.sql_file).read_text(), complete_only=True)


def _bars(frame: pl.DataFrame, columns: dict[str, str]) -> dict[str, dict[str, float]]:
    """groups[model@checkpoint][label] = value of each column (``columns``: column -> label)."""
    labelled = frame.with_columns(pl.format("{}@{}", "model", "checkpoint").alias("partition"))
    return {row["partition"]: {label: row[column] for column, label in columns.items()}
            for row in labelled.iter_rows(named=True)}


def section_figure(section: StudySection, table: pa.Table, directory: Path) -> Path:
    frame = pl.from_arrow(table)
    if section.name == "study_fdr_layers":
        return study_bars(_bars(frame, {"n_significant": "significant", "n_amplified": "amplified",
                                        "n_suppressed": "suppressed"}), directory,
                          name=section.name, title=section.title, y_label="sublayers (BH q < 0.05)")
    if section.name == "study_nonnormality_by_depth":
        return study_lines(partition_curves(frame, ["henrici_rel_j_minus_i", "frac_complex"]), directory, name=section.name,
                           title=section.title)
    if section.name == "study_cumulative_rank_by_depth":
        return study_lines(partition_curves(frame, ["effective_rank"]), directory, name=section.name, title=section.title,
                           log_y=("effective_rank",))
    if section.name == "study_surgery_effect":
        return study_bars(_bars(frame, {"rank_alpha_0": "alpha = 0", "rank_alpha_half": "alpha = 0.5",
                                        "rank_alpha_1": "alpha = 1"}), directory,
                          name=section.name, title=section.title, y_label="full-depth effective rank")
    if section.name == "study_coupling_by_operator":
        wide = frame.pivot(on="operator_type", index=["model", "checkpoint"], values="mean_effect",
                           aggregate_function="first", maintain_order=True)
        groups = {partition: {kind: value for kind, value in values.items() if value is not None}
                  for partition, values in _bars(wide, {c: c for c in wide.columns
                                                        if c not in ("model", "checkpoint")}).items()}
        return study_bars(groups, directory, name=section.name, title=section.title,
                          y_label="mean boundary effect (rank-biserial)")
    raise KeyError(section.name)


def _html_table(table: pa.Table, max_rows: int = 200) -> str:
    def cell(value) -> str:
        return html.escape(f"{value:.4g}" if isinstance(value, float) else str(value))

    head = "".join(f"<th>{html.escape(name)}</th>" for name in table.column_names)
    body = "".join("<tr>" + "".join(f"<td>{cell(row[name])}</td>" for name in table.column_names) + "</tr>"
                   for row in table.slice(0, max_rows).to_pylist())
    more = f"<p>({table.num_rows - max_rows} more rows: see the SQL)</p>" if table.num_rows > max_rows else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def provenance(store: Warehouse) -> pa.Table:
    """Per complete partition: the run that published it, its settings and code version."""
    return store.query("""
        SELECT p.model, p.checkpoint, p.run_id, p.settings_hash, r.git_commit, r.resdyn_version, r.corpus,
               r.dtype, r.backend, r.device, r.started_at, r.settings
        FROM partitions p LEFT JOIN runs r ON r.run_id = p.run_id AND r.model = p.model AND r.checkpoint = p.checkpoint
             AND r.status = 'success'
        WHERE p.status = 'complete' ORDER BY p.model, p.checkpoint""")


STYLE = """body{font-family:sans-serif;max-width:1500px;margin:1em auto;padding:0 1em}
section{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start;border-top:1px solid #ccc;padding:1em 0}
img{max-width:100%;height:auto}figure{flex:1 1 600px;margin:0}div.table{flex:1 1 500px;overflow-x:auto}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
th{background:#f4f4f4}code{font-size:12px}"""


def _claims_section(store: Warehouse, artefacts: Path) -> str:
    from resdyn.dagster_project.study.claims import build_claims, claim_pairs

    parts = ["<h2>(f) The paper's claims: each model's first checkpoint (null model) against its last</h2>"]
    for pair in claim_pairs(store):
        title = (f"<h3>{html.escape(pair['model'])}: {html.escape(pair['null_checkpoint'])} vs "
                 f"{html.escape(pair['trained_checkpoint'])}</h3>")
        try:
            report, figure = build_claims(store, pair["model"], pair["null_checkpoint"], pair["trained_checkpoint"],
                                          artefacts / "claims" / pair["model"])
        except ValueError as error:  # e.g. checkpoints measured on other samples: said, the other models go on
            parts.append(f"{title}<p><b>not judged:</b> {html.escape(str(error))}</p>")
            continue
        warnings = json.loads((figure.parent / "claims.json").read_text()).get("warnings", [])
        title += "".join(f"<p><b>warning:</b> {html.escape(line)}</p>" for line in warnings)
        rows = [claim.row() for claim in report.claims]
        table = pa.Table.from_pylist([{key: row[key] for key in ("claim", "measure", "paper", "rule", "null_model",
                                                                 "trained", "verdict", "note")} for row in rows])
        image = base64.b64encode(figure.read_bytes()).decode()
        parts.append(f"{title}<section><figure><img alt='claims' "
                     f"src='data:image/png;base64,{image}'></figure><div class='table'>{_html_table(table)}</div>"
                     "</section>")
    return "".join(parts) if len(parts) > 1 else ""


# the figures that compare the checkpoints of each model: name -> (the table drawn, the figure, what it shows)
COMPARISONS = {
    "metrics_by_checkpoint": ("layer_metrics", "metrics_figure",
                              "Metrics through depth (non-normality, complex fraction, alignment, effective rank, "
                              "conditioning, spectral radius), one line per checkpoint of each model."),
    "cumulative_rank_by_checkpoint": ("cumulative_rank", "cumulative_rank_figure",
                                      "Ranks of the cumulative Jacobian through depth, one line per checkpoint."),
    "coupling_by_checkpoint": ("coupling_tests", "coupling_figure",
                               "Boundary-unit coupling effect through depth, one line per checkpoint, FDR-significant "
                               "sublayers filled."),
}


def checkpoint_comparisons(store: Warehouse, artefacts: Path | None = None) -> dict[str, dict[str, Path]]:
    """Per comparison, per model: the figure of ``table`` through depth with one line per checkpoint that has it
    published (drawn by :mod:`.figure_frames`, as the notebook draws it), under ``ARTEFACTS/comparisons/<model>``
    (default: the warehouse's ``_artefacts``; an object-store warehouse has none: give a local folder)."""
    from resdyn import figure_frames

    artefacts = Path(artefacts) if artefacts is not None else report_artefacts(store)
    drawn: dict[str, dict[str, Path]] = {}
    manifests = list(store.manifests())  # read once (on an object store: a GET each), not per table and model
    models = sorted({manifest["model"] for manifest in manifests})
    labels_of = {model: store.checkpoint_labels(model) for model in models}  # a stale or mismatched one is marked
    for name, (table, function, _) in COMPARISONS.items():
        drawn[name] = {}
        for model in models:
            labels = labels_of[model]
            published = sorted(manifest["checkpoint"] for manifest in manifests
                                if manifest["model"] == model and table in manifest["tables"])
            frames = {labels.get(checkpoint, checkpoint): pl.from_arrow(store.read(table, model, checkpoint))
                      for checkpoint in published}
            if frames:
                drawn[name][model] = getattr(figure_frames, function)(
                    model, frames, artefacts / "comparisons" / model)
    for model in models:  # what names them for the UI (store/artefacts.py)
        figures = [by_model[model] for by_model in drawn.values() if model in by_model]
        if figures:
            index_figures(artefacts / "comparisons" / model, figures)
    return drawn


def report_artefacts(store: Warehouse, output: Path | None = None) -> Path:
    """Where the report's figures are drawn: the warehouse folder's ``_artefacts``; for a warehouse on an object
    store, which holds only what runs publish, ``<output stem>_figures/`` beside the report file ``output`` (required
    there: refused, naming --output)."""
    if store.results_folder is not None:
        return store.results_folder / "_artefacts"
    if output is None:
        raise ValueError(report_needs_output(store))
    return Path(output).parent / f"{Path(output).stem}_figures"


def report_needs_output(where) -> str:
    """Why a report of the object-store warehouse ``where`` without --output is refused."""
    return (f"the report of the object-store warehouse {where} is not written into it: give --output FILE (a local "
            "file, its figures in a folder beside it; or s3://BUCKET/KEY to upload both there)")


def build_report(store: Warehouse, output: Path | None = None, artefacts: Path | None = None
                 ) -> tuple[Path, dict[str, tuple[pa.Table, Path]]]:
    """Every section's table and figure, and report.html (default: <warehouse>/report.html; for a warehouse on an
    object store ``output`` is required and nothing is written to the store: :func:`report_artefacts`); the figures
    under ``artefacts`` (default: :func:`report_artefacts`)."""
    artefacts = Path(artefacts) if artefacts is not None else report_artefacts(store, output)
    directory = artefacts / "report"
    directory.mkdir(parents=True, exist_ok=True)
    results = {}
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>resdyn study report</title>"
             f"<style>{STYLE}</style></head><body><h1>resdyn: the residual stream across models and checkpoints</h1>"
             f"<p>Warehouse <code>{html.escape(str(store))}</code>; complete partitions only.</p>"]
    for section in SECTIONS:
        table = section_table(store, section)
        figure = section_figure(section, table, directory)
        results[section.name] = (table, figure)
        image = base64.b64encode(figure.read_bytes()).decode()
        parts.append(f"<h2>{html.escape(section.title)}</h2><p>SQL: <code>sql/{section.sql_file}</code></p><section>"
                     f"<figure><img alt='{section.name}' src='data:image/png;base64,{image}'></figure>"
                     f"<div class='table'>{_html_table(table)}</div></section>")
    index_figures(directory, [figure for _, figure in results.values()])  # what names them for the UI
    parts.append(_claims_section(store, artefacts))
    runs = provenance(store)
    parts.append("<h2>Settings and provenance of every partition used</h2><section><div class='table'>"
                 + _html_table(runs.drop_columns(["settings"])) + "</div></section>")
    settings = {f"{r['model']}@{r['checkpoint']}": json.loads(r["settings"]) if r["settings"] else None
                for r in runs.to_pylist()}
    parts.append(f"<details><summary>settings (JSON)</summary><pre>{html.escape(json.dumps(settings, indent=1))}"
                 "</pre></details></body></html>")
    output = Path(output) if output else store.root / "report.html"
    atomic_write_text(output, "".join(parts))
    return output, results
