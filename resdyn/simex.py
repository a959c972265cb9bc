"""The extrapolation of a statistic to no rounding at all (SIMEX), with an interval that can be trusted.

Simulation-extrapolation (SIMEX; Cook & Stefanski 1994, J. Am. Stat. Assoc. 89:1314; Carroll, Ruppert, Stefanski
& Crainiceanu 2006, Measurement Error in Nonlinear Models, 2nd ed., ch. 5) for a model's quantization rounding: a
statistic ``s`` is measured on the model's own weights (``s0``, dose ``lambda = 0``) and on copies of them with
independent pseudo-errors of variance ``lambda`` times the weights' own rounding variance added
(:mod:`resdyn.models.rounding_noise`), at several doses ``lambda_j > 0`` and several independent draws per dose.

Every draw is measured as a *paired* difference on the same samples,

    d_jk = s(lambda_j, draw k) - s0,

so the dose response passes through the origin and the extrapolants have no intercept:

    linear:     d(lambda) = a lambda                   shift = d(-1) = -a
    quadratic:  d(lambda) = a lambda + b lambda^2      shift = d(-1) = -a + b

and the statistic without rounding is ``s0 + shift``. (The mean response of a smooth statistic is a power series in
the total noise variance, ``(1 + lambda)`` rounding variances, so ``lambda = -1`` is no noise at all; the linear
extrapolant keeps its first-order term, the quadratic the first two.)

Both are fitted by ordinary least squares on *every draw* (not on the dose means), with the classic covariance
``sigma^2 (X'X)^-1``, ``sigma^2`` the residual mean square on ``n - p`` degrees of freedom: the scatter between the
draws of a dose is then in the standard error, and the 95% interval is Student's t on those degrees of freedom.
Which extrapolant is right is itself uncertain (the linear one is biased whenever the response curves, the
quadratic one is more variable), so the combined interval is the hull of the two extrapolants' intervals, and
:func:`differs_between_extrapolants` says when a verdict depends on the choice.

The interval is conditional on the model's weights as they are (``s0`` is subtracted from every draw, so it carries
no sampling error here): it is the uncertainty of the shift from the noise draws and from the choice of extrapolant.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.stats

MIN_DOSES_BEYOND_ZERO = 3  # distinct lambda > 0: one more than the quadratic's coefficients, so its fit is tested
MIN_DRAWS_PER_DOSE = 5  # independent noise draws at every dose: enough to see the scatter between draws
CONFIDENCE = 0.95
LINEAR, QUADRATIC = "linear", "quadratic"
EXTRAPOLANTS = (LINEAR, QUADRATIC)
# the quadratic: SIMEX's customary extrapolant (Cook & Stefanski 1994; Carroll et al. 2006, sec. 5.3.2), the old
# one-draw rule's, and the more cautious of the two (see extrapolate_rounding_shift)
PRIMARY_EXTRAPOLANT = QUADRATIC
# the powers of lambda in each extrapolant's design matrix, and the weights that evaluate its coefficients at -1
_POWERS = {LINEAR: (1,), QUADRATIC: (1, 2)}
_AT_MINUS_ONE = {extrapolant: np.array([(-1.0) ** power for power in powers]) for extrapolant, powers in _POWERS.items()}


@dataclass(frozen=True)
class ExtrapolantFit:
    """One extrapolant's shift ``d(-1)`` (linear: ``-a``; quadratic: ``-a + b``) with its OLS standard error and
    its Student-t interval ``shift +- t_{(1 + CONFIDENCE) / 2, dof} standard_error``.

    ``coefficients`` are ``(a,)`` or ``(a, b)``. With no residual degrees of freedom (as many points as
    coefficients, possible only with the design checks off) the standard error and the interval are NaN."""

    extrapolant: str
    shift: float
    standard_error: float
    low: float
    high: float
    residual_degrees_of_freedom: int
    coefficients: tuple[float, ...]


@dataclass(frozen=True)
class RoundingShift:
    """Both extrapolants' fits side by side, the primary one named, and the combined interval: the hull
    ``[min(low_linear, low_quadratic), max(high_linear, high_quadratic)]``, which carries the uncertainty of the
    extrapolant as well as that of the draws."""

    linear: ExtrapolantFit
    quadratic: ExtrapolantFit
    primary: str
    combined_low: float
    combined_high: float

    def fit(self, extrapolant: str) -> ExtrapolantFit:
        """The fit of the extrapolant named (``"linear"`` or ``"quadratic"``)."""
        if extrapolant not in EXTRAPOLANTS:
            raise ValueError(f"unknown extrapolant {extrapolant!r}: name one of {EXTRAPOLANTS}")
        return self.linear if extrapolant == LINEAR else self.quadratic

    @property
    def primary_fit(self) -> ExtrapolantFit:
        return self.fit(self.primary)

    @property
    def shift(self) -> float:
        """The primary extrapolant's shift: the point estimate of ``s(no rounding) - s0``."""
        return self.primary_fit.shift


