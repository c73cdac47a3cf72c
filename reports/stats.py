"""How a change between a baseline and a run is estimated, and the one function that decides
what the change means (regression, improvement, within noise, inconclusive).

Gate, compare, sweep compare and history all call `decide_family`; nothing else in the project
says "worse". The estimates come from scipy:

- **Several runs per side** (the runs are the independent units): Welch's t-test on the
  logarithms of the per-run values (`scipy.stats.ttest_ind`), so the change and its interval
  are ratios (−5 % … +12 %). Calibrated for few runs: unit-tested by simulation
  (tests/unit/test_stats.py). The test's arithmetic is written out here and its distribution
  read from `scipy.special` (`_t_test`): `ttest_ind` costs ~1 ms a call in input handling,
  which the simulations and the gate's redraws pay thousands of times; the unit tests hold
  the results to `ttest_ind`'s. A bootstrap over 5 runs per side would be narrower than the truth.
- **Three or more runs per side, each with the machine's speed** (harness/machine_speed.py):
  the same change adjusted for how fast the machine ran in each run, by analysis of covariance
  on the logarithms (`compare_runs_adjusted`; reports/changes.py decides when it applies).
- **One run per side**: the only replicates are the run's own measurement intervals (one merged
  histogram per second, results_contract/intervals.py). A percentile's change is bootstrapped
  (`scipy.stats.bootstrap`) over those intervals, merging the resampled histograms and reading
  the percentile from the sum; the interval then says nothing about run-to-run variation, and
  every verdict from it says so.

Criterion.rs's rule: a change is called only when it is significant (the one-sided p below its
level, after Holm's correction over the metrics of one comparison: `decide_family`) **and** its
whole interval lies beyond the rule's threshold. The minimum detectable effect (80 % power at
the level used) is reported beside each verdict, and a threshold below it is said to be so.

scipy is imported in the functions that use it: `scipy.stats` takes 1.2 CPU-s to import, which
every process that imported this module paid, also one that compares nothing (each pytest
process collected it through reports/compare.py; a refused `bench gate`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np
from numpy.typing import ArrayLike

from reports.metrics import Direction

ALPHA = 0.05
"""Family-wise false-alarm rate of one comparison: the chance that a comparison of identical
revisions calls a regression on any metric (`decide_family`; improvements are a family of their
own, at the same rate)."""
POWER = 0.8
SEED = 20261126
"""Every bootstrap is seeded, so the same inputs give the same verdict."""
RESAMPLES = 2000
SPEED_ADJUSTED = "adjusted for the machine's speed in each run"
"""How a method and the gate's summary say that a change was set against the machine's speed."""


class Verdict(StrEnum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NOISE = "within noise"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Change:
    """A relative change (run / baseline − 1) with its two-sided interval at level 1 − alpha."""

    estimate: float
    low: float | None
    high: float | None
    p_value: float | None
    """Two-sided, for "no change at all"."""
    mde: float | None
    """Smallest relative change detected with 80 % power at this level and spread."""
    method: str
    """How the interval was made, in words a reader can check."""
    alpha: float = ALPHA
    resampled: tuple[float, ...] = field(default=(), compare=False, repr=False)
    """A bootstrap's log changes, so Holm's level can redraw the interval without resampling."""
    speed_adjusted: bool = False
    """Made by `compare_runs_adjusted`: set against the machine's speed in each run."""

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str
    below_mde: bool = False
    """The rule's threshold is smaller than the change this comparison can detect."""


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def describe(change: Change) -> str:
    """ "+3.1 % (−2.0 % … +8.4 %, p 0.21)": the numbers a verdict was decided from."""
    if not change.has_interval:
        return f"{_pct(change.estimate)} (no interval)"
    assert change.low is not None and change.high is not None
    p = "" if change.p_value is None else f", p {change.p_value:.2g}"
    return f"{_pct(change.estimate)} ({_pct(change.low)} … {_pct(change.high)}{p})"


