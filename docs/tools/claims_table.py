"""Rewrite the README's claims tables (each between its ``claims:begin`` / ``claims:end`` markers) and the
per-model verdict prose (between ``verdicts:begin`` / ``verdicts:end``, in the README and in docs/study.md) from
the study's ``docs/study/<model>/claims.json`` (the paper's n, ``make study``), and docs/smollm2.md's block from
docs/smollm2/claims.md (the demo's n = 128: ``resdyn claims smollm2-135m --output docs/smollm2``).

    python docs/tools/claims_table.py [--check]

``--check`` exits 1 when a table or a verdict block differs from its JSON (nothing written).

The verdict prose says only what claims.json says: each primary claim under its verdict, with its effect (or the
value its rule reads when it has no effect) and its ``why`` verbatim, and which zero-rounding verdicts differ.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
CLAIMS = REPOSITORY / "docs" / "smollm2" / "claims.json"
README = REPOSITORY / "README.md"
STUDY = REPOSITORY / "docs" / "study.md"
STUDY_CLAIMS = REPOSITORY / "docs" / "study"  # <model>/claims.json
ACCOUNT = REPOSITORY / "docs" / "smollm2.md"
ACCOUNT_BEGIN = "<!-- claims:begin (docs/smollm2/claims.md, made by `resdyn claims smollm2-135m --output docs/smollm2`) -->"
STUDY_MODELS = ("smollm2-135m", "gemma3-270m")  # make study
END = "<!-- claims:end -->"
VERDICTS_END = "<!-- verdicts:end -->"
NOT_APPLICABLE = "n/a"


def study_begin(model: str) -> str:
    return f"<!-- claims:begin (from docs/study/{model}/claims.json: `make study`) -->"


def verdicts_begin(model: str) -> str:
    return f"<!-- verdicts:begin (from docs/study/{model}/claims.json: `make study`) -->"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|") if "\\|" not in str(text) else str(text)


def _primary(claims: dict) -> list[dict]:
    return [claim for claim in claims["claims"] if claim.get("primary", True)]


def table(claims: dict) -> str:
    """The primary reading of every claim: the measure its verdict rests on, the null model's and the trained
    model's numbers with their intervals (and the quantization control's, when the model has one)."""
    control = claims.get("quantized_null_checkpoint")
    head = "| claim (PAPER.md) | paper | null model (`init`) | " + ("null model, quantized | " if control else "")
    lines = [head + "trained | verdict |", "|---|---|---|" + ("---|" if control else "") + "---|---|"]
    for claim in _primary(claims):
        measure = re.sub(r" \(.*$", "", claim["measure"]) if "(" in claim["measure"] else claim["measure"]
        quantized = f"{_cell(claim.get('quantized_null_model', 'n/a'))} | " if control else ""
        lines.append(f"| {_cell(claim['claim'])} ({_cell(measure)}) | {_cell(claim['paper'])} | "
                     f"{_cell(claim['null_model'])} | {quantized}{_cell(claim['trained'])} | **{claim['verdict']}** |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- verdict prose

def _verdict_order(verdict: str) -> int:
    """holds, does not hold, every "undecided ..." verdict, not testable, then any other verdict."""
    if verdict == "holds":
        return 0
    if verdict == "does not hold":
        return 1
    if verdict.startswith("undecided"):
        return 2
    if verdict == "not testable":
        return 3
    return 4


def _rule_version(claim: dict, rules: dict):
    """The claim's own ``rule_version``, else its rule's version in ``rules`` (the longest rule key its key starts
    with: ``spectral_gradient`` for ``spectral_gradient_attn``); None when neither records one."""
    if claim.get("rule_version") is not None:
        return claim["rule_version"]
    key = str(claim.get("key", ""))
    matches = [name for name in rules if key == name or key.startswith(name)]
    if not matches:
        return None
    entry = rules[max(matches, key=len)]
    if isinstance(entry, dict):
        return entry.get("version")
    if isinstance(entry, (list, tuple)) and entry:
        return entry[0]
    return entry if isinstance(entry, (int, str)) else None


def _rules_sentence(claims: dict, primary: list[dict]) -> str:
    rules = claims.get("rules") or {}
    digest = claims.get("rules_hash")
    head = f"Judged by the rules recorded in claims.json (rules hash `{digest}`)" if digest else \
        "Judged by the rules recorded in claims.json (no rules hash recorded)"
    versions = [_rule_version(claim, rules) for claim in primary]
    counts = Counter(versions)
    if not counts:
        return head + "; it has no primary claim."
    if len(counts) == 1:
        (version,) = counts
        named = f"version {version}" if version is not None else "no recorded version"
        return f"{head}: every primary claim's rule at {named}."
    common = counts.most_common(1)[0][0]
    others = []
    for version in sorted({v for v in versions if v != common}, key=lambda v: (v is None, str(v))):
        names = ", ".join(f"*{claim['claim']}*" for claim, v in zip(primary, versions) if v == version)
        others.append(f"{'version ' + str(version) if version is not None else 'no recorded version'} for {names}")
    common_text = f"version {common}" if common is not None else "no recorded version"
    return f"{head}: the primary claims' rules at {common_text}, except " + "; ".join(others) + "."


def _judged_value(claim: dict) -> str:
    """What the verdict is judged by: the effect; without one, the null model's value when the claim's own rule
    reads the null model (its text begins so), else the trained model's."""
    effect = claim.get("effect", NOT_APPLICABLE)
    if effect not in (None, NOT_APPLICABLE, ""):
        return f"effect {effect}"
    if str(claim.get("rule", "")).startswith("null model"):
        return f"null model {claim.get('null_model', NOT_APPLICABLE)}"
    return f"trained {claim.get('trained', NOT_APPLICABLE)}"


