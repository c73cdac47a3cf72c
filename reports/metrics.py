"""The scalar metrics of a run that comparisons and the gate talk about, by short name.

One table serves both, so that a metric has the same name, unit and direction in a
comparison page as in a gate rule. Anything numeric in summary.json that is not listed can
still be named by its dotted path (e.g. `latency.e2e.p99_9`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from results_contract.metrics import (
    CLIENT_DELAY,
    E2E,
    E2E_ACTUAL,
    E2E_KERNEL,
    PUBLISH,
    PUBLISH_DELAY,
    STAGES,
    stage_metric,
)
from results_contract.summary import (
    ClientBound,
    Connection,
    Deliveries,
    Headline,
    PerConsumer,
    Stages,
    Stat,
    Top,
    lookup,
)

STAGE_LABELS = {s: f"{i} {s.replace('_', ' ')}" for i, s in enumerate(STAGES, start=1)}
# Names of summary.json's latency entries, as a reader would say them.
LATENCY_LABELS = {
    E2E: "end-to-end (from intended send)",
    E2E_ACTUAL: "end-to-end (from actual send)",
    E2E_KERNEL: "end-to-end at the kernel (from intended send)",
    CLIENT_DELAY: "client delay (read − kernel receive)",
    PUBLISH: "publish",
    PUBLISH_DELAY: "publish delay",
    **{stage_metric(s): f"stage {label}" for s, label in STAGE_LABELS.items()},
}


class Direction(StrEnum):
    """Which way a metric gets better."""

    LOWER_IS_BETTER = "lower_is_better"
    HIGHER_IS_BETTER = "higher_is_better"


@dataclass(frozen=True)
class Metric:
    """A named number in summary.json."""

    name: str
    label: str
    unit: str
    path: tuple[str, ...]  # summary.json's keys (results_contract/summary.py)
    direction: Direction


_LOWER = Direction.LOWER_IS_BETTER
_HIGHER = Direction.HIGHER_IS_BETTER

METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric(
            "connection_time_s",
            "connection time",
            "s",
            (Top.HEADLINE, Headline.CONNECTION_TIME_S),
            _LOWER,
        ),
        Metric(
            "connect_p99_s",
            "per-consumer connect P99",
            "s",
            (Top.CONNECTION, Connection.PER_CONSUMER, PerConsumer.P99),
            _LOWER,
        ),
        Metric(
            "connections_failed",
            "failed connections",
            "",
            (Top.CONNECTION, Connection.FAILED),
            _LOWER,
        ),
        Metric("e2e_p50_ms", "end-to-end P50", "ms", (Top.LATENCY, E2E, Stat.P50), _LOWER),
        Metric("e2e_p99_ms", "end-to-end P99", "ms", (Top.HEADLINE, Headline.E2E_P99_MS), _LOWER),
        Metric("e2e_p99_9_ms", "end-to-end P99.9", "ms", (Top.LATENCY, E2E, Stat.P99_9), _LOWER),
        Metric("e2e_max_ms", "end-to-end max", "ms", (Top.LATENCY, E2E, Stat.MAX), _LOWER),
        Metric(
            "e2e_actual_p99_ms",
            "end-to-end P99 from actual send",
            "ms",
            (Top.LATENCY, E2E_ACTUAL, Stat.P99),
            _LOWER,
        ),
        Metric(
            "e2e_kernel_p99_ms",
            "end-to-end P99 at the kernel",
            "ms",
            (Top.LATENCY, E2E_KERNEL, Stat.P99),
            _LOWER,
        ),
        Metric(
            "client_delay_p99_ms",
            "client delay P99",
            "ms",
            (Top.LATENCY, CLIENT_DELAY, Stat.P99),
            _LOWER,
        ),
        Metric("publish_p99_ms", "publish P99", "ms", (Top.LATENCY, PUBLISH, Stat.P99), _LOWER),
        Metric(
            "publish_delay_p99_ms",
            "publish delay P99",
            "ms",
            (Top.LATENCY, PUBLISH_DELAY, Stat.P99),
            _LOWER,
        ),
        Metric(
            "deliveries_received",
            "deliveries received",
            "",
            (Top.HEADLINE, Headline.DELIVERIES_RECEIVED),
            _HIGHER,
        ),
        Metric(
            "deliveries_lost",
            "deliveries lost",
            "",
            (Top.HEADLINE, Headline.DELIVERIES_LOST),
            _LOWER,
        ),
        Metric(
            "client_errors", "client errors", "", (Top.HEADLINE, Headline.CLIENT_ERRORS), _LOWER
        ),
        Metric(
            "consumers_short",
            "consumers short of messages",
            "",
            (Top.DELIVERIES, Deliveries.CONSUMERS_SHORT),
            _LOWER,
        ),
        Metric(
            "deliveries_out_of_order",
            "deliveries out of order",
            "",
            (Top.DELIVERIES, Deliveries.OUT_OF_ORDER),
            _LOWER,
        ),
        *(
            Metric(
                f"stage_{stage}_p99_ms",
                f"stage {i} {stage.replace('_', ' ')} P99",
                "ms",
                (Top.STAGES, Stages.P99_MS, stage),
                _LOWER,
            )
            for i, stage in enumerate(STAGES, start=1)
        ),
        Metric(
            "client_distortion_ms",
            "client's share of the end-to-end P99",
            "ms",
            (Top.CLIENT_BOUND, ClientBound.DISTORTION_MS),
            _LOWER,
        ),
        Metric(
            "client_max_cpu", "client max CPU", "%", (Top.CLIENT_BOUND, ClientBound.MAX_CPU), _LOWER
        ),
        Metric(
            "client_max_loop_lag_ms",
            "client max loop lag",
            "ms",
            (Top.CLIENT_BOUND, ClientBound.MAX_LOOP_LAG_MS),
            _LOWER,
        ),
    )
}


def metric_value(data: Mapping[str, Any], metric: str) -> float | None:
    """The number a metric (name or dotted path) holds in a summary; None if absent."""
    known = METRICS.get(metric)
    value = lookup(data, known.path if known else tuple(metric.split(".")))
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base; 0 / 0 is ×1 (nothing changed) and x / 0 has no ratio."""
    if value is None or base is None:
        return None
    if base == 0:
        return 1.0 if value == 0 else None
    return value / base