def decide(
    change: Change, threshold: float, direction: Direction, significant: bool | None = None
) -> Decision:
    """The verdict on one metric: a regression only when the change is significant and its
    whole interval is worse than `threshold` (a fraction: 0.1 = 10 % worse).

    `significant` is the multiple-comparison procedure's answer (Holm); None: p < alpha.
    """
    below_mde = change.mde is not None and threshold < change.mde
    if change.low is None or change.high is None:
        return Decision(Verdict.INCONCLUSIVE, f"{describe(change)}: {change.method}", below_mde)
    if direction is Direction.LOWER_IS_BETTER:
        worse_low, worse_high = change.low, change.high
    else:
        worse_low, worse_high = -change.high, -change.low
    if significant is None:
        significant = change.p_value is not None and change.p_value < change.alpha
    limit = f"threshold {threshold * 100:.0f} %"
    if significant and worse_low > threshold:
        return Decision(
            Verdict.REGRESSION, f"{describe(change)}: worse beyond the {limit}", below_mde
        )
    if significant and worse_high < -threshold:
        return Decision(Verdict.IMPROVEMENT, f"{describe(change)}: better", below_mde)
    if worse_high <= threshold:
        return Decision(Verdict.NOISE, f"{describe(change)}: within the {limit}", below_mde)
    return Decision(
        Verdict.INCONCLUSIVE,
        f"{describe(change)}: the interval reaches past the {limit}; more repeats would tell",
        below_mde,
    )


def one_sided_p(change: Change, direction: Direction, worse: bool) -> float | None:
    """The p-value for "not worse" (worse=True) or "not better" from the two-sided one: half of
    it on the side the estimate points to (exact for t and for the bootstrap's tail share)."""
    if change.p_value is None:
        return None
    if change.estimate == 0:
        return 0.5
    half = change.p_value / 2
    return half if _points_worse(change, direction) == worse else 1 - half


def _points_worse(change: Change, direction: Direction) -> bool:
    return (change.estimate > 0) == (direction is Direction.LOWER_IS_BETTER)


def decide_family(
    changes: Sequence[Change],
    thresholds: Sequence[float],
    directions: Sequence[Direction],
    redraw: Callable[[int, float], Change],
    alpha: float = ALPHA,
) -> list[tuple[Change, Decision]]:
    """The verdicts on the metrics of one comparison (gate and compare both call this).

    A gate asks one question per metric, "worse?", so regressions are one family of one-sided
    tests under Holm at `alpha`, and improvements another: identical revisions call a
    regression on any metric at most `alpha` of the time. Each interval is drawn two-sided at
    twice its metric's Holm level, so each of its bounds holds one-sided at that level (the
    level of the family the estimate points to). `redraw(i, level)` re-estimates change i at
    another two-sided level. Compared with one two-sided family, a 5-against-5 comparison of
    nine metrics needs t 3.3 instead of 3.8 for its first call.
    """
    worse = holm([one_sided_p(c, d, True) for c, d in zip(changes, directions, strict=True)], alpha)
    better = holm(
        [one_sided_p(c, d, False) for c, d in zip(changes, directions, strict=True)], alpha
    )
    out = []
    for i, (change, threshold, direction) in enumerate(
        zip(changes, thresholds, directions, strict=True)
    ):
        if not change.has_interval or change.p_value is None:
            out.append((change, decide(change, threshold, direction, False)))
            continue
        points_worse = change.estimate == 0 or _points_worse(change, direction)
        level, significant = (worse if points_worse else better)[i]
        if not math.isclose(2 * level, change.alpha):
            change = redraw(i, 2 * level)
        out.append((change, decide(change, threshold, direction, significant)))
    return out


def holm(p_values: Sequence[float | None], alpha: float = ALPHA) -> list[tuple[float, bool]]:
    """Holm–Bonferroni step-down: per metric (the level its interval is drawn at, rejected?).

    scipy has Benjamini–Hochberg (false discovery rate) but not Holm (family-wise), and the
    procedure is four lines: the k-th smallest p is tested at alpha / (m − k); the first one
    not rejected stops the rest. Metrics without a p-value do not count in m.
    """
    ranked = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(ranked)
    out: list[tuple[float, bool]] = [(alpha, False)] * len(p_values)
    still = True
    for k, (p, i) in enumerate(ranked):
        level = alpha / (m - k)
        still = still and p < level
        out[i] = (level, still)
    return out


def _t_test(diff: float, se: float, df: float, alpha: float) -> tuple[float, float, float]:
    """Two-sided p and interval (low, high) of a difference with standard error `se` under
    Student's t with `df` degrees of freedom: what scipy's t-tests return, from the same
    `scipy.special` functions they call, without their ~1 ms of input handling a call."""
    from scipy import special  # imported where used: see the module's note

    p = 2 * float(special.stdtr(df, -abs(diff / se)))
    low = diff + float(special.stdtrit(df, alpha / 2)) * se
    high = diff + float(special.stdtrit(df, 1 - alpha / 2)) * se
    return p, low, high


def _welch_df(va: float, na: int, vb: float, nb: int) -> float:
    """Welch–Satterthwaite degrees of freedom from the two sides' variances and sizes."""
    ma, mb = va / na, vb / nb
    return (ma + mb) ** 2 / (ma**2 / (na - 1) + mb**2 / (nb - 1))


