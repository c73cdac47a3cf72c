"""Deliveries per consumer, from every worker's deliveries.csv.

The headline's lost count compares two totals, so one consumer's duplicate can hide another's
loss. When every consumer should get every message (one topic, and as many deliveries per
message as consumers: Broadcast, or one subscription per consumer), each consumer's own count
is checked against the messages sent. Sequence numbers go up per producer, so with one
producer and one partition a delivery whose number is not above the last one that consumer
saw is a duplicate or a reordering; with more, order is not defined and it is not counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from results_contract.columns import DELIVERY_COLUMNS
from results_contract.summary import Deliveries
from spark_analysis.inputs import Manifest, parsers, read_csv, row_error

COLUMNS = parsers(DELIVERY_COLUMNS, "consumer", "received", "out_of_order")

_SCHEMA = StructType(
    [
        StructField("received", LongType(), False),
        StructField("out_of_order", LongType(), False),
    ]
)


def read_deliveries(files: Iterable[tuple[str, Path]]) -> list[tuple[int, int]]:
    rows = []
    first_seen: dict[str, str] = {}
    for _worker, path in files:
        for line, (consumer, received, out_of_order) in read_csv(path, COLUMNS):
            if consumer in first_seen:
                raise row_error(path, line, f"consumer {consumer!r} repeats {first_seen[consumer]}")
            first_seen[consumer] = f"{path}: line {line}"
            rows.append((received, out_of_order))
    return rows


def expected_per_consumer(manifest: Manifest, messages_sent: int) -> int | None:
    """Every message to every consumer, or None when consumers share the messages."""
    one_topic = manifest.workload.get("topics", 1) == 1
    if one_topic and manifest.expected_deliveries_per_message == manifest.consumers:
        return messages_sent
    return None


def order_is_defined(manifest: Manifest) -> bool:
    workload = manifest.workload
    return (
        workload.get("topics", 1) == 1
        and workload.get("partitionsPerTopic", 1) == 1
        and workload.get("producersPerTopic", 1) == 1
    )


def analyze_deliveries(
    spark: SparkSession, rows: list[tuple[int, int]], manifest: Manifest, messages_sent: int
) -> dict[str, Any]:
    expected = expected_per_consumer(manifest, messages_sent)
    frame = spark.createDataFrame(rows, _SCHEMA)
    row = frame.agg(
        F.count(F.lit(1)).alias("consumers"),
        F.min("received").alias("min"),
        F.max("received").alias("max"),
        F.sum("out_of_order").alias("out_of_order"),
        F.count(F.when(F.col("received") < (expected or 0), 1)).alias("short"),
        F.count(F.when(F.col("received") > (expected or 0), 1)).alias("over"),
    ).collect()[0]
    return {
        Deliveries.CONSUMERS_COUNTED: row.consumers,
        Deliveries.PER_CONSUMER_EXPECTED: expected,
        Deliveries.MIN_RECEIVED: row.min,
        Deliveries.MAX_RECEIVED: row.max,
        Deliveries.CONSUMERS_SHORT: row.short if expected is not None else None,
        Deliveries.CONSUMERS_OVER: row.over if expected is not None else None,
        Deliveries.OUT_OF_ORDER: (row.out_of_order or 0) if order_is_defined(manifest) else None,
    }
