"""The ids that version the JSON documents the analysis writes and the reports read.

A reader refuses a document whose `schema` is not the one it knows, so a format change
is a new id here and never a silent misreading.
"""

from __future__ import annotations

from types import MappingProxyType

SUMMARY_SCHEMA = "fanout-bench/summary/1"
SWEEP_SCHEMA = "fanout-bench/sweep/1"

# summary.json's `units`: the unit of each kind of quantity (docs/results.md, "Units").
# Connection times are in s ("connection"); the `connect` latency metric is in ms like every
# latency ("latency"). No key is named after a metric: "connect": "s" read as the unit of
# latency.connect, which it is not.
SUMMARY_UNITS = MappingProxyType(
    {
        "latency": "ms",
        "connection": "s",
        "rate": "msg/s",
        "time": "s",
        "memory": "MiB",
        "cpu_per_delivery": "us",
    }
)
