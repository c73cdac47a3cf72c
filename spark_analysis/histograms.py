"""Merging every worker's interval histograms per metric, with Spark.

Percentiles are never averaged: histograms are added (as OMB's PeriodStats.plus does) and
percentiles read from the sum. HdrHistogram objects do not pickle, so what crosses a Spark
boundary is an encode() blob; each partition decodes its intervals once, adds them per key,
and ships one blob per key.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from hdrh.histogram import HdrHistogram
from hdrh.iterators import PercentileIterator
from pyspark.sql import SparkSession

from results_contract.hlog import (
    LOWEST_US,
    HlogFormatError,
    Interval,
    decode,
    new_histogram,
    read_intervals,
)
from results_contract.intervals import INTERVAL_METRICS, INTERVAL_S
from results_contract.metrics import (
    BROADCASTING,
    E2E,
    METRICS,
    PRODUCING,
    PUBLISH,
    PUBLISH_DELAY,
    stage_metric,
)
from results_contract.summary import STAT_PERCENTILES, Stat
from spark_analysis.errors import AnalysisError
from spark_analysis.inputs import second_index

# Summary keys (plain strings: they travel to Spark's executors) and the percentiles behind them.
PERCENTILES = {str(key): p for key, p in STAT_PERCENTILES.items()}
# The metrics with a series: e2e P99 per second (summary), and OMB's three every window.
SECOND_METRIC = E2E
WINDOW_METRICS = (PUBLISH, PUBLISH_DELAY, E2E)
SPECTRUM_TICKS = 5  # per half distance, as HdrHistogram's own percentile output
OMB_QUANTILE_TICKS = 100  # what OMB's WorkloadGenerator passes to percentiles()

Key = tuple[Any, ...]
ERROR_KEY: Key = ("error",)


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """What one merged histogram says, in µs (converted once, when written)."""

    count: int
    min_us: int
    max_us: int
    mean_us: float
    percentiles_us: dict[str, int]

    def to_ms(self) -> dict[str, float | int]:
        ms = {name: value / 1000.0 for name, value in self.percentiles_us.items()}
        return {
            Stat.COUNT: self.count,
            Stat.MIN: self.min_us / 1000.0,
            Stat.MEAN: self.mean_us / 1000.0,
            **ms,
            Stat.MAX: self.max_us / 1000.0,
        }


@dataclass(frozen=True, slots=True)
class TotalDigest:
    """A whole-run histogram: its stats, its HDR spectrum and OMB's quantile points (µs)."""

    stats: LatencyStats
    spectrum: list[tuple[float, int]]
    quantiles: list[tuple[float, int]]


@dataclass(frozen=True, slots=True)
class MergedHistograms:
    totals: dict[str, TotalDigest]
    e2e_p99_us: list[int | None]  # one per measure second; None when nothing was delivered
    windows: dict[str, list[LatencyStats | None]]  # WINDOW_METRICS, one per OMB window
    intervals: dict[tuple[str, int], str]
    """(metric, interval of the measure phase) → merged blob, for INTERVAL_METRICS: the
    gate's per-second histograms (results_contract/intervals.py), added up in the same pass."""


class _Partial(NamedTuple):
    """A partition's blob for one key, or (under ERROR_KEY only) why a blob did not decode."""

    blob: str
    error: str


def read_hlogs(files: Iterable[tuple[str, Path]]) -> list[tuple[str, Interval]]:
    """Read every interval of every worker's log, on the driver, as (source file, interval)."""
    records = []
    for _worker, path in files:
        try:
            for interval in read_intervals(path):
                if interval.tag not in METRICS:
                    raise AnalysisError(
                        f"{path}: unknown tag {interval.tag!r} (interval at "
                        f"{interval.start_s:.3f}); tags are {', '.join(METRICS)}"
                    )
                records.append((str(path), interval))
        except HlogFormatError as exc:
            raise AnalysisError(str(exc)) from None
        except UnicodeDecodeError:
            raise AnalysisError(f"{path}: not ASCII text, so not an interval log") from None
    return records


def broker_clock_shifts(broker_offset_us: int) -> dict[str, int]:
    """What to add to the two stages that end or start on a broker stamp, for a broker clock
    `broker_offset_us` ahead of the coordinator's (spark_analysis/stages.py says why)."""
    if not broker_offset_us:
        return {}
    return {
        stage_metric(PRODUCING): -broker_offset_us,
        stage_metric(BROADCASTING): broker_offset_us,
    }


