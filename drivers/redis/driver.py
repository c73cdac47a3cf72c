"""The Redis pub/sub driver: `drivers.redis.driver:RedisDriver` (drivers/redis.yaml).

What maps to what:
- a topic is a channel (the harness's topic name as it is; pub/sub keeps nothing, so the
  workload's topicPersistence changes nothing, and partitionsPerTopic > 1 is refused);
- a Broadcast consumer is a connection that SUBSCRIBEs to the channel: every subscriber gets
  every message. Redis sends a connection one copy of a message however many times it
  subscribed, so each consumer has a connection of its own and consumersPerConnection is not
  used (10,000 consumers are 10,000 sockets);
- a publish is PUBLISH, acknowledged by its integer reply.

Refused, never emulated: Shared, Key_Shared, Failover and Exclusive. Redis pub/sub has no
consumer groups (Redis Streams do, but they are another system with storage). A lost
connection loses its consumer for the rest of the run: no resubscribe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from drivers.base import ConsumerCallback, ConsumerSpec, SubscribeResult
from drivers.peer.connection import RequestFailed, now_us
from drivers.peer.driver import PeerDriver
from drivers.peer.pool import Connections
from drivers.peer.settings import ClientConfig, ClientOnlyConfig, client_keys
from drivers.redis.connection import RedisConnection, command

REFUSED = {
    "Shared": "Redis pub/sub has no consumer groups (every subscriber gets every message)",
    "Key_Shared": "Redis pub/sub has no consumer groups",
    "Failover": "Redis pub/sub has no active/standby subscription",
    "Exclusive": "Redis pub/sub never refuses a second subscriber",
}


class RedisConfig(ClientOnlyConfig):
    KEYS = client_keys("redis")
    TOPIC = "a Redis channel"


class RedisProducer:
    def __init__(self, conn: RedisConnection, channel: bytes) -> None:
        self._conn = conn
        self._channel = channel

    def send_async(
        self, key: bytes | None, payload: bytes, on_done: Callable[[Exception | None], None]
    ) -> None:
        try:
            self._conn.request(
                command(b"PUBLISH", self._channel, payload),
                lambda reply, receive_us, error: on_done(error),
            )
        except RequestFailed as exc:
            on_done(exc)

    def close(self) -> None:
        pass  # the driver closes the connection


class RedisDriver(PeerDriver[RedisConnection]):
    SCHEME = "redis"
    DEFAULT_PORT = 6379
    SYSTEM = "Redis pub/sub"
    REFUSED = REFUSED
    PER_CONNECTION = 1

    def parse_config(self, sections: Mapping[Any, object], where: str) -> RedisConfig:
        return RedisConfig.parse(sections, where)

    def initialize(
        self,
        config: RedisConfig,
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
        conns: Connections[RedisConnection],
    ) -> RedisConnection:
        return RedisConnection(
            conn_id,
            host,
            port,
            self._group,
            callback,
            connect_timeout=float(client.connect_timeout_seconds),
            operation_timeout=float(client.operation_timeout_seconds),
            on_closed=conns.closed,
        )

    def create_producer(self, topic: str) -> RedisProducer:
        return RedisProducer(self._producer_connection(topic), topic.encode())

    def subscribe(self, spec: ConsumerSpec) -> SubscribeResult:
        self._check_mode(spec)
        start_us = now_us()
        conn: RedisConnection | None = None
        try:
            conn = self._ready().open()
            conn.wait_ready()
            end_us = conn.subscribe(spec.index, spec.topic.encode())
        except RequestFailed as exc:
            conn_id = conn.id if conn else -1
            return SubscribeResult(
                spec.index, conn_id, start_us, max(start_us, now_us()), False, str(exc)
            )
        return SubscribeResult(spec.index, conn.id, start_us, max(start_us, end_us), True)
