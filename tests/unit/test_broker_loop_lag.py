"""The broker's loop-lag timer: a callback that holds the loop shows as lag."""

from __future__ import annotations

import asyncio
import time

from broker.server.loop_lag import LoopLag


def test_a_stall_of_the_loop_is_the_longest_lag_and_take_starts_afresh():
    async def run() -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        lag = LoopLag(asyncio.get_running_loop(), interval_s=0.002)
        lag.start()
        await asyncio.sleep(0.05)
        time.sleep(0.08)  # a callback that holds the loop for 80 ms
        await asyncio.sleep(0.05)
        first = lag.take()
        await asyncio.sleep(0.05)
        second = lag.take()
        lag.stop()
        return first, second, lag.take()

    first, second, empty = asyncio.run(run())
    assert 75 <= first["max_ms"] < 500
    assert first["p50_ms"] < 20  # most ticks were on time
    assert second["max_ms"] < 75  # the stall was taken with the first snapshot
    assert empty == {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
