"""The columns of each raw CSV file, in header order, with what each column holds.

The harness writes these headers and rows; every reader picks the columns it needs from
here (by name: readers accept extra columns and any order). What a column *means* is in
docs/results.md; `Kind` says what text a reader may find in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType

from results_contract.metrics import BROKER_STAGES, STAGES


class Kind(Enum):
    """What one CSV field holds, as text."""

    TEXT = "any text"
    INTEGER = "an integer"
    NATURAL = "an integer >= 0"
    OPTIONAL_INTEGER = "empty, or an integer"
    OPTIONAL_NATURAL = "empty, or an integer >= 0"
    NUMBER = "a finite decimal number"
    FLAG = "0 or 1"


Columns = Mapping[str, Kind]
"""Column name -> kind, in header order."""


def _columns(*pairs: tuple[str, Kind]) -> Columns:
    return MappingProxyType(dict(pairs))


def header(columns: Columns) -> tuple[str, ...]:
    """The header line's fields."""
    return tuple(columns)


def stage_column(stage: str) -> str:
    """`producing` -> `producing_us`, the stages.csv column of a stage (metrics.STAGES)."""
    return f"{stage}_us"


# raw/<worker-id>/connections.csv: one row per consumer.
CONNECTION_COLUMNS = _columns(
    ("consumer", Kind.TEXT),
    ("connection", Kind.NATURAL),
    ("start_us", Kind.NATURAL),
    ("end_us", Kind.OPTIONAL_NATURAL),  # empty when the subscribe failed
    ("ok", Kind.FLAG),
    ("error", Kind.TEXT),
)

# raw/<worker-id>/timeline.csv: one row per second.
PHASES = ("connect", "warmup", "measure", "drain")  # the values of `phase`
TIMELINE_COLUMNS = _columns(
    ("ts", Kind.INTEGER),
    ("phase", Kind.TEXT),
    ("sent", Kind.NATURAL),
    ("received", Kind.NATURAL),
    ("errors", Kind.NATURAL),
    ("connected", Kind.NATURAL),
    ("cpu", Kind.NUMBER),
    ("rss", Kind.NATURAL),
    ("loop_lag_ms", Kind.NUMBER),
)

# raw/<worker-id>/stages.csv: one row per read of an entry, `count` the sampled deliveries
# it stands for (the consumers a broadcast read reached: the same stamps, read and e2e time).
# The broker's own stages are empty when the broker does not stamp its entries; stages may
# be negative (clock offsets). Files written before `count` existed have one row per
# delivery, and readers take a missing `count` as 1.
STAGE_COUNT_COLUMN = "count"
STAGE_COLUMNS = _columns(
    ("ts_us", Kind.INTEGER),
    ("e2e_us", Kind.INTEGER),
    *(
        (stage_column(s), Kind.OPTIONAL_INTEGER if s in BROKER_STAGES else Kind.INTEGER)
        for s in STAGES
    ),
    (STAGE_COUNT_COLUMN, Kind.NATURAL),
)

# raw/<worker-id>/deliveries.csv: one row per consumer that subscribed, written at the end.
DELIVERY_COLUMNS = _columns(
    ("consumer", Kind.TEXT),
    ("received", Kind.NATURAL),
    ("out_of_order", Kind.NATURAL),
)

# raw/<worker-id>/bursts.csv: one row per second in which the worker read deliveries over a
# window of its own (harness/burst_meter.py): from its first to its last read of that second,
# the window's length, the CPU the worker spent inside it (its process CPU time, ms) and the
# time its thread waited for a core while runnable (run-queue time, ms).
BURST_COLUMNS = _columns(
    ("ts", Kind.INTEGER),
    ("window_ms", Kind.NUMBER),
    ("cpu_ms", Kind.NUMBER),
    ("wait_ms", Kind.NUMBER),
)

# broker/process.csv: the broker process the harness started, once a second, read from
# /proc/<pid>/stat by the coordinator (any broker program, so any driver's broker has a CPU
# figure): cumulative CPU seconds (user + system) and resident bytes.
BROKER_PROCESS_COLUMNS = _columns(
    ("ts", Kind.NUMBER),
    ("cpu_seconds", Kind.NUMBER),
    ("rss", Kind.NATURAL),
)

# machine-speed.csv: how fast this machine ran (harness/machine_speed.py), fifty rows a
# second from a process of the coordinator's: the CPU microseconds one fixed unit of Python
# work took, and the version of that unit (a changed unit is a different ruler).
MACHINE_SPEED_COLUMNS = _columns(
    ("ts", Kind.NUMBER),
    ("unit_us", Kind.NUMBER),
    ("version", Kind.NATURAL),
)
