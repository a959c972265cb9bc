"""The golden re-judgment: every kept input set of the study (docs/study/<model>/inputs, and the demo's n = 128)
judged again by the rules in force gives the committed claims.json: the same verdict for every reading, exactly, and
every number within RELATIVE_TOLERANCE. What pre-registers the rules is what they decide on these inputs, so a code
change that decides differently fails here, and one that only computes differently (a faster loop, another BLAS's
last digits) does not."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from resdyn import claims
from resdyn.dagster_project.study.claims import checkpoint_data, zero_rounding
from resdyn.dagster_project.study.claims_inputs import identity, load_claims_inputs

STUDY = Path(__file__).resolve().parents[2] / "docs" / "study"
KEPT = (("smollm2-135m", STUDY / "smollm2-135m"), ("gemma3-270m", STUDY / "gemma3-270m"),
        ("smollm2-135m", STUDY / "smollm2-135m" / "n128"))
RELATIVE_TOLERANCE = 1e-9  # last digits of another BLAS's kernels; far below any printed digit
ABSOLUTE_FLOOR = 1e-12  # numbers that are zero up to rounding
ESTIMATES = ("null_estimate", "trained_estimate", "effect_estimate", "zero_rounding_estimate")


def rejudged(model: str, folder: Path) -> tuple[dict, list[claims.Claim], str]:
    record = json.loads((folder / "claims.json").read_text())
    frames = load_claims_inputs(folder / "inputs", model)
    data, _ = checkpoint_data(frames)
    null, trained = data[record["null_checkpoint"]], data[record["trained_checkpoint"]]
    judged = claims.evaluate(null, trained)
    if record.get("quantized_null_checkpoint"):
        judged = claims.with_quantization_control(judged, data[record["quantized_null_checkpoint"]], trained)
    simex = STUDY / model / "simex"  # the model's SIMEX set, kept by resdyn claims --simex-inputs
    simex_frames = load_claims_inputs(simex, model) if record["simex_checkpoints"] else None
    judged, note, checkpoints = zero_rounding(judged, model, null, simex_frames,
                                              identity(frames, record["trained_checkpoint"]),
                                              record["null_checkpoint"], from_kept_inputs=True)
    assert checkpoints == record["simex_checkpoints"]
    return record, judged, note



def _close(kept, now) -> bool:
    if kept is None or now is None:
        return kept is now
    if isinstance(kept, float) and math.isnan(kept) or isinstance(now, float) and math.isnan(now):
        return isinstance(kept, float) and isinstance(now, float) and math.isnan(kept) and math.isnan(now)
    return abs(now - kept) <= max(RELATIVE_TOLERANCE * abs(kept), ABSOLUTE_FLOOR)


@pytest.mark.parametrize(("model", "folder"), KEPT, ids=[str(folder.relative_to(STUDY)) for _, folder in KEPT])
def test_every_kept_input_set_is_judged_as_committed(model, folder):
    record, judged, note = rejudged(model, folder)
    assert record["rules_version"] == claims.RULES_VERSION and record["rules_hash"] == claims.rules_hash(), (
        f"{folder / 'claims.json'} was judged under other rules: judge it again (`resdyn claims {model} --inputs "
        f"{folder / 'inputs'} --output {folder}`) and say in docs/study.md what changed")
    kept = {row["key"]: row for row in record["claims"]}
    assert [claim.key for claim in judged] == list(kept)
    verdicts = {claim.key: (kept[claim.key]["verdict"], claim.verdict) for claim in judged}
    assert {key: pair for key, pair in verdicts.items() if pair[0] != pair[1]} == {}
    for claim in judged:
        for name, estimate in zip(ESTIMATES, (claim.null_model, claim.trained, claim.effect, claim.zero_rounding)):
            committed = kept[claim.key][name]
            now = None if estimate is None else {field: getattr(estimate, field) for field in committed or {}}
            assert (committed is None) == (estimate is None), (claim.key, name)
            if committed is not None:
                assert all(_close(committed[field], now[field]) for field in committed), (claim.key, name, committed, now)
        assert kept[claim.key]["zero_rounding_verdict"] == claim.zero_rounding_verdict
    assert record["zero_rounding_note"] == note


def test_the_tolerance_can_fail():
    """A last-digit difference passes, a difference a printed digit could show does not."""
    assert _close(0.4312345678, 0.4312345678 * (1 + 1e-12)) and not _close(0.4312345678, 0.4312345678 * (1 + 1e-6))
    assert _close(0.0, 1e-13) and not _close(0.0, 1e-9) and _close(None, None) and not _close(None, 0.0)


@pytest.mark.skipif(bool(os.environ.get("OPENBLAS_CORETYPE")), reason="already under other kernels")
def test_other_blas_kernels_judge_the_same_within_the_tolerance():
    """Another machine's BLAS, as near as one machine gets: OpenBLAS's generic SSE kernels (OPENBLAS_CORETYPE
    Prescott, reported as Katmai) on one thread, in place of this CPU's Haswell kernels on two."""
    environment = {**os.environ, "OPENBLAS_CORETYPE": "Prescott", "OPENBLAS_NUM_THREADS": "1"}
    completed = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", __file__,
                                "-k", "every_kept_input_set"], env=environment, capture_output=True, text=True,
                               timeout=900)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-2000:]
    assert "3 passed" in completed.stdout
