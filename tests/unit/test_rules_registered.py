"""The rules are pre-registered by what they decide: the declared data (resdyn/claims/rules.py) must be the one
committed for its version in docs/study/rules-v<N>.json. This file runs first (tests/conftest.py): a changed rule
under an old version stops the suite before anything is judged by it."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from resdyn.claims import rules

REGISTERED = Path(__file__).resolve().parents[2] / "docs" / "study"


def test_the_declared_rules_are_the_ones_registered_for_their_version():
    path = REGISTERED / f"rules-v{rules.RULES_VERSION}.json"
    assert path.exists(), (f"rules v{rules.RULES_VERSION} are not registered: write {path} (its declared data and hash) "
                           "and commit it before the rules are used")
    registered = json.loads(path.read_text())
    declared = json.loads(json.dumps(rules.declared_rules()))
    changed = sorted({entry["key"] for entry in declared["rules"]} ^ {entry["key"] for entry in registered["declared"]["rules"]}
                     | {new["key"] for new, old in zip(declared["rules"], registered["declared"]["rules"]) if new != old}
                     | {f"size {key}" for key in declared["sizes"] if declared["sizes"][key] != registered["declared"]["sizes"].get(key)})
    assert declared == registered["declared"], (
        f"the rules of v{rules.RULES_VERSION} changed after they were registered ({', '.join(changed)}): a changed rule "
        "needs a new RULES_VERSION in resdyn/claims/rules.py and its own docs/study/rules-v<N>.json, committed before use")
    assert rules.rules_hash() == registered["hash"]


def test_the_hash_follows_the_declared_data_and_not_the_source_bytes(monkeypatch):
    """A size or a bound that changes changes the hash; the order of a mapping does not."""
    before = rules.rules_hash()
    monkeypatch.setitem(rules.SIZES, "min_share_effect", 0.06)
    assert rules.rules_hash() != before
    monkeypatch.setitem(rules.SIZES, "min_share_effect", 0.05)
    assert rules.rules_hash() == before
    reordered = dict(reversed(list(rules.SIZES.items())))
    monkeypatch.setattr(rules, "SIZES", reordered)
    assert rules.rules_hash() == before


def test_every_claim_row_has_a_declared_rule_of_at_most_the_current_version():
    assert all(1 <= rule.version <= rules.RULES_VERSION and rule.reads and rule.decides
               for rule in rules.RULES.values())
    assert rules.rule_for("spectral_gradient_mlp@henrici").key == "spectral_gradient"
    assert rules.rule_for("surgery_dissolves@lapack-default/stable_rank").key == "surgery_dissolves"


def _committed_versions(path: Path) -> list[tuple[str, dict]]:
    """(commit, content) of every committed version of ``path``, newest first ([] outside a git checkout)."""
    if shutil.which("git") is None:
        return []
    root = path.parents[2]
    listed = subprocess.run(["git", "-C", str(root), "log", "--format=%H", "--", str(path.relative_to(root))],
                            capture_output=True, text=True)
    if listed.returncode != 0:
        return []
    versions = []
    for commit in listed.stdout.split():
        shown = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{path.relative_to(root)}"],
                               capture_output=True, text=True)
        if shown.returncode == 0:
            versions.append((commit, json.loads(shown.stdout)))
    return versions


def test_a_registered_hash_is_never_changed_in_place():
    """Every hash the registration ever committed for this version is the current one or is named superseded, with
    the reason: an edit of rules and registration together cannot pass silently."""
    path = REGISTERED / f"rules-v{rules.RULES_VERSION}.json"
    current = json.loads(path.read_text())
    versions = _committed_versions(path)
    if not versions:
        pytest.skip("not a git checkout: no history to compare with")
    superseded = {entry["hash"]: entry for entry in current.get("superseded", [])}
    assert all(entry.get("why") and entry.get("registered_in") for entry in superseded.values())
    for commit, committed in versions:
        assert committed["hash"] == current["hash"] or committed["hash"] in superseded, (
            f"{path.name} at {commit[:10]} registered {committed['hash']}, which is neither the current hash nor "
            "named superseded (with why): a changed rule needs a new RULES_VERSION, or the old hash kept with its "
            "reason")
        assert all(entry in current.get("superseded", []) for entry in committed.get("superseded", [])), (
            f"{path.name} at {commit[:10]}: a superseded entry was removed or edited")
