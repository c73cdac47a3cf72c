"""From runs to a `Change`: which numbers of a run a metric's change is estimated from, and
which of reports/stats.py's estimators applies (several runs per side, or one run and its
measurement intervals). Gate, compare and history call `estimate`; `decide` says what it means.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from reports.metrics import METRICS
from reports.results import RunSummary
from reports.stats import (
    ALPHA,
    Change,
    compare_against_target,
    compare_interval_histograms,
    compare_runs,
    compare_runs_adjusted,
)
from results_contract.harness_cost import (
    BROKER_CPU_US_PER_DELIVERY,
    CLIENT_CPU_US_PER_DELIVERY,
    MACHINE_PROBE_VERSION,
    MACHINE_UNIT_US,
)
from results_contract.hlog import HlogFormatError, decode, read_intervals
from results_contract.intervals import INTERVALS_FILE
from results_contract.metrics import E2E, E2E_ACTUAL, E2E_KERNEL, PUBLISH, PUBLISH_DELAY
from results_contract.summary import (
    ClientBound,
    Copied,
    Headline,
    Series,
    SummaryError,
    Top,
    finite,
)

InputError = SummaryError
"""A summary holds something that is not a number where a number belongs (NaN, inf, text):
bad input, never a regression; the message names the file and the field. The contract
(results_contract/summary.py) decides it, for every reader alike."""


# Metrics computed from several fields: name → (fields read, how). Values per run.
CONNECT_PER_CONSUMER = "connection_time_per_consumer_ms"
PUBLISH_RATE = "publish_rate_vs_asked"
DELIVERY_RATE = "delivery_rate_vs_asked"
CLIENT_CPU = CLIENT_CPU_US_PER_DELIVERY
BROKER_CPU = BROKER_CPU_US_PER_DELIVERY
DERIVED = (CONNECT_PER_CONSUMER, PUBLISH_RATE, DELIVERY_RATE, CLIENT_CPU, BROKER_CPU)
TARGET_METRICS = (PUBLISH_RATE, DELIVERY_RATE)
"""Gated against what the workload asked (a fraction of it), not against the baseline."""
KERNEL_METRICS = ("e2e_kernel_p99_ms", "client_delay_p99_ms")
# Percentile metrics with per-interval histograms (results_contract/intervals.py).
INTERVAL_PERCENTILES: dict[str, tuple[str, float]] = {
    "e2e_p50_ms": (E2E, 50.0),
    "e2e_p99_ms": (E2E, 99.0),
    "e2e_p99_9_ms": (E2E, 99.9),
    "e2e_actual_p99_ms": (E2E_ACTUAL, 99.0),
    "e2e_kernel_p99_ms": (E2E_KERNEL, 99.0),
    "publish_p99_ms": (PUBLISH, 99.0),
    "publish_delay_p99_ms": (PUBLISH_DELAY, 99.0),
}


@dataclass(frozen=True)
class Sample:
    """A metric's value in one run, and (for a rate) what the workload asked and the run's
    per-second values."""

    value: float | None
    target: float | None = None
    per_second: tuple[float, ...] = ()


def _number(run: RunSummary, path: tuple[str, ...]) -> float | None:
    """A number at `path`; None when not measured; InputError for bad input (the contract's
    `number` says which)."""
    return run.number(*path)


def _series(run: RunSummary, key: str) -> tuple[float, ...]:
    values = run.section(Top.SERIES).get(key) or []
    return tuple(
        finite(v, (Top.SERIES, f"{key}[{i}]"), run.path)
        for i, v in enumerate(values)
        if v is not None
    )


def sample(run: RunSummary, metric: str) -> Sample:
    """The metric's value in a run (InputError for a value that is not a finite number)."""
    if metric == CONNECT_PER_CONSUMER:
        total = _number(run, (Top.HEADLINE, Headline.CONNECTION_TIME_S))
        consumers = _number(run, (Top.HEADLINE, Headline.CONSUMERS))
        return Sample(None if total is None or not consumers else total * 1000 / consumers)
    if metric in (CLIENT_CPU, BROKER_CPU):
        return Sample(_number(run, (Top.HARNESS_COST, metric)))
    if metric in TARGET_METRICS:
        asked = _number(run, (Top.WORKLOAD, Copied.PRODUCER_RATE))
        if not asked:  # 0: OMB's "find the maximum rate", nothing to hold it to
            return Sample(None)
        if metric == DELIVERY_RATE:
            sent = _number(run, (Top.HEADLINE, Headline.MESSAGES_SENT))
            expected = _number(run, (Top.HEADLINE, Headline.DELIVERIES_EXPECTED))
            if not sent or expected is None:
                return Sample(None)
            asked *= expected / sent
        seconds = _series(
            run, Series.PUBLISH_RATE if metric == PUBLISH_RATE else Series.CONSUME_RATE
        )
        if not seconds:
            return Sample(None)
        return Sample(sum(seconds) / len(seconds), asked, seconds)
    known = METRICS.get(metric)
    return Sample(_number(run, known.path if known else tuple(metric.split("."))))


