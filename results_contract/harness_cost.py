"""Harness cost: what the load generator and the bundled broker spend per delivery.

summary.json's `harness_cost` object (docs/results.md, "Harness cost") and the two keys the
bundled broker adds to its periodic `broker/stats-<n>.json` for it. The broker cannot import
this package (docs/architecture.md), so it spells the stats keys itself; the broker-stats
test checks they match.
"""

from __future__ import annotations

# broker/stats-<n>.json: the broker process's cumulative CPU time (user + system, seconds,
# since the process started) and the messages it dispatched to consumers (all topics, since
# it started).
BROKER_CPU_SECONDS = "cpu_seconds"
BROKER_DELIVERIES = "deliveries"
# ... and, since the previous snapshot, how late its event loop ran ready work (the wait of an
# ACK or FLOW read from a socket): {"p50_ms", "p99_ms", "max_ms"}.
BROKER_LOOP_LAG = "loop_lag"

# summary.json: the `harness_cost` object and its fields.
HARNESS_COST = "harness_cost"
CLIENT_CPU_US_PER_DELIVERY = "client_cpu_us_per_delivery"
CLIENT_CPU_S = "client_cpu_s"  # all workers' CPU over the measure phase
CLIENT_DELIVERIES = "client_deliveries"  # deliveries the workers read in it
BROKER_CPU_US_PER_DELIVERY = "broker_cpu_us_per_delivery"
BROKER_CPU_S = "broker_cpu_s"  # the broker's CPU over its stats window in the measure phase
BROKER_DELIVERIES_DISPATCHED = "broker_deliveries"  # deliveries it dispatched in that window
BROKER_WINDOW_S = "broker_window_s"  # that window: first to last broker stats in the phase
BROKER_LOOP_LAG_P99_MS = "broker_loop_lag_p99_ms"  # the largest per-snapshot P99 in that window
BROKER_LOOP_LAG_MAX_MS = "broker_loop_lag_max_ms"  # the longest stall in that window
# How fast the machine ran in the measure phase (harness/machine_speed.py): the median CPU µs of
# the probe's fixed unit of work, and the unit's version. The gate adjusts CPU and latency for it.
MACHINE_UNIT_US = "machine_unit_us"
MACHINE_PROBE_VERSION = "machine_probe_version"

HARNESS_COST_FIELDS = (
    CLIENT_CPU_US_PER_DELIVERY,
    CLIENT_CPU_S,
    CLIENT_DELIVERIES,
    BROKER_CPU_US_PER_DELIVERY,
    BROKER_CPU_S,
    BROKER_DELIVERIES_DISPATCHED,
    BROKER_WINDOW_S,
    BROKER_LOOP_LAG_P99_MS,
    BROKER_LOOP_LAG_MAX_MS,
    MACHINE_UNIT_US,
    MACHINE_PROBE_VERSION,
)
