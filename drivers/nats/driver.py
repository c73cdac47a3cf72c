"""The core NATS driver: `drivers.nats.driver:NatsDriver` (drivers/nats.yaml).

What maps to what:
- a topic is a subject (the harness's topic name as it is: NATS core keeps nothing, so the
  workload's topicPersistence changes nothing here, and partitionsPerTopic > 1 is refused);
- a Broadcast consumer is a plain SUB on the subject: every subscriber gets every message;
- a Shared consumer is a SUB in the queue group named after its subscription: the server
  gives each message to one member of each group (with one consumer per subscription, the
  seed's baseline, each is alone in its group and gets every message);
- consumersPerConnection SUBs share one connection, each with its own sid (one MSG each);
- a publish is acknowledged when the server has processed it (a PING's PONG behind it).

Refused, never emulated: Exclusive (NATS does not refuse a second subscriber), Failover and
Key_Shared (no active/standby or key routing in core NATS). A lost connection loses its
consumers for the rest of the run (they show as short deliveries): no resubscribe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from drivers.base import ConsumerCallback, ConsumerSpec, SubscribeResult
from drivers.nats.connection import NatsConnection
from drivers.peer.connection import RequestFailed, now_us
from drivers.peer.driver import PeerDriver
from drivers.peer.pool import Connections
from drivers.peer.settings import ClientConfig, ClientOnlyConfig, client_keys

REFUSED = {
    "Exclusive": "NATS has no exclusive subscription (a second subscriber is never refused)",
    "Failover": "NATS has no active/standby subscription",
    "Key_Shared": "NATS queue groups do not route by key",
}


class NatsConfig(ClientOnlyConfig):
    KEYS = client_keys("nats")
    TOPIC = "a NATS subject"


class NatsProducer:
    def __init__(self, conn: NatsConnection, subject: bytes) -> None:
        self._conn = conn
        self._subject = subject

    def send_async(
        self, key: bytes | None, payload: bytes, on_done: Callable[[Exception | None], None]
    ) -> None:
        try:
            self._conn.after(
                b"PUB %s %d\r\n%s\r\n" % (self._subject, len(payload), payload),
                lambda receive_us, error: on_done(error),
            )
        except RequestFailed as exc:
            on_done(exc)

    def close(self) -> None:
        pass  # the driver closes the connection


class NatsDriver(PeerDriver[NatsConnection]):
    SCHEME = "nats"
    DEFAULT_PORT = 4222
    SYSTEM = "NATS"
    REFUSED = REFUSED

    def parse_config(self, sections: Mapping[Any, object], where: str) -> NatsConfig:
        return NatsConfig.parse(sections, where)

    def initialize(
        self,
        config: NatsConfig,
        callback: ConsumerCallback,
        *,
        consumers_per_connection: int,
        service_url: str,
        admin_url: str | None = None,
    ) -> None:
        self._initialize(config.client, callback, consumers_per_connection, service_url)

    def _make_connection(
        self,
        conn_id: int,
        host: str,
        port: int,
        callback: ConsumerCallback,
        client: ClientConfig,
        conns: Connections[NatsConnection],
    ) -> NatsConnection:
        return NatsConnection(
            conn_id,
            host,
            port,
            self._group,
            callback,
            connect_timeout=float(client.connect_timeout_seconds),
            operation_timeout=float(client.operation_timeout_seconds),
            on_closed=conns.closed,
        )

    def create_producer(self, topic: str) -> NatsProducer:
        return NatsProducer(self._producer_connection(topic), topic.encode())

    def subscribe(self, spec: ConsumerSpec) -> SubscribeResult:
        self._check_mode(spec)
        queue = spec.subscription.encode() if spec.subscription_type == "Shared" else None
        start_us = now_us()
        conn: NatsConnection | None = None
        try:
            conn = self._ready().for_consumer(spec.index)
            conn.wait_ready()
            end_us = conn.subscribe(spec.index, spec.topic.encode(), queue)
        except RequestFailed as exc:
            conn_id = conn.id if conn else -1
            return SubscribeResult(
                spec.index, conn_id, start_us, max(start_us, now_us()), False, str(exc)
            )
        return SubscribeResult(spec.index, conn.id, start_us, max(start_us, end_us), True)
