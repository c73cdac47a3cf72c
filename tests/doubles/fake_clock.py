"""A clock a test moves by hand (broker.core.clock.Clock): `advance` runs the timers that fall
due, in time order, each at its own time, so a policy's windows, checks and delays are tested
in microseconds of real time and without a sleep."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

START = 1_800_000_000.0
"""An epoch second in 2027 on a whole minute: windows of any period up to 60 s start here."""


class FakeTimer:
    __slots__ = ("when", "callback", "args", "cancelled")

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...]):
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    def __init__(self, start: float = START) -> None:
        self.time = start
        self._timers: list[tuple[float, int, FakeTimer]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self.time

    def call_later(self, delay_s: float, callback: Callable[..., object], *args: Any) -> FakeTimer:
        timer = FakeTimer(self.time + max(0.0, delay_s), callback, args)
        heapq.heappush(self._timers, (timer.when, next(self._order), timer))
        return timer

    def advance(self, seconds: float) -> None:
        """Move time on by `seconds`, running each timer due on the way at its own time."""
        end = self.time + seconds
        while self._timers and self._timers[0][0] <= end:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self.time = max(self.time, when)
            timer.callback(*timer.args)
        self.time = end

    def pending(self) -> list[float]:
        """When the timers not cancelled are due, soonest first."""
        return sorted(t.when for _, _, t in self._timers if not t.cancelled)
