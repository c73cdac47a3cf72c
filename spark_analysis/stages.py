"""The six-stage breakdown of end-to-end latency (seed 000, figure 6) from stages.csv.

Two views: each stage's own P99 over the recorded deliveries, and, over the recorded
deliveries in the e2e tail (e2e at or above the run's e2e P99), each stage's share of the
time: which stage the slow deliveries spent their time in. A row stands for `count`
deliveries (a broadcast read reaches many consumers with the same times), and every
figure weighs it so; by default every delivery is recorded (stageSampleFraction 1).

A broker without stage timestamps (a real Pulsar) leaves the four middle columns empty and
puts stages 1-5 in producing_us; then only `producing` (meaning 1-5) and `broadcasting`
have values.

The workers wrote the broker's stamps as the broker read them; a broker on another host puts
its clock offset into `producing` (which ends on a broker stamp) and `broadcasting` (which
starts on one). The offset the coordinator measured (manifest `broker_clock`) is taken off
here; the middle stages are differences of broker stamps and need nothing.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from results_contract.columns import STAGE_COLUMNS, STAGE_COUNT_COLUMN, stage_column
from results_contract.hlog import new_histogram
from results_contract.metrics import BROADCASTING, BROKER_STAGES, PRODUCING, STAGES
from results_contract.summary import Stages, Tail
from spark_analysis.inputs import optional_integer, parsers, read_csv, row_error
from spark_analysis.session import columns_frame, one_row

E2E_COLUMN = "e2e_us"
COLUMNS = parsers(
    STAGE_COLUMNS, E2E_COLUMN, *(stage_column(stage) for stage in STAGES), STAGE_COUNT_COLUMN
)
# Files written before `count` existed: one row per delivery.
_UNCOUNTED = {name: parse for name, parse in COLUMNS.items() if name != STAGE_COUNT_COLUMN}
_MIDDLE_POSITIONS = [list(COLUMNS).index(stage_column(stage)) for stage in BROKER_STAGES]
_PRODUCING = list(COLUMNS).index(stage_column(PRODUCING))
_BROADCASTING = list(COLUMNS).index(stage_column(BROADCASTING))
_COUNT = list(COLUMNS).index(STAGE_COUNT_COLUMN)

_SCHEMA = StructType(
    [StructField(name, LongType(), parse is optional_integer) for name, parse in COLUMNS.items()]
)


def _counted(path: Path) -> bool:
    """Whether the file's header has `count` (read_csv reports a missing or bad file)."""
    try:
        with open(path, encoding="utf-8", newline="") as stream:
            return STAGE_COUNT_COLUMN in next(csv.reader(stream), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return True


def read_stages(files: Iterable[tuple[str, Path]], broker_offset_us: int = 0) -> list[tuple]:
    """Parse every stages.csv into (e2e_us, *stage_us, count) rows, with the broker's clock
    offset (its clock minus the coordinator's) taken off the two stages that cross hosts.

    Stages may be negative: they are differences of clocks on different hosts.
    """
    rows = []
    for _worker, path in files:
        counted = _counted(path)
        for line, parsed in read_csv(path, COLUMNS if counted else _UNCOUNTED):
            values = parsed if counted else (*parsed, 1)
            empty = [values[i] is None for i in _MIDDLE_POSITIONS]
            if any(empty) and not all(empty):
                raise row_error(path, line, "the middle stage columns must be all empty or all set")
            if broker_offset_us:
                corrected = list(values)
                corrected[_PRODUCING] -= broker_offset_us
                corrected[_BROADCASTING] += broker_offset_us
                values = tuple(corrected)
            rows.append(values)
    return rows


def analyze_stages(
    spark: SparkSession, rows: list[tuple], sample_fraction: float, e2e_p99_us: int | None
) -> dict[str, Any]:
    """The summary's `stages` object; the tail is the deliveries at or above `e2e_p99_us`."""
    broker_timestamps = bool(rows) and all(row[_MIDDLE_POSITIONS[0]] is not None for row in rows)
    result: dict[str, Any] = {
        Stages.SAMPLE_FRACTION: sample_fraction,
        Stages.SAMPLES: sum(row[_COUNT] for row in rows),
        Stages.BROKER_TIMESTAMPS: broker_timestamps,
        Stages.P99_MS: dict.fromkeys(STAGES),
        Stages.TAIL: None,
    }
    if not rows:
        return result
    if broker_timestamps:
        present: dict[str, Column] = {stage: F.col(stage_column(stage)) for stage in STAGES}
    else:
        # Rows from a broker that stamps, mixed with rows that do not, fold the same way.
        through_broker_out = F.col(stage_column(PRODUCING))
        for stage in BROKER_STAGES:
            through_broker_out = through_broker_out + F.coalesce(
                F.col(stage_column(stage)), F.lit(0)
            )
        present = {
            PRODUCING: through_broker_out,
            BROADCASTING: F.col(stage_column(BROADCASTING)),
        }
    if e2e_p99_us is None:
        in_tail = F.lit(False)
    else:
        # "At or above the P99" in HDR terms: in the P99 value's bucket or above it.
        in_tail = F.col(E2E_COLUMN) >= new_histogram().get_lowest_equivalent_value(e2e_p99_us)
    count = F.col(STAGE_COUNT_COLUMN)
    by_column = dict(zip(COLUMNS, map(list, zip(*rows, strict=True)), strict=True))
    found = one_row(
        columns_frame(spark, _SCHEMA, by_column).agg(
            *[
                F.percentile(col, 0.99, count).alias(f"p99_{stage}")
                for stage, col in present.items()
            ],
            F.sum(F.when(in_tail, count)).alias("tail_count"),
            *[
                F.sum(F.when(in_tail, col * count)).alias(f"tail_{stage}")
                for stage, col in present.items()
            ],
        )
    )
    result[Stages.P99_MS].update({stage: found[f"p99_{stage}"] / 1000.0 for stage in present})
    if e2e_p99_us is None:
        return result
    total = sum(found[f"tail_{stage}"] or 0 for stage in present)
    share = dict.fromkeys(STAGES)
    if total:
        share.update({stage: found[f"tail_{stage}"] / total for stage in present})
    result[Stages.TAIL] = {
        Tail.THRESHOLD_MS: e2e_p99_us / 1000.0,
        Tail.COUNT: found.tail_count or 0,
        Tail.SHARE: share,
    }
    return result
