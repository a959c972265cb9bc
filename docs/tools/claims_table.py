"""Rewrite the README's claims tables (each between its ``claims:begin`` / ``claims:end`` markers) from the
study's ``docs/study/<model>/claims.json`` (the paper's n, ``make study``), and docs/smollm2.md's block from
docs/smollm2/claims.md (the demo's n = 128: ``resdyn claims smollm2-135m --output docs/smollm2``).

    python docs/tools/claims_table.py [--check]

``--check`` exits 1 when a table differs from its JSON (nothing written).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
CLAIMS = REPOSITORY / "docs" / "smollm2" / "claims.json"
README = REPOSITORY / "README.md"
ACCOUNT = REPOSITORY / "docs" / "smollm2.md"
ACCOUNT_BEGIN = "<!-- claims:begin (docs/smollm2/claims.md, made by `resdyn claims smollm2-135m --output docs/smollm2`) -->"
STUDY_MODELS = ("smollm2-135m", "gemma3-270m")  # make study
END = "<!-- claims:end -->"


def study_begin(model: str) -> str:
    return f"<!-- claims:begin (from docs/study/{model}/claims.json: `make study`) -->"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|") if "\\|" not in str(text) else str(text)


def table(claims: dict) -> str:
    """The primary reading of every claim: the measure its verdict rests on, the null model's and the trained
    model's numbers with their intervals (and the quantization control's, when the model has one)."""
    control = claims.get("quantized_null_checkpoint")
    head = "| claim (PAPER.md) | paper | null model (`init`) | " + ("null model, quantized | " if control else "")
    lines = [head + "trained | verdict |", "|---|---|---|" + ("---|" if control else "") + "---|---|"]
    for claim in claims["claims"]:
        if not claim.get("primary", True):
            continue
        measure = re.sub(r" \(.*$", "", claim["measure"]) if "(" in claim["measure"] else claim["measure"]
        quantized = f"{_cell(claim.get('quantized_null_model', 'n/a'))} | " if control else ""
        lines.append(f"| {_cell(claim['claim'])} ({_cell(measure)}) | {_cell(claim['paper'])} | "
                     f"{_cell(claim['null_model'])} | {quantized}{_cell(claim['trained'])} | **{claim['verdict']}** |")
    return "\n".join(lines)


def _replace(text: str, begin: str, content: str) -> str:
    """``text`` with what stands between ``begin`` and the next END replaced (unchanged without ``begin``)."""
    if begin not in text:
        return text
    start = text.index(begin) + len(begin)
    end = text.index(END, start)
    return text[:start] + "\n" + content.strip() + "\n" + text[end:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    arguments = parser.parse_args()
    readme = README.read_text()
    for model in STUDY_MODELS:
        claims = REPOSITORY / "docs" / "study" / model / "claims.json"
        if claims.is_file():
            readme = _replace(readme, study_begin(model), table(json.loads(claims.read_text())))
    targets = {README: readme,
               ACCOUNT: _replace(ACCOUNT.read_text(), ACCOUNT_BEGIN, CLAIMS.with_suffix(".md").read_text())}
    stale = [path for path, text in targets.items() if path.read_text() != text]
    if arguments.check:
        return 1 if stale else 0
    for path in stale:
        path.write_text(targets[path])
    return 0


if __name__ == "__main__":
    sys.exit(main())
