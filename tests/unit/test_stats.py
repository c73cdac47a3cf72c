"""The gate's statistics on synthetic data with a known effect, over many seeded simulations:
identical revisions raise a false alarm at the stated rate, a change the size of the stated
minimum detectable effect is caught at least 80 % of the time."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reports.metrics import Direction
from reports.stats import (
    ALPHA,
    POWER,
    Change,
    Verdict,
    at_level,
    compare_against_target,
    compare_interval_histograms,
    compare_interval_means,
    compare_runs,
    compare_runs_adjusted,
    decide,
    decide_family,
    holm,
    one_sided_p,
)

SIMULATIONS = 1000
CV = 0.05  # run-to-run spread of a P99 on a quiet machine (issue 24: 3.3–7.1 %)
N = 5  # runs per side


def _called(base: np.ndarray, run: np.ndarray, threshold: float = 0.0) -> Verdict:
    return decide(compare_runs(base, run), threshold, Direction.LOWER_IS_BETTER).verdict


def test_identical_revisions_raise_a_false_alarm_at_the_stated_rate() -> None:
    rng = np.random.default_rng(7)
    base = np.exp(rng.normal(0, CV, (SIMULATIONS, N)))
    run = np.exp(rng.normal(0, CV, (SIMULATIONS, N)))
    alarms = sum(
        _called(b, r) in (Verdict.REGRESSION, Verdict.IMPROVEMENT)
        for b, r in zip(base, run, strict=True)
    )
    sd = math.sqrt(ALPHA * (1 - ALPHA) / SIMULATIONS)
    assert abs(alarms / SIMULATIONS - ALPHA) <= 3 * sd, alarms


def test_a_change_of_the_stated_minimum_detectable_effect_is_caught_four_times_in_five() -> None:
    rng = np.random.default_rng(11)
    # The stated effect: what the gate prints as the minimum detectable effect for this spread
    # and N, computed from the true spread (a change with no noise in its estimate).
    probe = compare_runs(np.exp([-CV, CV, -CV, CV, 0.0]), np.exp([-CV, CV, -CV, CV, 0.0]))
    true_se = CV * math.sqrt(2 / N)
    observed_se = np.std(np.array([-CV, CV, -CV, CV, 0.0]), ddof=1) * math.sqrt(2 / N)
    assert probe.mde is not None
    effect = math.log1p(probe.mde) * true_se / observed_se
    base = np.exp(rng.normal(0, CV, (SIMULATIONS, N)))
    run = np.exp(rng.normal(effect, CV, (SIMULATIONS, N)))
    caught = sum(_called(b, r) is Verdict.REGRESSION for b, r in zip(base, run, strict=True))
    assert caught / SIMULATIONS >= 0.8, (caught, math.expm1(effect))


# A fixed design for the adjusted estimator: each side's five runs at the machine speeds seen on
# the 2-core VM (docs/reports.md, "Validation benchmark"): most runs at one speed, one or two a
# tenth slower. Values follow the speed with slope 1 plus the metric's own spread.
SPEED_BASE = np.log([1.0, 1.02, 0.99, 1.12, 1.0])
SPEED_RUN = np.log([1.01, 1.1, 1.0, 0.98, 1.13])
OWN = 0.03


def _adjusted(noise_base: np.ndarray, noise_run: np.ndarray, effect: float = 0.0) -> Change:
    return compare_runs_adjusted(
        np.exp(SPEED_BASE + noise_base),
        np.exp(SPEED_RUN + effect + noise_run),
        np.exp(SPEED_BASE),
        np.exp(SPEED_RUN),
    )


def test_adjusting_for_the_machines_speed_keeps_the_false_alarm_rate() -> None:
    rng = np.random.default_rng(13)
    noise = rng.normal(0, OWN, (SIMULATIONS, 2, N))
    alarms = sum(
        decide(_adjusted(a, b), 0.0, Direction.LOWER_IS_BETTER).verdict
        in (Verdict.REGRESSION, Verdict.IMPROVEMENT)
        for a, b in noise
    )
    sd = math.sqrt(ALPHA * (1 - ALPHA) / SIMULATIONS)
    assert abs(alarms / SIMULATIONS - ALPHA) <= 3 * sd, alarms


def test_adjusting_for_the_machines_speed_detects_its_stated_effect() -> None:
    # A probe whose residuals have exactly the true spread: its stated minimum detectable
    # effect is the one the simulations below must reach four times in five.
    design = np.column_stack(
        [np.ones(2 * N), np.repeat([0.0, 1.0], N), np.concatenate([SPEED_BASE, SPEED_RUN])]
    )
    e = np.random.default_rng(1).normal(size=2 * N)
    e -= design @ np.linalg.lstsq(design, e, rcond=None)[0]
    e *= OWN * math.sqrt(2 * N - 3) / math.sqrt(float(e @ e))
    probe = _adjusted(e[:N], e[N:])
    assert probe.mde is not None
    effect = math.log1p(probe.mde)
    rng = np.random.default_rng(17)
    noise = rng.normal(0, OWN, (SIMULATIONS, 2, N))
    adjusted = [_adjusted(a, b, effect) for a, b in noise]
    caught = sum(
        decide(c, 0.0, Direction.LOWER_IS_BETTER).verdict is Verdict.REGRESSION for c in adjusted
    )
    assert caught / SIMULATIONS >= 0.8, (caught, math.expm1(effect))
    # Unadjusted, the slow runs' spread hides the same change more often than not.
    plain = sum(
        decide(
            compare_runs(np.exp(SPEED_BASE + a), np.exp(SPEED_RUN + effect + b)),
            0.0,
            Direction.LOWER_IS_BETTER,
        ).verdict
        is Verdict.REGRESSION
        for a, b in noise
    )
    assert plain < caught, (plain, caught)


def test_one_run_against_a_history_is_set_against_its_own_speed() -> None:
    speeds = np.array([1.0, 1.0, 1.15, 1.0, 1.0, 1.15, 1.0, 1.0])
    noise = np.exp(np.random.default_rng(23).normal(0, 0.01, len(speeds)))
    history = 10.0 * speeds * noise
    lower = Direction.LOWER_IS_BETTER
    # A run on the slow machine, as slow as the slow runs before it: no change.
    slow = compare_runs_adjusted(history, [11.5], speeds, [1.15])
    assert decide(slow, 0.05, lower).verdict is Verdict.NOISE, slow
    # 12 % slower on a machine at full speed: adjusted, a regression; unadjusted, the history's
    # slow runs make the prediction interval too wide to tell.
    worse = compare_runs_adjusted(history, [11.2], speeds, [1.0])
    assert decide(worse, 0.05, lower).verdict is Verdict.REGRESSION, worse
    plain = compare_runs(history, [11.2])
    assert decide(plain, 0.05, lower).verdict is not Verdict.REGRESSION, plain


def test_a_regression_needs_the_whole_interval_beyond_the_threshold() -> None:
    lower = Direction.LOWER_IS_BETTER
    change = Change(0.15, 0.12, 0.18, 0.001, 0.05, "test")
    assert decide(change, 0.10, lower).verdict is Verdict.REGRESSION
    straddling = Change(0.15, 0.05, 0.25, 0.001, 0.05, "test")
    assert decide(straddling, 0.10, lower).verdict is Verdict.INCONCLUSIVE
    assert decide(Change(0.02, -0.03, 0.07, 0.4, 0.05, "t"), 0.1, lower).verdict is Verdict.NOISE
    # Higher is better: a drop is the regression.
    assert decide(change, 0.10, Direction.HIGHER_IS_BETTER).verdict is Verdict.IMPROVEMENT
    # A threshold below what this comparison can detect is said to be.
    assert decide(Change(0.0, -0.2, 0.2, 1.0, 0.3, "t"), 0.1, lower).below_mde
    # No interval (one run, no intervals): never a pass by default, never a regression.
    assert decide(Change(3.0, None, None, None, None, "t"), 0.1, lower).verdict is (
        Verdict.INCONCLUSIVE
    )


FAMILY = 9  # the default rules' statistical metrics on one case


def _family(base: np.ndarray, run: np.ndarray, thresholds: float = 0.0) -> list[Verdict]:
    """One comparison of FAMILY independent metrics, decided together as the gate does."""
    changes = [compare_runs(b, r) for b, r in zip(base, run, strict=True)]
    judged = decide_family(
        changes,
        [thresholds] * len(changes),
        [Direction.LOWER_IS_BETTER] * len(changes),
        lambda i, level: compare_runs(base[i], run[i], level),
    )
    return [d.verdict for _, d in judged]


def test_a_family_of_metrics_calls_a_regression_at_the_stated_rate_and_improvements_apart() -> None:
    rng = np.random.default_rng(29)
    noise = rng.normal(0, CV, (SIMULATIONS, 2, FAMILY, N))
    verdicts = [_family(np.exp(a), np.exp(b)) for a, b in noise]
    regressions = sum(Verdict.REGRESSION in v for v in verdicts)
    improvements = sum(Verdict.IMPROVEMENT in v for v in verdicts)
    sd = math.sqrt(ALPHA * (1 - ALPHA) / SIMULATIONS)
    # Holm over independent metrics is exact to 1 − (1 − α/9)^9 = 0.0489.
    assert abs(regressions / SIMULATIONS - ALPHA) <= 3 * sd, regressions
    assert abs(improvements / SIMULATIONS - ALPHA) <= 3 * sd, improvements


def test_one_sided_families_catch_more_than_one_two_sided_family() -> None:
    # 300 simulations, not 1,000: the one-sided family caught 1.26× as many as the two-sided
    # here and 1.30× over 1,000 (at 1.4 ms a t-test, the 1,000 cost 27 s of CPU).
    rng = np.random.default_rng(31)
    noise = rng.normal(0, CV, (300, 2, FAMILY, N))
    effect = np.zeros((FAMILY, 1))
    effect[0] = 0.12  # one metric 12.7 % worse, the other eight unchanged
    caught = 0
    two_sided = 0
    for a, b in noise:
        base, run = np.exp(a), np.exp(b + effect)
        caught += _family(base, run)[0] is Verdict.REGRESSION
        # One two-sided family: Holm over the two-sided p, the interval at the Holm level.
        changes = [compare_runs(x, y) for x, y in zip(base, run, strict=True)]
        level, significant = holm([c.p_value for c in changes])[0]
        first = compare_runs(base[0], run[0], level)
        two_sided += (
            decide(first, 0.0, Direction.LOWER_IS_BETTER, significant).verdict is Verdict.REGRESSION
        )
    assert caught > two_sided * 1.1, (caught, two_sided)


def test_the_one_sided_p_is_half_the_two_sided_on_the_side_the_change_points_to() -> None:
    worse = Change(0.1, 0.02, 0.2, 0.04, 0.1, "t")
    assert one_sided_p(worse, Direction.LOWER_IS_BETTER, True) == pytest.approx(0.02)
    assert one_sided_p(worse, Direction.LOWER_IS_BETTER, False) == pytest.approx(0.98)
    # Higher is better: a rise is the better side.
    assert one_sided_p(worse, Direction.HIGHER_IS_BETTER, False) == pytest.approx(0.02)
    assert (
        one_sided_p(Change(0.0, -0.1, 0.1, 1.0, 0.1, "t"), Direction.LOWER_IS_BETTER, True) == 0.5
    )
    assert (
        one_sided_p(Change(0.1, None, None, None, None, "t"), Direction.LOWER_IS_BETTER, True)
        is None
    )


def test_holm_controls_the_family_and_stops_at_the_first_kept_hypothesis() -> None:
    out = holm([0.001, 0.04, None, 0.02])
    assert out[0] == (pytest.approx(ALPHA / 3), True)
    assert out[3] == (pytest.approx(ALPHA / 2), True)
    assert out[1] == (pytest.approx(ALPHA), True)
    assert out[2][1] is False
    # 0.03 fails alpha / 2, so 0.04 is not rejected either although it is below alpha.
    assert [r for _, r in holm([0.03, 0.04])] == [False, False]


def test_the_interval_bootstrap_is_seeded_and_finds_a_planted_tail_shift() -> None:
    rng = np.random.default_rng(3)
    values = np.arange(1, 601, dtype=float)
    base = np.zeros((20, 600))
    base[:, :300] = rng.multinomial(500, np.ones(300) / 300, size=20)
    slower = np.roll(base, 30, axis=1)  # every value +30: the P99 (~297) +10 %
    first = compare_interval_histograms(base, slower, values, 99.0)
    again = compare_interval_histograms(base, slower, values, 99.0)
    assert first == again
    assert first.low is not None and first.low > 0.05
    same = compare_interval_histograms(base, base.copy(), values, 99.0)
    assert decide(same, 0.05, Direction.LOWER_IS_BETTER).verdict is Verdict.NOISE
    assert "one run per side" in same.method


def test_rates_against_what_was_asked_and_between_single_runs() -> None:
    short = compare_against_target([8.0, 8.1, 7.9, 8.0], 10.0)
    assert short.high is not None and short.high < -0.1
    assert decide(short, 0.02, Direction.HIGHER_IS_BETTER).verdict is Verdict.REGRESSION
    rng = np.random.default_rng(5)
    a, b = rng.normal(10, 0.5, 30), rng.normal(10, 0.5, 30)
    assert compare_interval_means(a, b).low is not None


# -- the closed forms against scipy.stats ---------------------------------------------------
# compare_runs and its kin compute the t-test themselves from scipy.special (~30 µs, not ~1 ms
# a call); these hold every result to the scipy.stats function the closed form stands for.
PAIRS = 300
LEVELS = (ALPHA, 0.01, 2 * ALPHA / 9)  # the default, a stricter one, a Holm redraw's


def _samples(rng: np.random.Generator, positive: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Two sides of 2–8 values each, often of unequal sizes and spreads."""
    na, nb = rng.integers(2, 9, size=2)
    a = rng.normal(0, rng.uniform(0.001, 0.3), na)
    b = rng.normal(rng.normal(0, 0.1), rng.uniform(0.001, 0.3), nb)
    return (np.exp(a), np.exp(b)) if positive else (a, b)


