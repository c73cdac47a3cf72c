"""Harness cost: CPU per delivery of the load generator and of the bundled broker.

The client figure is all workers' CPU over the measure phase (the timeline's `cpu`, percent
of one core over each one-second row, summed: CPU seconds) divided by the deliveries they
read in it. The broker figure comes from the broker's own cumulative counters
(`cpu_seconds`, `deliveries` in broker/stats-<n>.json): their differences between the first
and the last snapshot taken inside the measure phase, an exact quotient over that window. A broker
that keeps no such counters (a peer: pulsar-lite, nats-server, ...) still has its process's
CPU, sampled by the harness that started it (broker/process.csv): over the same kind of
window, divided by the deliveries the workers read in the measure phase, scaled to the
window's share of it. Either is null when it cannot be computed (docs/results.md, "Harness
cost").
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from results_contract.columns import BROKER_PROCESS_COLUMNS, MACHINE_SPEED_COLUMNS
from results_contract.harness_cost import (
    BROKER_CPU_S,
    BROKER_CPU_SECONDS,
    BROKER_CPU_US_PER_DELIVERY,
    BROKER_DELIVERIES,
    BROKER_DELIVERIES_DISPATCHED,
    BROKER_LOOP_LAG,
    BROKER_LOOP_LAG_MAX_MS,
    BROKER_LOOP_LAG_P99_MS,
    BROKER_WINDOW_S,
    CLIENT_CPU_S,
    CLIENT_CPU_US_PER_DELIVERY,
    CLIENT_DELIVERIES,
    MACHINE_PROBE_VERSION,
    MACHINE_UNIT_US,
)
from results_contract.paths import (
    BROKER_PROCESS_FILE,
    BROKER_STATS_PATTERN,
    MACHINE_SPEED_FILE,
    broker_dir,
)
from spark_analysis.inputs import load_json, parsers, read_csv, require

BrokerCounters = tuple[float, float, int]  # (ts, cumulative CPU seconds, deliveries)
LoopLagPoint = tuple[float, float, float]  # (ts, P99 ms, max ms) since the previous snapshot


def per_delivery_us(cpu_s: float | None, deliveries: int | None) -> float | None:
    """CPU µs per delivery, rounded to 0.01 µs; null without CPU or without deliveries."""
    if cpu_s is None or not deliveries or deliveries <= 0:
        return None
    return round(cpu_s * 1e6 / deliveries, 2)


def read_broker_counters(run_dir: Path) -> list[BrokerCounters]:
    """The snapshots that carry the cumulative counters, in time order; stats written
    before the counters existed (or by no bundled broker at all) give none."""
    points = []
    for path in sorted(broker_dir(run_dir).glob(BROKER_STATS_PATTERN)):
        stats = load_json(path)
        ts = require(stats, "ts", (int, float), path)
        if BROKER_CPU_SECONDS not in stats or BROKER_DELIVERIES not in stats:
            continue
        cpu_s = require(stats, BROKER_CPU_SECONDS, (int, float), path)
        deliveries = require(stats, BROKER_DELIVERIES, int, path)
        points.append((float(ts), float(cpu_s), deliveries))
    points.sort()
    return points


def read_broker_loop_lag(run_dir: Path) -> list[LoopLagPoint]:
    """Each snapshot's loop lag, in time order; stats without it give none."""
    points = []
    for path in sorted(broker_dir(run_dir).glob(BROKER_STATS_PATTERN)):
        stats = load_json(path)
        lag = stats.get(BROKER_LOOP_LAG)
        if lag is None:
            continue
        ts = require(stats, "ts", (int, float), path)
        p99 = require(lag, "p99_ms", (int, float), path)
        longest = require(lag, "max_ms", (int, float), path)
        points.append((float(ts), float(p99), float(longest)))
    points.sort()
    return points


def broker_loop_lag(
    points: list[LoopLagPoint], measure_start: float, measure_end: float
) -> dict[str, Any]:
    """The loop lag over the broker-cost window: the snapshots after the first one inside the
    measure phase (the first one's interval began before it), up to the last one inside."""
    inside = [p for p in points if measure_start <= p[0] <= measure_end][1:]
    if not inside:
        return {BROKER_LOOP_LAG_P99_MS: None, BROKER_LOOP_LAG_MAX_MS: None}
    return {
        BROKER_LOOP_LAG_P99_MS: max(p[1] for p in inside),
        BROKER_LOOP_LAG_MAX_MS: max(p[2] for p in inside),
    }