def shifted(hist: HdrHistogram, by_us: int) -> HdrHistogram:
    """Every recorded value moved by `by_us` (clamped to the floor as the recorder clamps),
    to the histogram's precision at the value as recorded (3 digits: 0.1 % of it).

    The worker clamped values below the floor (a stage that crossed a skewed clock came out
    negative) up to it: moved up, such a value would land at a made-up `by_us`, so it is left
    out. A histogram whose every value was clamped ends empty and its metric drops out of the
    summary's latency; the exact, signed stage figures are in `stages`, from stages.csv."""
    out = new_histogram()
    for item in hist.get_recorded_iterator():
        if by_us > 0 and item.value_iterated_to <= LOWEST_US:
            continue
        value = max(LOWEST_US, item.value_iterated_to + by_us)
        out.record_value(value, item.count_added_in_this_iter_step)
    return out


def merge_histograms(
    spark: SparkSession,
    records: list[tuple[str, Interval]],
    measure_start: float,
    seconds: int,
    window_s: int,
    shifts: Mapping[str, int] | None = None,
) -> MergedHistograms:
    """Add up intervals per metric: whole run, per measure second, per OMB window; a metric
    in `shifts` has its values moved by that many µs first (broker_clock_shifts)."""
    windows = math.ceil(seconds / window_s)
    partition = functools.partial(
        _merge_partition,
        measure_start=measure_start,
        seconds=seconds,
        window_s=window_s,
        shifts=dict(shifts or {}),
    )
    slices = max(1, min(len(records), spark.sparkContext.defaultParallelism))
    digests = dict(
        spark.sparkContext.parallelize(records, slices)
        .mapPartitions(partition)
        .reduceByKey(_add)
        .map(_digest)
        .collect()
    )
    if ERROR_KEY in digests:
        raise AnalysisError(digests[ERROR_KEY])
    e2e_p99_us: list[int | None] = [None] * seconds
    window_stats: dict[str, list[LatencyStats | None]] = {
        m: [None] * windows for m in WINDOW_METRICS
    }
    totals = {}
    intervals: dict[tuple[str, int], str] = {}
    for key, digest in digests.items():
        match key:
            case ("total", metric):
                totals[metric] = digest
            case ("interval", metric, k):
                intervals[(metric, k)] = digest
            case ("second", k):
                e2e_p99_us[k] = digest
            case ("window", metric, w):
                window_stats[metric][w] = digest
    return MergedHistograms(totals, e2e_p99_us, window_stats, intervals)


def _merge_partition(
    items: Iterable[tuple[str, Interval]],
    measure_start: float,
    seconds: int,
    window_s: int,
    shifts: Mapping[str, int],
) -> Iterator[tuple[Key, _Partial]]:
    merged: dict[Key, HdrHistogram] = {}
    for source, interval in items:
        try:
            hist = decode(interval.blob)
        except Exception as exc:  # hdrh raises an open set: base64, zlib, cookie, length...
            yield (
                ERROR_KEY,
                _Partial(
                    "",
                    f"{source}: Tag={interval.tag} interval at {interval.start_s:.3f}: "
                    f"corrupt histogram blob ({type(exc).__name__}: {exc})",
                ),
            )
            continue
        if hist.get_total_count() == 0:
            continue  # adding an empty histogram resets the sum's min to 0
        if interval.tag in shifts:
            hist = shifted(hist, shifts[interval.tag])
            if hist.get_total_count() == 0:
                continue
        for key in _keys(interval, measure_start, seconds, window_s):
            merged.setdefault(key, new_histogram()).add(hist)
    for key, hist in merged.items():
        yield key, _Partial(hist.encode().decode("ascii"), "")


