"""Opening peer connections within the process's socket budget, spread over source addresses.

A process holds fewer than 20,000 sockets here (DESIGN.md): asking for more connections than
RLIMIT_NOFILE allows is an error that says what to change, not an EMFILE in the middle of the
connect storm. Redis pub/sub and MQTT take one connection per subscriber, so they reach it at
consumersPerConnection times fewer consumers than NATS or Pulsar.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Generic, TypeVar

from gevent.pool import Group

from drivers.base import DriverError
from drivers.net.sockets import FD_MARGIN, socket_budget, source_address
from drivers.peer.connection import PeerConnection

ConnT = TypeVar("ConnT", bound=PeerConnection)


class Connections(Generic[ConnT]):
    def __init__(
        self,
        make: Callable[[int], ConnT],
        group: Group,
        *,
        source_addresses: int,
        per_connection: int,
        max_connections: int | None = None,
    ) -> None:
        self._make = make
        self._group = group
        self._spread = source_addresses
        self._per_connection = per_connection
        self._max = socket_budget() if max_connections is None else max_connections
        self._ids = itertools.count()
        self._slots: dict[int, ConnT] = {}
        self.live: set[ConnT] = set()

    def open(self) -> ConnT:
        """A new connection, opening in the background (call wait_ready on it)."""
        if len(self.live) >= self._max:
            raise DriverError(
                f"this process would need more than {self._max} connections, the most its "
                f"open-file limit allows (RLIMIT_NOFILE minus {FD_MARGIN} for other files): "
                f"with {self._per_connection} consumer(s) per connection one process holds about "
                f"{self._max * self._per_connection} consumers; run more worker processes"
            )
        conn = self._make(next(self._ids))
        self.live.add(conn)
        self._group.spawn(conn.open, source_address(conn.id, self._spread))
        return conn

    def for_consumer(self, index: int) -> ConnT:
        """Consumer `index`'s shared connection (slot index // per_connection); a slot whose
        connection failed gets a new one."""
        key = index // self._per_connection
        conn = self._slots.get(key)
        if conn is None or conn.closed:
            conn = self._slots[key] = self.open()
            conn.carries_consumers = True
        return conn

    def closed(self, conn: PeerConnection) -> None:
        """The connections' on_closed: it no longer counts against the budget."""
        self.live.discard(conn)

    @property
    def kernel_timestamps(self) -> bool:
        conns = [conn for conn in self.live if not conn.closed]
        return bool(conns) and all(conn.kernel_timestamps for conn in conns)

    def close(self) -> None:
        for conn in list(self.live):
            conn.close()
