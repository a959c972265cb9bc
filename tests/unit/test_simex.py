"""SIMEX's shift to no rounding (resdyn/simex.py): coverage of planted dose responses at the study's design, the
fits against independent least squares, the between-draw scatter in the interval, the input errors, and the old
one-draw rule as the quadratic through three points."""

import dataclasses

import numpy as np
import pytest
import scipy.stats

from resdyn import simex

# the study's design: doses 1, 2, 3 times the weights' own rounding variance, 5 noise draws at each
STUDY_DOSES = np.repeat([1.0, 2.0, 3.0], 5)
SLOPE, CURVATURE, NOISE_SD = 0.02, 0.005, 0.01  # a, b and the draws' scatter of a realistic statistic
SIMULATIONS = 200


def _coverage(rng, slope, curvature, noise_sd, *, noise_grows_with_dose=False):
    """Fractions of SIMULATIONS planted responses d = a lambda + b lambda^2 + noise whose intervals contain the true
    shift -a + b: each extrapolant's own and the combined one."""
    truth = -slope + curvature
    covered = {"linear": 0, "quadratic": 0, "combined": 0}
    for _ in range(SIMULATIONS):
        scale = np.sqrt(STUDY_DOSES) if noise_grows_with_dose else 1.0
        differences = slope * STUDY_DOSES + curvature * STUDY_DOSES ** 2 + noise_sd * scale * rng.normal(size=15)
        result = simex.extrapolate_rounding_shift(STUDY_DOSES, differences)
        covered["linear"] += result.linear.low <= truth <= result.linear.high
        covered["quadratic"] += result.quadratic.low <= truth <= result.quadratic.high
        covered["combined"] += result.combined_low <= truth <= result.combined_high
    return {name: count / SIMULATIONS for name, count in covered.items()}


def test_intervals_cover_a_planted_linear_response(fresh_seed):
    """On a linear response both extrapolants are unbiased: the combined interval covers -a in >= 90% of 200
    simulations, and the linear one's own 95% interval at a rate consistent with 95% (Binomial(200, 0.95) falls
    outside [0.90, 0.99] with probability < 0.2%)."""
    rates = _coverage(np.random.default_rng(fresh_seed), SLOPE, 0.0, NOISE_SD)
    assert rates["combined"] >= 0.9, rates
    assert 0.9 <= rates["linear"] <= 0.99, rates


def test_intervals_cover_a_planted_quadratic_response(fresh_seed):
    """On a quadratic response the combined interval covers -a + b in >= 90%, the quadratic (primary) one's own at a
    rate consistent with 95%; the linear one alone almost never does (its bias is -3.6 b, ten of its standard
    errors here): without the hull the extrapolant's uncertainty would be missing."""
    rates = _coverage(np.random.default_rng(fresh_seed), SLOPE, CURVATURE, NOISE_SD)
    assert rates["combined"] >= 0.9, rates
    assert 0.9 <= rates["quadratic"] <= 0.99, rates
    assert rates["linear"] < 0.5, rates


def test_combined_interval_covers_when_the_scatter_grows_with_the_dose(fresh_seed):
    """Rounding noise of variance lambda makes a statistic's scatter grow like sqrt(lambda); the OLS intervals assume
    one variance for all doses, and the combined one still covers (measured 0.98 on 2000 simulations)."""
    rates = _coverage(np.random.default_rng(fresh_seed), SLOPE, CURVATURE, NOISE_SD, noise_grows_with_dose=True)
    assert rates["combined"] >= 0.9, rates


def _planted(rng, noise_sd=NOISE_SD):
    doses = np.repeat(rng.permutation([1.0, 2.0, 3.0, 4.0]), rng.integers(5, 9))  # dose order and draws vary
    return doses, SLOPE * doses + CURVATURE * doses ** 2 + noise_sd * rng.normal(size=doses.size)