def _same(change: Change, p: float, low: float, high: float) -> None:
    assert change.p_value == pytest.approx(p, rel=1e-9)
    assert change.low == pytest.approx(low, rel=1e-9)
    assert change.high == pytest.approx(high, rel=1e-9)


def test_compare_runs_is_scipys_welch_t_on_the_log_values() -> None:
    from scipy import stats  # here, not when collected: reports/stats.py's note

    rng = np.random.default_rng(37)
    for i in range(PAIRS):
        a, b = _samples(rng)
        alpha = LEVELS[i % len(LEVELS)]
        res = stats.ttest_ind(np.log(b), np.log(a), equal_var=False)
        ci = res.confidence_interval(1 - alpha)
        _same(compare_runs(a, b, alpha), res.pvalue, np.expm1(ci.low), np.expm1(ci.high))


def test_values_that_can_be_zero_get_scipys_welch_t_on_the_values() -> None:
    from scipy import stats  # here, not when collected: reports/stats.py's note

    rng = np.random.default_rng(41)
    for i in range(PAIRS):
        a, b = _samples(rng, positive=False)
        a[0] = 0.0  # not all positive: the difference of means, relative to the base's
        alpha = LEVELS[i % len(LEVELS)]
        scale = abs(a.mean())
        res = stats.ttest_ind(b, a, equal_var=False)
        ci = res.confidence_interval(1 - alpha)
        change = compare_runs(a, b, alpha)
        assert "on values" in change.method
        _same(change, res.pvalue, ci.low / scale, ci.high / scale)


