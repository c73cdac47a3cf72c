"""The six-stage breakdown of end-to-end latency (seed 000, figure 6) from stages.csv.

Two views: each stage's own P99 over the sampled deliveries, and, over the sampled
deliveries in the e2e tail (e2e at or above the run's e2e P99), each stage's share of the
time: which stage the slow deliveries spent their time in.

A broker without stage timestamps (a real Pulsar) leaves the four middle columns empty and
puts stages 1-5 in producing_us; then only `producing` (meaning 1-5) and `broadcasting`
have values.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from harness.hlog import STAGES, new_histogram
from spark_analysis.inputs import integer, optional_integer, read_csv, row_error

MIDDLE = STAGES[1:5]  # the stages only a broker that stamps its entries can tell apart
COLUMNS = {"e2e_us": integer} | {
    f"{stage}_us": optional_integer if stage in MIDDLE else integer for stage in STAGES
}
_MIDDLE_POSITIONS = [list(COLUMNS).index(f"{stage}_us") for stage in MIDDLE]

_SCHEMA = StructType(
    [StructField(name, LongType(), parse is optional_integer) for name, parse in COLUMNS.items()]
)


def read_stages(files: Iterable[tuple[str, Path]]) -> list[tuple]:
    """Parse every stages.csv into (e2e_us, *stage_us) rows.

    Stages may be negative: they are differences of clocks on different hosts.
    """
    rows = []
    for _worker, path in files:
        for line, values in read_csv(path, COLUMNS):
            empty = [values[i] is None for i in _MIDDLE_POSITIONS]
            if any(empty) and not all(empty):
                raise row_error(path, line, "the middle stage columns must be all empty or all set")
            rows.append(values)
    return rows


def analyze_stages(
    spark: SparkSession, rows: list[tuple], sample_fraction: float, e2e_p99_us: int | None
) -> dict[str, Any]:
    """The summary's `stages` object; the tail is the deliveries at or above `e2e_p99_us`."""
    broker_timestamps = bool(rows) and all(row[_MIDDLE_POSITIONS[0]] is not None for row in rows)
    result: dict[str, Any] = {
        "sample_fraction": sample_fraction,
        "samples": len(rows),
        "broker_timestamps": broker_timestamps,
        "p99_ms": dict.fromkeys(STAGES),
        "tail": None,
    }
    if not rows:
        return result
    if broker_timestamps:
        present: dict[str, Column] = {stage: F.col(f"{stage}_us") for stage in STAGES}
    else:
        # Rows from a broker that stamps, mixed with rows that do not, fold the same way.
        through_broker_out = F.col("producing_us")
        for stage in MIDDLE:
            through_broker_out = through_broker_out + F.coalesce(F.col(f"{stage}_us"), F.lit(0))
        present = {"producing": through_broker_out, "broadcasting": F.col("broadcasting_us")}
    if e2e_p99_us is None:
        in_tail = F.lit(False)
    else:
        # "At or above the P99" in HDR terms: in the P99 value's bucket or above it.
        in_tail = F.col("e2e_us") >= new_histogram().get_lowest_equivalent_value(e2e_p99_us)
    found = (
        spark.createDataFrame(rows, _SCHEMA)
        .agg(
            *[F.percentile(col, 0.99).alias(f"p99_{stage}") for stage, col in present.items()],
            F.count(F.when(in_tail, 1)).alias("tail_count"),
            *[F.sum(F.when(in_tail, col)).alias(f"tail_{stage}") for stage, col in present.items()],
        )
        .first()
    )
    result["p99_ms"].update({stage: found[f"p99_{stage}"] / 1000.0 for stage in present})
    if e2e_p99_us is None:
        return result
    total = sum(found[f"tail_{stage}"] or 0 for stage in present)
    share = dict.fromkeys(STAGES)
    if total:
        share.update({stage: found[f"tail_{stage}"] / total for stage in present})
    result["tail"] = {
        "threshold_ms": e2e_p99_us / 1000.0,
        "count": found.tail_count,
        "share": share,
    }
    return result
