"""Grouped acknowledgements, flushed for every connection of a process by one timer.

The codec groups each consumer's acks until `flush_acks()` (pulsar_protocol.connection); the
official clients flush them every ackGroupTimeMs. A timer per connection did the same, but a
broadcast reaches the ~50 connections of a worker within a few ms, so their 50 timers then
fired one by one after it, each waking an idle process: 30-70 µs of CPU per wake-up on this VM
(a gevent timer with nothing else to do, measured with 0 and 5,000 idle greenlets). One timer
per process flushes them all in one wake-up, a connection's acks waiting at most ackGroupTimeMs
as before.

A turn is cut into slices of at most the receive engine's pass (drivers.net.reactor
PASS_SECONDS), the loop turning between them: a broadcast makes every connection of a worker
due within one group time, and at a million consumers (5,000 connections of 100 a worker) one
turn over all of them would hold the loop 120-140 ms: 25 µs a connection once the ACK heads are kept
and 130-150 µs at a connection's first flush (the codec's flush_acks and a send of its ACKs on
a socketpair, 200 connections, load 4.5): the event-loop lag that flagged such a run
client-bound (issue 40: 116 ms against a 100 ms limit).
"""

from __future__ import annotations

from time import perf_counter
from typing import Protocol

import gevent
from gevent.event import Event
from gevent.pool import Group

from drivers.net.reactor import PASS_SECONDS

YIELD_SECONDS = 0.0005
"""The pause between two slices of a turn: a timer, so the loop polls the sockets and runs the
timers due (gevent.sleep(0) runs the ready greenlets only)."""


class AcksDue(Protocol):
    def flush_acks(self) -> None:
        """Hand the codec's grouped acks to the connection's writer."""


class AckFlusher:
    def __init__(self, ack_group_time_ms: int, group: Group) -> None:
        self._delay = ack_group_time_ms / 1000
        self._group = group
        self._due: dict[AcksDue, None] = {}
        """Connections with acks to flush, in the order they became due."""
        self._wanted = Event()
        self._greenlet: gevent.Greenlet | None = None

    def due(self, conn: AcksDue) -> None:
        """`conn` has acks grouped: flush them within ackGroupTimeMs."""
        if conn in self._due:
            return
        self._due[conn] = None
        if self._greenlet is None:
            self._greenlet = self._group.spawn(self._run)
        if not self._wanted.is_set():
            self._wanted.set()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            gevent.sleep(self._delay)
            self._wanted.clear()
            due, self._due = self._due, {}
            self._flush(due)

    def _flush(self, due: dict[AcksDue, None]) -> None:
        """Flush `due` in order, letting the loop turn whenever a slice took PASS_SECONDS (a
        connection due again meanwhile waits in `_due` for the next turn)."""
        deadline = perf_counter() + PASS_SECONDS
        for conn in due:
            conn.flush_acks()
            if perf_counter() > deadline:
                gevent.sleep(YIELD_SECONDS)
                deadline = perf_counter() + PASS_SECONDS

    def close(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
