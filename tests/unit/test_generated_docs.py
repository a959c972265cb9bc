"""docs/performance.md says what benchmarks/results/*.json say (it is generated, never typed)."""

import importlib.util
import json
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("performance_tables",
                                                  REPOSITORY / "docs" / "tools" / "performance_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_performance_doc_is_what_the_results_say():
    tool = _tool()
    assert tool.main(["--check"]) == 0, "run python docs/tools/performance_tables.py"


def test_every_result_file_has_a_section_and_its_numbers(tmp_path, monkeypatch):
    tool = _tool()
    (tmp_path / "one.json").write_text(json.dumps({"seconds": 12.5, "label": "x"}))
    (tmp_path / "two.json").write_text(json.dumps([{"d": 256, "seconds": 0.125}, {"d": 512, "seconds": 1.5}]))
    monkeypatch.setattr(tool, "RESULTS", tmp_path)
    text = tool.render()
    assert "## one" in text and "| seconds | 12.5 |" in text and "| label | x |" in text
    assert "| d | seconds |" in text and "| 256 | 0.125 |" in text and "| 512 | 1.5 |" in text


# ---------------------------------------------------------------------------------------------- claims' verdicts
# The README's and docs/study.md's verdict prose is generated from docs/study/<model>/claims.json by
# docs/tools/claims_table.py, so it cannot say more than the claims' table.

import itertools  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402

import pytest  # noqa: E402


def _claims_tool():
    spec = importlib.util.spec_from_file_location("claims_table", REPOSITORY / "docs" / "tools" / "claims_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _block(text: str, begin: str, end: str) -> str:
    start = text.index(begin) + len(begin)
    return text[start:text.index(end, start)].strip()


def test_readme_and_study_verdicts_are_what_claims_json_says():
    tool = _claims_tool()
    readme, study = tool.README.read_text(), tool.STUDY.read_text()
    for model in tool.STUDY_MODELS:
        claims = json.loads((REPOSITORY / "docs" / "study" / model / "claims.json").read_text())
        begin = tool.verdicts_begin(model)
        assert readme.count(begin) == 1 and study.count(begin) == 1, f"{model}: one verdict block in each page"
        prose = tool.verdict_prose(claims).strip()
        assert _block(readme, begin, tool.VERDICTS_END) == prose, "run python docs/tools/claims_table.py"
        assert _block(study, begin, tool.VERDICTS_END) == prose, "run python docs/tools/claims_table.py"
        before = json.loads((REPOSITORY / "docs" / "study" / model / "v4" / "claims.json").read_text())
        assert _block(study, tool.comparison_begin(model), tool.COMPARISON_END) == \
            tool.rules_comparison(before, claims).strip(), "run python docs/tools/claims_table.py"
    assert tool.main(["--check"]) == 0, "run python docs/tools/claims_table.py"


@pytest.mark.parametrize("page", ["README", "STUDY"])
def test_the_check_fails_on_a_verdict_block_that_says_more(tmp_path, monkeypatch, page):
    tool = _claims_tool()
    copies = {}
    for name in ("README", "STUDY", "ACCOUNT"):
        copies[name] = tmp_path / getattr(tool, name).name
        shutil.copy(getattr(tool, name), copies[name])
        monkeypatch.setattr(tool, name, copies[name])
    assert tool.main(["--check"]) == 0
    model = tool.STUDY_MODELS[0]
    target = copies[page]
    good = target.read_text()
    begin = tool.verdicts_begin(model)
    block = _block(good, begin, tool.VERDICTS_END)
    assert "- **does not hold**: " in block
    target.write_text(good.replace(block, block.replace("- **does not hold**: ", "- **holds**: ", 1), 1))
    assert tool.main(["--check"]) == 1
    target.write_text(good.replace(block, block + "\nThe file's quantization could explain it.", 1))
    assert tool.main(["--check"]) == 1
    assert tool.main([]) == 0 and target.read_text() == good  # rewritten from claims.json
    assert tool.main(["--check"]) == 0


VERDICTS = ["holds", "does not hold", "undecided", "undecided (no power)", "undecided (ordering-dependent)",
            "not testable"]


def _fake_claims(rng: random.Random, count: int = 14) -> dict:
    claims = []
    for index in range(count):
        primary = rng.random() < 0.7
        effect = rng.choice(["n/a", f"{rng.uniform(-1, 1):.3g} [{rng.uniform(-2, -1):.3g}, {rng.uniform(1, 2):.3g}]"])
        claims.append({
            "claim": f"Fake claim #{index:02d} {'primary' if primary else 'secondary'} {rng.randrange(10**6)}",
            "key": f"fake_{index}" if primary else f"fake_{index}@other",
            "rule": "null model mean x < 1" if rng.random() < 0.2 else "trained - null mean x > 0.05",
            "primary": primary, "verdict": rng.choice(VERDICTS), "effect": effect,
            "null_model": f"{rng.random():.3g}", "trained": f"{rng.random():.3g} [samples 0.1, 0.2]",
            "why": f"why #{index:02d}: value {rng.random():.4g} (interval {rng.random():.3g} to 2): *every* | bound",
            "rule_version": rng.choice([3, 4, 4, 4])})
    return {"rules": {f"fake_{index}": {"version": 4, "rule": "x"} for index in range(count)},
            "rules_hash": f"{rng.randrange(16 ** 12):012x}", "claims": claims}


def _bullets(prose: str) -> list[tuple[str, str]]:
    """(verdict, the rest) of every bullet."""
    return [re.match(r"- \*\*(.+?)\*\*: (.*)$", line).groups() for line in prose.splitlines() if line.startswith("- ")]


@pytest.mark.parametrize("seed", range(8))
def test_every_primary_claim_once_under_its_own_verdict(seed):
    tool = _claims_tool()
    claims = _fake_claims(random.Random(seed))
    prose = tool.verdict_prose(claims)
    bullets = _bullets(prose)
    primary = [claim for claim in claims["claims"] if claim["primary"]]
    assert len(bullets) == len(primary)
    for claim in claims["claims"]:
        mine = [(verdict, rest) for verdict, rest in bullets if rest.startswith(f"*{claim['claim']}*")]
        if not claim["primary"]:
            assert claim["claim"] not in prose and claim["why"] not in prose
            continue
        bullet_text = "\n".join(line for line in prose.splitlines() if line.startswith("- "))
        assert len(mine) == 1 and bullet_text.count(claim["claim"]) == 1, claim["claim"]
        verdict, rest = mine[0]
        assert verdict == claim["verdict"]
        assert rest.endswith(": " + claim["why"])  # verbatim
        judged = claim["effect"] if claim["effect"] != "n/a" else (
            claim["null_model"] if claim["rule"].startswith("null model") else claim["trained"])
        assert f"({'effect ' if claim['effect'] != 'n/a' else ''}" in rest and judged in rest
    # grouped: holds, does not hold, the undecided ones, not testable; each verdict's bullets together
    order = [verdict for verdict, _ in bullets]
    groups = list(dict.fromkeys(order))
    assert all(order.count(verdict) == len(list(group)) for verdict, group in itertools.groupby(order)), \
        "a verdict's bullets are contiguous"
    rank = [0 if v == "holds" else 1 if v == "does not hold" else 2 if v.startswith("undecided") else 3 for v in groups]
    assert rank == sorted(rank)
    assert claims["rules_hash"] in prose.splitlines()[0]


def test_the_rules_and_their_versions_are_named():
    tool = _claims_tool()
    claims = _fake_claims(random.Random(3))
    for claim in claims["claims"]:
        claim["rule_version"] = 4
    assert "every primary claim's rule at version 4" in tool.verdict_prose(claims)
    primary = [claim for claim in claims["claims"] if claim["primary"]]
    primary[0]["rule_version"] = 2
    head = tool.verdict_prose(claims).splitlines()[0]
    assert f"at version 4, except version 2 for *{primary[0]['claim']}*" in head
    del primary[0]["rule_version"]  # from the rules table, a [version, text] pair or a dict
    claims["rules"][primary[0]["key"]] = [5, "text"]
    assert f"except version 5 for *{primary[0]['claim']}*" in tool.verdict_prose(claims).splitlines()[0]


def _zero_rounding_line(prose: str) -> str:
    (line,) = [line for line in prose.splitlines() if line.startswith("Zero rounding")]
    return line


@pytest.mark.parametrize("seed", range(8))
def test_the_zero_rounding_sentence_names_exactly_the_claims_that_differ(seed):
    tool = _claims_tool()
    rng = random.Random(100 + seed)
    claims = _fake_claims(rng)
    differ = set()
    for claim in claims["claims"]:
        kind = rng.choice(["same", "other", "other+flag", "n/a", "absent", "n/a+verdict", "field"])
        other = rng.choice([v for v in VERDICTS if v != claim["verdict"]])
        flag = f"flag words {rng.randrange(1000)} (the extrapolation, widens: every interval)"
        if kind == "same":
            claim["zero_rounding"] = f"0.5 [0.1, 0.9] [samples 0.4, 0.6], {claim['verdict']}"
        elif kind == "other":
            claim["zero_rounding"] = f"-0.2 [samples -0.3, -0.1], {other}"
        elif kind == "other+flag":
            claim["zero_rounding"] = f"0.0522 [-0.0121, 0.119] (p = 0.5), {other}: {flag}"
        elif kind == "n/a":
            claim["zero_rounding"] = "n/a"
        elif kind == "n/a+verdict":
            claim["zero_rounding"] = f"n/a, {claim['verdict']}"
        elif kind == "field":  # a later claims.json: the verdict in its own field
            claim["zero_rounding"] = f"0.1 [0, 0.2], {claim['verdict']}"
            claim["zero_rounding_verdict"] = other
        if claim["primary"] and kind in ("other", "other+flag", "field"):
            differ.add(claim["claim"])
            if kind == "other+flag":
                claim["_flag"] = flag
    prose = tool.verdict_prose(claims)
    line = _zero_rounding_line(prose)
    named = set(re.findall(r"\*(Fake claim #\d\d [^*]+)\*", line))
    assert named == differ
    if not differ and any(tool.zero_rounding_reading(c) for c in claims["claims"] if c["primary"]):
        assert "none differs" in line
    for claim in claims["claims"]:
        if claim["claim"] in differ and "_flag" in claim:
            assert f'"{claim["_flag"]}"' in line  # the field's own flag words


def test_the_zero_rounding_sentence_when_none_differs_or_none_is_read():
    tool = _claims_tool()
    claims = _fake_claims(random.Random(7))
    for claim in claims["claims"]:
        claim["zero_rounding"] = f"1.5 [1, 2], {claim['verdict']}"
    assert "none differs from its verdict" in _zero_rounding_line(tool.verdict_prose(claims))
    for claim in claims["claims"]:
        claim["zero_rounding"] = "n/a"
    assert "no zero-rounding reading" in _zero_rounding_line(tool.verdict_prose(claims))
    for claim in claims["claims"]:
        del claim["zero_rounding"]
    assert "no zero-rounding reading" in _zero_rounding_line(tool.verdict_prose(claims))


def test_zero_rounding_reading_parses_the_field():
    tool = _claims_tool()
    read = tool.zero_rounding_reading
    assert read({"zero_rounding": "-0.267 [-0.309, -0.222] [samples -0.272, -0.263], does not hold"}) == \
        ("does not hold", "")
    assert read({"zero_rounding": "0.0522 [-0.0121, 0.119], undecided: weaker at zero rounding (the extrapolation "
                                  "widens every interval)"}) == \
        ("undecided", "weaker at zero rounding (the extrapolation widens every interval)")
    assert read({"zero_rounding": "0.43 [samples 0.418, 0.443], undecided (ordering-dependent)"}) == \
        ("undecided (ordering-dependent)", "")
    assert read({"zero_rounding": "n/a, not testable"}) == ("not testable", "")
    assert read({"zero_rounding": "n/a"}) is None and read({}) is None
    assert read({"zero_rounding": "1 [0, 2], holds", "zero_rounding_verdict": "undecided"}) == ("undecided", "")