def _mde_t(se: float, df: int, alpha: float) -> float:
    """The shift (in the units of `se`) detected with 80 % power by a two-sided t-test, from
    the noncentral t; df is Welch's lower bound min(n) − 1, so the stated power holds."""
    return _noncentrality(df, alpha) * se


@functools.cache
def _noncentrality(df: int, alpha: float) -> float:
    from scipy import stats  # imported where used: see the module's note
    from scipy.optimize import brentq

    crit = stats.t.ppf(1 - alpha / 2, df)
    return float(brentq(lambda x: stats.nct.sf(crit, df, x) - POWER, 0.0, 1e3))


def _exact(estimate: float, method: str, alpha: float) -> Change:
    """No spread on either side (identical values): the change is known exactly."""
    return Change(estimate, estimate, estimate, 1.0 if estimate == 0 else 0.0, 0.0, method, alpha)


def compare_runs(base: ArrayLike, run: ArrayLike, alpha: float = ALPHA) -> Change:
    """Change between per-run values (two or more per side): Welch's t on their logarithms."""
    a = np.asarray(base, dtype=float)
    b = np.asarray(run, dtype=float)
    method = f"Welch t on log values, {len(b)} run(s) against {len(a)}"
    if len(b) == 1 and len(a) >= 3 and (a > 0).all() and b[0] > 0:
        return _against_history(np.log(a), float(np.log(b[0])), alpha)
    if len(a) < 2 or len(b) < 2:
        raise ValueError("compare_runs needs two or more runs per side")
    if (a <= 0).any() or (b <= 0).any():
        return _compare_runs_linear(a, b, alpha, method.replace("log values", "values"))
    la, lb = np.log(a), np.log(b)
    diff = float(lb.mean() - la.mean())
    estimate = float(np.exp(diff) - 1)
    va, vb = float(la.var(ddof=1)), float(lb.var(ddof=1))
    se = math.sqrt(va / len(la) + vb / len(lb))
    df = min(len(la), len(lb)) - 1
    if se <= 1e-12:  # identical values on each side (to rounding): the change is exact
        return _exact(estimate, method, alpha)
    p, low, high = _t_test(diff, se, _welch_df(va, len(la), vb, len(lb)), alpha)
    return Change(
        estimate,
        float(np.expm1(low)),
        float(np.expm1(high)),
        p,
        float(np.expm1(_mde_t(se, df, alpha))),
        method,
        alpha,
    )


def compare_runs_adjusted(
    base: ArrayLike,
    run: ArrayLike,
    base_speed: ArrayLike,
    run_speed: ArrayLike,
    alpha: float = ALPHA,
) -> Change:
    """Change between per-run values, adjusted for how fast the machine was in each run.

    Analysis of covariance on logarithms: log value = a + change · (run side) + slope ·
    log(machine speed), least squares, the change's interval from Student's t with n − 3
    degrees of freedom. In one validation on the 2-core VM a quarter of the runs came while the
    whole machine was slower (client and broker CPU per delivery up together by 20-40 %); the
    probe sees a run like that, not the smaller spread of a quiet hour (docs/reports.md,
    "Validation benchmark"). The slope is estimated, not assumed: a metric the machine's speed
    does not move costs one degree of freedom. Valid because the speed probe is fixed work that
    the revision under test does not run (changes.py adjusts only runs whose probe versions
    match). With one run against a
    history's last K, the change's interval is the prediction interval of that run from the
    line through the K (Conbench's lookback, at the run's own speed).
    """
    a = np.asarray(base, dtype=float)
    b = np.asarray(run, dtype=float)
    sa = np.asarray(base_speed, dtype=float)
    sb = np.asarray(run_speed, dtype=float)
    if len(a) < 2 or len(b) < 1 or len(a) + len(b) < 6 or len(sa) != len(a) or len(sb) != len(b):
        raise ValueError("compare_runs_adjusted needs six or more runs, each with its speed")
    if (a <= 0).any() or (b <= 0).any() or (sa <= 0).any() or (sb <= 0).any():
        return compare_runs(a, b, alpha)
    y = np.log(np.concatenate([a, b]))
    x = np.log(np.concatenate([sa, sb]))
    side = np.concatenate([np.zeros(len(a)), np.ones(len(b))])
    design = np.column_stack([np.ones_like(y), side, x - x.mean()])
    coef, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    df = len(y) - 3
    if rank < 3:  # the speed is constant, or tells the sides apart: nothing to adjust with
        return compare_runs(a, b, alpha)
    method = f"t on log values {SPEED_ADJUSTED} (ANCOVA), {len(b)} run(s) against {len(a)}"
    residual = y - design @ coef
    s2 = float(residual @ residual) / df
    se = math.sqrt(s2 * float(np.linalg.inv(design.T @ design)[1, 1]))
    d = float(coef[1])
    if se <= 1e-12:
        return replace(_exact(float(np.expm1(d)), method, alpha), speed_adjusted=True)
    p, low, high = _t_test(d, se, df, alpha)
    return Change(
        float(np.expm1(d)),
        float(np.expm1(low)),
        float(np.expm1(high)),
        p,
        # One degree of freedom fewer than the test's: the stated effect is then detected
        # with at least 80 % power, not 80 % give or take the simulation (tests/unit).
        float(np.expm1(_mde_t(se, df - 1, alpha))),
        method,
        alpha,
        speed_adjusted=True,
    )


