"""Whether the load generator, not the broker, was the bottleneck (docs/results.md).

Measured first: with kernel receive times, a client delay P99 (how long delivered bytes
waited in the sockets before the client read them) above CLIENT_DELAY_SHARE_LIMIT of the
end-to-end P99 and above CLIENT_DELAY_FLOOR_MS means the reported tail is partly the client's.
Averages as well: a worker above 90 % of a core for more than 10 % of the measure phase, or
with an event loop that stalled over 100 ms in any second, was measuring itself as much as
the broker. Either is enough; without kernel times only the averages can judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from results_contract.client_bound import (
    CLIENT_DELAY_FLOOR_MS,
    CLIENT_DELAY_SHARE_LIMIT,
    CPU_LIMIT_PERCENT,
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
    delay_share = _share(delay, e2e)
    if delay is not None and delay > CLIENT_DELAY_FLOOR_MS:
        if e2e is None or delay > CLIENT_DELAY_SHARE_LIMIT * e2e:
            share = f"{delay_share:.0%} of" if delay_share is not None else "beside"
            reasons.append(
                f"client delay P99 {delay:g} ms is {share} the end-to-end P99 "
                f"(limits: {CLIENT_DELAY_SHARE_LIMIT:.0%} and {CLIENT_DELAY_FLOOR_MS:g} ms)"
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
    distortion = (
        round(e2e - tail.e2e_kernel_p99_ms, 3)
        if tail.kernel_times and e2e is not None and tail.e2e_kernel_p99_ms is not None
        else None
    )
    return {
        "flag": bool(reasons),
        "reasons": reasons,
        "max_cpu": max((load.max_cpu for load in loads), default=None),
        "max_loop_lag_ms": max((load.max_loop_lag_ms for load in loads), default=None),
        "kernel_times": tail.kernel_times,
        "note": None if tail.kernel_times else NO_KERNEL_TIMES,
        "client_delay_p99_ms": delay,
        "client_delay_share": delay_share,
        "distortion_ms": distortion,
        "distortion_share": _share(distortion, e2e),
    }
