"""Connection time (seed 000, table 1 and figure 5) from every worker's connections.csv.

The run's connection time is first start -> last success; the per-consumer times show the
long tail. Every per-consumer duration is in the CSV, so its percentiles are exact (Spark's
`percentile`, linear interpolation), not histogram approximations.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from results_contract.columns import CONNECTION_COLUMNS
from results_contract.summary import PER_CONSUMER_QUANTILES, Connection, Distribution, PerConsumer
from spark_analysis.inputs import parsers, read_csv, row_error
from spark_analysis.session import one_row

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


# start_us, end_us (None for a failure), error (None for a success).
ConnectionRow = tuple[int, int | None, str | None]


def read_connections(files: Iterable[tuple[str, Path]]) -> list[ConnectionRow]:
    """Parse every connections.csv into (start_us, end_us, error) rows.

    A success keeps its end_us and no error, a failure its error and no end_us, so that a
    failed consumer's end never counts as "last success".
    """
    rows: list[ConnectionRow] = []
    first_seen: dict[str, str] = {}
    for _worker, path in files:
        for line, (consumer, start_us, end_us, ok, error) in read_csv(path, COLUMNS):
            if consumer in first_seen:
                raise row_error(path, line, f"consumer {consumer!r} repeats {first_seen[consumer]}")
            first_seen[consumer] = f"{path}: line {line}"
            if ok and end_us is None:
                raise row_error(path, line, "ok is 1 but end_us is empty")
            if ok and end_us < start_us:
                raise row_error(path, line, f"end_us {end_us} is before start_us {start_us}")
            if ok:
                rows.append((start_us, end_us, None))
            else:
                rows.append((start_us, None, error.strip() or NO_ERROR_TEXT))
    return rows


def analyze_connections(spark: SparkSession, rows: list[ConnectionRow]) -> dict[str, Any]:
    """The summary's `connection` object (times in s, the two instants in epoch µs)."""
    frame = spark.createDataFrame(rows, _SCHEMA)
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