def _keys(interval: Interval, measure_start: float, seconds: int, window_s: int) -> list[Key]:
    keys: list[Key] = [("total", interval.tag)]
    k = second_index(interval.start_s + interval.length_s, measure_start)
    if 0 <= k < seconds:
        if interval.tag == SECOND_METRIC:
            keys.append(("second", k))
        if interval.tag in WINDOW_METRICS:
            keys.append(("window", interval.tag, k // window_s))
    if interval.tag in INTERVAL_METRICS and 0 <= k // INTERVAL_S < seconds // INTERVAL_S:
        keys.append(("interval", interval.tag, k // INTERVAL_S))
    return keys


def _add(a: _Partial, b: _Partial) -> _Partial:
    if a.error or b.error:  # only under ERROR_KEY: keep one message
        return a if a.error else b
    hist = decode(a.blob)
    hist.add(decode(b.blob))
    return _Partial(hist.encode().decode("ascii"), "")


def _digest(entry: tuple[Key, _Partial]) -> tuple[Key, Any]:
    """Reduce a merged blob to the few numbers the driver needs, on the executor."""
    key, partial = entry
    if partial.error:
        return key, partial.error
    if key[0] == "interval":
        return key, partial.blob  # written as it is
    hist = decode(partial.blob)
    match key[0]:
        case "total":
            return key, TotalDigest(
                latency_stats(hist),
                [
                    (float(v.percentile_level_iterated_to), v.value_iterated_to)
                    for v in JavaPercentileIterator(hist, SPECTRUM_TICKS)
                ],
                omb_quantiles(hist),
            )
        case "second":
            return key, hist.get_value_at_percentile(STAT_PERCENTILES[Stat.P99])
        case _:
            return key, latency_stats(hist)


def latency_stats(hist: HdrHistogram) -> LatencyStats:
    values = hist.get_percentile_to_value_dict(list(PERCENTILES.values()))
    return LatencyStats(
        count=hist.get_total_count(),
        min_us=hist.get_min_value(),
        max_us=hist.get_max_value(),
        mean_us=mean_value(hist),
        percentiles_us={name: values[p] for name, p in PERCENTILES.items()},
    )


def mean_value(hist: HdrHistogram) -> float:
    """hdrh's `get_mean_value`, read from the nonzero counts only: hdrh steps through every
    count up to the highest value in Python (about 29,000 for a second's value), which was 80 %
    of the CPU of reducing a small run's merged histograms (1.3-1.7 CPU-s for 40 of them). The
    same integer sum of each count times the middle of its value range, so the same float
    (tests/unit/test_analysis_histograms.py holds it to hdrh's)."""
    total_count = hist.get_total_count()
    if not total_count:
        return 0.0
    counts = np.ctypeslib.as_array(hist.counts)
    total = 0
    for index in map(int, np.flatnonzero(counts)):
        low = hist.get_lowest_equivalent_value(hist.get_value_from_index(index))
        size = hist.get_highest_equivalent_value(low) - low + 1
        total += int(counts[index]) * (low + (size >> 1))
    return float(total) / total_count


def omb_quantiles(hist: HdrHistogram) -> list[tuple[float, int]]:
    """(percentile, value) as OMB puts them in its TreeMap: keyed by the percentile reached."""
    points = {
        v.percentile: v.value_iterated_to for v in JavaPercentileIterator(hist, OMB_QUANTILE_TICKS)
    }
    return sorted(points.items())


class JavaPercentileIterator(PercentileIterator):
    """hdrh's percentile iterator stepped as Java's HdrHistogram steps it.

    hdrh computes the reporting ticks from a fractional power of two, Java truncates the
    exponent to a whole number of halvings; OMB's quantile maps and the usual HDR
    spectrum come from the Java one.

    It also steps from one nonzero count to the next, where hdrh steps through every count up
    to the highest value in Python (about 29,000 for values of a second): an empty count adds
    nothing to what the iterator sums and never reaches a level, so the values are the same
    (tests/unit/test_analysis_histograms.py); the spectrum and OMB's quantiles were 90 % of
    the digest's CPU once the mean was read so (`mean_value`).
    """

    current_index: int

    def __init__(self, histogram: HdrHistogram, percentile_ticks_per_half_distance: int) -> None:
        super().__init__(histogram, percentile_ticks_per_half_distance)
        self._nonzero = list(map(int, np.flatnonzero(np.ctypeslib.as_array(histogram.counts))))

    def increment_sub_bucket(self) -> None:
        index = self.current_index
        at = bisect.bisect_right(self._nonzero, index)
        # Past the last count (the iteration ends there first): one step, as hdrh's.
        index = index + 1 if at == len(self._nonzero) else self._nonzero[at]
        self.current_index = index
        self.fresh_sub_bucket = True
        self.value_at_index = self.histogram.get_value_from_index(index)
        self.value_at_next_index = self.histogram.get_value_from_index(index + 1)

    def increment_iteration_level(self) -> None:
        self.percentile_to_iterate_from = self.percentile_to_iterate_to
        gap = 100.0 - self.percentile_to_iterate_to
        if gap > 0:
            halvings = int(math.log(100.0 / gap) / math.log(2))
            ticks = self.percentile_ticks_per_half_distance * 2 ** (halvings + 1)
            self.percentile_to_iterate_to += 100.0 / ticks