def _top_level_split(text: str, separator: str) -> tuple[str, str] | None:
    """``text`` split at the first ``separator`` outside brackets and parentheses (None when there is none)."""
    depth = 0
    for index, character in enumerate(text):
        if character in "[(":
            depth += 1
        elif character in "])":
            depth = max(depth - 1, 0)
        elif depth == 0 and text.startswith(separator, index):
            return text[:index], text[index + len(separator):]
    return None


_VERDICT_STEMS = ("holds", "does not hold", "undecided", "not testable")


def zero_rounding_reading(claim: dict) -> tuple[str, str] | None:
    """The claim's verdict at zero rounding and the field's own flag words (``""`` without a flag), or None when it
    has no zero-rounding reading. ``zero_rounding`` reads "VALUE, VERDICT[: FLAG]" (or "n/a");
    ``zero_rounding_verdict``, where present, is the verdict."""
    text = str(claim.get("zero_rounding") or "").strip()
    verdict, flag = None, ""
    if text and text != NOT_APPLICABLE:
        parts = _top_level_split(text, ", ")
        rest = parts[1] if parts else (text if text.startswith(_VERDICT_STEMS) else None)
        if rest is not None:
            verdict_flag = _top_level_split(rest, ": ")
            verdict, flag = (verdict_flag[0], verdict_flag[1]) if verdict_flag else (rest, "")
            verdict, flag = verdict.strip(), flag.strip()
    if claim.get("zero_rounding_verdict") not in (None, "", NOT_APPLICABLE):
        verdict = str(claim["zero_rounding_verdict"])
    return None if verdict is None else (verdict, flag)


def zero_rounding_sentence(claims: dict) -> str:
    """One sentence: which primary claims have another verdict at zero rounding (the SIMEX extrapolation over the
    trained file's rounding doses), in the field's own words; or that none does; or that there is no such reading."""
    primary = _primary(claims)
    readings = [(claim, zero_rounding_reading(claim)) for claim in primary]
    readings = [(claim, reading) for claim, reading in readings if reading is not None]
    if not readings:
        reason = claims.get("zero_rounding_note", claims.get("rounding_doses_note")) or ""
        return (f"Zero rounding (SIMEX): {reason}." if reason.startswith("no zero-rounding reading") else
                "Zero rounding (SIMEX): claims.json has no zero-rounding reading of any primary claim"
                + (f" ({reason})." if reason else "."))
    differ = [(claim, reading) for claim, reading in readings if reading[0] != claim["verdict"]]
    counted = f"{len(readings)} primary claim{'s' if len(readings) != 1 else ''} with a zero-rounding verdict"
    if not differ:
        return f"Zero rounding (SIMEX): of the {counted}, none differs from its verdict."
    named = "; ".join(f"*{claim['claim']}* ({claim['verdict']}; at zero rounding: {verdict}"
                      + (f', "{flag}"' if flag else "") + ")" for claim, (verdict, flag) in differ)
    return f"Zero rounding (SIMEX): of the {counted}, {len(differ)} differ{'s' if len(differ) == 1 else ''}: {named}."


