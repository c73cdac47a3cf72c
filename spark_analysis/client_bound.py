"""Whether the load generator, not the broker, was the bottleneck (docs/results.md).

A worker above 90 % of a core for more than 10 % of the measure phase, or with an event
loop that stalled over 100 ms in any second, was measuring itself as much as the broker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from results_contract.client_bound import CPU_LIMIT_PERCENT, HOT_FRACTION_LIMIT, LOOP_LAG_LIMIT_MS


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """One worker over the measure phase."""

    worker: str
    hot_seconds: int  # seconds with CPU above CPU_LIMIT_PERCENT
    max_cpu: float
    max_loop_lag_ms: float


def judge(loads: list[WorkerLoad], measure_seconds: int) -> dict[str, Any]:
    """The summary's `client_bound` object, with one reason per rule a worker broke."""
    reasons = []
    for load in loads:
        if load.hot_seconds > HOT_FRACTION_LIMIT * measure_seconds:
            reasons.append(
                f"{load.worker}: CPU above {CPU_LIMIT_PERCENT:g}% of a core for "
                f"{load.hot_seconds} of {measure_seconds} s"
            )
        if load.max_loop_lag_ms > LOOP_LAG_LIMIT_MS:
            reasons.append(
                f"{load.worker}: event loop lag reached {load.max_loop_lag_ms:g} ms "
                f"(limit {LOOP_LAG_LIMIT_MS:g} ms)"
            )
    return {
        "flag": bool(reasons),
        "reasons": reasons,
        "max_cpu": max((load.max_cpu for load in loads), default=None),
        "max_loop_lag_ms": max((load.max_loop_lag_ms for load in loads), default=None),
    }
