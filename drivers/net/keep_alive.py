"""A client's keep-alive pings, spread over their interval.

The official clients keep a timer per connection, so their pings fall as the connections were
made. One loop that pinged every connection at once did the same work as one burst: with one
connection per consumer, 5,000 pings held a worker's loop 110-160 ms every 30 s (gevent's
monitor thread caught it), which the sockets read meanwhile counted as client delay, and the
broker answered them all at once (docs/benchmarks.md, "Keep-alive in slices"). Here each
interval pings every connection once, in slices of at most PER_SLICE connections spread evenly
over it; a process with few connections still wakes once per interval.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol, TypeVar

import gevent

__all__ = ["MAX_SLICES", "PER_SLICE", "keep_alive", "slices_of"]

PER_SLICE = 100
"""Pings per slice at most (a few ms of a worker's loop), until MAX_SLICES."""

MAX_SLICES = 30
"""Slices per interval at most: one wake-up a second for a 30 s interval."""


class Pingable(Protocol):
    id: int

    def ping(self) -> None: ...


C = TypeVar("C", bound=Pingable)
T = TypeVar("T")


def slices_of(connections: list[T]) -> list[list[T]]:
    """`connections` (in a stable order) cut into the interval's slices: as many as PER_SLICE
    asks for, at most MAX_SLICES, at least one."""
    count = max(1, min(MAX_SLICES, -(-len(connections) // PER_SLICE)))
    size = -(-len(connections) // count)
    return [connections[at : at + size] for at in range(0, count * size, size)] if size else [[]]


def keep_alive(live: Callable[[], Collection[C]], interval_s: float) -> None:
    """Ping every connection `live()` holds once per `interval_s`, slice after slice, forever
    (a greenlet of the driver's: killed with it). A connection that left meanwhile is skipped;
    one that came is pinged from the next interval."""
    while True:
        slices = slices_of(sorted(live(), key=_by_id))
        pause = interval_s / len(slices)
        for connections in slices:
            gevent.sleep(pause)
            now = live()
            for conn in connections:
                if conn in now:
                    conn.ping()


def _by_id(conn: Pingable) -> int:
    return conn.id