def _as_draws(name: str, values) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, one value per draw (got shape {array.shape}): flatten it, repeating a "
                         f"dose once for each of its draws")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"{name} has {bad.size} non-finite value(s) (NaN or inf) at draw(s) {bad[:10].tolist()}: "
                         f"remeasure those draws, or drop them together with their doses")
    return array


def _checked(doses, differences, *, check_design: bool) -> tuple[np.ndarray, np.ndarray]:
    """The inputs as float64 arrays, or a ValueError that says how to fix them. Always checked: shapes, finiteness,
    doses > 0; with ``check_design`` also the minimum design (MIN_DOSES_BEYOND_ZERO, MIN_DRAWS_PER_DOSE)."""
    doses, differences = _as_draws("doses", doses), _as_draws("differences", differences)
    if len(doses) != len(differences):
        raise ValueError(f"doses has {len(doses)} values and differences {len(differences)}: give one dose per "
                         f"difference (repeat a dose once for each of its draws)")
    if np.any(doses <= 0):
        raise ValueError(f"every dose must be > 0 (got {sorted(set(doses[doses <= 0].tolist()))}): drop the "
                         f"lambda = 0 rows (s0 is already subtracted from each paired difference s(lambda, draw) - s0)")
    if check_design:
        distinct, draws = np.unique(doses, return_counts=True)
        if len(distinct) < MIN_DOSES_BEYOND_ZERO:
            raise ValueError(f"only {len(distinct)} distinct dose(s) beyond zero ({distinct.tolist()}): measure at "
                             f"least MIN_DOSES_BEYOND_ZERO = {MIN_DOSES_BEYOND_ZERO} (e.g. lambda = 1, 2, 3)")
        few = {float(dose): int(count) for dose, count in zip(distinct, draws) if count < MIN_DRAWS_PER_DOSE}
        if few:
            raise ValueError(f"too few noise draws at dose(s) {few} (dose: draws): draw at least MIN_DRAWS_PER_DOSE = "
                             f"{MIN_DRAWS_PER_DOSE} independent noise copies at every dose")
    return doses, differences


def fit_extrapolant(doses, differences, extrapolant: str, *, check_design: bool = True) -> ExtrapolantFit:
    """One extrapolant through the origin, fitted by least squares on every draw, evaluated at ``lambda = -1``.

    With ``X`` the design (columns ``lambda`` [and ``lambda^2``], one row per draw), the coefficients
    ``beta = argmin |d - X beta|^2``, ``sigma^2 = |d - X beta|^2 / (n - p)`` and ``Cov(beta) = sigma^2 (X'X)^-1``
    (classic OLS), the shift is ``c' beta`` with ``c = (-1,)`` or ``(-1, 1)``, its standard error
    ``sqrt(c' Cov(beta) c)``, its interval Student's t on ``n - p`` degrees of freedom (Cook & Stefanski 1994).

    ``check_design=False`` skips the minimum-design checks (not the others), e.g. to show that with one draw at
    each of lambda = 1, 2 the quadratic's shift is the old rule's ``f(-1) - f(0) = 3 f(0) - 3 f(1) + f(2) - f(0)``;
    it still needs as many distinct doses as coefficients."""
    if extrapolant not in EXTRAPOLANTS:
        raise ValueError(f"unknown extrapolant {extrapolant!r}: name one of {EXTRAPOLANTS}")
    doses, differences = _checked(doses, differences, check_design=check_design)
    powers = _POWERS[extrapolant]
    if len(np.unique(doses)) < len(powers):
        raise ValueError(f"the {extrapolant} extrapolant has {len(powers)} coefficients and needs as many distinct "
                         f"doses (got {len(np.unique(doses))}): measure at more doses")
    design = np.column_stack([doses ** power for power in powers])
    # QR rather than the normal equations: (X'X)^-1 = R^-1 R^-T without squaring X's condition number
    orthonormal, triangular = np.linalg.qr(design)
    coefficients = np.linalg.solve(triangular, orthonormal.T @ differences)
    residuals = differences - design @ coefficients
    degrees_of_freedom = len(differences) - len(powers)
    at_minus_one = _AT_MINUS_ONE[extrapolant]
    shift = float(at_minus_one @ coefficients)
    if degrees_of_freedom > 0:
        residual_variance = float(residuals @ residuals) / degrees_of_freedom
        # c' (X'X)^-1 c = |R^-T c|^2
        leverage = np.linalg.solve(triangular.T, at_minus_one)
        standard_error = float(np.sqrt(residual_variance * (leverage @ leverage)))
        half_width = float(scipy.stats.t.ppf((1 + CONFIDENCE) / 2, degrees_of_freedom)) * standard_error
    else:  # an exact interpolation: no scatter left to measure
        standard_error = half_width = float("nan")
    return ExtrapolantFit(extrapolant=extrapolant, shift=shift, standard_error=standard_error,
                          low=shift - half_width, high=shift + half_width,
                          residual_degrees_of_freedom=degrees_of_freedom,
                          coefficients=tuple(float(c) for c in coefficients))


