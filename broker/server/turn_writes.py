"""One write per connection per turn of the event loop, scheduled once for all connections.

What a turn queues on a connection (answers, and the MESSAGE frames of every subscription
dispatching to it) leaves in one write at the end of the turn. Scheduling that write with a
callback per connection costs a loop handle per connection per turn: with one connection per
consumer, a handle per delivery. Here the first connection with something queued schedules
one callback and the others join its list.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

log = logging.getLogger("broker.connection")


class Flushable(Protocol):
    def flush_queued(self) -> None:
        """Write what is queued; the connection may be queued again from then on."""
        ...


class TurnWrites:
    def __init__(self) -> None:
        self._due: list[Flushable] = []

    def add(self, conn: Flushable) -> None:
        """Write `conn`'s queue at the end of this turn; the caller adds it once a turn (its
        own flag), not once per frame."""
        if not self._due:
            asyncio.get_running_loop().call_soon(self._flush)
        self._due.append(conn)

    def _flush(self) -> None:
        due, self._due = self._due, []
        for conn in due:
            try:
                conn.flush_queued()
            except Exception:  # one broken connection must not stall the others' writes
                log.exception("writing to a connection failed")