def _against_history(la: np.ndarray, lb: float, alpha: float) -> Change:
    """One new run against three or more earlier ones (a history's last K): the new run is
    assumed to spread as they do, so its interval is the t prediction interval of one more
    run from theirs (Conbench's lookback, with t instead of z for few runs)."""
    method = f"one run against the spread of {len(la)} earlier runs (t prediction interval)"
    s = float(la.std(ddof=1))
    estimate = float(np.expm1(lb - la.mean()))
    if s <= 1e-12:
        return _exact(estimate, method, alpha)
    se = s * math.sqrt(1 + 1 / len(la))
    df = len(la) - 1
    p, low, high = _t_test(lb - float(la.mean()), se, df, alpha)
    return Change(
        estimate,
        float(np.expm1(low)),
        float(np.expm1(high)),
        p,
        float(np.expm1(_mde_t(se, df, alpha))),
        method,
        alpha,
    )


def _compare_runs_linear(a: np.ndarray, b: np.ndarray, alpha: float, method: str) -> Change:
    """Values that can be 0: the difference of means, relative to the baseline's mean."""
    scale = abs(float(a.mean())) or 1.0
    estimate = float(b.mean() - a.mean()) / scale
    va, vb = float(a.var(ddof=1)), float(b.var(ddof=1))
    se = math.sqrt(va / len(a) + vb / len(b))
    if se <= 1e-12 * max(1.0, abs(estimate)):
        return _exact(estimate, method, alpha)
    diff = float(b.mean() - a.mean())
    p, low, high = _t_test(diff, se, _welch_df(va, len(a), vb, len(b)), alpha)
    df = min(len(a), len(b)) - 1
    return Change(
        estimate,
        low / scale,
        high / scale,
        p,
        _mde_t(se, df, alpha) / scale,
        method,
        alpha,
    )


def compare_against_target(values: ArrayLike, target: float, alpha: float = ALPHA) -> Change:
    """Change of measured values (runs, or seconds of one run) against what was asked."""
    x = np.asarray(values, dtype=float) / target
    method = f"one-sample t over {len(x)} value(s) against the asked rate"
    if len(x) < 2:
        return Change(float(x.mean() - 1) if len(x) else 0.0, None, None, None, None, method, alpha)
    se = float(x.std(ddof=1) / math.sqrt(len(x)))
    estimate = float(x.mean() - 1)
    if se <= 1e-12 * max(1.0, abs(estimate)):
        return _exact(estimate, method, alpha)
    p, low, high = _t_test(estimate, se, len(x) - 1, alpha)
    return Change(
        estimate,
        low,
        high,
        p,
        _mde_t(se, len(x) - 1, alpha),
        method,
        alpha,
    )


# -- one run per side: bootstrap over the measurement intervals --------------------------------
def percentile_of_counts(counts: np.ndarray, values: np.ndarray, q: float) -> np.ndarray:
    """The q-th percentile (0–100) of histograms given as count rows over shared bucket values,
    as HdrHistogram reads it: the first bucket whose cumulative count reaches q % of the total."""
    cum = np.cumsum(counts, axis=-1)
    total = cum[..., -1:]
    target = np.ceil(total * q / 100.0)
    target = np.maximum(target, 1)
    idx = (cum < target).sum(axis=-1)
    return values[np.minimum(idx, len(values) - 1)]


