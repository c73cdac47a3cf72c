"""The native Pulsar-protocol driver: `drivers.pulsar.driver:PulsarDriver`.

It speaks the binary protocol itself, on gevent sockets, so that one Locust worker process can
hold tens of thousands of consumers and time each delivery when its bytes leave the socket.
The same driver measures the bundled broker and a real Pulsar cluster.
"""

from __future__ import annotations

from typing import Any

from gevent.pool import Group

from drivers.base import ConsumerCallback, ConsumerSpec, DriverError, SubscribeResult
from drivers.pulsar.admin import create_partitioned_topic
from drivers.pulsar.connection import Connection, RequestFailed, now_us
from drivers.pulsar.partitions import PartitionedProducer, partition_names
from drivers.pulsar.pool import ConnectionPool
from drivers.pulsar.producer import PulsarProducer
from drivers.pulsar.settings import Settings, settings_from


class PulsarDriver:
    """BenchmarkDriver over the Pulsar binary protocol.

    `subscribe` answers a refused, timed-out or disconnected subscribe with ok=False; it
    raises DriverError only for what would fail every consumer alike (an unknown subscription
    type, a lookup redirect, more connections than the process may open).
    """

    def __init__(self) -> None:
        self._group = Group()
        self._settings: Settings | None = None
        self._pool: ConnectionPool | None = None
        self._producers: list[PulsarProducer | PartitionedProducer] = []
        self._admin_url: str | None = None

    def initialize(
        self,
        config: Any,
        callback: ConsumerCallback,
        *,
        consumers_per_connection: int,
        service_url: str,
        admin_url: str | None = None,
    ) -> None:
        self._admin_url = admin_url
        self._settings = settings_from(
            config, consumers_per_connection=consumers_per_connection, service_url=service_url
        )
        self._pool = ConnectionPool(self._settings, callback, self._group)

    def create_topic(self, topic: str, partitions: int) -> None:
        if partitions <= 1:
            return  # plain topics are created by the broker on first use
        if not self._admin_url:
            raise DriverError(
                f"creating {topic!r} with {partitions} partitions needs the broker's admin API: "
                "set client.adminUrl in the driver file"
            )
        create_partitioned_topic(self._admin_url, topic, partitions)

    def create_producer(self, topic: str) -> PulsarProducer | PartitionedProducer:
        """A producer on a connection of its own; on a partitioned topic, one producer per
        partition, all on that connection, as the official clients share one per broker."""
        pool, settings = self._ready()
        conn = pool.open_connection()
        try:
            conn.wait_ready()
            names = partition_names(topic, conn.ensure_topic(topic))
            parts = [PulsarProducer(conn, name, settings, self._group) for name in names or [topic]]
            for part in parts:
                part.open()
        except BaseException:
            conn.close()
            raise
        producer = PartitionedProducer(topic, parts) if names else parts[0]
        self._producers.append(producer)
        return producer

    def subscribe(self, spec: ConsumerSpec) -> SubscribeResult:
        pool, _ = self._ready()
        start_us = now_us()
        conn: Connection | None = None
        try:
            conn = pool.for_consumer(spec.index)
            conn.wait_ready()
            end_us = conn.subscribe(spec)
        except RequestFailed as exc:
            return SubscribeResult(
                spec.index,
                conn.id if conn else -1,
                start_us,
                max(start_us, now_us()),
                False,
                str(exc),
            )
        return SubscribeResult(spec.index, conn.id, start_us, max(start_us, end_us), True)

    def close(self) -> None:
        for producer in self._producers:
            producer.close()
        self._producers.clear()
        if self._pool is not None:
            self._pool.close()
        self._group.kill()

    def _ready(self) -> tuple[ConnectionPool, Settings]:
        if self._pool is None or self._settings is None:
            raise DriverError("PulsarDriver used before initialize()")
        return self._pool, self._settings
