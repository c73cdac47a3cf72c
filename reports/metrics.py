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
    path: tuple[str, ...]
    direction: Direction


_LOWER = Direction.LOWER_IS_BETTER
_HIGHER = Direction.HIGHER_IS_BETTER

METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric(
            "connection_time_s", "connection time", "s", ("headline", "connection_time_s"), _LOWER
        ),
        Metric(
            "connect_p99_s",
            "per-consumer connect P99",
            "s",
            ("connection", "per_consumer", "p99"),
            _LOWER,
        ),
        Metric("connections_failed", "failed connections", "", ("connection", "failed"), _LOWER),
        Metric("e2e_p50_ms", "end-to-end P50", "ms", ("latency", "e2e", "p50"), _LOWER),
        Metric("e2e_p99_ms", "end-to-end P99", "ms", ("headline", "e2e_p99_ms"), _LOWER),
        Metric("e2e_p99_9_ms", "end-to-end P99.9", "ms", ("latency", "e2e", "p99_9"), _LOWER),
        Metric("e2e_max_ms", "end-to-end max", "ms", ("latency", "e2e", "max"), _LOWER),
        Metric(
            "e2e_actual_p99_ms",
            "end-to-end P99 from actual send",
            "ms",
            ("latency", "e2e_actual", "p99"),
            _LOWER,
        ),
        Metric(
            "e2e_kernel_p99_ms",
            "end-to-end P99 at the kernel",
            "ms",
            ("latency", "e2e_kernel", "p99"),
            _LOWER,
        ),
        Metric(
            "client_delay_p99_ms",
            "client delay P99",
            "ms",
            ("latency", "client_delay", "p99"),
            _LOWER,
        ),
        Metric("publish_p99_ms", "publish P99", "ms", ("latency", "publish", "p99"), _LOWER),
        Metric(
            "publish_delay_p99_ms",
            "publish delay P99",
            "ms",
            ("latency", "publish_delay", "p99"),
            _LOWER,
        ),
        Metric(
            "deliveries_received",
            "deliveries received",
            "",
            ("headline", "deliveries_received"),
            _HIGHER,
        ),
        Metric("deliveries_lost", "deliveries lost", "", ("headline", "deliveries_lost"), _LOWER),
        Metric("client_errors", "client errors", "", ("headline", "client_errors"), _LOWER),
        Metric(
            "consumers_short",
            "consumers short of messages",
            "",
            ("deliveries", "consumers_short"),
            _LOWER,
        ),
        Metric(
            "deliveries_out_of_order",
            "deliveries out of order",
            "",
            ("deliveries", "out_of_order"),
            _LOWER,
        ),
        *(
            Metric(
                f"stage_{stage}_p99_ms",
                f"stage {i} {stage.replace('_', ' ')} P99",
                "ms",
                ("stages", "p99_ms", stage),
                _LOWER,
            )
            for i, stage in enumerate(STAGES, start=1)
        ),
        Metric(
            "client_distortion_ms",
            "client's share of the end-to-end P99",
            "ms",
            ("client_bound", "distortion_ms"),
            _LOWER,
        ),
        Metric("client_max_cpu", "client max CPU", "%", ("client_bound", "max_cpu"), _LOWER),
        Metric(
            "client_max_loop_lag_ms",
            "client max loop lag",
            "ms",
            ("client_bound", "max_loop_lag_ms"),
            _LOWER,
        ),
    )
}


def lookup(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """Follows `path` into nested objects; None when any step is missing.

    Some keys hold dots themselves (`latency."stage.producing"`), so consecutive parts are
    joined when the single part is not a key.
    """
    node: Any = data
    i = 0
    while i < len(path):
        if not isinstance(node, Mapping):
            return None
        for j in range(i + 1, len(path) + 1):
            key = ".".join(path[i:j])
            if key in node:
                node, i = node[key], j
                break
        else:
            return None
    return node


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