def machine_speeds(
    base: Sequence[RunSummary], run: Sequence[RunSummary]
) -> tuple[list[float], list[float]] | None:
    """Each run's machine speed (the probe's unit time, harness/machine_speed.py) when a change
    can be adjusted for it: three or more runs per side (or one run against five or more, a
    history's last K), every one probed, all with one version of the probe (a changed probe is
    a different ruler). None otherwise: the change is then estimated unadjusted."""
    if not (min(len(base), len(run)) >= 3 or (len(run) == 1 and len(base) >= 5)):
        return None
    units = [_number(x, (Top.HARNESS_COST, MACHINE_UNIT_US)) for x in (*base, *run)]
    versions = {_number(x, (Top.HARNESS_COST, MACHINE_PROBE_VERSION)) for x in (*base, *run)}
    if any(u is None or u <= 0 for u in units) or len(versions) != 1 or None in versions:
        return None
    speeds = [float(u) for u in units if u is not None]
    return speeds[: len(base)], speeds[len(base) :]


def no_kernel_times(run: RunSummary) -> bool:
    """The run's driver gave no kernel receive times, so its kernel metrics cannot exist."""
    return run.section(Top.CLIENT_BOUND).get(ClientBound.KERNEL_TIMES) is False or (
        run.section(Top.LATENCY).get(E2E_KERNEL) is None
        and run.headline.get(Headline.E2E_KERNEL_P99_MS) is None
    )


def estimate(
    metric: str,
    base: Sequence[RunSummary],
    run: Sequence[RunSummary],
    alpha: float = ALPHA,
) -> Change:
    """The change of `metric` from the baseline's runs to the run's (all values present)."""
    bs = [sample(r, metric) for r in base]
    rs = [sample(r, metric) for r in run]
    b = [s.value for s in bs if s.value is not None]
    r = [s.value for s in rs if s.value is not None]
    if metric in TARGET_METRICS:
        target = rs[0].target or 1.0
        values: Sequence[float] = r if len(r) >= 2 else rs[0].per_second
        return compare_against_target(values, target, alpha)
    speeds = machine_speeds(
        [x for x, s in zip(base, bs, strict=True) if s.value is not None],
        [x for x, s in zip(run, rs, strict=True) if s.value is not None],
    )
    if speeds is not None:
        return compare_runs_adjusted(b, r, *speeds, alpha)
    if (len(b) >= 2 and len(r) >= 2) or (len(r) == 1 and len(b) >= 3 and min(b + r) > 0):
        return compare_runs(b, r, alpha)
    point = (r[0] / b[0] - 1) if b and r and b[0] else 0.0
    if len(b) == 1 and len(r) == 1 and metric in INTERVAL_PERCENTILES:
        tag, q = INTERVAL_PERCENTILES[metric]
        grids = interval_counts([base[0].run_dir, run[0].run_dir], tag)
        if grids is not None:
            (ca, cb), values_ = grids
            return compare_interval_histograms(ca, cb, values_, q, alpha)
        why = f"one run per side and no {INTERVALS_FILE} (re-run `bench analyze`)"
    elif len(b) == 1 and len(r) == 1:
        why = "one run per side and no measurement intervals for this metric: repeat the runs"
    else:
        why = f"{len(r)} run(s) against {len(b)}: two or more per side give an interval"
    return Change(point, None, None, None, None, why, alpha)


def interval_counts(
    run_dirs: Sequence[Path], tag: str
) -> tuple[list[np.ndarray], np.ndarray] | None:
    """Each run's intervals of `tag` as rows of counts over one shared grid of bucket values;
    None when a run has no intervals file or fewer than two intervals of the tag."""
    per_run = [_intervals(Path(d)).get(tag) for d in run_dirs]
    if any(rows is None or len(rows) < 2 for rows in per_run):
        return None
    grid = sorted({v for rows in per_run for row in rows or [] for v in row})
    index = {v: i for i, v in enumerate(grid)}
    out = []
    for rows in per_run:
        m = np.zeros((len(rows or []), len(grid)))
        for i, row in enumerate(rows or []):
            for v, c in row.items():
                m[i, index[v]] = c
        out.append(m)
    return out, np.asarray(grid, dtype=float)


@cache
def _intervals(run_dir: Path) -> Mapping[str, list[dict[int, int]]]:
    """tag → per-interval {bucket value: count}, from the run's intervals file ({} without)."""
    path = run_dir / INTERVALS_FILE
    if not path.is_file():
        return {}
    out: dict[str, list[dict[int, int]]] = {}
    try:
        for interval in read_intervals(path):
            hist = decode(interval.blob)
            # The counts array directly: hdrh's recorded-value iterator walks every bucket in
            # Python. Values as HdrHistogram reports percentiles (highest equivalent value).
            array = np.ctypeslib.as_array(hist.counts)
            counts = {
                int(hist.get_highest_equivalent_value(hist.get_value_from_index(int(i)))): int(
                    array[i]
                )
                for i in np.flatnonzero(array)
            }
            out.setdefault(interval.tag, []).append(counts)
    except (HlogFormatError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: {exc}") from None
    except Exception as exc:  # hdrh raises an open set for a corrupt blob
        raise InputError(f"{path}: corrupt histogram ({type(exc).__name__}: {exc})") from None
    return out


def center(values: Sequence[float]) -> float | None:
    """What a side's runs are shown as: the geometric mean when all are positive (the t-test's
    centre), else the mean."""
    if not values:
        return None
    if all(v > 0 for v in values):
        return float(math.exp(sum(math.log(v) for v in values) / len(values)))
    return sum(values) / len(values)


def values(runs: Sequence[RunSummary], metric: str) -> list[float | None]:
    return [sample(r, metric).value for r in runs]