def extrapolate_rounding_shift(doses, differences, *, primary: str = PRIMARY_EXTRAPOLANT) -> RoundingShift:
    """The shift ``s(no rounding) - s0`` by SIMEX (Cook & Stefanski 1994) from paired draw-level differences.

    ``doses``: one ``lambda > 0`` per draw (a dose repeated for each of its draws); ``differences``: the draws'
    ``s(lambda, draw) - s0``, same length. The design needs at least ``MIN_DOSES_BEYOND_ZERO`` distinct doses and
    ``MIN_DRAWS_PER_DOSE`` draws at each; a ValueError says what to fix otherwise.

    Both extrapolants are fitted (:func:`fit_extrapolant`); the combined interval is the hull of their 95%
    intervals. The default primary is the quadratic: it is SIMEX's customary extrapolant (Cook & Stefanski 1994;
    Carroll et al. 2006, sec. 5.3.2), unbiased when the response curves to second order where the linear one is not
    (the linear slope absorbs the curvature over the doses, ``a + b sum(lambda^3) / sum(lambda^2)``, and carries it
    to -1 with the opposite sign: a bias of ``-(1 + sum(lambda^3) / sum(lambda^2)) b``, -3.6 b at doses 1, 2, 3),
    the same model as the old one-draw rule ``3 f(0) - 3 f(1) + f(2)``, and its wider interval makes
    the primary verdict the cautious one. ``primary="linear"`` is the choice where first order is known to
    suffice (tiny rounding), at the price of that bias otherwise."""
    if primary not in EXTRAPOLANTS:
        raise ValueError(f"unknown primary extrapolant {primary!r}: name one of {EXTRAPOLANTS}")
    doses, differences = _checked(doses, differences, check_design=True)
    linear = fit_extrapolant(doses, differences, LINEAR)
    quadratic = fit_extrapolant(doses, differences, QUADRATIC)
    return RoundingShift(linear=linear, quadratic=quadratic, primary=primary,
                         combined_low=min(linear.low, quadratic.low), combined_high=max(linear.high, quadratic.high))


def verdicts_by_extrapolant(result: RoundingShift, judge: Callable[[float, float, float], str]) -> dict[str, str]:
    """``judge(shift, low, high)`` of each extrapolant's fit, by extrapolant name."""
    return {extrapolant: judge(fit.shift, fit.low, fit.high)
            for extrapolant, fit in ((LINEAR, result.linear), (QUADRATIC, result.quadratic))}


def differs_between_extrapolants(result: RoundingShift, judge: Callable[[float, float, float], str]) -> bool:
    """Whether the verdict ``judge(shift, low, high)`` differs between the linear and the quadratic extrapolant:
    then the verdict rests on the choice of extrapolant, and the claims say "undecided (rounding)"."""
    verdicts = verdicts_by_extrapolant(result, judge)
    return verdicts[LINEAR] != verdicts[QUADRATIC]
