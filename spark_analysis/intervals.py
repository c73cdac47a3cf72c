"""One merged histogram per measurement interval and metric (results_contract/intervals.py).

A second Spark pass over the intervals already read: each partition adds its workers'
histograms per (metric, second of the measure phase) and ships encode() blobs; the sums are
written as a tagged interval log, one line per metric and second, in time order.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from hdrh.histogram import HdrHistogram
from pyspark.sql import SparkSession

from results_contract.hlog import HlogWriter, Interval, decode, new_histogram
from results_contract.intervals import INTERVAL_METRICS, INTERVAL_S, INTERVALS_FILE
from spark_analysis.errors import AnalysisError
from spark_analysis.histograms import shifted
from spark_analysis.inputs import second_index

Key = tuple[str, int]


def merge_intervals(
    spark: SparkSession,
    records: list[tuple[str, Interval]],
    measure_start: float,
    seconds: int,
    shifts: Mapping[str, int] | None = None,
) -> dict[Key, str]:
    """(metric, second) → merged blob, for INTERVAL_METRICS over the measure phase."""
    wanted = [r for r in records if r[1].tag in INTERVAL_METRICS]
    if not wanted:
        return {}
    partition = functools.partial(
        _partition, measure_start=measure_start, seconds=seconds, shifts=dict(shifts or {})
    )
    slices = max(1, min(len(wanted), spark.sparkContext.defaultParallelism))
    return dict(
        spark.sparkContext.parallelize(wanted, slices)
        .mapPartitions(partition)
        .reduceByKey(_add)
        .collect()
    )


def _partition(
    items: Iterable[tuple[str, Interval]],
    measure_start: float,
    seconds: int,
    shifts: Mapping[str, int],
) -> Iterator[tuple[Key, str]]:
    merged: dict[Key, HdrHistogram] = {}
    for source, interval in items:
        k = second_index(interval.start_s + interval.length_s, measure_start) // INTERVAL_S
        if not 0 <= k < seconds // INTERVAL_S:
            continue
        try:
            hist = decode(interval.blob)
        except Exception as exc:  # hdrh raises an open set; the main merge reports it first
            raise AnalysisError(f"{source}: corrupt histogram blob ({exc})") from None
        if hist.get_total_count() == 0:
            continue  # adding an empty histogram resets the sum's min to 0
        if interval.tag in shifts:
            hist = shifted(hist, shifts[interval.tag])
            if hist.get_total_count() == 0:
                continue
        merged.setdefault((interval.tag, k), new_histogram()).add(hist)
    for key, hist in merged.items():
        yield key, hist.encode().decode("ascii")


def _add(a: str, b: str) -> str:
    hist = decode(a)
    hist.add(decode(b))
    return str(hist.encode().decode("ascii"))


def write_intervals(run_dir: Path, blobs: Mapping[Key, str], measure_start: float) -> Path:
    """The merged intervals as run_dir/intervals.hlog, written whole then renamed."""
    path = run_dir / INTERVALS_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="ascii") as stream:
        writer = HlogWriter(stream, measure_start)
        for (tag, k), blob in sorted(blobs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            writer.write(tag, measure_start + k * INTERVAL_S, float(INTERVAL_S), decode(blob))
    tmp.replace(path)
    return path
