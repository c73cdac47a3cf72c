"""The `client` section every peer driver file has, checked here once for all of them.

A null `serviceUrl` means the harness starts the broker: the program the file's
`embeddedBroker` names (harness/broker_command.py), on a free loopback port. Without an
`embeddedBroker` the harness would start the bundled Pulsar broker instead, which no peer
speaks to; `check_service_url` turns that into a message saying what to add.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

from drivers.base import DriverError
from drivers.config import (
    ConfigError,
    Parser,
    check_keys,
    integer,
    nullable,
    parse_section,
    url,
)
from drivers.net.hosts import is_loopback, resolve_host


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfig:
    service_url: str | None = None
    """<scheme>://host:port of a running broker; None = the harness starts `embeddedBroker`."""
    source_addresses: int = 0
    """Spread connections over this many 127.x.y.z source addresses; 0 = off."""
    connect_timeout_seconds: int = 10
    operation_timeout_seconds: int = 30
    """How long a subscribe or a publish may wait for the broker's answer."""


C = TypeVar("C", bound=ClientConfig)


def client_keys(*schemes: str) -> dict[str, tuple[str, Parser]]:
    """YAML key -> (ClientConfig field, parser) for a driver whose URLs use `schemes`."""
    return {
        "serviceUrl": ("service_url", nullable(url(*schemes))),
        "sourceAddresses": ("source_addresses", integer(minimum=0)),
        "connectTimeoutSeconds": ("connect_timeout_seconds", integer(minimum=1)),
        "operationTimeoutSeconds": ("operation_timeout_seconds", integer(minimum=1)),
    }


def parse_client(
    sections: Mapping[Any, object],
    config: type[C],
    keys: Mapping[str, tuple[str, Parser]],
    where: str,
) -> C:
    """The `client` section as `config` (ClientConfig or a driver's subclass), typed and its
    source addresses checked against the service URL."""
    client = config(**parse_section(sections, "client", keys, where))
    _check_source_addresses(client, where)
    return client


def section_dict(obj: object, keys: Mapping[str, tuple[str, Parser]]) -> dict[str, Any]:
    """A config dataclass back under its YAML keys."""
    return {key: getattr(obj, attr) for key, (attr, _) in keys.items()}


def check_service_url(service_url: str, scheme: str, default_port: int) -> tuple[str, int]:
    """(host, port) of `scheme://host[:port]`; DriverError saying what to fix otherwise."""
    parts = urlsplit(service_url)
    if parts.scheme != scheme:
        raise DriverError(
            f"service URL {service_url!r} is not a {scheme}:// URL: a driver file without "
            f"client.serviceUrl needs an embeddedBroker section that starts the {scheme} server "
            f"(see drivers/{scheme}.yaml), or the harness starts the bundled Pulsar broker"
        )
    try:
        port = parts.port or default_port
    except ValueError as exc:
        raise DriverError(f"service URL {service_url!r}: {exc}") from None
    if not parts.hostname:
        raise DriverError(f"service URL {service_url!r} names no host")
    return parts.hostname, port


def _check_source_addresses(client: ClientConfig, where: str) -> None:
    """Source addresses in 127/8 reach only a loopback broker (the embedded one always is)."""
    if client.source_addresses and client.service_url is not None:
        host = urlsplit(client.service_url).hostname or ""
        if not is_loopback(resolve_host(host)):
            raise ConfigError(
                f"{where}key 'client.sourceAddresses': 127.x.y.z source addresses only reach a "
                f"loopback broker, and serviceUrl is {client.service_url!r} (set it to 0)"
            )


def source_spread(client: ClientConfig, host: str) -> int:
    """How many 127.x.y.z source addresses connections to `host` use (0: the kernel's)."""
    return client.source_addresses if is_loopback(resolve_host(host)) else 0


class PeerUrls:
    """A peer driver config's URLs (drivers.base.DriverConfig): the service URL from its
    `client` section; peers have no admin API."""

    __slots__ = ()
    client: ClientConfig

    @property
    def service_url(self) -> str | None:
        return self.client.service_url

    @property
    def admin_url(self) -> str | None:
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOnlyConfig(PeerUrls):
    """A driver file whose only section is `client` (NATS, Redis): a subclass names the URL
    schemes it takes and what a topic is on its broker."""

    KEYS: ClassVar[dict[str, tuple[str, Parser]]]
    TOPIC: ClassVar[str]
    """What a topic is on the broker, for the refusal of partitions ("a NATS subject")."""

    client: ClientConfig = field(default_factory=ClientConfig)

    @classmethod
    def parse(cls, sections: Mapping[Any, object], where: str) -> Any:
        check_keys(sections, ["client"], where)
        return cls(client=parse_client(sections, ClientConfig, cls.KEYS, where))

    def to_dict(self) -> dict[str, Any]:
        return {"client": section_dict(self.client, self.KEYS)}

    def partitions_problem(self, partitions: int) -> str | None:
        return None if partitions <= 1 else f"is not possible: {self.TOPIC} has no partitions"
