"""Per-second series from the workers' timelines, and the broker's own stats.

Series are aligned on the measure phase: slot k is the k-th second ending after
measure_start (see inputs.second_index), the same slots the interval histograms use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from results_contract.client_bound import CPU_LIMIT_PERCENT
from results_contract.columns import TIMELINE_COLUMNS
from results_contract.paths import BROKER_STATS_PATTERN, broker_dir
from results_contract.summary import Series
from spark_analysis.client_bound import WorkerLoad
from spark_analysis.inputs import (
    Manifest,
    load_json,
    number,
    parsers,
    read_csv,
    require,
    row_error,
    second_index,
)

MIB = 1024 * 1024

COLUMNS = parsers(TIMELINE_COLUMNS, "ts", "sent", "received", "errors", "cpu", "rss", "loop_lag_ms")

_SCHEMA = StructType(
    [StructField("worker", StringType(), False), StructField("k", LongType(), False)]
    + [
        StructField(name, DoubleType() if parse is number else LongType(), False)
        for name, parse in COLUMNS.items()
    ]
)


@dataclass(frozen=True, slots=True)
class Timeline:
    series: dict[str, list[Any]]
    messages_sent: int  # whole run: warmup and measure
    deliveries_received: int  # whole run, drain included
    client_errors: int  # whole run: failed or timed-out sends, deliveries that could not be read
    worker_loads: list[WorkerLoad]  # measure phase only
    # Measure phase, all workers: CPU seconds (each row's `cpu` % over its second; None
    # without rows) and the deliveries read; the harness cost's client figure.
    measure_cpu_s: float | None = None
    measure_received: int = 0


def read_timelines(files: Iterable[tuple[str, Path]], manifest: Manifest) -> list[tuple]:
    """Parse every worker's timeline.csv into rows (worker, k, *COLUMNS)."""
    rows = []
    for worker, path in files:
        seen: dict[int, int] = {}
        for line, values in read_csv(path, COLUMNS):
            ts = values[0]
            if ts in seen:
                raise row_error(path, line, f"ts {ts} repeats line {seen[ts]}")
            seen[ts] = line
            rows.append((worker, second_index(ts, manifest.measure_start), *values))
    return rows


def analyze_timeline(spark: SparkSession, rows: list[tuple], manifest: Manifest) -> Timeline:
    """Sum over workers per second; backlog from cumulative counts since the run began."""
    seconds = manifest.measure_seconds
    frame = spark.createDataFrame(rows, _SCHEMA)
    per_second = (
        frame.groupBy("ts", "k")
        .agg(
            F.sum("sent").alias("sent"),
            F.sum("received").alias("received"),
            F.sum("errors").alias("errors"),
            F.max("cpu").alias("cpu"),
            F.sum("rss").alias("rss"),
            F.max("loop_lag_ms").alias("loop_lag_ms"),
        )
        .orderBy("ts")
        .collect()
    )
    loads = (
        frame.where((F.col("k") >= 0) & (F.col("k") < seconds))
        .groupBy("worker")
        .agg(
            F.count(F.when(F.col("cpu") > CPU_LIMIT_PERCENT, 1)).alias("hot_seconds"),
            F.max("cpu").alias("max_cpu"),
            F.max("loop_lag_ms").alias("max_loop_lag_ms"),
        )
        .orderBy("worker")
        .collect()
    )
    measured = (
        frame.where((F.col("k") >= 0) & (F.col("k") < seconds))
        .agg(F.sum("cpu").alias("cpu"), F.sum("received").alias("received"))
        .collect()[0]
    )
    series: dict[str, list[Any]] = {
        Series.T_S: list(range(seconds)),
        Series.PUBLISH_RATE: [0] * seconds,
        Series.CONSUME_RATE: [0] * seconds,
        Series.BACKLOG: [0] * seconds,
        Series.ERROR_RATE: [0] * seconds,
        Series.CLIENT_CPU: [None] * seconds,
        Series.CLIENT_RSS_MIB: [None] * seconds,
        Series.LOOP_LAG_MS: [None] * seconds,
    }
    sent = received = errors = backlog_before = 0
    backlog_at: dict[int, int] = {}
    for row in per_second:
        sent += row.sent
        received += row.received
        errors += row.errors
        # What was sent and not yet read, over all consumers; OMB clamps at 0 likewise.
        backlog = max(0, sent * manifest.expected_deliveries_per_message - received)
        if row.k < 0:
            backlog_before = backlog
        elif row.k < seconds:
            k = row.k
            backlog_at[k] = backlog
            series[Series.PUBLISH_RATE][k] = row.sent
            series[Series.CONSUME_RATE][k] = row.received
            series[Series.ERROR_RATE][k] = row.errors
            series[Series.CLIENT_CPU][k] = row.cpu
            series[Series.CLIENT_RSS_MIB][k] = row.rss / MIB
            series[Series.LOOP_LAG_MS][k] = row.loop_lag_ms
    level = backlog_before
    for k in range(seconds):  # a second no worker reported keeps the backlog it had
        level = backlog_at.get(k, level)
        series[Series.BACKLOG][k] = level
    return Timeline(
        series=series,
        messages_sent=sent,
        deliveries_received=received,
        client_errors=errors,
        worker_loads=[
            WorkerLoad(r.worker, r.hot_seconds, r.max_cpu, r.max_loop_lag_ms) for r in loads
        ],
        measure_cpu_s=None if measured.cpu is None else measured.cpu / 100.0,
        measure_received=measured.received or 0,
    )


def broker_series(run_dir: Path, manifest: Manifest) -> dict[str, list[float]]:
    """The bundled broker's CPU and memory during the measure phase (none for other brokers)."""
    points = []
    for path in sorted(broker_dir(run_dir).glob(BROKER_STATS_PATTERN)):
        stats = load_json(path)
        ts = require(stats, "ts", (int, float), path)
        cpu = require(stats, "cpu", (int, float), path)
        rss = require(stats, "rss", int, path)
        if manifest.measure_start <= ts <= manifest.measure_end:
            points.append((ts, cpu, rss))
    points.sort()
    return {
        Series.BROKER_T_S: [round(ts - manifest.measure_start, 3) for ts, _, _ in points],
        Series.BROKER_CPU: [float(cpu) for _, cpu, _ in points],
        Series.BROKER_RSS_MIB: [rss / MIB for _, _, rss in points],
    }
