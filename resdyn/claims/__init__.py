"""The paper's claims, checked on one model: a null-model checkpoint beside a trained one.

Each claim of PAPER.md's headline results becomes one or more *readings*: a measure computed from the warehouse's
tables, an estimate for the null model and for the trained model, and a verdict by a declared rule
(``rules.RULES``: one entry per reading, with its version, the paper sentence it reads, its bound and how the null
model enters; ``rules.rules_hash`` is taken of that data). The first reading of a claim is its primary one; the
others show which conclusions depend on the reading (e.g. "near-symmetric" by the asymmetry index, or by Henrici's
departure, which is 0 for rotations too).

Every claim is judged by an *effect of a stated minimum size* (``rules.SIZES``), against the null model wherever the
claim has one (trained - null paired by depth and by fold, or a ratio of the two); each claim says in words why
(``Claim.why``).

- ``holds``: the effect is beyond its bound and every interval it has is on that side;
- ``does not hold``: every interval is on the other side (the effect, if any, is smaller than the minimum);
- ``undecided``: an interval straddles the bound, or the data cannot carry the test (the correlation graphs within
  ``TOPOLOGY_NOISE_FACTOR`` of independent units' noise level, where those graphs can change the verdict), or a
  trained value that a claim puts beyond the null model's is not (``claim.guarded``);
- ``undecided (ordering-dependent)``: the surgery's guarded verdict differs between definitions of the normal part
  (LAPACK's Schur ordering, the two modulus orderings, the basis-free polar normal part);
- ``undecided (no power)``: a coupling called absent by a test whose power for the stated effect is below
  ``MIN_POWER`` (resdyn/coupling_power.py);
- ``undecided (rounding)``: the zero-rounding verdict differs between the SIMEX extrapolants;
- ``not testable``: the measure is undefined here (e.g. no sublayer of an operator type).

Two intervals, and a verdict needs every interval it has on its side (their hull is what ``statistics.side``
reads): the **samples**' interval (block jackknife over the fold means, resdyn/sampling.py) and the **sublayers**'
(a 95% percentile bootstrap over sublayers, Efron & Tibshirani 1993). Modules: ``rules`` (the declared data),
``statistics``, ``references``, ``checkpoint``, ``claim``, one module per claim family (``spectral``,
``bottleneck``, ``unit_coupling``, ``community``), ``power``, ``rounding`` (the quantization controls) and
``report`` (the table).
"""

from .checkpoint import CheckpointData
from .claim import Claim
from .evaluation import evaluate
from .power import community_power, coupling_power_table, unit_power
from .references import fisher_knn_correlation, ginibre_complex_fraction, noise_knn_correlation
from .report import ClaimsReport, diagnostics, markdown_cell
from .rounding import rounding_design_gap, with_quantization_control, with_zero_rounding
from .rules import (
    MIN_SHARE_EFFECT,
    RULES,
    RULES_VERSION,
    UNDECIDED_ORDERING,
    UNDECIDED_POWER,
    UNDECIDED_ROUNDING,
    VERDICTS,
    rules_hash,
    rules_table,
)
from .spectral import Gradient, depth_gradient, gradient_verdict
from .statistics import Estimate, bootstrap, holm, side, spearman_with_permutation

__all__ = [
    "MIN_SHARE_EFFECT", "RULES", "RULES_VERSION", "UNDECIDED_ORDERING", "UNDECIDED_POWER", "UNDECIDED_ROUNDING",
    "VERDICTS", "CheckpointData", "Claim", "ClaimsReport", "Estimate", "Gradient", "bootstrap", "community_power",
    "coupling_power_table", "depth_gradient", "diagnostics", "evaluate", "rounding_design_gap",
    "fisher_knn_correlation", "ginibre_complex_fraction", "gradient_verdict", "holm", "markdown_cell",
    "noise_knn_correlation", "rules_hash", "rules_table", "side", "spearman_with_permutation", "unit_power",
    "with_quantization_control", "with_zero_rounding",
]