def test_one_run_against_a_history_is_scipys_t_prediction_interval() -> None:
    from scipy import stats  # here, not when collected: reports/stats.py's note

    rng = np.random.default_rng(43)
    for i in range(PAIRS):
        history = rng.normal(0, rng.uniform(0.001, 0.3), rng.integers(3, 9))
        run = rng.normal(rng.normal(0, 0.1), 0.1)
        alpha = LEVELS[i % len(LEVELS)]
        df = len(history) - 1
        d = run - history.mean()
        se = history.std(ddof=1) * math.sqrt(1 + 1 / len(history))
        half = stats.t.ppf(1 - alpha / 2, df) * se
        change = compare_runs(np.exp(history), [math.exp(run)], alpha)
        assert "earlier runs" in change.method
        _same(change, 2 * stats.t.sf(abs(d) / se, df), np.expm1(d - half), np.expm1(d + half))


def test_the_speed_adjusted_change_is_scipys_t_on_the_ancova_coefficient() -> None:
    from scipy import stats  # here, not when collected: reports/stats.py's note

    rng = np.random.default_rng(47)
    for i in range(PAIRS):
        nb = 1 if i % 4 == 0 else int(rng.integers(2, 9))  # a quarter: one run against history
        na = int(rng.integers(max(2, 6 - nb), 9))  # six or more runs in all
        speed = rng.normal(0, 0.05, na + nb)
        y = speed + rng.normal(0, rng.uniform(0.005, 0.1), na + nb)
        y[na:] += rng.normal(0, 0.1)
        alpha = LEVELS[i % len(LEVELS)]
        side = np.repeat([0.0, 1.0], [na, nb])
        design = np.column_stack([np.ones(na + nb), side, speed])
        coef, residual, _, _ = np.linalg.lstsq(design, y, rcond=None)
        df = na + nb - 3
        se = math.sqrt(residual[0] / df * np.linalg.inv(design.T @ design)[1, 1])
        half = stats.t.ppf(1 - alpha / 2, df) * se
        change = compare_runs_adjusted(
            np.exp(y[:na]), np.exp(y[na:]), np.exp(speed[:na]), np.exp(speed[na:]), alpha
        )
        assert change.speed_adjusted
        d = coef[1]
        p = 2 * stats.t.sf(abs(d) / se, df)
        _same(change, p, np.expm1(d - half), np.expm1(d + half))


def test_a_rate_against_its_target_is_scipys_one_sample_t() -> None:
    from scipy import stats  # here, not when collected: reports/stats.py's note

    rng = np.random.default_rng(53)
    for i in range(PAIRS):
        x = rng.normal(rng.uniform(0.8, 1.1), rng.uniform(0.001, 0.2), rng.integers(2, 31))
        alpha = LEVELS[i % len(LEVELS)]
        res = stats.ttest_1samp(x, 1.0)
        ci = res.confidence_interval(1 - alpha)
        _same(compare_against_target(x * 1000, 1000, alpha), res.pvalue, ci.low - 1, ci.high - 1)


def test_a_bootstraps_redrawn_mde_is_from_scipys_normal_quantiles() -> None:
    from scipy import stats  # here, not when collected: reports/stats.py's note

    dist = tuple(np.random.default_rng(59).normal(0.02, 0.03, 2000))
    change = Change(0.02, 0.0, 0.04, 0.2, 0.1, "bootstrap", resampled=dist)
    for alpha in LEVELS:
        redrawn = at_level(change, alpha)
        assert redrawn is not None
        z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(POWER)
        assert redrawn.mde == pytest.approx(np.expm1(z * np.std(dist, ddof=1)), rel=1e-9)
