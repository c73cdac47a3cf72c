"""The native driver's settings, read from the harness's DriverConfig.

Attributes are read with getattr and defaults (those of drivers/bundled.yaml), so anything
shaped like a DriverConfig works, a types.SimpleNamespace in tests included. Values are checked
once here, so the hot paths never have to.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from gevent import socket

from drivers.base import DriverError

DEFAULT_PORT = 6650
ACK_MODES = ("cumulative", "individual")


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    host: str
    port: int = DEFAULT_PORT
    consumers_per_connection: int = 1
    source_addresses: int = 0
    """Spread connections over 127.0.0.2, 127.0.0.3, ... (this many); 0 = the kernel's choice."""
    connect_timeout: float = 10.0
    operation_timeout: float = 30.0
    batching_enabled: bool = False
    batching_max_publish_delay_ms: int = 1
    batching_max_messages: int = 1000
    batching_max_bytes: int = 128 * 1024
    max_pending_messages: int = 1000
    send_timeout_ms: int = 30000
    """0 = never time out."""
    receiver_queue_size: int = 1000
    ack_group_time_ms: int = 100
    """0 = flush acknowledgements at the next turn of the event loop."""
    ack_mode: str = "cumulative"
    verify_checksum: bool = False
    """CRC32C of every delivery; off by default, it costs more than the rest of a delivery."""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_service_url(url: str) -> tuple[str, int]:
    """(host, port) of a `pulsar://host[:port]` URL."""
    parts = urlsplit(url)
    if parts.scheme != "pulsar":
        raise DriverError(f"service URL {url!r}: only pulsar:// is supported (no TLS yet)")
    if "," in parts.netloc:
        raise DriverError(f"service URL {url!r}: give one broker, not a list")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:
        raise DriverError(f"service URL {url!r}: {exc}") from None
    if not parts.hostname:
        raise DriverError(f"service URL {url!r} names no host")
    return parts.hostname, port


def settings_from(config: Any, *, consumers_per_connection: int, service_url: str) -> Settings:
    """Settings for `initialize`; raises DriverError for values the driver cannot use."""
    client = getattr(config, "client", None)
    producer = getattr(config, "producer", None)
    consumer = getattr(config, "consumer", None)
    host, port = parse_service_url(service_url)
    settings = Settings(
        host=host,
        port=port,
        consumers_per_connection=consumers_per_connection,
        source_addresses=getattr(client, "source_addresses", 0),
        connect_timeout=float(getattr(client, "connect_timeout_seconds", 10)),
        operation_timeout=float(getattr(client, "operation_timeout_seconds", 30)),
        batching_enabled=getattr(producer, "batching_enabled", False),
        batching_max_publish_delay_ms=getattr(producer, "batching_max_publish_delay_ms", 1),
        batching_max_messages=getattr(producer, "batching_max_messages", 1000),
        batching_max_bytes=getattr(producer, "batching_max_bytes", 128 * 1024),
        max_pending_messages=getattr(producer, "max_pending_messages", 1000),
        send_timeout_ms=getattr(producer, "send_timeout_ms", 30000),
        receiver_queue_size=getattr(consumer, "receiver_queue_size", 1000),
        ack_group_time_ms=getattr(consumer, "ack_group_time_ms", 100),
        ack_mode=getattr(consumer, "ack_mode", "cumulative"),
        verify_checksum=getattr(consumer, "verify_checksum", False),
    )
    _check(settings)
    return settings


def _check(s: Settings) -> None:
    if s.consumers_per_connection < 1:
        raise DriverError(
            f"consumers per connection must be >= 1, got {s.consumers_per_connection}"
        )
    if s.receiver_queue_size < 1:
        raise DriverError(f"consumer.receiverQueueSize must be >= 1, got {s.receiver_queue_size}")
    if s.max_pending_messages < 1:
        raise DriverError(f"producer.maxPendingMessages must be >= 1, got {s.max_pending_messages}")
    if s.ack_mode not in ACK_MODES:
        raise DriverError(f"consumer.ackMode must be one of {ACK_MODES}, got {s.ack_mode!r}")
    if s.source_addresses and not is_loopback(resolve_host(s.host)):
        raise DriverError(
            f"client.sourceAddresses={s.source_addresses} needs a loopback broker, and the "
            f"broker is {s.address} (set it to 0)"
        )


@lru_cache(maxsize=64)
def resolve_host(host: str) -> str:
    """The IPv4 address of a host, or the name itself when it does not resolve."""
    try:
        return str(ipaddress.ip_address(host))  # a literal: no resolver, no yield under gevent
    except ValueError:
        pass
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
