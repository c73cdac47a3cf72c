"""Whether the load generator, not the broker, was the bottleneck (docs/results.md).

Measured first: with kernel receive times, an end-to-end P99 at read time later than the P99
at the kernel (the broker's number) by more than DISTORTION_SHARE_LIMIT of it and more than
DISTORTION_FLOOR_MS means the reported tail is partly the client's.
Averages as well: a worker above 90 % of a core for more than 10 % of the measure phase, or
with an event loop that stalled over 100 ms in any second, was measuring itself as much as
the broker. And inside the burst: a worker above 90 % of a core between its first and last
read of a second, in more than 10 % of the measure seconds, was saturated while the
deliveries came in, whatever its one-second average says (at 1 msg/s the burst is a fraction
of the second). Any is enough; without kernel times only the CPU and loop lag can judge.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from results_contract.client_bound import (
    BURST_MIN_WINDOW_MS,
    CPU_LIMIT_PERCENT,
    DISTORTION_FLOOR_MS,
    DISTORTION_SHARE_LIMIT,
    LOOP_LAG_LIMIT_MS,
    NO_KERNEL_TIMES,
    cpu_hot,
    distorted,
    loop_lag_too_long,
    too_many_hot,
)
from results_contract.columns import BURST_COLUMNS
from results_contract.summary import ClientBound
from spark_analysis.inputs import parsers, read_csv, second_index

BURST_PARSERS = parsers(BURST_COLUMNS, "ts", "window_ms", "cpu_ms", "wait_ms")


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """One worker over the measure phase."""

    worker: str
    hot_seconds: int  # seconds with CPU above CPU_LIMIT_PERCENT
    max_cpu: float
    max_loop_lag_ms: float


@dataclass(frozen=True, slots=True)
class BurstLoad:
    """One worker's bursts of deliveries over the measure phase (raw bursts.csv)."""

    worker: str
    seconds: int  # measure seconds with a window of at least BURST_MIN_WINDOW_MS
    hot_seconds: int  # of those, the ones with CPU inside the window above CPU_LIMIT_PERCENT
    cpu: float  # median over those seconds of the CPU inside the window, % of a core
    window_ms: float  # median window
    wait: float = 0.0  # median share of the window spent waiting for a core, %


def burst_load(
    worker: str,
    rows: Iterable[tuple[int, float, float, float]],
    measure_start: float,
    seconds: int,
) -> BurstLoad | None:
    """A worker's (ts, window_ms, cpu_ms, wait_ms) rows judged over the measure phase; None
    when no measure second had a window long enough to judge."""
    windows = [
        (window_ms, 100.0 * cpu_ms / window_ms, 100.0 * wait_ms / window_ms)
        for ts, window_ms, cpu_ms, wait_ms in rows
        if 0 <= second_index(ts, measure_start) < seconds and window_ms >= BURST_MIN_WINDOW_MS
    ]
    if not windows:
        return None
    return BurstLoad(
        worker,
        seconds=len(windows),
        hot_seconds=sum(1 for _, cpu, _ in windows if cpu_hot(cpu)),
        cpu=round(statistics.median(cpu for _, cpu, _ in windows), 1),
        window_ms=round(statistics.median(w for w, _, _ in windows), 1),
        wait=round(statistics.median(wait for _, _, wait in windows), 1),
    )


def read_bursts(
    files: Iterable[tuple[str, Path]], measure_start: float, seconds: int
) -> list[BurstLoad]:
    """Every worker's bursts.csv, judged over the measure phase (workers without a window
    long enough are left out)."""
    loads = []
    for worker, path in files:
        rows = [
            (int(v[0]), float(v[1]), float(v[2]), float(v[3]))
            for _, v in read_csv(path, BURST_PARSERS)
        ]
        load = burst_load(worker, rows, measure_start, seconds)
        if load is not None:
            loads.append(load)
    return loads


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
    loads: list[WorkerLoad],
    measure_seconds: int,
    tail: TailLatency | None = None,
    bursts: Sequence[BurstLoad] = (),
) -> dict[str, Any]:
    """The summary's `client_bound` object, with one reason per rule broken (per worker for
    the worker rules), each said once: a worker hot over whole seconds is not said to be hot
    inside its bursts as well, and `rules_broken` tells the report which rules the reasons
    already name."""
    tail = tail or TailLatency()
    reasons = []
    broken: list[str] = []
    delay = tail.client_delay_p99_ms if tail.kernel_times else None
    e2e = tail.e2e_p99_ms
    distortion = (
        round(e2e - tail.e2e_kernel_p99_ms, 3)
        if tail.kernel_times and e2e is not None and tail.e2e_kernel_p99_ms is not None
        else None
    )
    distortion_share = _share(distortion, e2e)
    if distortion is not None and distorted(distortion, e2e):
        reasons.append(
            f"the client added {distortion:g} ms ({distortion_share:.0%}) to the end-to-end P99 "
            f"(limits: {DISTORTION_SHARE_LIMIT:.0%} and {DISTORTION_FLOOR_MS:g} ms); "
            f"client delay P99 {delay:g} ms"
        )
        broken.append("distortion")
    hot_workers = set()
    for load in loads:
        if too_many_hot(load.hot_seconds, measure_seconds):
            hot_workers.add(load.worker)
            reasons.append(
                f"{load.worker}: CPU above {CPU_LIMIT_PERCENT:g}% of a core for "
                f"{load.hot_seconds} of {measure_seconds} s"
            )
            broken.append("cpu")
        if loop_lag_too_long(load.max_loop_lag_ms):
            reasons.append(
                f"{load.worker}: event loop lag reached {load.max_loop_lag_ms:g} ms "
                f"(limit {LOOP_LAG_LIMIT_MS:g} ms)"
            )
            broken.append("loop_lag")
    for burst in bursts:
        if too_many_hot(burst.hot_seconds, measure_seconds):
            broken.append("burst_cpu")
            if burst.worker not in hot_workers:
                reasons.append(
                    f"{burst.worker}: CPU above {CPU_LIMIT_PERCENT:g}% of a core inside its "
                    f"burst of deliveries in {burst.hot_seconds} of {measure_seconds} s "
                    f"(median: {burst.cpu:g}% of a core over {burst.window_ms:g} ms)"
                )
    busiest = max(bursts, key=lambda b: b.cpu, default=None)
    return {
        ClientBound.FLAG: bool(reasons),
        ClientBound.REASONS: reasons,
        ClientBound.RULES_BROKEN: list(dict.fromkeys(broken)),
        ClientBound.MAX_CPU: max((load.max_cpu for load in loads), default=None),
        ClientBound.MAX_LOOP_LAG_MS: max((load.max_loop_lag_ms for load in loads), default=None),
        ClientBound.BURST_CPU: None if busiest is None else busiest.cpu,
        ClientBound.BURST_MS: None if busiest is None else busiest.window_ms,
        ClientBound.BURST_WAIT: None if busiest is None else busiest.wait,
        ClientBound.KERNEL_TIMES: tail.kernel_times,
        ClientBound.NOTE: None if tail.kernel_times else NO_KERNEL_TIMES,
        ClientBound.CLIENT_DELAY_P99_MS: delay,
        ClientBound.CLIENT_DELAY_SHARE: _share(delay, e2e),
        ClientBound.DISTORTION_MS: distortion,
        ClientBound.DISTORTION_SHARE: distortion_share,
    }
