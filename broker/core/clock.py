"""Wall time and timers, as the broker's policies take them: from their owner, not from the
`time` module and the running loop directly, so that rate windows, TTL, retention, delayed
delivery and the periodic checks are unit-tested against a clock a test moves by hand
(tests/doubles/fake_clock.py) instead of seconds of real waiting."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol


class Timer(Protocol):
    """What `call_later` returns: asyncio's TimerHandle satisfies it."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Epoch seconds (the realtime clock: rate windows are aligned on it, and message
        timestamps, TTL and delivery times are epoch milliseconds)."""
        ...

    def call_later(self, delay_s: float, callback: Callable[..., object], *args: Any) -> Timer:
        """Run `callback(*args)` on the broker's loop after `delay_s` seconds."""
        ...


class LoopClock:
    """The real one: `time.time()` and the running event loop's timers (every caller runs on
    the loop: timers, the codec's handlers, the admin API through its on-loop call)."""

    now = staticmethod(time.time)

    @staticmethod
    def call_later(delay_s: float, callback: Callable[..., object], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_later(delay_s, callback, *args)


SYSTEM_CLOCK: Clock = LoopClock()
