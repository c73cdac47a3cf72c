"""Whether the load generator, not the broker, was the bottleneck (docs/results.md).

Measured first: with kernel receive times, an end-to-end P99 at read time later than the P99
at the kernel (the broker's number) by more than DISTORTION_SHARE_LIMIT of it and more than
DISTORTION_FLOOR_MS means the reported tail is partly the client's.
Averages as well: a worker above 90 % of a core for more than 10 % of the measure phase, or
with an event loop that stalled over 100 ms in any second, was measuring itself as much as
the broker. Either is enough; without kernel times only the averages can judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from results_contract.client_bound import (
    CPU_LIMIT_PERCENT,
    DISTORTION_FLOOR_MS,
    DISTORTION_SHARE_LIMIT,
    HOT_FRACTION_LIMIT,
    LOOP_LAG_LIMIT_MS,
    NO_KERNEL_TIMES,
)


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """One worker over the measure phase."""

    worker: str
    hot_seconds: int  # seconds with CPU above CPU_LIMIT_PERCENT
    max_cpu: float
    max_loop_lag_ms: float


@dataclass(frozen=True, slots=True)
class TailLatency:
    """The run's P99s (ms) the measured rule reads; None for a metric with no value."""

    e2e_p99_ms: float | None = None
    e2e_kernel_p99_ms: float | None = None
    client_delay_p99_ms: float | None = None

    @property
    def kernel_times(self) -> bool:
        return self.e2e_kernel_p99_ms is not None and self.client_delay_p99_ms is not None


def _share(part: float | None, whole: float | None) -> float | None:
    if part is None or not whole:
        return None
    return round(part / whole, 4)


def judge(
    loads: list[WorkerLoad], measure_seconds: int, tail: TailLatency | None = None
) -> dict[str, Any]:
    """The summary's `client_bound` object, with one reason per rule broken."""
    tail = tail or TailLatency()
    reasons = []
    delay = tail.client_delay_p99_ms if tail.kernel_times else None
    e2e = tail.e2e_p99_ms
    distortion = (
        round(e2e - tail.e2e_kernel_p99_ms, 3)
        if tail.kernel_times and e2e is not None and tail.e2e_kernel_p99_ms is not None
        else None
    )
    distortion_share = _share(distortion, e2e)
    if (
        distortion is not None
        and distortion > DISTORTION_FLOOR_MS
        and distortion > DISTORTION_SHARE_LIMIT * (e2e or 0.0)
    ):
        reasons.append(
            f"the client added {distortion:g} ms ({distortion_share:.0%}) to the end-to-end P99 "
            f"(limits: {DISTORTION_SHARE_LIMIT:.0%} and {DISTORTION_FLOOR_MS:g} ms); "
            f"client delay P99 {delay:g} ms"
        )
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
        "kernel_times": tail.kernel_times,
        "note": None if tail.kernel_times else NO_KERNEL_TIMES,
        "client_delay_p99_ms": delay,
        "client_delay_share": _share(delay, e2e),
        "distortion_ms": distortion,
        "distortion_share": distortion_share,
    }
