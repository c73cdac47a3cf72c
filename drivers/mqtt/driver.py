"""The MQTT driver: `drivers.mqtt.driver:MqttDriver` (drivers/mqtt.yaml), MQTT 3.1.1 or 5.

What maps to what:
- a topic is an MQTT topic (the harness's topic name as it is; with clean sessions the broker
  keeps nothing for a subscriber that is gone, so topicPersistence changes nothing, and
  partitionsPerTopic > 1 is refused);
- a Broadcast consumer SUBSCRIBEs to the topic: every subscriber gets every message;
- a Shared consumer SUBSCRIBEs to `$share/<subscription>/<topic>`: the broker gives each
  message to one subscriber of the share. Shared subscriptions are MQTT 5's; mosquitto 2 also
  takes them from 3.1.1 clients (tests/integration/test_driver_mqtt.py runs both);
- deliveries and publishes at consumer.qos and producer.qos, 0 or 1 (QoS 1: a PUBACK for each
  delivery, and a publish acknowledged by the broker's PUBACK); QoS 2 is refused in the file;
- one connection (one client id, one session) per consumer: an MQTT connection subscribes to
  a topic filter once, so consumersPerConnection is not used and N consumers are N sockets.

Refused, never emulated: Exclusive (MQTT never refuses a second subscriber), Failover and
Key_Shared (shares are round robin, not active/standby or by key). A lost connection loses its
consumer for the rest of the run: no resubscribe.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drivers.base import ConsumerCallback, ConsumerSpec, SubscribeResult
from drivers.config import InvalidValue, Parser, check_keys, describe, integer, parse_section
from drivers.mqtt.connection import MqttConnection
from drivers.mqtt.packets import MQTT_3_1_1, MQTT_5
from drivers.net.keep_alive import keep_alive
from drivers.peer.connection import RequestFailed, now_us
from drivers.peer.driver import PeerDriver
from drivers.peer.pool import Connections
from drivers.peer.settings import (
    ClientConfig,
    PeerUrls,
    client_keys,
    parse_client,
    section_dict,
)

VERSIONS = {"3.1.1": MQTT_3_1_1, "5": MQTT_5}
REFUSED = {
    "Exclusive": "MQTT never refuses a second subscriber to a topic",
    "Failover": "MQTT shared subscriptions have no active/standby mode",
    "Key_Shared": "MQTT shared subscriptions do not route by key",
}


def protocol_version(value: object) -> str:
    """ "3.1.1" or "5" (an unquoted 5 is taken too)."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if text not in VERSIONS:
        raise InvalidValue(f'expected "3.1.1" or "5", got {describe(value)}')
    assert isinstance(text, str)
    return text


def qos_level(value: object) -> int:
    level: int = integer(minimum=0)(value)
    if level > 1:
        raise InvalidValue(
            f"QoS {level} is not measured (this client speaks QoS 0 and 1, without "
            "PUBREC/PUBREL/PUBCOMP); use 0 or 1"
        )
    return level


_CLIENT: dict[str, tuple[str, Parser]] = {
    **client_keys("mqtt"),
    "protocolVersion": ("protocol_version", protocol_version),
    "keepAliveSeconds": ("keep_alive_seconds", integer(minimum=0)),
}
_QOS: dict[str, tuple[str, Parser]] = {"qos": ("qos", qos_level)}