def test_fits_agree_with_independent_least_squares_through_the_origin(fresh_seed):
    """Point estimates against numpy.linalg.lstsq on the design and numpy.polyfit of d / lambda weighted by lambda
    (the same residuals: lambda (d / lambda - a - b lambda) = d - a lambda - b lambda^2); standard errors against the
    closed-form OLS through the origin, written out in sums S_k = sum(lambda^k):
    linear  Var(a) = sigma^2 / S2;
    quadratic  (X'X)^-1 = [[S4, -S3], [-S3, S2]] / (S2 S4 - S3^2), so Var(-a + b) = sigma^2 (S4 + 2 S3 + S2) / det."""
    rng = np.random.default_rng(fresh_seed)
    doses, differences = _planted(rng)
    n = len(doses)
    result = simex.extrapolate_rounding_shift(doses, differences)
    s2, s3, s4 = (np.sum(doses ** k) for k in (2, 3, 4))

    (a_lstsq,), *_ = np.linalg.lstsq(doses[:, None], differences, rcond=None)
    (a_polyfit,) = np.polyfit(doses, differences / doses, 0, w=doses)
    a_closed = np.sum(doses * differences) / s2
    assert result.linear.coefficients[0] == pytest.approx(a_lstsq, rel=1e-10)
    assert result.linear.shift == pytest.approx(-a_polyfit, rel=1e-10)
    assert result.linear.shift == pytest.approx(-a_closed, rel=1e-10)
    sigma2 = np.sum((differences - a_closed * doses) ** 2) / (n - 1)
    assert result.linear.standard_error == pytest.approx(np.sqrt(sigma2 / s2), rel=1e-10)
    assert result.linear.residual_degrees_of_freedom == n - 1

    (a_lstsq, b_lstsq), *_ = np.linalg.lstsq(np.column_stack([doses, doses ** 2]), differences, rcond=None)
    b_polyfit, a_polyfit = np.polyfit(doses, differences / doses, 1, w=doses)
    assert result.quadratic.coefficients == pytest.approx((a_lstsq, b_lstsq), rel=1e-9)
    assert result.quadratic.shift == pytest.approx(-a_polyfit + b_polyfit, rel=1e-9)
    determinant = s2 * s4 - s3 ** 2
    s1d, s2d = np.sum(doses * differences), np.sum(doses ** 2 * differences)
    a_closed, b_closed = (s4 * s1d - s3 * s2d) / determinant, (s2 * s2d - s3 * s1d) / determinant
    sigma2 = np.sum((differences - a_closed * doses - b_closed * doses ** 2) ** 2) / (n - 2)
    se = np.sqrt(sigma2 * (s4 + 2 * s3 + s2) / determinant)
    assert result.quadratic.shift == pytest.approx(-a_closed + b_closed, rel=1e-9)
    assert result.quadratic.standard_error == pytest.approx(se, rel=1e-9)
    assert result.quadratic.residual_degrees_of_freedom == n - 2

    t = scipy.stats.t.ppf(0.975, n - 2)
    assert (result.quadratic.low, result.quadratic.high) == pytest.approx(
        (result.quadratic.shift - t * se, result.quadratic.shift + t * se), rel=1e-9)
    assert result.primary == simex.PRIMARY_EXTRAPOLANT == "quadratic" and result.shift == result.quadratic.shift
    assert result.combined_low == min(result.linear.low, result.quadratic.low)
    assert result.combined_high == max(result.linear.high, result.quadratic.high)
    linear_primary = simex.extrapolate_rounding_shift(doses, differences, primary="linear")
    assert linear_primary.shift == result.linear.shift and linear_primary.primary_fit == result.linear
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.quadratic.shift = 0.0


def test_interval_grows_with_the_scatter_between_draws(fresh_seed):
    """The same dose means (exactly on a quadratic) with the draws spread about them twice as far: the point
    estimates stay (balanced OLS on the draws is OLS on the means), the intervals widen, the quadratic's by exactly
    2 (its residuals are the within-dose spread alone). A fit on dose means alone would not widen at all."""
    rng = np.random.default_rng(fresh_seed)
    doses = np.repeat([1.0, 2.0, 3.0], 5)
    spread = rng.normal(size=(3, 5))
    spread = (spread - spread.mean(axis=1, keepdims=True)).ravel()  # within-dose scatter, dose means untouched
    means = SLOPE * doses + CURVATURE * doses ** 2

    def widths(noise_sd):
        result = simex.extrapolate_rounding_shift(doses, means + noise_sd * spread)
        return result, {fit.extrapolant: fit.high - fit.low for fit in (result.linear, result.quadratic)}

    narrow, narrow_widths = widths(NOISE_SD)
    wide, wide_widths = widths(2 * NOISE_SD)
    assert wide.quadratic.shift == pytest.approx(narrow.quadratic.shift, abs=1e-12)
    assert wide.linear.shift == pytest.approx(narrow.linear.shift, abs=1e-12)
    assert wide_widths["quadratic"] == pytest.approx(2 * narrow_widths["quadratic"], rel=1e-9)
    assert wide_widths["linear"] > narrow_widths["linear"]
    assert wide.combined_high - wide.combined_low > narrow.combined_high - narrow.combined_low


