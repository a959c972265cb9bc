"""One reading of one claim on one model (``Claim``), and the guard that no "holds" stands on the wrong side of
the null model."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .rules import rule_for
from .statistics import Estimate, finite


@dataclass(frozen=True)
class Claim:
    key: str
    statement: str
    measure: str
    paper: str
    rule: str
    null_model: Estimate | None
    trained: Estimate | None
    verdict: str
    note: str = ""
    primary: bool = True  # False: another reading of the same claim (``key`` is then "claim@reading")
    rule_version: int = 0
    # The quantization control (the null model rounded through the trained file's types): the claim's null-model
    # measure on it, or, for claims made of trained against null, that comparison against it
    quantized_null_model: Estimate | None = None
    quantized_comparison: Estimate | None = None
    why: str = ""  # the verdict in words: the bound, the effect, the power
    effect: Estimate | None = None  # what the verdict rests on where it is not ``trained`` itself (e.g. trained - null)
    direction: int = 0  # +1 / -1: the claim puts the trained value above / below the null model's; 0: no such order
    # the trained model extrapolated to no rounding (rounding.with_zero_rounding): the verdict's statistic and verdict there
    zero_rounding: Estimate | None = None
    zero_rounding_verdict: str = ""


    def rounding_text(self) -> str:
        """The zero-rounding reading: its statistic, its verdict, and a flag on any change of verdict (rules v5: a
        change from or to undecided is a change too)."""
        if not self.zero_rounding_verdict:
            return "n/a"
        value = self.zero_rounding.text() if self.zero_rounding else "n/a"
        decided = {"holds", "does not hold"}
        if self.zero_rounding_verdict == self.verdict:
            flag = ""
        elif self.verdict in decided and self.zero_rounding_verdict in decided:
            flag = ": changes at zero rounding (the file's quantization could explain the verdict)"
        else:
            flag = f": changes at zero rounding (from {self.verdict})"
        return f"{value}, {self.zero_rounding_verdict}{flag}"

    def control_text(self) -> str:
        if self.quantized_null_model is not None:
            return self.quantized_null_model.text()
        if self.quantized_comparison is not None:
            return f"trained vs it: {self.quantized_comparison.text()}"
        return "n/a"

    @property
    def reads(self) -> str:
        """The sentence of PAPER.md the claim reads: its declared rule's."""
        return rule_for(self.key).reads

    @property
    def claim(self) -> str:
        return self.key.split("@", 1)[0]

    def row(self) -> dict:
        return {"claim": self.statement, "measure": self.measure, "paper": self.paper, "rule": self.rule,
                "null_model": self.null_model.text() if self.null_model else "n/a",
                "trained": self.trained.text() if self.trained else "n/a",
                "effect": self.effect.text() if self.effect else "n/a", "verdict": self.verdict, "note": self.note,
                "key": self.key, "primary": self.primary, "rule_version": self.rule_version, "why": self.why,
                "zero_rounding": self.rounding_text(), "zero_rounding_verdict": self.zero_rounding_verdict,
                "reads": self.reads,
                "quantized_null_model": self.control_text()}

def guarded(claim: Claim) -> Claim:
    """No "holds" for a trained value on the wrong side of its null model's: a claim that orders them (``direction``)
    is undecided when its trained estimate is not beyond the null model's in the claimed direction."""
    if claim.verdict != "holds" or not claim.direction or claim.null_model is None or claim.trained is None:
        return claim
    trained, null = claim.trained.value, claim.null_model.value
    if finite(trained) and finite(null) and claim.direction * (trained - null) <= 0:
        return dataclasses.replace(claim, verdict="undecided", why=f"{claim.why}; but the trained value {trained:.3g} "
                                   f"is not {'above' if claim.direction > 0 else 'below'} the null model's {null:.3g}")
    return claim