@dataclass(frozen=True, slots=True, kw_only=True)
class MqttClientConfig(ClientConfig):
    protocol_version: str = "5"
    keep_alive_seconds: int = 60
    """The MQTT keep-alive: a PINGREQ every half of it; 0 = none (the broker never times out
    a silent client)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QosConfig:
    qos: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class MqttConfig(PeerUrls):
    client: MqttClientConfig = field(default_factory=MqttClientConfig)
    producer: QosConfig = field(default_factory=QosConfig)
    consumer: QosConfig = field(default_factory=QosConfig)

    @classmethod
    def parse(cls, sections: Mapping[Any, object], where: str) -> MqttConfig:
        check_keys(sections, ["client", "producer", "consumer"], where)
        return cls(
            client=parse_client(sections, MqttClientConfig, _CLIENT, where),
            producer=QosConfig(**parse_section(sections, "producer", _QOS, where)),
            consumer=QosConfig(**parse_section(sections, "consumer", _QOS, where)),
        )

    @property
    def version(self) -> int:
        return VERSIONS[self.client.protocol_version]

    def to_dict(self) -> dict[str, Any]:
        return {
            "client": section_dict(self.client, _CLIENT),
            "producer": section_dict(self.producer, _QOS),
            "consumer": section_dict(self.consumer, _QOS),
        }

    def partitions_problem(self, partitions: int) -> str | None:
        return None if partitions <= 1 else "is not possible: an MQTT topic has no partitions"


class MqttProducer:
    def __init__(self, conn: MqttConnection, topic: bytes, qos: int) -> None:
        self._conn = conn
        self._topic = topic
        self._qos = qos

    def send_async(
        self, key: bytes | None, payload: bytes, on_done: Callable[[Exception | None], None]
    ) -> None:
        try:
            self._conn.publish(
                self._topic, payload, self._qos, lambda receive_us, error: on_done(error)
            )
        except RequestFailed as exc:
            on_done(exc)

    def close(self) -> None:
        pass  # the driver closes the connection


class MqttDriver(PeerDriver[MqttConnection]):
    SCHEME = "mqtt"
    DEFAULT_PORT = 1883
    SYSTEM = "MQTT"
    REFUSED = REFUSED
    PER_CONNECTION = 1

    def __init__(self) -> None:
        super().__init__()
        self._config = MqttConfig()
        self._nonce = os.urandom(3).hex()
        """Client ids are unique per driver: a second run on a running broker must not take
        over the sessions of one still connected."""

    def parse_config(self, sections: Mapping[Any, object], where: str) -> MqttConfig:
        return MqttConfig.parse(sections, where)

    def initialize(
        self,
        config: MqttConfig,
        callback: ConsumerCallback,
        *,
        consumers_per_connection: int,
        service_url: str,
        admin_url: str | None = None,
    ) -> None:
        self._config = config
        self._initialize(config.client, callback, consumers_per_connection, service_url)
        seconds = config.client.keep_alive_seconds
        if seconds:
            self._group.spawn(keep_alive, lambda: self._ready().live, seconds / 2)

    def _make_connection(
        self,
        conn_id: int,
        host: str,
        port: int,
        callback: ConsumerCallback,
        client: ClientConfig,
        conns: Connections[MqttConnection],
    ) -> MqttConnection:
        config = self._config
        return MqttConnection(
            conn_id,
            host,
            port,
            self._group,
            callback,
            client_id=f"fanout-{self._nonce}-{conn_id}".encode(),
            version=config.version,
            keep_alive=config.client.keep_alive_seconds,
            connect_timeout=float(client.connect_timeout_seconds),
            operation_timeout=float(client.operation_timeout_seconds),
            on_closed=conns.closed,
        )

    def create_producer(self, topic: str) -> MqttProducer:
        conn = self._producer_connection(topic)
        return MqttProducer(conn, topic.encode(), self._config.producer.qos)

    def subscribe(self, spec: ConsumerSpec) -> SubscribeResult:
        self._check_mode(spec)
        topic_filter = spec.topic
        if spec.subscription_type == "Shared":
            topic_filter = f"$share/{spec.subscription}/{spec.topic}"
        start_us = now_us()
        conn: MqttConnection | None = None
        try:
            conn = self._ready().open()
            conn.wait_ready()
            end_us = conn.subscribe(spec.index, topic_filter.encode(), self._config.consumer.qos)
        except RequestFailed as exc:
            conn_id = conn.id if conn else -1
            return SubscribeResult(
                spec.index, conn_id, start_us, max(start_us, now_us()), False, str(exc)
            )
        return SubscribeResult(spec.index, conn.id, start_us, max(start_us, end_us), True)
