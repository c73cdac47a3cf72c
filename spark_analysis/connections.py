"""Connection time (seed 000, table 1 and figure 5) from every worker's connections.csv.

The run's connection time is first start -> last success; the per-consumer times show the
long tail. Every per-consumer duration is in the CSV, so its percentiles are exact (Spark's
`percentile`, linear interpolation), not histogram approximations.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from results_contract.columns import CONNECTION_COLUMNS
from results_contract.summary import PER_CONSUMER_QUANTILES, Connection, Distribution, PerConsumer
from spark_analysis.inputs import parsers, read_columns, read_csv, row_error
from spark_analysis.session import columns_frame, one_row

COLUMNS = parsers(CONNECTION_COLUMNS, "consumer", "start_us", "end_us", "ok", "error")
MAX_BINS = 50
NO_ERROR_TEXT = "(no error text)"

_SCHEMA = StructType(
    [
        StructField("start_us", LongType(), False),
        StructField("end_us", LongType(), True),
        StructField("error", StringType(), True),
    ]
)


@dataclass(frozen=True, slots=True)
class ConnectionColumns:
    """Every consumer's subscribe, by column: a success keeps its end_us and no error, a
    failure its error and no end_us, so that a failed consumer's end never counts as "last
    success"."""

    start_us: list[int]
    end_us: list[int | None]
    error: list[str | None]


def read_connections(files: Iterable[tuple[str, Path]]) -> ConnectionColumns:
    """Parse every connections.csv, a column at a time (a million rows at a million
    consumers); any bad row sends the files through `_check_rows`, which names it."""
    files = list(files)
    start: list[int] = []
    end: list[int | None] = []
    error: list[str | None] = []
    seen: set[str] = set()
    for _worker, path in files:
        columns = read_columns(path, COLUMNS)
        starts, ends, oks = columns["start_us"], columns["end_us"], columns["ok"]
        counted = len(seen)
        seen.update(columns["consumer"])
        if len(seen) != counted + len(starts) or any(
            ok and (e is None or e < s) for s, e, ok in zip(starts, ends, oks, strict=True)
        ):
            _check_rows(files)
        start += starts
        end += [e if ok else None for e, ok in zip(ends, oks, strict=True)]
        error += [
            None if ok else (text.strip() or NO_ERROR_TEXT)
            for text, ok in zip(columns["error"], oks, strict=True)
        ]
    return ConnectionColumns(start, end, error)


def _check_rows(files: list[tuple[str, Path]]) -> None:
    """Row by row, for the message: the first repeated consumer or inconsistent row raises."""
    first_seen: dict[str, str] = {}
    for _worker, path in files:
        for line, (consumer, start_us, end_us, ok, _error) in read_csv(path, COLUMNS):
            if consumer in first_seen:
                raise row_error(path, line, f"consumer {consumer!r} repeats {first_seen[consumer]}")
            first_seen[consumer] = f"{path}: line {line}"
            if ok and end_us is None:
                raise row_error(path, line, "ok is 1 but end_us is empty")
            if ok and end_us < start_us:
                raise row_error(path, line, f"end_us {end_us} is before start_us {start_us}")
    raise AssertionError("connections.csv: a column check failed that no row fails")


def analyze_connections(spark: SparkSession, rows: ConnectionColumns) -> dict[str, Any]:
    """The summary's `connection` object (times in s, the two instants in epoch µs)."""
    frame = columns_frame(
        spark, _SCHEMA, {"start_us": rows.start_us, "end_us": rows.end_us, "error": rows.error}
    )
    duration_us = F.col("end_us") - F.col("start_us")  # null for failures: aggregates skip it
    totals = one_row(
        frame.agg(
            F.count("*").alias("consumers"),
            F.count("end_us").alias("ok"),
            F.min("start_us").alias("first_start_us"),
            F.max("end_us").alias("last_end_us"),
            F.min(duration_us).alias("min"),
            F.max(duration_us).alias("max"),
            F.avg(duration_us).alias("mean"),
            F.percentile(duration_us, list(PER_CONSUMER_QUANTILES.values())).alias("p"),
        )
    )
    width_us = bin_width_us(totals["max"] or 0)
    # One pass groups both: failures by error (their bin is null), successes by bin.
    groups = frame.groupBy("error", F.floor(duration_us / width_us).alias("bin")).count().collect()
    result: dict[str, Any] = {
        Connection.CONSUMERS: totals.consumers,
        Connection.OK: totals.ok,
        Connection.FAILED: totals.consumers - totals.ok,
        Connection.ERRORS: dict(
            sorted((g.error, g["count"]) for g in groups if g.error is not None)
        ),
        Connection.TOTAL_S: None,
        Connection.FIRST_START_US: totals.first_start_us,
        Connection.LAST_END_US: totals.last_end_us,
        Connection.PER_CONSUMER: None,
        Connection.DISTRIBUTION: None,
    }
    if totals.ok == 0:
        return result
    result[Connection.TOTAL_S] = (totals.last_end_us - totals.first_start_us) / 1e6
    percentiles = zip(PER_CONSUMER_QUANTILES, totals.p, strict=True)
    result[Connection.PER_CONSUMER] = {
        PerConsumer.MIN: totals["min"] / 1e6,
        **{name: value / 1e6 for name, value in percentiles},
        PerConsumer.MAX: totals["max"] / 1e6,
        PerConsumer.MEAN: totals.mean / 1e6,
    }
    counts = {g.bin: g["count"] for g in groups if g.error is None}
    bins = range(totals["max"] // width_us + 1)
    result[Connection.DISTRIBUTION] = {
        Distribution.BIN_WIDTH_S: width_us / 1e6,
        Distribution.BINS_START_S: [b * width_us / 1e6 for b in bins],
        Distribution.COUNTS: [counts.get(b, 0) for b in bins],
    }
    return result


def bin_width_us(max_us: int) -> int:
    """The smallest 1-2-5 width from 1 ms up that puts every duration in MAX_BINS bins."""
    width = 1000
    while True:
        for step in (1, 2, 5):
            if max_us // (width * step) < MAX_BINS:
                return width * step
        width *= 10
