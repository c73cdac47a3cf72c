"""How long the broker's event loop keeps ready work waiting: its lag, sampled by a timer.

An ACK or FLOW read from a socket is handled when the loop next polls, so it waits as long as
the callback running then (a dispatch slice, a stats snapshot, a connect storm's SUBSCRIBEs).
A timer due every 20 milliseconds measures exactly that wait: how late it fires. Seed 000's
OrderedExecutor finding was acks queued behind sends; this is the number that shows it, in
each broker stats snapshot (P50, P99 and the longest stall since the previous one).
"""

from __future__ import annotations

import asyncio
import math
import time

INTERVAL_S = 0.02
"""50 samples a second: a stall of 20 ms or more always holds a tick and is measured whole;
shorter ones are sampled. Each tick is a wake-up of an otherwise idle loop: at 200 a second
the timer alone kept an idle broker at 11 ms of CPU a second, at 50 about 4 ms (CPU from
/proc over 20 s), which at 10,000 deliveries a second was 0.7 µs of each one's cost."""


class LoopLag:
    def __init__(self, loop: asyncio.AbstractEventLoop, interval_s: float = INTERVAL_S) -> None:
        self._loop = loop
        self._interval = interval_s
        self._lags_us: list[int] = []
        """Each tick's lag since the previous take(): a list, sorted once per take, because an
        HdrHistogram's record_value in Python was most of the timer's cost (py-spy: 4 % of the
        broker's main thread in the harness-cost run)."""
        self._due = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._due = time.monotonic() + self._interval
        self._handle = self._loop.call_later(self._interval, self._tick)

    def _tick(self) -> None:
        now = time.monotonic()
        # Timers may fire up to a millisecond early (libuv's clock ticks in milliseconds).
        self._lags_us.append(max(1, round((now - self._due) * 1e6)))
        self._due = now + self._interval
        self._handle = self._loop.call_later(self._interval, self._tick)

    def take(self) -> dict[str, float]:
        """P50, P99 (nearest rank) and maximum lag in ms since the previous call (zeros without
        samples)."""
        lags, self._lags_us = self._lags_us, []
        if not lags:
            return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
        lags.sort()
        n = len(lags)
        return {
            "p50_ms": lags[max(0, math.ceil(0.50 * n) - 1)] / 1000,
            "p99_ms": lags[max(0, math.ceil(0.99 * n) - 1)] / 1000,
            "max_ms": lags[-1] / 1000,
        }

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