def broker_cost(
    points: list[BrokerCounters], measure_start: float, measure_end: float
) -> dict[str, Any]:
    """CPU and deliveries between the first and last snapshot inside the measure phase."""
    inside = [p for p in points if measure_start <= p[0] <= measure_end]
    if len(inside) < 2:
        return {
            BROKER_CPU_US_PER_DELIVERY: None,
            BROKER_CPU_S: None,
            BROKER_DELIVERIES_DISPATCHED: None,
            BROKER_WINDOW_S: None,
        }
    (ts0, cpu0, sent0), (ts1, cpu1, sent1) = inside[0], inside[-1]
    cpu_s = round(cpu1 - cpu0, 6)
    deliveries = sent1 - sent0
    return {
        BROKER_CPU_US_PER_DELIVERY: per_delivery_us(cpu_s, deliveries),
        BROKER_CPU_S: cpu_s,
        BROKER_DELIVERIES_DISPATCHED: deliveries,
        BROKER_WINDOW_S: round(ts1 - ts0, 3),
    }


ProcessPoint = tuple[float, float]  # (ts, cumulative CPU seconds) of the broker process


def read_broker_process(run_dir: Path) -> list[ProcessPoint]:
    """broker/process.csv in time order; none when the harness started no broker."""
    path = broker_dir(run_dir) / BROKER_PROCESS_FILE
    if not path.is_file():
        return []
    columns = parsers(BROKER_PROCESS_COLUMNS, "ts", "cpu_seconds")
    return sorted((float(ts), float(cpu)) for _, (ts, cpu) in read_csv(path, columns))


def process_cost(
    points: list[ProcessPoint],
    measure_start: float,
    measure_end: float,
    measure_deliveries: int,
) -> dict[str, Any] | None:
    """The broker process's CPU between the first and last sample inside the measure phase,
    per delivery the workers read; None with fewer than two samples there."""
    inside = [p for p in points if measure_start <= p[0] <= measure_end]
    if len(inside) < 2 or measure_end <= measure_start:
        return None
    (ts0, cpu0), (ts1, cpu1) = inside[0], inside[-1]
    cpu_s = round(cpu1 - cpu0, 6)
    deliveries = round(measure_deliveries * (ts1 - ts0) / (measure_end - measure_start))
    return {
        BROKER_CPU_US_PER_DELIVERY: per_delivery_us(cpu_s, deliveries),
        BROKER_CPU_S: cpu_s,
        BROKER_DELIVERIES_DISPATCHED: deliveries,
        BROKER_WINDOW_S: round(ts1 - ts0, 3),
    }


MIN_PROBE_SAMPLES = 20
"""Under half a second of the probe in the measure phase says nothing steady about the machine."""
NO_MACHINE_SPEED: dict[str, Any] = {MACHINE_UNIT_US: None, MACHINE_PROBE_VERSION: None}


def machine_speed(run_dir: Path, measure_start: float, measure_end: float) -> dict[str, Any]:
    """The probe's median unit time inside the measure phase and its version; null for a run
    without the probe's file (made before it existed), with too few samples, or with samples of
    two versions."""
    path = run_dir / MACHINE_SPEED_FILE
    if not path.is_file():
        return dict(NO_MACHINE_SPEED)
    columns = parsers(MACHINE_SPEED_COLUMNS, "ts", "unit_us", "version")
    inside = [
        (float(us), int(version))
        for _, (ts, us, version) in read_csv(path, columns)
        if measure_start <= float(ts) <= measure_end
    ]
    versions = {v for _, v in inside}
    if len(inside) < MIN_PROBE_SAMPLES or len(versions) != 1:
        return dict(NO_MACHINE_SPEED)
    return {
        MACHINE_UNIT_US: round(statistics.median(us for us, _ in inside), 2),
        MACHINE_PROBE_VERSION: versions.pop(),
    }


def harness_cost(
    client_cpu_s: float | None,
    client_deliveries: int,
    broker: dict[str, Any],
    loop_lag: dict[str, Any] | None = None,
    machine: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """summary.json's `harness_cost` object."""
    return {
        CLIENT_CPU_US_PER_DELIVERY: per_delivery_us(client_cpu_s, client_deliveries),
        CLIENT_CPU_S: None if client_cpu_s is None else round(client_cpu_s, 6),
        CLIENT_DELIVERIES: client_deliveries,
        **broker,
        **(loop_lag or broker_loop_lag([], 0.0, 0.0)),
        **(machine or NO_MACHINE_SPEED),
    }
