"""How long the broker's event loop keeps ready work waiting: its lag, sampled by a timer.

An ACK or FLOW read from a socket is handled when the loop next polls, so it waits as long as
the callback running then (a dispatch slice, a stats snapshot, a connect storm's SUBSCRIBEs).
A timer due every few milliseconds measures exactly that wait: how late it fires. Seed 000's
OrderedExecutor finding was acks queued behind sends; this is the number that shows it, in
each broker stats snapshot (P50, P99 and the longest stall since the previous one).
"""

from __future__ import annotations

import asyncio
import time

from hdrh.histogram import HdrHistogram

INTERVAL_S = 0.005
"""200 samples a second: ~1 ms of CPU a second for the timer and the histogram."""


class LoopLag:
    def __init__(self, loop: asyncio.AbstractEventLoop, interval_s: float = INTERVAL_S) -> None:
        self._loop = loop
        self._interval = interval_s
        self._histogram = HdrHistogram(1, 600_000_000, 2)  # µs, up to 10 minutes
        self._due = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._due = time.monotonic() + self._interval
        self._handle = self._loop.call_later(self._interval, self._tick)

    def _tick(self) -> None:
        now = time.monotonic()
        # Timers may fire up to a millisecond early (libuv's clock ticks in milliseconds).
        self._histogram.record_value(max(1, round((now - self._due) * 1e6)))
        self._due = now + self._interval
        self._handle = self._loop.call_later(self._interval, self._tick)

    def take(self) -> dict[str, float]:
        """P50, P99 and maximum lag in ms since the previous call (zeros without samples)."""
        h = self._histogram
        if h.get_total_count() == 0:
            return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
        out = {
            "p50_ms": h.get_value_at_percentile(50) / 1000,
            "p99_ms": h.get_value_at_percentile(99) / 1000,
            "max_ms": h.get_max_value() / 1000,
        }
        h.reset()
        return out

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
