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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from results_contract.columns import DELIVERY_COLUMNS
from results_contract.summary import Deliveries
from spark_analysis.inputs import Manifest, parsers, read_columns, read_csv, row_error
from spark_analysis.session import columns_frame

COLUMNS = parsers(DELIVERY_COLUMNS, "consumer", "received", "out_of_order")

_SCHEMA = StructType(
    [
        StructField("received", LongType(), False),
        StructField("out_of_order", LongType(), False),
    ]
)


@dataclass(frozen=True, slots=True)
class DeliveryColumns:
    """Every counted consumer's deliveries and out-of-order ones, by column."""

    received: list[int]
    out_of_order: list[int]


def read_deliveries(files: Iterable[tuple[str, Path]]) -> DeliveryColumns:
    """Every deliveries.csv, a column at a time (a million rows at a million consumers); a
    consumer named twice sends the files through `_check_rows`, which names the line."""
    files = list(files)
    received: list[int] = []
    out_of_order: list[int] = []
    seen: set[str] = set()
    for _worker, path in files:
        columns = read_columns(path, COLUMNS)
        counted = len(seen)
        seen.update(columns["consumer"])
        if len(seen) != counted + len(columns["consumer"]):
            _check_rows(files)
        received += columns["received"]
        out_of_order += columns["out_of_order"]
    return DeliveryColumns(received, out_of_order)


def _check_rows(files: list[tuple[str, Path]]) -> None:
    """Row by row, for the message: the first consumer named twice raises."""
    first_seen: dict[str, str] = {}
    for _worker, path in files:
        for line, (consumer, _received, _out_of_order) in read_csv(path, COLUMNS):
            if consumer in first_seen:
                raise row_error(path, line, f"consumer {consumer!r} repeats {first_seen[consumer]}")
            first_seen[consumer] = f"{path}: line {line}"
    raise AssertionError("deliveries.csv: a consumer repeats, yet no row repeats one")


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
    spark: SparkSession, rows: DeliveryColumns, manifest: Manifest, messages_sent: int
) -> dict[str, Any]:
    expected = expected_per_consumer(manifest, messages_sent)
    frame = columns_frame(
        spark, _SCHEMA, {"received": rows.received, "out_of_order": rows.out_of_order}
    )
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
