"""Which connection each consumer and producer uses, and how many sockets a process may hold.

Consumers fill connections in order, consumersPerConnection each (consumer index i rides on
slot i // consumersPerConnection of each broker it uses), as the official clients multiplex
consumers on a shared connection; producers get a connection each. The socket budget is
drivers.net.sockets'.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from gevent.pool import Group

from drivers.base import ConsumerCallback, DriverError
from drivers.net.deliveries import deliveries_for
from drivers.net.keep_alive import keep_alive
from drivers.net.reactor import Reactor
from drivers.net.sockets import FD_MARGIN, socket_budget, source_address
from drivers.pulsar.ack_flusher import AckFlusher
from drivers.pulsar.connection import Connection, TlsConnection
from drivers.pulsar.consumer import ConsumerState
from drivers.pulsar.deadlines import Deadlines
from drivers.pulsar.delivery import DeliveryDecoder
from drivers.pulsar.lookup import Route
from drivers.pulsar.settings import Settings

PING_INTERVAL_SECONDS = 30.0


class ConnectionPool:
    def __init__(
        self,
        settings: Settings,
        callback: ConsumerCallback,
        group: Group,
        max_connections: int | None = None,
        on_consumers_lost: Callable[[list[ConsumerState]], None] = lambda states: None,
    ) -> None:
        self._settings = settings
        self._callback = callback
        self._group = group
        self._max = socket_budget() if max_connections is None else max_connections
        self._ids = itertools.count()
        self._service = Route.service(settings)
        self._slots: dict[tuple[Route, int], Connection] = {}
        self._live: set[Connection] = set()
        # PING every open connection every 30 s, as the official clients do.
        self._pinger = group.spawn(keep_alive, lambda: self._live, PING_INTERVAL_SECONDS)
        self._on_consumers_lost = on_consumers_lost
        self._acks = AckFlusher(settings.consumer.ack_group_time_ms, group)
        self._deadlines = Deadlines(group)
        # One of each for every connection: a message read on many sockets is decoded once and
        # handed to the harness once per receive pass (drivers.net.deliveries).
        self._decoder = DeliveryDecoder(settings.consumer.verify_checksum)
        self._deliveries = deliveries_for(callback)
        self._producers_engine = Reactor()
        """Producers' connections are read by an engine of their own: a pass over thousands of
        consumer sockets, or a harness slow to take a pass's deliveries, never delays their
        receipts (OMB's paused consumers are held apart: Reactor.hold_consumers)."""

    @property
    def service(self) -> Route:
        """Where the service URL points: the first broker every lookup asks."""
        return self._service

    @property
    def kernel_timestamps(self) -> bool:
        """Whether every open consumer connection hands out the kernel's receive times (False
        before there is one)."""
        conns = [conn for conn in self._slots.values() if not conn.closed]
        return bool(conns) and all(conn.kernel_timestamps for conn in conns)

    def for_consumer(self, index: int, route: Route | None = None) -> Connection:
        """The connection of consumer `index` to `route` (the service URL by default), opening
        it (in the background) if needed; call wait_ready() on it. A slot whose connection
        failed gets a new one."""
        key = (route or self._service, index // self._settings.consumers_per_connection)
        conn = self._slots.get(key)
        if conn is None or conn.closed:
            conn = self._slots[key] = self.open_connection(key[0])
            conn.carries_consumers = True
        return conn

    def open_connection(self, route: Route | None = None, producers: bool = False) -> Connection:
        """A new connection, opening in the background; raises DriverError past the budget.
        `producers`: for producers only (read by their own engine)."""
        if len(self._live) >= self._max:
            per = self._settings.consumers_per_connection
            raise DriverError(
                f"this process would need more than {self._max} connections, the most its "
                f"open-file limit allows (RLIMIT_NOFILE minus {FD_MARGIN} for other files): with "
                f"consumersPerConnection={per} one process holds about {self._max * per} "
                "consumers; run more worker processes or put more consumers on each connection"
            )
        route = route or self._service
        kind = TlsConnection if self._settings.tls is not None else Connection
        conn = kind(
            next(self._ids),
            self._settings,
            self._callback,
            self._group,
            self._live.discard,
            route,
            self._on_consumers_lost,
            self._acks,
            self._deliveries,
            self._decoder,
            self._producers_engine if producers else None,
            self._deadlines,
        )
        self._live.add(conn)
        conn.will_open()
        self._group.spawn(self._open, conn)
        return conn

    def _open(self, conn: Connection) -> None:
        """In the background: resolving a host name yields to other greenlets, and
        for_consumer must hand out a slot's connection without yielding, or several would be
        made for one slot."""
        # Source addresses in 127/8 reach only a broker on loopback (a redirect may leave it).
        spread = self._settings.client.source_addresses if conn.route.is_loopback() else 0
        conn.open(source_address(conn.id, spread))

    def close(self) -> None:
        for conn in list(self._live):
            conn.close()
        self._pinger.kill(block=False)
        self._acks.close()
        self._deadlines.close()
