"""The claims table: diagnostics of the measurements behind it and its markdown."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .checkpoint import CheckpointData
from .claim import Claim
from .references import noise_knn_correlation
from .rules import RULES_VERSION, STATED_COMMUNITY_RHO, STATED_UNIT_EFFECT, rules_hash


def diagnostics(null: CheckpointData, trained: CheckpointData) -> list[dict]:
    """What the data says about the measurements behind the claims (not claims of the paper)."""
    rows = []
    for label, data in (("null model", null), ("trained", trained)):
        noise = noise_knn_correlation(data.n_observations, data.d_model, data.graph_k)
        rows.append({"checkpoint": label, "measure": "median |r| of the kNN graphs' edges vs independent units",
                     "value": data.median_edge_correlation, "noise": noise,
                     "ratio": data.median_edge_correlation / noise if noise and np.isfinite(noise) else float("nan"),
                     "observations": data.n_observations, "units": data.d_model, "k": data.graph_k,
                     "median_noise_to_signal": float(np.nanmedian(data.noise_to_signal))
                     if data.noise_to_signal is not None and np.isfinite(data.noise_to_signal).any() else float("nan"),
                     "n_folds": data.n_folds,
                     "largest_eigenvector_condition": (data.largest_eigenvector_condition() or (float("nan"), -1))[0]})
    return rows


def markdown_cell(text) -> str:
    """A table cell's text with its pipes escaped (``||J - I||_F`` would split the cell)."""
    return str(text).replace("|", "\\|")


@dataclass
class ClaimsReport:
    model: str
    null_checkpoint: str
    trained_checkpoint: str
    claims: list[Claim] = field(default_factory=list)
    diagnostics: list[dict] = field(default_factory=list)
    quantized_checkpoint: str | None = None  # the quantization control's checkpoint, when there is one
    power: list[dict] = field(default_factory=list)  # coupling_power_table: each coupling test's power
    rounding_note: str = ""  # how the zero-rounding readings were made, or why there are none

    def markdown(self) -> str:
        control = self.quantized_checkpoint is not None
        doses = any(claim.zero_rounding_verdict for claim in self.claims)
        lines = [f"Rules v{RULES_VERSION} (hash of the declared rules {rules_hash()}).", "",
                 *([f"Zero rounding: {self.rounding_note}.", ""] if self.rounding_note else []),
                 "| claim (PAPER.md) | measure | paper | rule | null model | trained | effect | " +
                 ("quantization control | " if control else "") + ("at zero rounding (SIMEX) | " if doses else "")
                 + "verdict | why |",
                 "|---|---|---|---|---|---|---|" + ("---|" if control else "") + ("---|" if doses else "") + "---|---|"]
        for claim in self.claims:
            if not claim.primary:
                continue
            row = {key: markdown_cell(value) for key, value in claim.row().items()}
            note = f" ({row['note']})" if row["note"] else ""
            quantized = f"{row['quantized_null_model']} | " if control else ""
            quantized += f"{row['zero_rounding']} | " if doses else ""
            lines.append(f"| {row['claim']} | {row['measure']}{note} | {row['paper']} | {row['rule']} | "
                         f"{row['null_model']} | {row['trained']} | {row['effect']} | {quantized}**{row['verdict']}** | "
                         f"{row['why']} |")
        lines += ["", "The sentence of PAPER.md each claim reads:", "", "| claim | reads |", "|---|---|"]
        seen = set()
        for claim in self.claims:
            if claim.primary and claim.statement not in seen and claim.reads:
                seen.add(claim.statement)
                lines.append(f"| {markdown_cell(claim.statement)} | {markdown_cell(claim.reads)} |")
        lines += ["", "Every reading of the claims that depend on one (the first of each claim is the primary):", "",
                  "| claim | reading (measure) | rule version | null model | trained | effect | verdict | why |",
                  "|---|---|---|---|---|---|---|---|"]
        by_claim: dict[str, list[Claim]] = {}
        for claim in self.claims:
            by_claim.setdefault(claim.claim, []).append(claim)
        for group in by_claim.values():
            if len(group) < 2:
                continue
            for claim in group:
                row = {key: markdown_cell(value) for key, value in claim.row().items()}
                lines.append(f"| {row['claim']} | {row['measure']} | v{claim.rule_version} | {row['null_model']} | "
                             f"{row['trained']} | {row['effect']} | "
                             f"{'**' + row['verdict'] + '**' if claim.primary else row['verdict']} | {row['why']} |")
        if self.power:
            columns = ("checkpoint", "depth", "sublayer", "n_boundary", "n_interior", "unit_power", "unit_power_bh",
                       "n_communities", "community_power", "community_power_bh", "community_smallest_p")
            lines += ["", f"Power of each coupling test (unit level: rank-biserial effect {STATED_UNIT_EFFECT}; "
                      f"community level: rho {STATED_COMMUNITY_RHO}; at 0.05 and at BH's first level 0.05 / m):", "",
                      "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            for row in self.power:
                cells = [row.get(column) for column in columns]
                lines.append("| " + " | ".join("" if c is None else f"{c:.3g}" if isinstance(c, float) else str(c)
                                               for c in cells) + " |")
        for row in self.diagnostics:
            if np.isfinite(row["noise"]):
                lines.append(f"\nGraphs ({row['checkpoint']}): median kNN edge |r| {row['value']:.3f} against "
                             f"{row['noise']:.3f} for independent units ({row['observations']} observations, "
                             f"{row['units']} units, k = {row['k']}): {row['ratio']:.2f}x the noise level.")
            if np.isfinite(row.get("median_noise_to_signal", float("nan"))):
                lines.append(f"\nMean Jacobians ({row['checkpoint']}): median noise-to-signal "
                             f"||se(J)||_F / ||J - I||_F = {row['median_noise_to_signal']:.3f} over sublayers "
                             f"({row['n_folds']} folds).")
            if np.isfinite(row.get("largest_eigenvector_condition", float("nan"))):
                lines.append(f"\nPolar normal part ({row['checkpoint']}): largest eigenvector condition number "
                             f"kappa(V) = {row['largest_eigenvector_condition']:.3g} over sublayers.")
        return "\n".join(lines)