def verdict_prose(claims: dict) -> str:
    """A markdown block from a claims.json dict, saying nothing that is not in it: the rules it was judged by, each
    primary claim as one bullet under its verdict (holds, does not hold, undecided ..., not testable) with the
    value it is judged by and its ``why`` verbatim, and the zero-rounding sentence."""
    primary = _primary(claims)
    lines = [_rules_sentence(claims, primary), ""]
    seen = {verdict: index for index, verdict in enumerate(dict.fromkeys(claim["verdict"] for claim in primary))}

    def group(claim: dict) -> tuple:  # the "undecided ..." verdicts by name, any other in order of appearance
        rank = _verdict_order(claim["verdict"])
        return rank, claim["verdict"] if rank == 2 else "", seen[claim["verdict"]]

    for claim in sorted(primary, key=group):
        # the sentence of PAPER.md each claim reads stands once per claim in its claims.md, not in every bullet
        lines.append(f"- **{claim['verdict']}**: *{claim['claim']}* ({_judged_value(claim)}): {claim['why']}")
    lines += ["", zero_rounding_sentence(claims)]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- the files

def _replace(text: str, begin: str, content: str, end: str = END) -> str:
    """``text`` with what stands between ``begin`` and the next ``end`` replaced (unchanged without ``begin``)."""
    if begin not in text:
        return text
    start = text.index(begin) + len(begin)
    stop = text.index(end, start)
    return text[:start] + "\n" + content.strip() + "\n" + text[stop:]


COMPARISON_END = "<!-- rules-comparison:end -->"


def comparison_begin(model: str) -> str:
    return f"<!-- rules-comparison:begin (docs/study/{model}/v4/claims.json beside docs/study/{model}/claims.json) -->"


# v5 claims whose v4 counterpart had another key: the paper's "strongly non-normal" was read as rotation-dominated
EARLIER_KEYS = {"coupling_strongly_non_normal": "coupling_rotation_dominated",
                "community_coupling_strongly_non_normal": "community_coupling_rotation_dominated"}


def rules_comparison(before: dict, after: dict) -> str:
    """Every primary claim of the later rules beside the same claim under the earlier ones (matched by key; a claim
    whose key is new reads "(new reading)"), with each verdict's why under the later rules."""
    old = {claim["key"]: claim for claim in before["claims"]}
    lines = [f"| claim | v{_version(before)} | v{_version(after)} | changed | why (v{_version(after)}) |",
             "|---|---|---|---|---|"]
    for claim in _primary(after):
        previous = old.get(claim["key"]) or old.get(EARLIER_KEYS.get(claim["key"], ""))
        was = previous["verdict"] if previous else "(new reading)"
        changed = "" if previous and previous["verdict"] == claim["verdict"] else "**yes**"
        lines.append(f"| {_cell(claim['claim'])} | {was} | **{claim['verdict']}** | {changed} | {_cell(claim['why'])} |")
    return "\n".join(lines)


def _version(claims: dict) -> int:
    return claims.get("rules_version") or max(entry["version"] if isinstance(entry, dict) else entry[0]
                                              for entry in claims["rules"].values())


def rendered(readme: str, study: str, account: str) -> tuple[str, str, str]:
    """The README's, docs/study.md's and docs/smollm2.md's texts with every generated block rewritten."""
    for model in STUDY_MODELS:
        path = STUDY_CLAIMS / model / "claims.json"
        if not path.is_file():
            continue
        claims = json.loads(path.read_text())
        readme = _replace(readme, study_begin(model), table(claims))
        prose = verdict_prose(claims)
        readme = _replace(readme, verdicts_begin(model), prose, VERDICTS_END)
        study = _replace(study, verdicts_begin(model), prose, VERDICTS_END)
        before = STUDY_CLAIMS / model / "v4" / "claims.json"
        if before.is_file():
            study = _replace(study, comparison_begin(model), rules_comparison(json.loads(before.read_text()), claims),
                             COMPARISON_END)
    account = _replace(account, ACCOUNT_BEGIN, CLAIMS.with_suffix(".md").read_text())
    return readme, study, account


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    arguments = parser.parse_args(argv)
    paths = (README, STUDY, ACCOUNT)
    targets = dict(zip(paths, rendered(*(path.read_text() for path in paths))))
    stale = [path for path, text in targets.items() if path.read_text() != text]
    if arguments.check:
        for path in stale:
            print(f"{path}: differs from its claims.json (run python docs/tools/claims_table.py)", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(targets[path])
    return 0


if __name__ == "__main__":
    sys.exit(main())