def compare_interval_histograms(
    base: np.ndarray,
    run: np.ndarray,
    values: np.ndarray,
    q: float,
    alpha: float = ALPHA,
    seed: int = SEED,
) -> Change:
    """Change of a percentile between two runs from their interval histograms (rows of counts
    over the bucket `values`): intervals resampled with replacement on each side, merged, the
    percentile read from each merged sum (scipy.stats.bootstrap, percentile method)."""
    method = (
        f"bootstrap over the runs' own measurement intervals ({len(run)} against {len(base)}); "
        "one run per side says nothing about run-to-run variation"
    )
    if len(base) < 2 or len(run) < 2:
        return Change(0.0, None, None, None, None, "fewer than two measurement intervals", alpha)
    point = percentile_of_counts(run.sum(0), values, q) / percentile_of_counts(
        base.sum(0), values, q
    )

    def merged(rows: np.ndarray, idx: np.ndarray) -> np.ndarray:
        # A resample as weights (how often each interval was drawn) times the count rows:
        # one matrix product per batch, not a (batch × intervals × buckets) copy.
        idx = np.atleast_2d(idx.astype(int))
        weights = np.zeros((idx.shape[0], len(rows)))
        np.add.at(weights, (np.arange(idx.shape[0])[:, None], idx), 1)
        return np.asarray(percentile_of_counts(weights @ rows, values, q))

    def log_ratio(ia: np.ndarray, ib: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(np.log(merged(run, ib) / merged(base, ia)))

    return _bootstrap(
        (np.arange(len(base)), np.arange(len(run))), log_ratio, float(point), method, alpha, seed
    )


def compare_interval_means(
    base: ArrayLike, run: ArrayLike, alpha: float = ALPHA, seed: int = SEED
) -> Change:
    """Change of a per-interval mean (a rate per second) between two single runs."""
    a = np.asarray(base, dtype=float)
    b = np.asarray(run, dtype=float)
    method = (
        f"bootstrap over the runs' own seconds ({len(b)} against {len(a)}); one run per side "
        "says nothing about run-to-run variation"
    )
    if len(a) < 2 or len(b) < 2 or a.mean() <= 0 or b.mean() <= 0:
        return Change(0.0, None, None, None, None, "fewer than two measured seconds", alpha)

    def log_ratio(xa: np.ndarray, xb: np.ndarray, axis: int = -1) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.asarray(np.log(xb.mean(axis=axis) / xa.mean(axis=axis)))

    return _bootstrap((a, b), log_ratio, float(b.mean() / a.mean()), method, alpha, seed)


def _bootstrap(
    data: tuple[np.ndarray, np.ndarray],
    statistic: Callable[..., np.ndarray],
    point_ratio: float,
    method: str,
    alpha: float,
    seed: int,
) -> Change:
    from scipy import stats  # imported where used: see the module's note

    res = stats.bootstrap(
        data,
        statistic,
        n_resamples=RESAMPLES,
        vectorized=True,
        batch=200,
        confidence_level=1 - alpha,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    dist = res.bootstrap_distribution[np.isfinite(res.bootstrap_distribution)]
    if len(dist) == 0:
        return Change(point_ratio - 1, None, None, None, None, method, alpha)
    # Two-sided p for "no change": how often the resampled change falls on the other side of 0.
    p = min(1.0, 2 * min(float((dist <= 0).mean()), float((dist >= 0).mean())))
    se = float(res.standard_error)
    z = _z_mde(alpha)
    return Change(
        point_ratio - 1,
        float(np.expm1(res.confidence_interval.low)),
        float(np.expm1(res.confidence_interval.high)),
        p,
        float(np.expm1(z * se)) if math.isfinite(se) else None,
        method,
        alpha,
        tuple(float(x) for x in dist),
    )


def _z_mde(alpha: float) -> float:
    """The normal quantiles of a two-sided level and 80 % power (the bootstrap's minimum
    detectable effect in standard errors); `scipy.special.ndtri` is `stats.norm.ppf` without
    its ~100 µs of argument handling, paid on each redraw of a bootstrapped change."""
    from scipy import special  # imported where used: see the module's note

    return float(special.ndtri(1 - alpha / 2) + special.ndtri(POWER))


def at_level(change: Change, alpha: float) -> Change | None:
    """A bootstrap's interval at another level, from its kept resamples (percentile method);
    None when the change was not bootstrapped (re-estimate it instead)."""
    if not change.resampled:
        return None
    dist = np.asarray(change.resampled)
    low, high = np.quantile(dist, [alpha / 2, 1 - alpha / 2])
    z = _z_mde(alpha)
    se = float(dist.std(ddof=1))
    return replace(
        change,
        low=float(np.expm1(low)),
        high=float(np.expm1(high)),
        mde=float(np.expm1(z * se)),
        alpha=alpha,
    )