@pytest.mark.parametrize("mutate, fix", [
    (lambda d, x: (d[d != 3.0], x[d != 3.0]), "at least MIN_DOSES_BEYOND_ZERO = 3"),
    (lambda d, x: (d[2:], x[2:]), "draw at least MIN_DRAWS_PER_DOSE = 5"),
    (lambda d, x: (d, np.where(np.arange(len(x)) == 4, np.nan, x)), "remeasure those draws"),
    (lambda d, x: (np.where(np.arange(len(d)) == 0, np.inf, d), x), "remeasure those draws"),
    (lambda d, x: (np.concatenate([[0.0], d]), np.concatenate([[0.0], x])), "drop the lambda = 0 rows"),
    (lambda d, x: (-d, x), "every dose must be > 0"),
    (lambda d, x: (d, x[:-1]), "give one dose per difference"),
    (lambda d, x: (d.reshape(3, 5), x.reshape(3, 5)), "must be 1-D"),
])
def test_each_input_error_names_its_fix(fresh_seed, mutate, fix):
    rng = np.random.default_rng(fresh_seed)
    doses, differences = mutate(STUDY_DOSES.copy(), SLOPE * STUDY_DOSES + NOISE_SD * rng.normal(size=15))
    with pytest.raises(ValueError, match=fix.replace("(", r"\(").replace(")", r"\)")):
        simex.extrapolate_rounding_shift(doses, differences)


def test_other_input_errors():
    doses, differences = STUDY_DOSES, SLOPE * STUDY_DOSES
    with pytest.raises(ValueError, match="name one of"):
        simex.extrapolate_rounding_shift(doses, differences, primary="cubic")
    with pytest.raises(ValueError, match="name one of"):
        simex.fit_extrapolant(doses, differences, "cubic")
    # the design checks off, the other checks stay, and the quadratic still needs two distinct doses
    with pytest.raises(ValueError, match="every dose must be > 0"):
        simex.fit_extrapolant([0.0, 1.0], [0.0, 1.0], "quadratic", check_design=False)
    with pytest.raises(ValueError, match="needs as many distinct doses"):
        simex.fit_extrapolant([1.0, 1.0], [0.1, 0.2], "quadratic", check_design=False)


def test_old_one_draw_rule_is_the_quadratic_through_three_points(fresh_seed):
    """f(-1) = 3 f(0) - 3 f(1) + f(2) is the quadratic through lambda = 0, 1, 2: with one draw at each of lambda = 1, 2
    (d = f(lambda) - f(0)) the quadratic's shift is 3 f0 - 3 f1 + f2 - f0, an exact fit with no residual degrees of
    freedom (so no interval); the design checks, which refuse this design, are bypassed for it."""
    rng = np.random.default_rng(fresh_seed)
    for f0, f1, f2 in rng.normal(size=(20, 3)):
        fit = simex.fit_extrapolant([1.0, 2.0], [f1 - f0, f2 - f0], "quadratic", check_design=False)
        assert fit.shift == pytest.approx(3 * f0 - 3 * f1 + f2 - f0, abs=1e-12)
        assert fit.residual_degrees_of_freedom == 0 and np.isnan(fit.standard_error) and np.isnan(fit.low)
    with pytest.raises(ValueError, match="MIN_DOSES_BEYOND_ZERO"):
        simex.fit_extrapolant([1.0, 2.0], [f1 - f0, f2 - f0], "quadratic")


def _side_of_zero(shift, low, high):
    return "positive" if low > 0 else "negative" if high < 0 else "undecided"


def test_a_verdict_that_rests_on_the_extrapolant_is_flagged(fresh_seed):
    """A strongly curved response: the quadratic's shift -a + b is clearly positive, the linear one's -a - 3.6 b
    clearly negative, so a verdict on the sign differs between them (the claims' "undecided (rounding)") and the
    combined interval straddles 0. On a linear response measured precisely both say "negative"."""
    rng = np.random.default_rng(fresh_seed)
    curved = 0.02 * STUDY_DOSES + 0.06 * STUDY_DOSES ** 2 + 0.002 * rng.normal(size=15)
    result = simex.extrapolate_rounding_shift(STUDY_DOSES, curved)
    assert simex.verdicts_by_extrapolant(result, _side_of_zero) == {"linear": "negative", "quadratic": "positive"}
    assert simex.differs_between_extrapolants(result, _side_of_zero)
    assert result.combined_low < 0 < result.combined_high

    straight = 0.02 * STUDY_DOSES + 0.001 * rng.normal(size=15)
    result = simex.extrapolate_rounding_shift(STUDY_DOSES, straight)
    assert not simex.differs_between_extrapolants(result, _side_of_zero)
    assert _side_of_zero(result.shift, result.combined_low, result.combined_high) == "negative"
