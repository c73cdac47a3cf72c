"""Driver files: which driver class to load and how its clients (and our broker) are set up.

Like OMB's driver YAML (`name`, `driverClass`, client/producer/consumer sections), but every
key is checked: a typo in a timeout must not silently fall back to a default. The harness
loads the driver class by its dotted path, so this module never imports a driver.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from harness.config_errors import (
    ConfigError,
    InvalidValue,
    Parser,
    boolean,
    check_keys,
    choice,
    describe,
    integer,
    load_yaml_mapping,
    nullable,
    parse_value,
    string,
)

DEFAULT_DRIVER_CLASS = "drivers.pulsar.driver:PulsarDriver"
ACK_MODES = ("cumulative", "individual")
BrokerValue = str | int | float | bool | None

_DRIVER_CLASS = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfig:
    """Where the broker is and how clients connect to it."""

    service_url: str | None = None
    """pulsar://host:port of a running broker; None = start the bundled broker on loopback."""
    admin_url: str | None = None
    """http(s):// admin API of that broker, used to create partitioned topics."""
    source_addresses: int = 0
    """Spread connections over this many 127.x.y.z source addresses (each has its own
    ephemeral port range); 0 = off."""
    connect_timeout_seconds: int = 10
    operation_timeout_seconds: int = 30


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig:
    batching_enabled: bool = False
    batching_max_publish_delay_ms: int = 1
    batching_max_messages: int = 1000
    batching_max_bytes: int = 128 * 1024
    max_pending_messages: int = 1000
    send_timeout_ms: int = 30000
    """0 = never time out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConfig:
    receiver_queue_size: int = 1000
    ack_group_time_ms: int = 100
    """0 = send each acknowledgement at once."""
    ack_mode: str = "cumulative"


@dataclass(frozen=True, slots=True, kw_only=True)
class DriverConfig:
    """A driver file, resolved. The bundled default is DriverConfig(name="bundled")."""

    name: str
    driver_class: str = DEFAULT_DRIVER_CLASS
    """'package.module:Class', imported by the harness."""
    client: ClientConfig = field(default_factory=ClientConfig)
    producer: ProducerConfig = field(default_factory=ProducerConfig)
    consumer: ConsumerConfig = field(default_factory=ConsumerConfig)
    broker: Mapping[str, BrokerValue] = field(default_factory=lambda: MappingProxyType({}))
    """Bundled-broker settings, passed through unchecked (the broker owns their meaning)."""

    @property
    def uses_bundled_broker(self) -> bool:
        return self.client.service_url is None

    def to_dict(self) -> dict[str, Any]:
        """The resolved config under its YAML keys, for the manifest; loads back equal."""
        return {
            "name": self.name,
            "driverClass": self.driver_class,
            "client": {
                "serviceUrl": self.client.service_url,
                "adminUrl": self.client.admin_url,
                "sourceAddresses": self.client.source_addresses,
                "connectTimeoutSeconds": self.client.connect_timeout_seconds,
                "operationTimeoutSeconds": self.client.operation_timeout_seconds,
            },
            "producer": {
                "batchingEnabled": self.producer.batching_enabled,
                "batchingMaxPublishDelayMs": self.producer.batching_max_publish_delay_ms,
                "batchingMaxMessages": self.producer.batching_max_messages,
                "batchingMaxBytes": self.producer.batching_max_bytes,
                "maxPendingMessages": self.producer.max_pending_messages,
                "sendTimeoutMs": self.producer.send_timeout_ms,
            },
            "consumer": {
                "receiverQueueSize": self.consumer.receiver_queue_size,
                "ackGroupTimeMs": self.consumer.ack_group_time_ms,
                "ackMode": self.consumer.ack_mode,
            },
            "broker": dict(self.broker),
        }


def _url(*schemes: str) -> Parser:
    def parse(value: object) -> str:
        url = string(value)
        if not url.startswith(tuple(f"{scheme}://" for scheme in schemes)):
            wanted = " or ".join(f"{scheme}://" for scheme in schemes)
            raise InvalidValue(f"expected a {wanted} URL, got {url!r}")
        return url

    return parse


def _driver_class(value: object) -> str:
    text = string(value)
    if not _DRIVER_CLASS.fullmatch(text):
        raise InvalidValue(
            f"expected 'package.module:Class', got {text!r} (e.g. {DEFAULT_DRIVER_CLASS!r})"
        )
    return text


# section -> YAML key -> (dataclass field, parser); the top-level keys are handled apart.
_SECTIONS: dict[str, dict[str, tuple[str, Parser]]] = {
    "client": {
        "serviceUrl": ("service_url", nullable(_url("pulsar", "pulsar+ssl"))),
        "adminUrl": ("admin_url", nullable(_url("http", "https"))),
        "sourceAddresses": ("source_addresses", integer(minimum=0)),
        "connectTimeoutSeconds": ("connect_timeout_seconds", integer(minimum=1)),
        "operationTimeoutSeconds": ("operation_timeout_seconds", integer(minimum=1)),
    },
    "producer": {
        "batchingEnabled": ("batching_enabled", boolean),
        "batchingMaxPublishDelayMs": ("batching_max_publish_delay_ms", integer(minimum=0)),
        "batchingMaxMessages": ("batching_max_messages", integer(minimum=1)),
        "batchingMaxBytes": ("batching_max_bytes", integer(minimum=1)),
        "maxPendingMessages": ("max_pending_messages", integer(minimum=1)),
        "sendTimeoutMs": ("send_timeout_ms", integer(minimum=0)),
    },
    "consumer": {
        "receiverQueueSize": ("receiver_queue_size", integer(minimum=1)),
        "ackGroupTimeMs": ("ack_group_time_ms", integer(minimum=0)),
        "ackMode": ("ack_mode", choice(*ACK_MODES)),
    },
}
_TOP_KEYS = ("name", "driverClass", *_SECTIONS, "broker")


def load_driver(path: str | os.PathLike[str] | None) -> DriverConfig:
    """Read and check a driver file; None gives the bundled default (drivers/bundled.yaml
    spells it out). Raises ConfigError (one line) on any problem."""
    if path is None:
        return DriverConfig(name="bundled")
    where = f"{path}: "
    data = load_yaml_mapping(Path(path), str(path))
    check_keys(data, _TOP_KEYS, where)
    if "name" not in data:
        raise ConfigError(f"{where}missing key 'name' (every driver file needs a name)")
    client = _section(data, "client", ClientConfig, where)
    if client.admin_url is not None and client.service_url is None:
        raise ConfigError(
            f"{where}key 'client.adminUrl' needs 'client.serviceUrl' (the bundled broker's "
            "admin API is started by the harness; drop adminUrl or give serviceUrl)"
        )
    if client.source_addresses and not _is_loopback(client.service_url):
        raise ConfigError(
            f"{where}key 'client.sourceAddresses': 127.x.y.z source addresses only reach a "
            f"loopback broker, and serviceUrl is {client.service_url!r} (set it to 0, or use a "
            "loopback serviceUrl)"
        )
    return DriverConfig(
        name=parse_value(string, data["name"], where, "name"),
        driver_class=parse_value(
            _driver_class, data.get("driverClass", DEFAULT_DRIVER_CLASS), where, "driverClass"
        ),
        client=client,
        producer=_section(data, "producer", ProducerConfig, where),
        consumer=_section(data, "consumer", ConsumerConfig, where),
        broker=_broker(data.get("broker"), where),
    )


def _section(data: Mapping[object, object], name: str, cls: type, where: str) -> Any:
    raw = _mapping(data.get(name), name, where)
    keys = _SECTIONS[name]
    check_keys(raw, keys, where, prefix=f"{name}.")
    return cls(
        **{
            attr: parse_value(parser, raw[key], where, f"{name}.{key}")
            for key, (attr, parser) in keys.items()
            if key in raw
        }
    )


def _broker(raw: object, where: str) -> Mapping[str, BrokerValue]:
    settings = _mapping(raw, "broker", where)
    for key, value in settings.items():
        if not isinstance(key, str):
            raise ConfigError(f"{where}key 'broker': setting {key!r} is not a string (quote it)")
        if isinstance(value, list | dict):
            raise ConfigError(
                f"{where}key 'broker.{key}': expected a string, number, boolean or null, got "
                f"{describe(value)} (broker settings are flat)"
            )
    return MappingProxyType(dict(settings))


def _mapping(raw: object, name: str, where: str) -> Mapping[object, object]:
    """A section's mapping; an empty section (`client:` with nothing under it) means defaults."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}key {name!r}: expected a mapping, got {describe(raw)}")
    return raw


def _is_loopback(service_url: str | None) -> bool:
    """True for the bundled broker and for service URLs whose every host is loopback."""
    if service_url is None:
        return True
    netloc = urlsplit(service_url).netloc
    return all(_is_loopback_host(urlsplit(f"//{host}").hostname) for host in netloc.split(","))


def _is_loopback_host(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False
